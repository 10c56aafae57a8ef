# MindSpore launch config written by planner 0.1.0.
# Model llama3-8b on 16 x H100-SXM5-80GB (dgx-h100).
# Strategy: dp 4, tp 2, pp 1, cp 2 a2a, mb 1, global batch 512, seq_len 8192, sequence_parallel
#   true, recompute selective, zero_stage 1, bf16.
# Predicted: 32.820 s per step, peak 42.6 GiB per GPU (stage 0), MFU 41.6%.
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
    device_num=16,
    pipeline_stages=1,
    full_batch=True,
    gradients_mean=False,
    enable_parallel_optimizer=True,
)

recompute_config = TransformerRecomputeConfig(
    recompute=False,
    select_recompute=True,
    parallel_optimizer_comm_recompute=False,
    mp_comm_recompute=True,
    recompute_slice_activation=False,
)

parallel_config = TransformerOpParallelConfig(
    data_parallel=4,
    model_parallel=2,
    pipeline_stage=1,
    micro_batch_num=1,
    use_seq_parallel=True,
    vocab_emb_dp=False,
    context_parallel=2,
    context_parallel_algo='ulysses_cp',
    recompute=recompute_config,
)

# Samples per data-parallel rank per micro-batch; accumulation only without a pipeline.
runner_config = dict(batch_size=1, gradient_accumulation_steps=128)
