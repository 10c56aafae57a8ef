"""Pipeline schedules: in-flight micro-batches, bubble, and step time of unequal stages.

Symbols: p pipeline stages (devices), v model chunks per device (interleaved schedule),
m micro-batches per step, r a stage's index (0 = first).
"""

from __future__ import annotations

import numpy as np

from cost_models.communication import (Group, Network, all_gather_time_s,
                                      send_recv_time_s)
from cost_models.enums import MicroBatchGroups, PipelinePartition, PipelineSchedule


def bubble_fraction(*, pp, num_micro_batches, vpp=1):
    """Pipeline bubble time as a fraction of ideal compute time.

    Ref: Narayanan et al. 2021 (arXiv:2104.04473), Sec. 2.2.1: (p - 1) / m for GPipe and 1F1B;
    Sec. 2.2.2: (p - 1) / (v m) for the interleaved schedule.
    """
    return (pp - 1) / (vpp * num_micro_batches)


def interleaved_memory_factor(*, pp, vpp):
    """Activation memory of the first stage under the interleaved schedule, relative to 1F1B.

    Ref: Korthikanti et al. 2022 (arXiv:2205.05198), Sec. 4.2.3: 1 + (p - 1) / (p v).
    `in_flight_chunk_micro_batches` reproduces it for stage 0 by counting.
    """
    return 1 + (pp - 1) / (pp * vpp)


def micro_batch_group_size(*, pp, num_micro_batches):
    """The micro-batches each model chunk runs in a row under the interleaved schedule, where
    Megatron-LM can run m micro-batches on p stages at all: p (its default, the depth-first
    schedule) where p divides m, else the smallest group N in [p, m] whose remainder m mod N
    is 0 or at least p; 0 where none is (m < p).

    Ref: Megatron-LM megatron/core/model_parallel_config.py microbatch_group_size_per_vp_stage
    (--microbatch-group-size-per-virtual-pipeline-stage, default pp; commit 4295be1a6c,
    2024-11) and pipeline_parallel/schedules.py forward_backward_pipelining_with_interleaving,
    which refuses N outside [p, m] and a last group of fewer than p micro-batches ("Otherwise,
    it introduces dependency bubbles"). N = m is always allowed for m >= p; the smallest N
    keeps the fewest micro-batches in flight (`in_flight_chunk_micro_batches`). Meta's Llama 3
    405B run tuned the same N to run batch sizes that are not multiples of pp (Llama 3 paper,
    arXiv:2407.21783, Sec. 3.3.2). Works on arrays: one search per distinct (p, m).
    """
    p = np.asarray(pp, dtype=np.int64)
    m = np.asarray(num_micro_batches, dtype=np.int64)
    p, m = np.broadcast_arrays(p, m)
    # p where it divides m (most candidates), 0 where m < p; the rest searched per (p, m).
    out = np.where(m % np.maximum(p, 1) == 0, p, 0).astype(np.int64)
    rest = np.flatnonzero(((m % np.maximum(p, 1)) != 0) & (m >= p))
    if rest.size:
        keys, inverse = np.unique(p.ravel()[rest] * (1 << 32) + m.ravel()[rest],
                                  return_inverse=True)
        found = np.array([next(n for n in range(int(k >> 32) + 1, int(k & 0xFFFFFFFF) + 1)
                               if (k & 0xFFFFFFFF) % n == 0 or (k & 0xFFFFFFFF) % n >= k >> 32)
                          for k in keys.tolist()], dtype=np.int64)
        flat = out.ravel().copy()
        flat[rest] = found[inverse.reshape(-1)]
        out = flat.reshape(out.shape)
    return out if out.ndim else int(out)


