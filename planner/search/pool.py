"""Evaluated candidates: the float costs of every strategy that passes the degree rules and
the user's pins, flattened over the pipeline layouts they were evaluated in.

The search (`planner.search.solver`) and the explanation of an infeasible request
(`planner.search.explain`) both start from a `Pool`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.errors import InputError
from planner.search.candidates import CandidateGroup, Pin
from planner.costing.evaluate import (BlockCosts, Evaluation, block_costs, evaluate,
                                      state_floor_bytes, step_lower_bound_s)
from cost_models.enums import CpComm, ZeroStage
from planner.core.candidates import (CP_COMM_ORDER, DP_COMM_ORDER, MOE_DISPATCHER_ORDER,
                                     PIPELINE_SCHEDULE_ORDER, RANK_ORDER, RECOMPUTE_ORDER,
                                     Candidates, strategy_modules)
from planner.costing.layout import Layout, framework_layouts
from planner.core.problem import Problem
from planner.costing.uncertainty import tie_limit_s
from planner.rules.gate import (RuleOptions, degree_violations, host_memory_violations,
                                memory_violations)
from planner.schemas.strategy import Strategy


def passes(problem: Problem, cands: Candidates, pins: list[Pin],
           options: RuleOptions) -> np.ndarray:
    """Where `cands` break no degree rule and respect every pin."""
    ok = np.ones(len(cands), dtype=bool)
    for broken in degree_violations(problem, cands, options).values():
        ok &= ~broken
    for pin in pins:
        ok &= pin.allows(cands)
    return ok


def strategy_at(c: Candidates, i: int,
            layers_per_stage: tuple[int, ...] | None = None) -> Strategy:
    """Row i of a `Candidates`, with its layer counts per pipeline chunk if given."""
    return Strategy(
        dp=int(c.dp[i]), tp=int(c.tp[i]), pp=int(c.pp[i]), vpp=int(c.vpp[i]),
        microbatch_group=int(c.vp_group[i]) or None, micro_batch=int(c.mb[i]),
        global_batch=int(c.global_batch[i]),
        sequence_parallel=bool(c.sp[i]), recompute=RECOMPUTE_ORDER[c.recompute[i]],
        recompute_modules=strategy_modules(c.rc_modules[i]),
        zero_stage=ZeroStage(int(c.zero[i])),
        dp_shard=None if c.shard[i] == c.dp[i] else int(c.shard[i]),
        overlap_grad_reduce=bool(c.overlap[i]),
        overlap_param_gather=bool(c.param_gather[i]),
        tp_comm_overlap=bool(c.tp_overlap[i]),
        moe_a2a_overlap=bool(c.moe_overlap[i]),
        moe_dispatcher=MOE_DISPATCHER_ORDER[c.dispatcher[i]],
        dp_comm=DP_COMM_ORDER[c.dp_comm[i]],
        num_servers=int(c.num_servers[i]) if c.dp_comm[i] else None,
        ep=int(c.ep[i]), etp=int(c.etp[i]), cp=int(c.cp[i]),
        cp_comm=CP_COMM_ORDER[c.cp_comm[i]],
        cp_a2a=int(c.cp_a2a[i]) if CP_COMM_ORDER[c.cp_comm[i]] is CpComm.A2A_P2P
        else None,
        fp8_param_gather=bool(c.fp8_gather[i]),
        optimizer_offload=float(c.opt_offload[i]), param_offload=bool(c.param_offload[i]),
        activation_offload_layers=int(c.act_offload[i]),
        layers_per_stage=layers_per_stage, nvls=bool(c.nvls[i]),
        rank_order=RANK_ORDER[c.rank_order[i]],
        pipeline_schedule=PIPELINE_SCHEDULE_ORDER[c.pipeline_schedule[i]]
        if c.pipeline_schedule[i] else None)


@dataclass
class Batch:
    """Evaluated candidates of one pipeline layout."""

    layout: Layout
    cands: Candidates
    costs: BlockCosts
    ev: Evaluation
    origin: np.ndarray | None = None
    """Each row's index in the `Pending` it was evaluated from (None: a balanced layout)."""
    layout_index: int = 0
    """Which of the framework's layouts of its group (`framework_layouts`)."""

    def strategy(self, row: int, model) -> Strategy:
        """The strategy of a row, with this batch's layer counts per pipeline chunk."""
        return strategy_at(self.cands, row, tuple(self.layout.layers_per_chunk(model)))


