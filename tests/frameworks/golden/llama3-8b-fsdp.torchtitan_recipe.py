# torchtitan launch config written by planner 0.1.0.
# Model llama3-8b on 8 x H100-SXM5-80GB (dgx-h100).
# Strategy: dp 8, tp 1, pp 1, mb 1, global batch 512, seq_len 8192, sequence_parallel false,
#   recompute selective, zero_stage 3, bf16.
# Predicted: 66.022 s per step, peak 40.9 GiB per GPU (stage 0), MFU 41.3%.
# Keys checked against pytorch/torchtitan torchtitan/config/configs.py, trainer.py @b5bcd76c
#   (recipe); torchtitan/config/job_config.py @6404b932 (0.2.x TOML).
# Run: torchrun ... -m torchtitan.train --module torchtitan_recipe --config planner_plan

from dataclasses import replace

from torchtitan.config import ParallelismConfig
from torchtitan.distributed.activation_checkpoint import SelectiveAC
from torchtitan.trainer import Trainer

from torchtitan.models.llama3.config_registry import llama3_8b as base_config


def planner_plan() -> Trainer.Config:
    """llama3-8b: dp 8, tp 1, pp 1, mb 1 (planner)."""
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
            data_parallel_shard_degree=8,
            fsdp_reshard_after_forward='always',
            tensor_parallel_degree=1,
            pipeline_parallel_degree=1,
            context_parallel_degree=1,
            enable_sequence_parallel=False,
        ),
        activation_checkpoint=SelectiveAC.Config(),
        compile=replace(config.compile,
            enable=True,
            components=['model', 'loss'],
        ),
    )
