# torchtitan launch config written by planner 0.1.0.
# Model llama3-8b on 16 x H100-SXM5-80GB (dgx-h100).
# Strategy: dp 4, tp 2, pp 1, cp 2 all_gather, mb 1, global batch 512, seq_len 8192,
#   sequence_parallel true, recompute selective, zero_stage 3, bf16.
# Predicted: 38.369 s per step, peak 17.7 GiB per GPU (stage 0), MFU 35.5%.
# Keys checked against pytorch/torchtitan torchtitan/config/configs.py, trainer.py @b5bcd76c
#   (recipe); torchtitan/config/job_config.py @6404b932 (0.2.x TOML).
# Run: torchrun ... -m torchtitan.train --module torchtitan_recipe --config planner_plan

from dataclasses import replace

from torchtitan.config import ParallelismConfig
from torchtitan.distributed.activation_checkpoint import SelectiveAC
from torchtitan.trainer import Trainer

from torchtitan.models.llama3.config_registry import llama3_8b as base_config


def planner_plan() -> Trainer.Config:
    """llama3-8b: dp 4, tp 2, pp 1, cp 2 all_gather, mb 1 (planner)."""
    config = base_config()
    return replace(
        config,
        training=replace(config.training,
            num_tokens_per_microbatch_per_dp_rank=8192,
            num_tokens_per_train_step=4194304,
            max_context_length=8192,
            mixed_precision_param='bfloat16',
            mixed_precision_reduce='float32',
            steps=10000,
        ),
        parallelism=ParallelismConfig(
            data_parallel_replicate_degree=1,
            data_parallel_shard_degree=4,
            fsdp_reshard_after_forward='always',
            tensor_parallel_degree=2,
            pipeline_parallel_degree=1,
            context_parallel_degree=2,
            enable_sequence_parallel=True,
        ),
        activation_checkpoint=SelectiveAC.Config(),
        compile=replace(config.compile,
            enable=True,
            components=['model', 'loss'],
            enable_async_tensor_parallel=False,
        ),
    )
