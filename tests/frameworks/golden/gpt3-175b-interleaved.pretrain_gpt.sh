#!/usr/bin/env bash
# Megatron-LM launch config written by planner 0.1.0.
# Model gpt3-175b on 1024 x A100-SXM4-80GB (dgx-a100-80gb).
# Strategy: dp 16, tp 8, pp 8, vpp 3, mb 1, global batch 1536, seq_len 2048, sequence_parallel
#   true, recompute selective, zero_stage 1, bf16.
# Predicted: 17.575 s per step, peak 33.6 GiB per GPU (stage 0), MFU 59.5%.
# Keys checked against NVIDIA/Megatron-LM @d98e8a64 (megatron/training/arguments.py and the
#   config dataclasses it turns into flags).
# Run on every node: MASTER_ADDR=<first node> [DATA_PATH=<prefix>] bash pretrain_gpt.sh
set -euo pipefail

MEGATRON_PATH=${MEGATRON_PATH:-/workspace/Megatron-LM}
CHECKPOINT_PATH=${CHECKPOINT_PATH:-checkpoints/gpt3-175b}
NNODES=${NNODES:-128}            # 1024 GPUs = 128 x 8
NPROC_PER_NODE=${NPROC_PER_NODE:-8}
MASTER_ADDR=${MASTER_ADDR:?set MASTER_ADDR to the address of the first node}
MASTER_PORT=${MASTER_PORT:-29500}
RDZV_ID=${RDZV_ID:-planner-gpt3-175b}

# NCCL over infiniband (GPUDirect RDMA); list the HCAs in NCCL_IB_HCA if NCCL picks the wrong ones
export NCCL_IB_DISABLE=0
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
export TORCH_NCCL_ASYNC_ERROR_HANDLING=1   # fail fast on a hung collective
# Tensor- and context-parallel kernels must be issued in order (Megatron-LM asserts it with tp > 1 or cp > 1)
export CUDA_DEVICE_MAX_CONNECTIONS=1

MODEL_ARGS=(
  --num-layers 96
  --hidden-size 12288
  --num-attention-heads 96
  --ffn-hidden-size 49152
  --seq-length 2048
  --max-position-embeddings 2048
  --position-embedding-type learned_absolute
  --normalization LayerNorm
  --attention-backend auto
)
PARALLEL_ARGS=(
  --tensor-model-parallel-size 8
  --pipeline-model-parallel-size 8
  --num-virtual-stages-per-pipeline-rank 3
  --sequence-parallel
  --use-distributed-optimizer
  --overlap-grad-reduce
  --overlap-param-gather
  --tp-comm-overlap
  --micro-batch-size 1
  --global-batch-size 1536
  --recompute-granularity selective
)
TRAINING_ARGS=(
  --bf16
  --optimizer adam
  --adam-beta1 0.9
  --adam-beta2 0.95
  --train-iters "${TRAIN_ITERS:-500000}"
  --lr "${LR:-3.0e-4}"
  --min-lr "${MIN_LR:-3.0e-5}"
  --lr-decay-style cosine
  --lr-warmup-fraction 0.01
  --weight-decay 0.1
  --clip-grad 1.0
)
# NullTokenizer keeps the model's vocabulary; point TOKENIZER_ARGS at your tokenizer.
TOKENIZER_ARGS=(
  --tokenizer-type NullTokenizer
  --vocab-size 50257
)
if [ -n "${DATA_PATH:-}" ]; then
  DATA_ARGS=(--data-path "$DATA_PATH" --split 949,50,1)
else
  DATA_ARGS=(--mock-data)             # synthetic tokens: a throughput test
fi
LOGGING_ARGS=(
  --log-interval 10
  --log-throughput
  --eval-interval 1000
  --eval-iters 10
  --save "$CHECKPOINT_PATH"
  --load "$CHECKPOINT_PATH"
  --save-interval 1000
)

torchrun --nnodes "$NNODES" --nproc-per-node "$NPROC_PER_NODE" \
  --rdzv-backend c10d --rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT" --rdzv-id "$RDZV_ID" \
  "$MEGATRON_PATH/pretrain_gpt.py" \
  "${MODEL_ARGS[@]}" "${PARALLEL_ARGS[@]}" "${TRAINING_ARGS[@]}" "${TOKENIZER_ARGS[@]}" \
  "${DATA_ARGS[@]}" "${LOGGING_ARGS[@]}"
