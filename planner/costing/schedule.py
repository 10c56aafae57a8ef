"""One step of a plan laid out in time: each pipeline stage's forward and backward passes in
the order Megatron-LM's schedules run them, then what the step does after its last
micro-batch. What `planner plan --timeline` draws.

No new cost: the durations are the evaluated ones of `PlanReport.time` (each stage's seconds
per micro-batch and their forward share, `StageTime.forward_s`; the step-end terms of
`TimeReport`). The schedule only orders them: a pass starts when its stage is free and its
input is there (the forward of the chunk before it, the backward of the chunk after it),
which is what the closed form `cost_models.pipeline.pipeline_time_s` sums up. The two agree
exactly for equal stages (Narayanan et al. 2021, Eq. 1); for unequal ones the closed form is
an approximation of this schedule, and the passes are stretched by the small ratio between
them so that the picture's step is the planner's step (`Timeline.stretch`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from cost_models.pipeline import schedule_group_allowed
from planner.errors import InputError
from planner.schemas.report import PlanReport


@dataclass(frozen=True)
class Pass:
    """One chunk's forward or backward pass of one micro-batch on one stage."""

    stage: int
    chunk: int
    """The model chunk on this stage (0 to vpp - 1; interleaved schedules only)."""
    micro_batch: int
    backward: bool
    start_s: float
    end_s: float


def pass_order(*, stage: int, pp: int, vpp: int, num_micro_batches: int,
               group: int | None = None) -> list[tuple[int, int, bool]]:
    """(chunk, micro-batch, backward) of each pass `stage` runs, in order.

    Ref: Megatron-LM megatron/core/pipeline_parallel/schedules.py. One chunk per stage
    (forward_backward_pipelining_without_interleaving, 1F1B): p - r - 1 warm-up forwards,
    then one forward and one backward in turn, then the remaining backwards. With v chunks
    (forward_backward_pipelining_with_interleaving): forwards go through the schedule table
    in groups of N micro-batches (`group`, microbatch_group_size_per_vp_stage; None: p), chunk
    by chunk (get_schedule_table: the last group takes the micro-batches left), backwards
    through the same table with the chunks reversed; the warm-up is (p - r - 1) * 2 +
    (v - 1) * N forwards, capped at m * v (`cost_models.pipeline.in_flight_chunk_micro_batches`
    counts the same warm-up).
    """
    p, v, r, m = pp, vpp, stage, num_micro_batches
    n = group or p
    table = []
    for first in range(0, m, n):
        members = range(first, m) if first + n >= m else range(first, first + n)
        table += [(chunk, mb) for chunk in range(v) for mb in members]
    total = m * v
    warmup = min((p - r - 1) * 2 + (v - 1) * n if v > 1 else p - r - 1, total)
    forwards = [(chunk, mb, False) for chunk, mb in table]
    backwards = [(v - 1 - chunk, mb, True) for chunk, mb in table]
    order = forwards[:warmup]
    for k in range(total - warmup):
        order += [forwards[warmup + k], backwards[k]]
    return order + backwards[total - warmup:]


def simulate(forward_s: list[float], backward_s: list[float], *, vpp: int,
             num_micro_batches: int, group: int | None = None) -> list[list[Pass]]:
    """Each stage's passes in time, from 0: a stage runs its `pass_order` one pass at a
    time, each when its input has arrived. `forward_s[r]` and `backward_s[r]` are one
    chunk's passes on stage r (the stage's seconds per micro-batch over vpp), or a sequence of
    each chunk's; `group` the interleaved schedule's micro-batches per group (None: p)."""
    p, v = len(forward_s), vpp
    orders = [pass_order(stage=r, pp=p, vpp=v, num_micro_batches=num_micro_batches,
                         group=group)
              for r in range(p)]
    done: dict[tuple[int, int, bool], float] = {}        # (virtual stage, mb, bwd) -> end
    waiting: dict[tuple[int, int, bool], int] = {}       # input -> the stage waiting for it
    position, free = [0] * p, [0.0] * p
    passes: list[list[Pass]] = [[] for _ in range(p)]
    ready = deque(range(p))
    last = p * v - 1
    while ready:
        r = ready.popleft()
        while position[r] < len(orders[r]):
            chunk, mb, backward = orders[r][position[r]]
            virtual = chunk * p + r
            if backward:
                needs = (virtual + 1, mb, True) if virtual < last else (virtual, mb, False)
            else:
                needs = (virtual - 1, mb, False) if virtual > 0 else None
            if needs is not None and needs not in done:
                waiting[needs] = r
                break
            start = max(free[r], done[needs] if needs is not None else 0.0)
            seconds = backward_s[r] if backward else forward_s[r]
            end = start + (seconds[chunk] if isinstance(seconds, (list, tuple)) else seconds)
            done[(virtual, mb, backward)] = free[r] = end
            passes[r].append(Pass(r, chunk, mb, backward, start, end))
            position[r] += 1
            woken = waiting.pop((virtual, mb, backward), None)
            if woken is not None:
                ready.append(woken)
    if any(position[r] < len(orders[r]) for r in range(p)):
        raise AssertionError("pipeline schedule deadlocked (a bug in pass_order)")
    return passes