DEGREES = ("dp", "tp", "pp", "vpp", "mb", "ep", "etp", "cp")
"""The Candidates fields that make a plan's degrees: plans after the first differ in them."""

DENSE_DEGREES = DEGREES[:5]
"""The degrees of the dense layers (without ep, etp and cp)."""


@dataclass
class Pool:
    """Every evaluated candidate, flattened over batches: row i is `cands` row i, evaluated in
    batch `batch[i]` at its row `row[i]`."""

    batches: list[Batch]
    batch: np.ndarray
    row: np.ndarray
    step_s: np.ndarray
    peak_bytes: np.ndarray
    cands: Candidates
    """The strategies, by named field (the batches' candidates, concatenated)."""

    @classmethod
    def of(cls, batches: list[Batch]) -> Pool:
        if not batches:
            return cls([], np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64),
                       np.zeros(0), np.zeros(0), Candidates.empty())
        return cls(batches,
                   np.concatenate([np.full(len(b.cands), i) for i, b in enumerate(batches)]),
                   np.concatenate([np.arange(len(b.cands)) for b in batches]),
                   np.concatenate([b.ev.step_s for b in batches]),
                   np.concatenate([b.ev.peak_bytes for b in batches]),
                   Candidates.concat([b.cands for b in batches]))

    def __len__(self) -> int:
        return len(self.row)

    def take(self, index) -> Pool:
        return Pool(self.batches, self.batch[index], self.row[index], self.step_s[index],
                    self.peak_bytes[index], self.cands.take(index))

    def extend(self, batch: Batch) -> Pool:
        """This pool and one more evaluated batch."""
        if not self.batches:
            return Pool.of([batch])
        n = len(batch.cands)
        return Pool(self.batches + [batch],
                    np.concatenate([self.batch, np.full(n, len(self.batches))]),
                    np.concatenate([self.row, np.arange(n)]),
                    np.concatenate([self.step_s, batch.ev.step_s]),
                    np.concatenate([self.peak_bytes, batch.ev.peak_bytes]),
                    Candidates.concat([self.cands, batch.cands]))

    def degree_rows(self, names: tuple[str, ...] = DEGREES) -> np.ndarray:
        """(N, len(names)) integers, one column per named degree: rows to compare or sort by,
        never indexed by position outside this class."""
        return np.stack([np.asarray(getattr(self.cands, name), dtype=np.int64)
                         for name in names], axis=1)

    def same_degrees(self, i: int) -> np.ndarray:
        """Where candidates have the degrees of candidate i."""
        rows = self.degree_rows()
        return (rows == rows[i]).all(1)

    def label(self, i: int) -> str:
        return strategy_at(self.cands, i).degrees_label()


EVALUATION_BUDGET = 2**24
"""Most (candidate, pipeline chunk) cells one search may list for evaluation (about a
microsecond each): 18x the largest realistic search we measured (DeepSeek-V3 on 2,048 H100s,
0.9M cells; a 10,000-layer model on 8 GPUs needs 9.5M). Beyond it (10,000 layers on thousands
of GPUs) the search would take minutes, so the user is asked to narrow it."""

SLICE_CELLS = 2**18
"""Cells evaluated at once (about 600 bytes each while evaluated, so some 150 MB): a group with
more is evaluated in slices."""


