#!/usr/bin/env bash
# torchrun launch config written by planner 0.1.0.
# Model gpt3-175b on 512 x Ascend-910B (ascend-910b).
# Strategy: dp 8, tp 8, pp 8, mb 1, global batch 1536, seq_len 2048, sequence_parallel true,
#   recompute full, zero_stage 1, bf16.
# Predicted: 55.240 s per step, peak 24.4 GiB per GPU (stage 0), MFU 36.9%.
# Keys checked against pytorch/pytorch torch/distributed/run.py (torch 2.x option spellings).
# Run on every node: MASTER_ADDR=<first node> bash torchrun.sh train.py [args]
set -euo pipefail

NNODES=${NNODES:-64}            # 512 GPUs = 64 x 8
NPROC_PER_NODE=${NPROC_PER_NODE:-8}
MASTER_ADDR=${MASTER_ADDR:?set MASTER_ADDR to the address of the first node}
MASTER_PORT=${MASTER_PORT:-29500}
RDZV_ID=${RDZV_ID:-planner-gpt3-175b}

# HCCL (Ascend, torch_npu): allow slow first connections on large clusters
export HCCL_CONNECT_TIMEOUT=${HCCL_CONNECT_TIMEOUT:-1200}
# Tensor- and context-parallel kernels must be issued in order (Megatron-LM asserts it with tp > 1 or cp > 1)
export CUDA_DEVICE_MAX_CONNECTIONS=1

torchrun --nnodes "$NNODES" --nproc-per-node "$NPROC_PER_NODE" \
  --rdzv-backend c10d --rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT" --rdzv-id "$RDZV_ID" \
  "$@"
