#!/usr/bin/env bash
# Megatron-LM launch config written by planner 0.1.0.
# Model bert-large on 8 x A100-SXM4-80GB (dgx-a100-80gb).
# Strategy: dp 8, tp 1, pp 1, mb 4, global batch 256, seq_len 512, sequence_parallel false,
#   recompute none, zero_stage 0, fp16.
# Predicted: 0.251 s per step, peak 10.5 GiB per GPU (stage 0), MFU 45.0%.
# Keys checked against NVIDIA/Megatron-LM @d98e8a64 (megatron/training/arguments.py and the
#   config dataclasses it turns into flags).
# Run on every node: MASTER_ADDR=<first node> DATA_PATH=<prefix> VOCAB_FILE=<vocab.txt> bash pretrain_bert.sh
set -euo pipefail

MEGATRON_PATH=${MEGATRON_PATH:-/workspace/Megatron-LM}
DATA_PATH=${DATA_PATH:?set DATA_PATH to a Megatron .bin/.idx prefix}
VOCAB_FILE=${VOCAB_FILE:?set VOCAB_FILE to the BERT WordPiece vocabulary}
CHECKPOINT_PATH=${CHECKPOINT_PATH:-checkpoints/bert-large}
NNODES=${NNODES:-1}            # 8 GPUs = 1 x 8
NPROC_PER_NODE=${NPROC_PER_NODE:-8}
MASTER_ADDR=${MASTER_ADDR:?set MASTER_ADDR to the address of the first node}
MASTER_PORT=${MASTER_PORT:-29500}
RDZV_ID=${RDZV_ID:-planner-bert-large}

# NCCL over infiniband (GPUDirect RDMA); list the HCAs in NCCL_IB_HCA if NCCL picks the wrong ones
export NCCL_IB_DISABLE=0
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
export TORCH_NCCL_ASYNC_ERROR_HANDLING=1   # fail fast on a hung collective

MODEL_ARGS=(
  --num-layers 24
  --hidden-size 1024
  --num-attention-heads 16
  --ffn-hidden-size 4096
  --seq-length 512
  --max-position-embeddings 512
  --position-embedding-type learned_absolute
  --normalization LayerNorm
  --attention-backend auto
)
PARALLEL_ARGS=(
  --tensor-model-parallel-size 1
  --pipeline-model-parallel-size 1
  --overlap-grad-reduce
  --micro-batch-size 4
  --global-batch-size 256
)
TRAINING_ARGS=(
  --fp16
  --initial-loss-scale 4294967296
  --min-loss-scale 1.0
  --loss-scale-window 1000
  --hysteresis 2
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
TOKENIZER_ARGS=(
  --tokenizer-type BertWordPieceLowerCase
  --vocab-file "$VOCAB_FILE"
)
DATA_ARGS=(
  --data-path "$DATA_PATH"
  --split 949,50,1
)
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
  "$MEGATRON_PATH/pretrain_bert.py" \
  "${MODEL_ARGS[@]}" "${PARALLEL_ARGS[@]}" "${TRAINING_ARGS[@]}" "${TOKENIZER_ARGS[@]}" \
  "${DATA_ARGS[@]}" "${LOGGING_ARGS[@]}"
