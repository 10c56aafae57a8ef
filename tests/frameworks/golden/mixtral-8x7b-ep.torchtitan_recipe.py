# torchtitan launch config written by planner 0.1.0.
# Model mixtral-8x7b on 64 x H100-SXM5-80GB (dgx-h100).
# Strategy: dp 64, tp 1, pp 1, ep 8, mb 1, global batch 1024, seq_len 4096, sequence_parallel
#   false, recompute full, zero_stage 3, bf16.
# Predicted: 22.812 s per step, peak 16.8 GiB per GPU (stage 0), MFU 23.1%.
# Keys checked against pytorch/torchtitan torchtitan/config/configs.py, trainer.py @b5bcd76c
#   (recipe); torchtitan/config/job_config.py @6404b932 (0.2.x TOML).
# Run: torchrun ... -m torchtitan.train --module torchtitan_recipe --config planner_plan

from dataclasses import replace

from torchtitan.config import ParallelismConfig
from torchtitan.distributed.activation_checkpoint import FullAC
from torchtitan.trainer import Trainer


# torchtitan ships no recipe for mixtral-8x7b: import the function that returns its
# Trainer.Config as base_config.
def base_config():
    raise RuntimeError("set base_config to the recipe of mixtral-8x7b (see the comment above)")


def planner_plan() -> Trainer.Config:
    """mixtral-8x7b: dp 64, tp 1, pp 1, ep 8, mb 1 (planner)."""
    config = base_config()
    return replace(
        config,
        training=replace(config.training,
            num_tokens_per_microbatch_per_dp_rank=4096,
            num_tokens_per_train_step=4194304,
            max_context_length=4096,
            mixed_precision_param='bfloat16',
            mixed_precision_reduce='float32',
            steps=10000,
            disable_cuda_graphs=True,
        ),
        parallelism=ParallelismConfig(
            data_parallel_replicate_degree=1,
            data_parallel_shard_degree=64,
            fsdp_reshard_after_forward='always',
            tensor_parallel_degree=1,
            pipeline_parallel_degree=1,
            context_parallel_degree=1,
            expert_parallel_degree=8,
            enable_sequence_parallel=False,
        ),
        activation_checkpoint=FullAC.Config(),
        compile=replace(config.compile,
            enable=True,
            components=['model', 'loss'],
        ),
    )
