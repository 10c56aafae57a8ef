# MindSpore launch config written by planner 0.1.0.
# Model gpt3-175b on 512 x Ascend-910B (ascend-910b).
# Strategy: dp 8, tp 8, pp 8, mb 1, global batch 1536, seq_len 2048, sequence_parallel false,
#   recompute full, zero_stage 1, bf16.
# Predicted: 70.256 s per step, peak 30.1 GiB per GPU (stage 0), MFU 29.0%.
# Keys checked against mindspore-ai/mindspore
#   mindspore/python/mindspore/parallel/_auto_parallel_context.py (2.x);
#   mindspore-lab/mindformers mindformers/modules/transformer/transformer.py, configs/llama2
#   @0e67b43f.
# Import this module before building the model (MindSpore graph mode, Ascend).

import mindspore as ms
from mindformers.modules.transformer import (TransformerOpParallelConfig,
                                             TransformerRecomputeConfig)

ms.set_context(mode=ms.GRAPH_MODE, device_target="Ascend")
ms.set_auto_parallel_context(
    parallel_mode='semi_auto_parallel',
    device_num=512,
    pipeline_stages=8,
    full_batch=True,
    gradients_mean=False,
    enable_parallel_optimizer=True,
)

recompute_config = TransformerRecomputeConfig(
    recompute=True,
    select_recompute=False,
    parallel_optimizer_comm_recompute=False,
    mp_comm_recompute=True,
    recompute_slice_activation=False,
)

parallel_config = TransformerOpParallelConfig(
    data_parallel=8,
    model_parallel=8,
    pipeline_stage=8,
    micro_batch_num=192,
    use_seq_parallel=False,
    vocab_emb_dp=False,
    recompute=recompute_config,
)

# Samples per data-parallel rank per micro-batch; accumulation only without a pipeline.
runner_config = dict(batch_size=1, gradient_accumulation_steps=1)
