# torchtitan launch config written by planner 0.1.0.
# Model llama3-8b on 32 x H100-SXM5-80GB (dgx-h100).
# Strategy: dp 8, tp 1, pp 4, vpp 2, mb 1, global batch 512, seq_len 8192, sequence_parallel
#   false, recompute full, zero_stage 3, bf16.
# Predicted: 20.919 s per step, peak 22.6 GiB per GPU (stage 0), MFU 32.6%.
# Keys checked against pytorch/torchtitan torchtitan/config/configs.py, trainer.py @b5bcd76c
#   (recipe); torchtitan/config/job_config.py @6404b932 (0.2.x TOML).
# Run: torchrun ... -m torchtitan.train --module torchtitan_recipe --config planner_plan

from dataclasses import replace

from torchtitan.config import ParallelismConfig
from torchtitan.distributed.activation_checkpoint import FullAC
from torchtitan.trainer import Trainer

from torchtitan.models.llama3.config_registry import llama3_8b as base_config


def planner_plan() -> Trainer.Config:
    """llama3-8b: dp 8, tp 1, pp 4, vpp 2, mb 1 (planner)."""
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
            disable_cuda_graphs=True,
        ),
        parallelism=ParallelismConfig(
            data_parallel_replicate_degree=1,
            data_parallel_shard_degree=8,
            fsdp_reshard_after_forward='always',
            tensor_parallel_degree=1,
            pipeline_parallel_degree=4,
            context_parallel_degree=1,
            pipeline_parallel_schedule='Interleaved1F1B',
            num_pp_microbatches=64,
            module_fqns_per_model_part=[['tok_embeddings', 'layers.0', 'layers.1', 'layers.2', 'layers.3'], ['layers.4', 'layers.5', 'layers.6', 'layers.7'], ['layers.8', 'layers.9', 'layers.10', 'layers.11'], ['layers.12', 'layers.13', 'layers.14'], ['layers.15', 'layers.16', 'layers.17', 'layers.18'], ['layers.19', 'layers.20', 'layers.21', 'layers.22', 'layers.23'], ['layers.24', 'layers.25', 'layers.26', 'layers.27', 'layers.28'], ['layers.29', 'layers.30', 'layers.31', 'norm', 'lm_head']],
            enable_sequence_parallel=False,
        ),
        activation_checkpoint=FullAC.Config(),
        compile=replace(config.compile,
            enable=True,
            components=['model', 'loss'],
        ),
    )
