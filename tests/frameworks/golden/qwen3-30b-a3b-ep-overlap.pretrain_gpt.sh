#!/usr/bin/env bash
# Megatron-LM launch config written by planner 0.1.0.
# Model qwen3-30b-a3b on 16 x H100-SXM5-80GB (dgx-h100).
# Strategy: dp 16, tp 1, pp 1, ep 16, mb 1, global batch 1024, seq_len 4096, sequence_parallel
#   false, recompute none, zero_stage 1, bf16.
# Predicted: 38.273 s per step, peak 68.5 GiB per GPU (stage 0), MFU 16.0%.
# Keys checked against NVIDIA/Megatron-LM @d98e8a64 (megatron/training/arguments.py and the
#   config dataclasses it turns into flags).
# Run on every node: MASTER_ADDR=<first node> [DATA_PATH=<prefix>] bash pretrain_gpt.sh
set -euo pipefail

MEGATRON_PATH=${MEGATRON_PATH:-/workspace/Megatron-LM}
CHECKPOINT_PATH=${CHECKPOINT_PATH:-checkpoints/qwen3-30b-a3b}
NNODES=${NNODES:-2}            # 16 GPUs = 2 x 8
NPROC_PER_NODE=${NPROC_PER_NODE:-8}
MASTER_ADDR=${MASTER_ADDR:?set MASTER_ADDR to the address of the first node}
MASTER_PORT=${MASTER_PORT:-29500}
RDZV_ID=${RDZV_ID:-planner-qwen3-30b-a3b}

# NCCL over infiniband (GPUDirect RDMA); list the HCAs in NCCL_IB_HCA if NCCL picks the wrong ones
export NCCL_IB_DISABLE=0
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
export TORCH_NCCL_ASYNC_ERROR_HANDLING=1   # fail fast on a hung collective

MODEL_ARGS=(
  --num-layers 48
  --hidden-size 2048
  --num-attention-heads 32
  --ffn-hidden-size 6144
  --seq-length 4096
  --max-position-embeddings 4096
  --kv-channels 128
  --group-query-attention
  --num-query-groups 4
  --qk-layernorm
  --swiglu
  --position-embedding-type rope
  --normalization RMSNorm
  --disable-bias-linear
  --untie-embeddings-and-output-weights
  --attention-dropout 0.0
  --hidden-dropout 0.0
  --attention-backend auto
  --num-experts 128
  --moe-router-topk 8
  --moe-ffn-hidden-size 768
  --moe-grouped-gemm
  --moe-token-dispatcher-type alltoall
  --moe-router-load-balancing-type aux_loss
)
PARALLEL_ARGS=(
  --tensor-model-parallel-size 1
  --pipeline-model-parallel-size 1
  --expert-model-parallel-size 16
  --expert-tensor-parallel-size 1
  --use-distributed-optimizer
  --overlap-grad-reduce
  --overlap-param-gather
  --overlap-moe-expert-parallel-comm
  --delay-wgrad-compute
  --micro-batch-size 1
  --global-batch-size 1024
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
  --vocab-size 151936
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
