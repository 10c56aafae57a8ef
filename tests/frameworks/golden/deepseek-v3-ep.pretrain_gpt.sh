#!/usr/bin/env bash
# Megatron-LM launch config written by planner 0.1.0.
# Model deepseek-v3 on 1024 x H100-SXM5-80GB (dgx-h100).
# Strategy: dp 128, tp 8, pp 1, ep 128, etp 1, mb 1, global batch 15360, seq_len 4096,
#   sequence_parallel true, recompute full, zero_stage 1, bf16.
# Predicted: 113.173 s per step, peak 59.8 GiB per GPU (stage 0), MFU 14.3%.
# Keys checked against NVIDIA/Megatron-LM @d98e8a64 (megatron/training/arguments.py and the
#   config dataclasses it turns into flags).
# Run on every node: MASTER_ADDR=<first node> [DATA_PATH=<prefix>] bash pretrain_gpt.sh
set -euo pipefail

MEGATRON_PATH=${MEGATRON_PATH:-/workspace/Megatron-LM}
CHECKPOINT_PATH=${CHECKPOINT_PATH:-checkpoints/deepseek-v3}
NNODES=${NNODES:-128}            # 1024 GPUs = 128 x 8
NPROC_PER_NODE=${NPROC_PER_NODE:-8}
MASTER_ADDR=${MASTER_ADDR:?set MASTER_ADDR to the address of the first node}
MASTER_PORT=${MASTER_PORT:-29500}
RDZV_ID=${RDZV_ID:-planner-deepseek-v3}

# NCCL over infiniband (GPUDirect RDMA); list the HCAs in NCCL_IB_HCA if NCCL picks the wrong ones
export NCCL_IB_DISABLE=0
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
export TORCH_NCCL_ASYNC_ERROR_HANDLING=1   # fail fast on a hung collective
# Tensor- and context-parallel kernels must be issued in order (Megatron-LM asserts it with tp > 1 or cp > 1)
export CUDA_DEVICE_MAX_CONNECTIONS=1

MODEL_ARGS=(
  --num-layers 61
  --hidden-size 7168
  --num-attention-heads 128
  --ffn-hidden-size 18432
  --seq-length 4096
  --max-position-embeddings 4096
  --multi-latent-attention
  --kv-lora-rank 512
  --qk-head-dim 128
  --qk-pos-emb-head-dim 64
  --v-head-dim 128
  --q-lora-rank 1536
  --swiglu
  --position-embedding-type rope
  --normalization RMSNorm
  --disable-bias-linear
  --untie-embeddings-and-output-weights
  --attention-dropout 0.0
  --hidden-dropout 0.0
  --attention-backend auto
  --num-experts 256
  --moe-router-topk 8
  --moe-ffn-hidden-size 2048
  --moe-grouped-gemm
  --moe-token-dispatcher-type alltoall
  --moe-layer-freq "([0]*3+[1]*58)"
  --moe-shared-expert-intermediate-size 2048
  --moe-router-load-balancing-type seq_aux_loss
  --moe-router-enable-expert-bias
  --moe-router-score-function sigmoid
  --moe-router-num-groups 8
  --moe-router-group-topk 4
  --mtp-num-layers 1
)
PARALLEL_ARGS=(
  --tensor-model-parallel-size 8
  --pipeline-model-parallel-size 1
  --expert-model-parallel-size 128
  --expert-tensor-parallel-size 1
  --sequence-parallel
  --use-distributed-optimizer
  --overlap-grad-reduce
  --overlap-param-gather
  --tp-comm-overlap
  --micro-batch-size 1
  --global-batch-size 15360
  --recompute-granularity full
  --recompute-method uniform
  --recompute-num-layers 1
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
  --vocab-size 129280
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
