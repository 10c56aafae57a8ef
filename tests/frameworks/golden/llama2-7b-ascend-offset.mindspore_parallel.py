# MindSpore launch config written by planner 0.1.0.
# Model llama2-7b on 32 x Ascend-910B (ascend-910b).
# Strategy: dp 8, tp 1, pp 4, mb 1, global batch 1024, seq_len 4096, sequence_parallel false,
#   recompute full, zero_stage 1, bf16.
# Predicted: 52.980 s per step, peak 18.5 GiB per GPU (stage 1), MFU 33.1%.
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
    device_num=32,
    pipeline_stages=4,
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
    model_parallel=1,
    pipeline_stage=4,
    micro_batch_num=128,
    use_seq_parallel=False,
    vocab_emb_dp=False,
    recompute=recompute_config,
)

# Samples per data-parallel rank per micro-batch; accumulation only without a pipeline.
runner_config = dict(batch_size=1, gradient_accumulation_steps=1)

# Uneven stages (MindFormers LayerSetting): stage i runs num_layers // pipeline_stage + offset[i]
# layers; put offset in your model_config.
model_config = dict(offset=[0, 1, 1, -2])
