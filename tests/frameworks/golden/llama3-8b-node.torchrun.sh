#!/usr/bin/env bash
# torchrun launch config written by planner 0.1.0.
# Model llama3-8b on 8 x H100-SXM5-80GB (dgx-h100).
# Strategy: dp 8, tp 1, pp 1, mb 1, global batch 512, seq_len 8192, sequence_parallel false,
#   recompute none, zero_stage 3, bf16.
# Predicted: 56.445 s per step, peak 61.7 GiB per GPU (stage 0), MFU 48.3%.
# Keys checked against pytorch/pytorch torch/distributed/run.py (torch 2.x option spellings).
# Run on every node: MASTER_ADDR=<first node> bash torchrun.sh train.py [args]
set -euo pipefail

NNODES=${NNODES:-1}            # 8 GPUs = 1 x 8
NPROC_PER_NODE=${NPROC_PER_NODE:-8}
MASTER_ADDR=${MASTER_ADDR:?set MASTER_ADDR to the address of the first node}
MASTER_PORT=${MASTER_PORT:-29500}
RDZV_ID=${RDZV_ID:-planner-llama3-8b}

# NCCL over infiniband (GPUDirect RDMA); list the HCAs in NCCL_IB_HCA if NCCL picks the wrong ones
export NCCL_IB_DISABLE=0
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
export TORCH_NCCL_ASYNC_ERROR_HANDLING=1   # fail fast on a hung collective

torchrun --nnodes "$NNODES" --nproc-per-node "$NPROC_PER_NODE" \
  --rdzv-backend c10d --rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT" --rdzv-id "$RDZV_ID" \
  "$@"