@dataclass(frozen=True)
class Segment:
    """A part of the step outside the pipeline passes, the same on every stage."""

    name: str
    start_s: float
    seconds: float


@dataclass(frozen=True)
class Timeline:
    """One step of a plan in time."""

    passes: list[list[Pass]]
    """Each stage's passes, stretched to the planner's pipeline time, offset by `pipeline_start_s`."""
    comm_share: list[float]
    """Of each stage's pass time, the share that is exposed communication (TP, CP, EP, PP,
    per-micro-batch DP) and host copies: drawn at the end of each pass."""
    pipeline_start_s: float
    pipeline_s: float
    """The planner's time for the micro-batches: m x the slowest stage + the bubble."""
    segments: list[Segment]
    """Before the first micro-batch (gradient zeroing) and after the last (data-parallel
    reduction, gradient norm, optimizer, offloaded step, loss all-reduce, host overhead)."""
    step_s: float
    stretch: float
    """The planner's pipeline time over the simulated one (1 for equal stages)."""
    num_micro_batches: int
    vpp: int

    @property
    def pp(self) -> int:
        return len(self.passes)


STEP_END = (("data-parallel reduction", "dp_end"), ("gradient norm", "grad_norm_s"),
            ("optimizer step", "optimizer_s"), ("offloaded step", "offload_end"),
            ("loss all-reduce", "loss_reduce_s"), ("host overhead", "overhead_s"))
"""The step-end segments in the order drawn, by name and `TimeReport` term (dp_end and
offload_end: the step-end parts of dp_comm_s and offload_s)."""


def step_timeline(plan: PlanReport) -> Timeline:
    """The timeline of one step of `plan`, its parts adding up to `plan.time.step_s`."""
    t, s = plan.time, plan.strategy
    m, v = max(1, round(s.num_micro_batches)), s.vpp
    group = s.microbatch_group or s.pp
    if v > 1 and not schedule_group_allowed(pp=s.pp, num_micro_batches=m, group=group):
        raise InputError(f"--timeline: the interleaved schedule cannot run {m} micro-batches "
                         f"on pp {s.pp} in groups of {group}, as Megatron-LM cannot")
    slowest = t.stages[t.slowest_stage]
    forward, backward, comm = [], [], []
    for stage in t.stages:
        total = stage.total_s
        share = stage.forward_s / stage.compute_s if stage.compute_s > 0 else 1 / 3
        forward.append(total * share / v)
        backward.append(total * (1 - share) / v)
        comm.append((total - stage.compute_s) / total if total > 0 else 0.0)
    passes = simulate(forward, backward, vpp=v, num_micro_batches=m, group=group)
    simulated = max((q[-1].end_s for q in passes if q), default=0.0)
    pipeline = s.num_micro_batches * slowest.total_s + t.bubble_s
    stretch = pipeline / simulated if simulated > 0 else 1.0
    start = t.grad_zero_s
    passes = [[Pass(q.stage, q.chunk, q.micro_batch, q.backward, start + q.start_s * stretch,
                    start + q.end_s * stretch) for q in row] for row in passes]
    terms = {"dp_end": t.dp_comm_s - s.num_micro_batches * slowest.dp_comm_s,
             "offload_end": t.offload_s - s.num_micro_batches * slowest.offload_s}
    segments = [Segment("gradient zeroing", 0.0, t.grad_zero_s)]
    at = start + pipeline
    for name, term in STEP_END:
        seconds = max(0.0, terms[term] if term in terms else getattr(t, term))
        segments.append(Segment(name, at, seconds))
        at += seconds
    return Timeline(passes, comm, start, pipeline, [g for g in segments if g.seconds > 0],
                    t.step_s, stretch, m, v)