@dataclass
class Pending:
    """Candidates that pass the rules, before evaluation: each group's rows in one order (group
    by group), with their block costs and step lower bounds (`evaluate.step_lower_bound_s`)."""

    groups: list[tuple[CandidateGroup, Candidates]]
    start: np.ndarray
    """Where each group's rows begin in that order."""
    costs: BlockCosts
    bound_s: np.ndarray

    def __len__(self) -> int:
        return len(self.bound_s)

    def cands(self) -> Candidates:
        return Candidates.concat([cands for _, cands in self.groups])


def pending(problem: Problem, groups: list[tuple[CandidateGroup, np.ndarray]], *,
            drop_unfittable: bool = False) -> Pending:
    """The rows of each group that `mask` keeps; with `drop_unfittable`, not those whose model
    states alone fill the average stage (no layout fits them). Raises InputError when they
    are more than EVALUATION_BUDGET cells."""
    capacity = problem.usable_bytes
    kept = []
    for group, mask in groups:
        if not mask.any():
            continue
        cands = group.cands.take(np.flatnonzero(mask))
        if drop_unfittable:
            cands = cands.take(np.flatnonzero(state_floor_bytes(problem, cands) <= capacity))
        if len(cands):
            kept.append((group, cands))
    cells = sum(len(cands) * group.pp * group.vpp for group, cands in kept)
    if cells > EVALUATION_BUDGET:
        raise InputError(f"the search space is too large: {cells:,} (strategy, pipeline chunk) "
                         f"pairs to evaluate, at most {EVALUATION_BUDGET:,}; narrow it with "
                         f"--max-pp, --pp, --micro-batch or --max-micro-batch, or fewer --gpus")
    start = np.cumsum([0] + [len(cands) for _, cands in kept])[:-1].astype(np.int64)
    if not kept:
        return Pending([], start, None, np.zeros(0))
    # Block costs depend on (tp, micro-batch, sp, recompute, ep, etp), not on the layout:
    # evaluate each distinct point once over all groups.
    every = Candidates.concat([cands for _, cands in kept])
    costs = block_costs(problem, every)
    return Pending(kept, start, costs, step_lower_bound_s(problem, every, costs))


