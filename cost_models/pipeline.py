"""Pipeline schedules: in-flight micro-batches, bubble, and step time of unequal stages.

Symbols: p pipeline stages (devices), v model chunks per device (interleaved schedule),
m micro-batches per step, r a stage's index (0 = first).
"""

from __future__ import annotations

import numpy as np


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


def in_flight_chunk_micro_batches(*, stage, pp, vpp, num_micro_batches):
    """Forward passes (chunk x micro-batch) a stage holds activations for at its peak.

    Ref: Megatron-LM megatron/core/pipeline_parallel/schedules.py. With one chunk per device
    (1F1B, Narayanan et al. 2021 Sec. 2.2.1) stage r runs p - r - 1 warm-up forwards and one
    more before its first backward: p - r micro-batches in flight. With v chunks
    (forward_backward_pipelining_with_interleaving) the warm-up is (p - r - 1) * 2 + (v - 1) * p
    forwards, plus one. Both are capped by the m * v forwards a step has. For r = 0 the count
    is p (v + 1) - 1 chunks of L / (p v) layers: L (1 + (p - 1)/(p v)) layers, Korthikanti's
    factor.
    """
    p, v, r, m = pp, vpp, stage, num_micro_batches
    warmup = np.where(v > 1, (p - r - 1) * 2 + (v - 1) * p, p - r - 1)
    return np.minimum(warmup + 1, m * v)


def in_flight_per_chunk(*, stage, pp, vpp, num_micro_batches, chunk):
    """How many of the in-flight forwards of `stage` belong to its model chunk `chunk`.

    Ref: Megatron-LM schedules.py get_model_chunk_id: forward k of a device runs chunk
    (k mod (p v)) // p, so the warm-up fills chunk 0 for p micro-batches, then chunk 1, ...
    """
    p, v = pp, vpp
    total = in_flight_chunk_micro_batches(stage=stage, pp=pp, vpp=vpp,
                                          num_micro_batches=num_micro_batches)
    full_rounds, rest = np.divmod(total, p * v)
    return full_rounds * p + np.clip(rest - chunk * p, 0, p)


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