def schedule_group(*, pp, num_micro_batches, pinned=0, groups=MicroBatchGroups.PP):
    """Micro-batches per group the interleaved schedule runs: `pinned` where it is set (> 0),
    else as the framework's schedule groups them (`groups`): pp; the smallest group
    Megatron-LM accepts (`micro_batch_group_size`); or PyTorch's equal rounds, m / r with
    r = max(1, m // p) rounds where r divides m (0 where it does not, or m < p).

    Ref: Megatron-LM model_parallel_config.py microbatch_group_size_per_vp_stage (default pp);
    PyTorch torch/distributed/pipelining/schedules.py ScheduleInterleaved1F1B ("It differs by
    relaxing the requirement of num_microbatch % pp_size == 0 ... num_rounds = max(1,
    n_microbatches // pp_group_size) and it works as long as n_microbatches % num_rounds is
    0"), whose warm-up is (n_local_stages - 1) * microbatches_per_round + 2 (pp - 1 - rank),
    Megatron-LM's with N = microbatches_per_round."""
    p = np.asarray(pp)
    m = np.rint(np.asarray(num_micro_batches, dtype=float)).astype(np.int64)
    groups = MicroBatchGroups(groups)
    if groups is MicroBatchGroups.SMALLEST:
        chosen = micro_batch_group_size(pp=p, num_micro_batches=m)
    elif groups is MicroBatchGroups.ROUNDS:
        rounds = np.maximum(1, m // np.maximum(p, 1))
        chosen = np.where((m % rounds == 0) & (m >= p), m // rounds, 0)
    else:
        chosen = p
    return np.where(np.asarray(pinned) > 0, pinned, chosen)


def schedule_group_allowed(*, pp, num_micro_batches, group):
    """Where the interleaved schedule can run `num_micro_batches` on `pp` stages in groups of
    `group`: p <= N <= m, and the last group is whole or holds at least p micro-batches.

    Ref: Megatron-LM pipeline_parallel/schedules.py forward_backward_pipelining_with_
    interleaving (the ValueError and RuntimeError before the schedule starts)."""
    p, n = np.asarray(pp), np.asarray(group)
    m = np.rint(np.asarray(num_micro_batches, dtype=float)).astype(np.int64)
    rest = m % np.maximum(n, 1)
    return (n >= p) & (n <= m) & ((rest == 0) | (rest >= p))


def _group(pp, group):
    """Micro-batches per group of the interleaved schedule: `group`, else p (the default)."""
    return pp if group is None else np.where(np.asarray(group) > 0, group, pp)


def in_flight_chunk_micro_batches(*, stage, pp, vpp, num_micro_batches, group=None,
                                  schedule=PipelineSchedule.ONE_F_ONE_B):
    """Forward passes (chunk x micro-batch) a stage holds activations for at its peak.

    Ref: Megatron-LM megatron/core/pipeline_parallel/schedules.py. With one chunk per device
    (1F1B, Narayanan et al. 2021 Sec. 2.2.1) stage r runs p - r - 1 warm-up forwards and one
    more before its first backward: p - r micro-batches in flight. With v chunks
    (forward_backward_pipelining_with_interleaving, get_pp_rank_microbatches) the warm-up is
    (p - r - 1) * 2 + (v - 1) * N forwards, plus one, for groups of N micro-batches
    (`micro_batch_group_size`; `group` None: N = p). Both are capped by the m * v forwards a
    step has. For r = 0 and N = p the count is p (v + 1) - 1 chunks of L / (p v) layers:
    L (1 + (p - 1)/(p v)) layers, Korthikanti's factor.

    The zero-bubble schedules keep a micro-batch's activations until its weight gradient
    runs, which they delay: every rank holds p of them with one chunk (Qi et al. 2024,
    arXiv:2401.10241, Sec. 2.3: worker i holds (p - i + 1) M_B + (i - 1) M_W, counted here
    whole, M_W as M_B: an upper bound), and with v chunks its (v - 1) N + p warm-up
    forwards (torch.distributed.pipelining ScheduleInterleavedZeroBubble: (v - 1) N +
    p - 1 - r warm-up forwards, one more, and the r whose W is still to run); ZB-V holds
    2 p chunk passes on every rank, as 1F1B's first rank (Qi et al., sail-sg/zero-bubble-
    pipeline-parallelism README: ZBV activation memory 1x 1F1B's), and DualPipeV one more,
    the pair it runs together (deepseek-ai/DualPipe README: "PP+1" of PP chunks).
    """
    p, v, r, m = pp, vpp, stage, num_micro_batches
    n = _group(pp, group)
    schedule = PipelineSchedule(schedule)
    if schedule is PipelineSchedule.ZERO_BUBBLE:
        held = (v - 1) * n + p + 0 * r
    elif schedule is PipelineSchedule.ZBV:
        held = 2 * p + 0 * r
    elif schedule is PipelineSchedule.DUALPIPEV:
        held = 2 * p + 1 + 0 * r
    else:
        held = np.where(v > 1, (p - r - 1) * 2 + (v - 1) * n, p - r - 1) + 1
    return np.minimum(held, m * v)


def in_flight_per_chunk(*, stage, pp, vpp, num_micro_batches, chunk, group=None,
                        schedule=PipelineSchedule.ONE_F_ONE_B):
    """How many of the in-flight forwards of `stage` belong to its model chunk `chunk`.

    Ref: Megatron-LM schedules.py get_schedule_table: the forwards run groups of N micro-
    batches (N = p by default, `group`), chunk by chunk within a group, and the last group
    holds the m - N (G - 1) micro-batches left (G groups); so the warm-up fills chunk 0 for N
    micro-batches, then chunk 1, ...
    """
    p, v, m = pp, vpp, num_micro_batches
    n = _group(pp, group)
    total = in_flight_chunk_micro_batches(stage=stage, pp=pp, vpp=vpp,
                                          num_micro_batches=num_micro_batches, group=group,
                                          schedule=schedule)
    groups = np.maximum(-(-np.asarray(m) // n), 1)                 # ceil(m / N)
    before_last = (groups - 1) * n * v                              # forwards in full groups
    last = m - (groups - 1) * n                                     # the last group's size
    full_rounds, rest = np.divmod(np.minimum(total, before_last), n * v)
    in_full = full_rounds * n + np.clip(rest - chunk * n, 0, n)
    in_last = np.clip(total - before_last - chunk * last, 0, last)
    return in_full + np.where(total > before_last, in_last, 0)


def pipeline_time_s(*, max_stage_s, sum_stage_s, num_micro_batches, vpp=1):
    """Time of one step's forward and backward passes through a pipeline of unequal stages.

    Ref: Narayanan et al. 2021, Sec. 3.3, Eq. 1: (m + p - 1) (t_f + t_b) for p equal stages.
    With unequal per-micro-batch stage times tau_r, 1F1B takes sum_r tau_r to fill and drain
    and (m - 1) max_r tau_r in the steady state; the interleaved schedule divides the fill and
    drain by v (Sec. 2.2.2). Both reduce to Eq. 1 and to m tau + (p - 1) tau / v when the
    stages are equal.
    """
    m, v = num_micro_batches, vpp
    return (m - 1) * max_stage_s + (sum_stage_s + (v - 1) * max_stage_s) / v


def schedule_bubble_s(schedule, *, pp, forward_s, input_grad_s, weight_grad_s):
    """Idle time of a pipeline of pp equal stages per step, from one chunk's times per
    micro-batch: forward F, backward for the inputs B (with any recomputation) and for the
    weights W (1F1B runs B and W as one backward).

    Refs:
    - 1F1B: (p - 1)(F + B + W) (Narayanan et al. 2021, Sec. 2.2.1; Qi et al. 2024,
      arXiv:2401.10241, Table 2); per chunk it is the interleaved schedule's bubble.
    - ZB-H1: (p - 1)(F + B - W) (Qi et al. 2024, Table 2 and Sec. 2.1; DeepSeek-V3 report,
      arXiv:2412.19437, Table 2, ZB1P, with B the whole backward: (p - 1)(F + B - 2W)). It
      assumes W no longer than F or B: the last rank still waits p - 1 forwards before its
      first, and the first rank p - 1 input gradients after its last forward, so it is never
      below (p - 1) max(F, B). torch's ScheduleInterleavedZeroBubble runs it per chunk; the
      ZB-V schedule (ScheduleZBVZeroBubble) is priced the same, its own bubble for unequal
      F, B, W being unpublished (zero at F = B = W, Qi et al. Sec. 6, beyond the start-up
      p - 1 forwards every synchronous step pays).
    - DualPipeV: (PP/2 - 1)(F&B + B - 3W) over PP = 2p chunks with B the whole backward
      (deepseek-ai/DualPipe README), F&B the time of a forward and a backward of two
      micro-batches run together: torch's ScheduleDualPipeV runs them one after the other
      unless the model registers an overlapped pair (schedules.py, OVERLAP_F_B), F&B =
      F + B + W, so (p - 1)(F + 2B - W); likewise never below (p - 1) F.
    """
    q = np.asarray(pp) - 1
    f, b, w = forward_s, input_grad_s, weight_grad_s
    schedule = PipelineSchedule(schedule)
    if schedule in (PipelineSchedule.ZERO_BUBBLE, PipelineSchedule.ZBV):
        return q * np.maximum(np.maximum(f, b), f + b - w)
    if schedule is PipelineSchedule.DUALPIPEV:
        return q * np.maximum(f, f + 2 * b - w)
    return q * (f + b + w)


def pipeline_send_bytes(elements, *, tp, value_bytes: float):
    """Bytes one rank sends across a pipeline boundary per micro-batch.

    Ref: Narayanan et al. 2021, Sec. 4.1 (scatter/gather): each of the t ranks sends 1/t of
    the s*b*h activation and the receiver all-gathers it over NVLink; with sequence
    parallelism the activation is already split t ways. `tp` is the split (1: whole).
    """
    return elements * value_bytes / tp


def pipeline_boundary_s(*, elements, value_bytes: float, tp, sequence_parallel: bool,
                        scatter_gather: bool, across_nodes, tp_group: Group, net: Network):
    """Seconds per micro-batch one chunk boundary costs its stage: the activation sent forward
    and its gradient sent back.

    Ref: Narayanan et al. 2021, Sec. 2.2 and 4.1: each micro-batch crosses every chunk boundary
    once forward and once backward. With the scatter/gather optimisation each rank sends 1/t
    and the receiving side all-gathers over the TP group (not needed with sequence
    parallelism, whose activation is already split); without it (`scatter_gather` false:
    DeepSpeed's runtime/pipe/p2p.py) every rank sends the whole activation.
    """
    split = np.where(np.asarray(sequence_parallel) | scatter_gather, tp, 1.0)
    sent = pipeline_send_bytes(elements, tp=split, value_bytes=value_bytes)
    transfer = send_recv_time_s(sent, across_nodes=across_nodes, net=net)
    regather = all_gather_time_s(elements * value_bytes, tp_group, net)
    regather = np.where(np.asarray(sequence_parallel) | (not scatter_gather), 0.0, regather)
    return 2 * (transfer + regather)                         # forward + backward


def pipeline_boundary_exposed_s(boundary_s, *, overlapped):
    """Seconds of `pipeline_boundary_s` a stage waits for: all of it, or none where the
    schedule overlaps its transfers with compute.

    Ref: Megatron-LM core/pipeline_parallel/schedules.py forward_backward_pipelining_with_
    interleaving with overlap_p2p_comm (on by default with the interleaved schedule,
    training/arguments.py): each send and receive is posted asynchronously
    (p2p_communication.py returns wait handles) and waited only before the chunk that needs
    it, so in the steady state the transfer runs beside another chunk's forward or backward.
    That chunk's compute is several times the transfer (both scale with s b h / t; a layer's
    forward does about 24 h FLOPs per byte sent), so the transfer is hidden.
    """
    return np.where(np.asarray(overlapped), 0.0, boundary_s)


def pipeline_kept_output_bytes(elements, *, value_bytes: float):
    """Bytes a pipeline engine keeps per in-flight micro-batch for a chunk's output, whole.

    Ref: DeepSpeed runtime/pipe/engine.py keeps each stage output in pipe_buffers['outputs']
    until its backward pass (num_pipe_buffers = min(stages - stage_id, micro_batches),
    runtime/pipe/schedule.py).
    """
    return elements * value_bytes


def partitioned_layer_counts(num_layers: int, num_stages: int,
                             method: PipelinePartition) -> list[int]:
    """Transformer layers per stage as DeepSpeed's pipeline places them by itself.

    deepspeed/runtime/utils.py partition_balanced (the linear-partition DP that
    PipelineModule._partition_layers runs for 'type:...' methods) gives U unit-weight specs over
    m stages ceil(U/m) on the first U mod m stages and floor(U/m) on the rest. Under
    TRANSFORMER_EMBEDDING, U counts the two embedding specs too, which sit on the first and the
    last stage: e.g. 70 layers on 12 stages (BLOOM) -> [5, 6 x 10, 5]."""
    embeddings = 2 if method is PipelinePartition.TRANSFORMER_EMBEDDING else 0
    units = num_layers + embeddings
    base, extra = divmod(units, num_stages)
    counts = [base + (stage < extra) for stage in range(num_stages)]
    if embeddings:
        counts[0] -= 1
        counts[-1] -= 1
    return counts


def partition_placements(num_layers: int, num_stages: int,
                         methods) -> list[list[int]]:
    """The distinct layer counts per stage that `methods` (PipelinePartition) give, those with a
    layer on every stage, in the order of `methods`."""
    found: list[list[int]] = []
    for method in methods:
        counts = partitioned_layer_counts(num_layers, num_stages, method)
        if min(counts) >= 1 and counts not in found:
            found.append(counts)
    return found
