"""Data-parallel communication under ZeRO: which collectives a step runs, and how much of them
the forward and backward passes hide.

Symbols: Psi the parameters a rank holds (after tensor, pipeline and expert sharding), d the
ranks sharing them, B_f and B_b the forward and backward compute they overlap with.

Refs:
- Rajbhandari et al. 2020 (ZeRO, arXiv:1910.02054), Sec. 7.2: data parallelism all-reduces the
  gradients (2 Psi per rank: a reduce-scatter and an all-gather); P_os and P_os+g reduce-scatter
  the gradients and all-gather the updated parameters, the same 2 Psi; P_os+g+p all-gathers
  the parameters before the forward and again before the backward pass and reduce-scatters the
  gradients, 3 Psi (1.5x). Megatron-LM's distributed optimizer is P_os
  (docs/source/api-guide/dist_optimizer.md: reduce-scatter of the gradients, all-gather of the
  parameters).
- Zhao et al. 2023 (PyTorch FSDP, arXiv:2304.11277), Sec. 3.2: P_os+g+p runs unit by unit (one
  unit per transformer block), so the gathers and reductions are per block; Sec. 3.2.2, hybrid
  sharding (HSDP): the ZeRO collectives inside a shard group, then one all-reduce of each rank's
  gradient shard across the replicas.
- Overlap (`communication.overlap_pieces`): gradient traffic hides behind the backward pass it
  follows, parameter gathers behind the forward pass they precede.

Every function here works on plain numbers and numpy arrays; the per-micro-batch one also on
anything with + and scalar x (the layout balancer's per-stage sums), which is why it returns
linear pieces and leaves their maximum to the caller.
"""

from __future__ import annotations

import numpy as np

from cost_models.communication import Line, exposed_time_s, overlap_pieces
from cost_models.enums import ZeroStage


def zero_micro_batch_pieces(*, zero_stage, reduce_scatter_s, block_all_gather_s,
                            block_reduce_scatter_s, forward_s, backward_s, overlap,
                            prefetch_share: float, interference: float) -> tuple:
    """Four linear pieces whose largest is the data-parallel time per micro-batch, seconds.

    Ref: Rajbhandari et al. 2020, Sec. 5.2 and 7.2.1: P_os+g reduce-scatters each micro-batch's
    gradients as they are produced (the accumulated gradients are sharded), `reduce_scatter_s`
    of them, behind the backward pass with overlap. P_os+g+p (Zhao et al. 2023, Sec. 3.2) all-
    gathers every block's weights before its forward and again before its backward and
    reduce-scatters its gradients: `block_all_gather_s` and `block_reduce_scatter_s` summed
    over the blocks; with overlap, `prefetch_share` of each hides behind its pass (the forward
    prefetch of the next unit). ZeRO 0 and 1 reduce once per step (`zero_step_end_s`).
    `zero_stage` and `overlap` may be arrays (per candidate); they select pieces through 0/1
    weights, so that every piece stays linear in the times.
    """
    zero = np.asarray(zero_stage)
    stage2 = (zero == ZeroStage.GRADIENTS).astype(float)
    stage3 = (zero == ZeroStage.PARAMETERS).astype(float)
    on = np.asarray(overlap, dtype=float)
    off = 1.0 - on
    k = interference
    on2, off2, on3, off3 = stage2 * on, stage2 * off, stage3 * on, stage3 * off
    # What no piece depends on the overlap's case for: the serial collectives.
    base = 0.0 * reduce_scatter_s
    if np.any(off2):
        base = base + off2 * reduce_scatter_s
    if np.any(off3):
        base = base + off3 * (2 * block_all_gather_s + block_reduce_scatter_s)
    # ZeRO-2: the micro-batch's reduce-scatter behind the backward pass.
    zero2 = [base, base]
    if np.any(on2):
        zero2 = [base + on2 * piece
                 for piece in overlap_pieces(reduce_scatter_s, backward_s, interference=k)]
    if not np.any(on3):
        return zero2[0], zero2[0], zero2[1], zero2[1]
    # ZeRO-3: the gather before the forward behind it; the second gather and the reduce-scatter
    # behind the backward pass.
    before_forward = overlap_pieces(block_all_gather_s, forward_s, interference=k,
                                    share=prefetch_share)
    before_backward = overlap_pieces(block_all_gather_s + block_reduce_scatter_s, backward_s,
                                     interference=k, share=prefetch_share)
    pieces = []
    for i in (0, 1):
        for j in (0, 1):
            pieces.append(zero2[i] + on3 * (before_forward[i] + before_backward[j]))
    return tuple(pieces)


def zero3_block_collectives_s(line: Line, *, message_bytes, fetches):
    """Seconds of ZeRO-3's collectives of `message_bytes` in all, split into `fetches`
    collectives of message_bytes / fetches each, on one NCCL protocol line: each pays the
    latency, so fetches x latency + message_bytes x seconds per byte.

    Ref: Zhao et al. 2023 (FSDP), Sec. 3.2: one FSDP unit per transformer block, gathered and
    reduced unit by unit; DeepSpeed stage 3 fetches per submodule (zero/parameter_offload.py),
    the framework profile's fetches_per_block. Linear in the bytes and the fetches.
    """
    return fetches * line.latency_s + message_bytes * line.seconds_per_byte


