#!/usr/bin/env bash
# Megatron-LM launch config written by planner 0.1.0.
# Model gpt-oss-120b on 64 x H100-SXM5-80GB (dgx-h100).
# Strategy: dp 64, tp 1, pp 1, ep 64, mb 1, global batch 1024, seq_len 4096, sequence_parallel
#   false, recompute full, zero_stage 1, bf16.
# Predicted: 20.306 s per step, peak 51.2 GiB per GPU (stage 0), MFU 10.7%.
# Keys checked against NVIDIA/Megatron-LM @d98e8a64 (megatron/training/arguments.py and the
#   config dataclasses it turns into flags).
# The experts' GLU clamp (limit 7, HF swiglu_limit) has no pretrain_gpt.py flag:
#   Megatron-Bridge's GPT-OSS provider sets TransformerConfig.activation_func_clamp_value; this
#   script trains without it.
# Run on every node: MASTER_ADDR=<first node> [DATA_PATH=<prefix>] bash pretrain_gpt.sh
set -euo pipefail

MEGATRON_PATH=${MEGATRON_PATH:-/workspace/Megatron-LM}
CHECKPOINT_PATH=${CHECKPOINT_PATH:-checkpoints/gpt-oss-120b}
NNODES=${NNODES:-8}            # 64 GPUs = 8 x 8
NPROC_PER_NODE=${NPROC_PER_NODE:-8}
MASTER_ADDR=${MASTER_ADDR:?set MASTER_ADDR to the address of the first node}
MASTER_PORT=${MASTER_PORT:-29500}
RDZV_ID=${RDZV_ID:-planner-gpt-oss-120b}

# NCCL over infiniband (GPUDirect RDMA); list the HCAs in NCCL_IB_HCA if NCCL picks the wrong ones
export NCCL_IB_DISABLE=0
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
export TORCH_NCCL_ASYNC_ERROR_HANDLING=1   # fail fast on a hung collective

MODEL_ARGS=(
  --num-layers 36
  --hidden-size 2880
  --num-attention-heads 64
  --ffn-hidden-size 2880
  --seq-length 4096
  --max-position-embeddings 4096
  --kv-channels 64
  --group-query-attention
  --num-query-groups 8
  --swiglu
  --position-embedding-type rope
  --normalization RMSNorm
  --untie-embeddings-and-output-weights
  --attention-dropout 0.0
  --hidden-dropout 0.0
  --attention-backend auto
  --window-size "128,0"
  --window-attn-skip-freq 2
  --softmax-type learnable
  --num-experts 128
  --moe-router-topk 4
  --moe-ffn-hidden-size 2880
  --moe-grouped-gemm
  --moe-token-dispatcher-type alltoall
  --moe-router-load-balancing-type aux_loss
)
PARALLEL_ARGS=(
  --tensor-model-parallel-size 1
  --pipeline-model-parallel-size 1
  --expert-model-parallel-size 64
  --expert-tensor-parallel-size 1
  --use-distributed-optimizer
  --overlap-grad-reduce
  --overlap-param-gather
  --micro-batch-size 1
  --global-batch-size 1024
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
  --vocab-size 201088
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