def evaluate_pending(problem: Problem, todo: Pending, select: np.ndarray | None = None) -> Pool:
    """Evaluate the pending rows `select` (indices; all by default), each in its group's
    layouts: a pool in the pending order, a framework's layouts one after another within a
    group (`in_pending_order`)."""
    select = np.arange(len(todo)) if select is None else np.sort(select)
    batches = []
    for g, (group, group_cands) in enumerate(todo.groups):
        lo = todo.start[g]
        chosen = select[(select >= lo) & (select < lo + len(group_cands))] - lo
        if not len(chosen):
            continue
        # Each layout the framework runs by itself (one, but for a pipeline engine that
        # partitions layers its own ways: DeepSpeed's).
        layouts = framework_layouts(problem.model, problem.framework, group.pp, group.vpp)
        for li, layout in enumerate(layouts):
            step = max(1, SLICE_CELLS // layout.num_chunks)
            for first in range(0, len(chosen), step):
                rows = chosen[first:first + step]
                cands, costs = group_cands.take(rows), todo.costs.take(lo + rows)
                ev = evaluate(problem, layout, cands, costs)
                over_host = host_memory_violations(ev.host_bytes, problem)
                if over_host.any():     # offloading more than the host holds (--offload)
                    keep = np.flatnonzero(~over_host)
                    cands, costs, rows = cands.take(keep), costs.take(keep), rows[keep]
                    if not len(cands):
                        continue
                    ev = evaluate(problem, layout, cands, costs)
                batches.append(Batch(layout, cands, costs, ev, origin=lo + rows,
                                     layout_index=li))
    return Pool.of(batches)


def in_pending_order(todo: Pending, batches: list[Batch]) -> Pool:
    """Batches of pending rows evaluated apart, as one pool in the order `evaluate_pending`
    gives them all at once (ties between equal candidates go the same way): one batch per
    group and layout."""
    parts: dict[tuple[int, int], list[Batch]] = {}
    for b in batches:
        group = int(np.searchsorted(todo.start, b.origin[0], side="right"))
        parts.setdefault((group, b.layout_index), []).append(b)
    batches = []
    for key in sorted(parts):
        same = parts[key]
        if len(same) == 1:
            batches.append(same[0])
            continue
        origin = np.concatenate([b.origin for b in same])
        order = np.argsort(origin, kind="stable")
        batches.append(Batch(same[0].layout,
                             Candidates.concat([b.cands for b in same]).take(order),
                             BlockCosts.concat([b.costs for b in same]).take(order),
                             Evaluation.concat([b.ev for b in same]).take(order),
                             origin=origin[order], layout_index=key[1]))
    return Pool.of(batches)


def evaluate_groups(problem: Problem, groups: list[tuple[CandidateGroup, np.ndarray]], *,
                    drop_unfittable: bool = False) -> Pool:
    """Evaluate the rows of each group that `mask` keeps (see `pending`)."""
    return evaluate_pending(problem, pending(problem, groups, drop_unfittable=drop_unfittable))


def pareto(pool: Pool) -> Pool:
    """Drop candidates another candidate with the same degrees beats on both time and memory."""
    if not len(pool):
        return pool
    # The five dense degrees: a candidate beaten on both counts by one with other expert
    # degrees (ep, etp) and the same rest is no better a second plan than the rest of the pool.
    dense = pool.degree_rows(DENSE_DEGREES)
    order = np.lexsort((pool.peak_bytes, pool.step_s, *dense.T[::-1]))
    keep = np.zeros(len(pool), dtype=bool)
    degrees = dense[order]
    starts = np.flatnonzero(np.r_[True, (degrees[1:] != degrees[:-1]).any(1)])
    for start, stop in zip(starts, np.r_[starts[1:], len(order)]):
        block = order[start:stop]                     # same degrees, fastest first
        peaks = pool.peak_bytes[block]
        lowest_before = np.r_[np.inf, np.minimum.accumulate(peaks)[:-1]]
        keep[block[peaks < lowest_before]] = True
    return pool.take(np.flatnonzero(keep))


def rule_of_thumb_key(cands: Candidates) -> tuple[np.ndarray, ...]:
    """Megatron-LM's rule of thumb as sort keys, most significant first (Narayanan et al.
    2021, Sec. 3.3 takeaways): the largest tensor parallelism, then the fewest pipeline
    stages and chunks, then micro-batch 1; the plan it picks is the fastest fitting one of
    the smallest key (`solver._heuristic`)."""
    return (-np.asarray(cands.tp, dtype=np.int64), cands.pp, cands.vpp, cands.mb)


FIRST_EVALUATED = 2**12
"""The fewest candidates of the lowest step bounds `evaluate_promising` evaluates first, to
learn how fast its best plans are; an eighth of the candidates where that is more (about what
a search ends up evaluating). Each round (4x more while their bounds can beat those plans)
costs an evaluation per pipeline layout (about 7 ms each) besides about a microsecond per
candidate and chunk: DeepSeek-V3 on 1,024 / 2,048 H100 takes 37 / 19 evaluations of 24,000 /
16,000 candidates (a sixteenth: 37 / 37 of 38,000 / 12,000)."""


def _fitting_steps(pool: Pool, capacity: float) -> np.ndarray:
    """The step time of the fastest fitting candidate of each set of degrees (`DEGREES`, as
    the search lists plans), ascending."""
    fits = ~memory_violations(pool.peak_bytes, capacity, conservative=True)
    if not fits.any():
        return np.zeros(0)
    _, first = np.unique(pool.degree_rows()[fits], axis=0, return_inverse=True)
    best = np.full(first.max() + 1, np.inf)
    np.minimum.at(best, first.reshape(-1), pool.step_s[fits])
    return np.sort(best)


def fastest_fitting_s(pool: Pool, capacity: float, count: int) -> float:
    """The step time of the count-th fastest fitting plan with its own degrees, inf when
    fewer than `count` fit."""
    steps = _fitting_steps(pool, capacity)
    return float(steps[count - 1]) if len(steps) >= count else np.inf


def plan_limit_s(pool: Pool, capacity: float, *, plans: int, tolerance: float) -> float:
    """A step time the search's `plans` plans will not exceed, whatever it adds to `pool`: the
    `plans`-th fastest fitting plan with its own degrees, or the fastest's tie (within
    `tolerance`) if later; a rounding of the objective above it (`solver._objective` works in
    whole microseconds). inf when fewer fit."""
    steps = _fitting_steps(pool, capacity)
    if len(steps) < plans:
        return np.inf
    limit = max(float(steps[plans - 1]), tie_limit_s(float(steps[0]), tolerance))
    return limit * (1 + 1e-9) + 1e-6


def evaluate_promising(problem: Problem, todo: Pending, *, plans: int,
                       tolerance: float) -> Pool:
    """The pareto pool (`pareto`) of the pending candidates that can be among the `plans`
    fastest with distinct degrees, or tied within `tolerance` with the fastest, or the rule of
    thumb's plan; exactly as if all were evaluated, but for dominance among the rest.

    A candidate's step is at least its bound (`evaluate.step_lower_bound_s`), in any layout.
    The candidates of the lowest bounds are evaluated first, until `plans` of them fit with
    distinct degrees; the slowest of those, U (or the fastest's tie, if later), is a step the
    chosen plans will not exceed. Then only the rest whose bound is within U are evaluated,
    and the rule of thumb's candidates (it may pick a slow plan). Where the evaluated ones no
    longer hold `plans` fitting plans within U (dominance left fewer distinct degrees),
    every candidate is evaluated."""
    capacity = problem.usable_bytes
    order = np.argsort(todo.bound_s, kind="stable")
    done = np.zeros(len(todo), dtype=bool)
    batches: list[Batch] = []

    def add(rows: np.ndarray) -> Pool:
        """Evaluate `rows` too: the pareto pool of all evaluated (in no set order)."""
        rows = rows[~done[rows]]
        done[rows] = True
        batches.extend(evaluate_pending(problem, todo, rows).batches)
        return pareto(Pool.of(batches))

    # Rounds in the order of the bounds, each 4x the last, while the next bound is within
    # the limit the rounds so far set.
    size, reach = max(FIRST_EVALUATED, len(todo) // 8), np.inf
    while True:
        pool = add(order[:size][todo.bound_s[order[:size]] <= reach])
        reach = plan_limit_s(pool, capacity, plans=plans, tolerance=tolerance)
        if size >= len(todo) or todo.bound_s[order[size]] > reach:
            break
        size *= 4
    fits = ~memory_violations(pool.peak_bytes, capacity, conservative=True)
    if fits.any():
        # Every candidate the rule of thumb ranks at or before its pick so far.
        keys = rule_of_thumb_key(todo.cands())
        pick = np.lexsort(tuple(k[fits] for k in rule_of_thumb_key(pool.cands))[::-1])[0]
        ref = [k[fits][pick] for k in rule_of_thumb_key(pool.cands)]
        before, equal = np.zeros(len(todo), dtype=bool), np.ones(len(todo), dtype=bool)
        for key, value in zip(keys, ref):
            before |= equal & (key < value)
            equal &= key == value
        pool = add(np.flatnonzero(before | equal))
    if fastest_fitting_s(pool.take(np.flatnonzero(pool.step_s <= reach)), capacity,
                         plans) > reach:
        add(np.arange(len(todo)))
    return pareto(in_pending_order(todo, batches))