def zero_micro_batch_s(**kw):
    """Seconds of data-parallel traffic per micro-batch: the largest of
    `zero_micro_batch_pieces` (Ref: as there)."""
    pieces = zero_micro_batch_pieces(**kw)
    out = pieces[0]
    for p in pieces[1:]:
        out = np.maximum(out, p)
    return out


def ddp_bucket_count(params, *, dp_size, min_elements: int, elements_per_rank: int,
                     overlap):
    """How many buckets the overlapped gradient reduction (and the parameter all-gather that
    reuses its buckets) of `params` parameters runs as: one collective per bucket of
    max(`min_elements`, `elements_per_rank` x `dp_size`) parameters, launched as the bucket's
    gradients are ready. One bucket without overlap, or where the framework states no size.

    Ref: Megatron-LM megatron/training/training.py resolve_ddp_bucket_size @d98e8a64:
    `max(40_000_000, 1_000_000 * dp_cp_size)` parameters per bucket, no buckets (the whole
    buffer) when overlap_grad_reduce is off; core/distributed/param_and_grad_buffer.py forms
    the buckets and launches one reduce-scatter (all-reduce) / all-gather per bucket. DeepSpeed
    ZeRO-1/2: zero_optimization.reduce_bucket_size, 5e8 elements by default
    (deepspeed/runtime/zero/config.py).
    """
    size = np.maximum(min_elements, elements_per_rank * np.asarray(dp_size, dtype=float))
    count = np.ceil(np.asarray(params, dtype=float) / np.where(size > 0, size, 1.0))
    return np.where(np.asarray(overlap) & (size > 0), np.maximum(count, 1.0), 1.0)


def zero_step_end_s(*, zero_stage, gradient_all_reduce_s, gradient_reduce_scatter_s,
                    weight_all_gather_s, replica_all_reduce_s, forward_s, backward_s,
                    overlap_grad_reduce, overlap_param_gather, interference: float,
                    buckets=1.0, bucketed=False):
    """Seconds of data-parallel traffic at the end of a step (after the last micro-batch).

    Ref: Rajbhandari et al. 2020, Sec. 7.2.1: ZeRO-0 all-reduces the gradients
    (`gradient_all_reduce_s`, or the parameter server's push and pull in its place); P_os
    reduce-scatters them and, like P_os+g, all-gathers the updated weights
    (`weight_all_gather_s`). Under HSDP (Zhao et al. 2023, Sec. 3.2.2) every sharded stage
    also all-reduces its gradient shard across the replicas (`replica_all_reduce_s`, 0 without
    HSDP). With overlap the gradient traffic hides behind the last backward pass and the
    gather behind the next forward (Megatron-LM --overlap-grad-reduce, --overlap-param-gather).
    Where the framework reduces bucket by bucket (`bucketed`, `buckets` of them, each
    collective's time given as the sum over its buckets), one bucket of each cannot overlap:
    the last bucket's reduction starts when the backward has ended (finish_grad_sync waits on
    it), and the first bucket's gather must land before the first layer's forward
    (param_and_grad_buffer.py: the forward pre-hook waits on its bucket group and dispatches
    the next one).
    """
    zero = np.asarray(zero_stage)
    gradients = np.select([zero == ZeroStage.NONE, zero == ZeroStage.OPTIMIZER_STATES],
                          [gradient_all_reduce_s, gradient_reduce_scatter_s], 0.0)
    gradients = gradients + np.where(zero >= ZeroStage.OPTIMIZER_STATES, replica_all_reduce_s,
                                     0.0)
    gather = np.where((zero == ZeroStage.OPTIMIZER_STATES) | (zero == ZeroStage.GRADIENTS),
                      weight_all_gather_s, 0.0)
    k = interference
    edge = np.where(bucketed, 1.0 / np.asarray(buckets, dtype=float), 0.0)

    def overlapped(comm_s, compute_s):
        return edge * comm_s + exposed_time_s((1 - edge) * comm_s, compute_s, interference=k)

    return (np.where(overlap_grad_reduce, overlapped(gradients, backward_s), gradients)
            + np.where(overlap_param_gather, overlapped(gather, forward_s), gather))


def hsdp_replica_bytes(gradient_bytes, *, shard_size):
    """Bytes each rank all-reduces across the HSDP replicas: its 1/shard_size of the
    gradients.

    Ref: Zhao et al. 2023 (FSDP), Sec. 3.2.2, hybrid sharding.
    """
    return gradient_bytes / shard_size


def fp8_gather_bytes_saved(*, weight_bytes: float, fp8_value_bytes: float, gathered: object):
    """Bytes per FP8 linear parameter the weight all-gather saves when FP8 parameters are
    gathered in FP8 rather than bf16.

    Ref: Megatron-LM megatron/core/transformer/moe/README.md: --fp8-param-gather, "50%
    parameter all-gather" for 1-byte values; MXFP8 sends its scales too
    (`fp8.fp8_value_bytes`). `gathered`: where FP8 parameters are gathered so.
    """
    return np.where(gathered, weight_bytes - fp8_value_bytes, 0.0)
