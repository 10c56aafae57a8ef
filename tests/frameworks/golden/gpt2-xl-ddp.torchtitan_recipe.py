# torchtitan launch config written by planner 0.1.0.
# Model gpt2-xl on 16 x A100-SXM4-80GB (dgx-a100-80gb).
# Strategy: dp 16, tp 1, pp 1, mb 4, global batch 512, seq_len 1024, sequence_parallel false,
#   recompute none, zero_stage 0, bf16.
# Predicted: 1.898 s per step, peak 40.7 GiB per GPU (stage 0), MFU 54.2%.
# Keys checked against pytorch/torchtitan torchtitan/config/configs.py, trainer.py @b5bcd76c
#   (recipe); torchtitan/config/job_config.py @6404b932 (0.2.x TOML).
# Run: torchrun ... -m torchtitan.train --module torchtitan_recipe --config planner_plan

from dataclasses import replace

from torchtitan.config import ParallelismConfig
from torchtitan.trainer import Trainer


# torchtitan ships no recipe for gpt2-xl: import the function that returns its
# Trainer.Config as base_config.
def base_config():
    raise RuntimeError("set base_config to the recipe of gpt2-xl (see the comment above)")


def planner_plan() -> Trainer.Config:
    """gpt2-xl: dp 16, tp 1, pp 1, mb 4 (planner)."""
    config = base_config()
    return replace(
        config,
        training=replace(config.training,
            num_tokens_per_microbatch_per_dp_rank=4096,
            num_tokens_per_train_step=524288,
            max_context_length=1024,
            mixed_precision_param='bfloat16',
            mixed_precision_reduce='float32',
            steps=10000,
        ),
        parallelism=ParallelismConfig(
            data_parallel_replicate_degree=16,
            data_parallel_shard_degree=1,
            fsdp_reshard_after_forward='default',
            tensor_parallel_degree=1,
            pipeline_parallel_degree=1,
            context_parallel_degree=1,
            enable_sequence_parallel=False,
        ),
        activation_checkpoint=None,
        compile=replace(config.compile,
            enable=True,
            components=['model', 'loss'],
        ),
    )
