"""Split a chain of blocks into pipeline chunks, balanced, under per-stage memory: CP-SAT.

A plan with pp stages and vpp chunks per stage cuts the model chain (embedding, layers, final
norm, output head) into K = pp * vpp contiguous chunks; chunk k runs on stage k % pp
(Megatron-LM's interleaved assignment). A stage's time per micro-batch and its memory are
`evaluate`'s, as `ChainCosts` carries them (`costing.stage_costs`): a linear part (its blocks'
times and model states, each chunk's activations times the micro-batches it holds in flight, a
constant per stage) and terms that are not linear (pipeline sends by the block ending a chunk,
data-parallel traffic and host copies hidden behind compute, the recompute working set). The
problem is

    minimise max_r time_r   subject to   memory_r <= capacity for every stage r,

over the K - 1 cut positions. Cuts are integer variables; per-chunk sums come from prefix
sums; the terms are encoded by `terms_cp`. Every chunk holds at least one repeated layer
(Megatron-LM requires a positive layer count per stage). A stack of identical layers is solved
over per-stage layer counts with each stage's exact costs read from a table. `exact_partition`
solves the linear vpp = 1 case by the classic linear-partition dynamic programme, as the
reference the tests hold CP-SAT to.
"""

from __future__ import annotations

from itertools import accumulate

import numpy as np
from ortools.sat.python import cp_model

from planner.costing.stage_costs import ChainCosts
from planner.costing.stage_terms import Term
from planner.rules.gate import chunks_without_layers
from planner.search.layout_solve import (DEFAULT_WORK_LIMIT, MEMORY_UNIT_BYTES,  # noqa: F401
                                         LINEARIZATION_WITH_TERMS, QUICK_SHARE, TIME_UNIT_S,
                                         Balanced,
                                         LayoutSolve,
                                         allowed_cuts, ints, layout_solver, cost_runs,
                                         quick_slowest_bound_s, solved,
                                         stack_of, stage_totals, unsolved)
from planner.search.stack_layout import balance_stack, extra_layer_order
from planner.search.terms_cp import TermEncoder

RUNS_ENCODING_LIMIT = 16
"""Up to this many runs of identical blocks, sums before a cut are encoded run by run
(clamp(cut - start, 0, length) blocks of each run), which stays small for any number of
blocks; beyond it, as element constraints over prefix-sum tables, whose bound CP-SAT proves
faster on chains of many distinct blocks (measured on random 200-block chains, 16 stages:
the run encoding did not prove optimality in 20 s, the element encoding took about 1 s)."""


class _Prefix:
    """Integer expressions for "the sum of a per-block weight over the blocks before cut k"."""

    def __init__(self, model: cp_model.CpModel, cuts: list, runs: list[tuple[int, int]],
                 num_blocks: int) -> None:
        self.model, self.cuts, self.runs, self.n = model, cuts, runs, num_blocks
        self.by_runs = len(runs) <= RUNS_ENCODING_LIMIT
        self.taken = []
        if self.by_runs:
            for k, cut in enumerate(cuts):
                row = []
                for j, (start, length) in enumerate(runs):
                    if k in (0, len(cuts) - 1):
                        row.append(0 if k == 0 else length)
                        continue
                    past = model.new_int_var(0, num_blocks, f"past[{k},{j}]")
                    model.add_max_equality(past, [cut - start, 0])
                    count = model.new_int_var(0, length, f"taken[{k},{j}]")
                    model.add_min_equality(count, [past, length])
                    row.append(count)
                self.taken.append(row)

    def sums(self, weights: list[int], name: str) -> list:
        """One expression per cut: sum of `weights` (one per run) over the blocks before it."""
        if self.by_runs:
            return [sum(w * row[j] for j, w in enumerate(weights) if w) for row in self.taken]
        table = [0]
        for (start, length), w in zip(self.runs, weights):
            for _ in range(length):
                table.append(table[-1] + w)
        out = []
        for k, cut in enumerate(self.cuts):
            var = self.model.new_int_var(0, max(table), f"{name}[{k}]")
            self.model.add_element(cut, table, var)
            out.append(var)
        return out


def _even_time_cuts(costs: ChainCosts) -> tuple[int, ...]:
    """Cuts at equal shares of the chain's time, each chunk keeping a layer: a starting point
    for CP-SAT on long chains of unlike blocks."""
    n, big_k = len(costs.block_time_s), costs.num_chunks
    prefix = [0.0, *accumulate(costs.block_time_s)]
    layers = [0, *accumulate(int(x) for x in costs.is_layer)]
    cuts = [0]
    for k in range(1, big_k):
        target = prefix[-1] * k / big_k
        cut = next((i for i in range(cuts[-1] + 1, n) if prefix[i] >= target), n - 1)
        # Leave this chunk a layer and every later chunk one.
        while layers[cut] - layers[cuts[-1]] < 1 and cut < n - 1:
            cut += 1
        while layers[-1] - layers[cut] < big_k - k and cut > cuts[-1] + 1:
            cut -= 1
        cuts.append(cut)
    return (*cuts, n)


def _greedy_cuts(costs: ChainCosts) -> tuple[int, ...] | None:
    """For one chunk per stage: the best cuts by bisection on the slowest stage's time, each
    try packing stages greedily from the front (a stage that fits with some blocks still fits
    with fewer, so packing as much as allows is never worse). A hint for CP-SAT, which then
    only has to prove it: on long chains of unlike blocks that proof takes longest."""
    n, p = len(costs.block_time_s), costs.pp
    if costs.vpp != 1:
        return None

    def pack(limit: float) -> tuple[int, ...] | None:
        cuts, start = [0], 0
        for r in range(p):
            time, memory = costs.stage_time_s[r], costs.stage_bytes[r]
            end, has_layer = start, False
            left = p - r - 1
            while end < n:
                t = time + costs.block_time_s[end]
                m = memory + costs.block_state_bytes[end] + \
                    costs.in_flight[r][0] * costs.block_activation_bytes[end]
                layers_after = sum(costs.is_layer[end + 1:])
                if (t > limit or m > costs.capacity_bytes or layers_after < left) and has_layer:
                    break
                time, memory, has_layer = t, m, has_layer or costs.is_layer[end]
                end += 1
            while end < n and not costs.is_layer[end - 1]:
                end -= 1                           # a chunk ends with a layer
            if not has_layer or end <= start or time > limit or memory > costs.capacity_bytes:
                return None
            cuts.append(end)
            start = end
        return tuple(cuts) if cuts[-1] == n else None

    low, high = 0.0, sum(costs.block_time_s) + max(costs.stage_time_s)
    best = pack(high)
    if best is None:
        return None
    for _ in range(50):
        mid = (low + high) / 2
        found = pack(mid)
        if found is None:
            low = mid
        else:
            best, high = found, mid
    return best


def balance(costs: ChainCosts, *, hint: tuple[int, ...] | None = None,
            work_limit: float = DEFAULT_WORK_LIMIT) -> Balanced | None:
    """The layout minimising the slowest stage's time with every stage fitting; None when no
    layout fits (or none is found within `work_limit`, CP-SAT deterministic time)."""
    return solve_layout(costs, hint=hint, work_limit=work_limit).balanced


def solve_layout(costs: ChainCosts, *, hint: tuple[int, ...] | None = None,
                 work_limit: float = DEFAULT_WORK_LIMIT,
                 wall_limit_s: float | None = None,
                 cutoff_s: float | None = None) -> LayoutSolve:
    """`balance`, with CP-SAT's status and the work it used: a solve stopped by `work_limit`
    stops at the same point on every run; `wall_limit_s` is a safety net only. Its layout is
    OPTIMAL for the chain's costs (up to the integer units) unless `bounded`: a term the model
    can only bound (`terms_cp`). With `cutoff_s`, layouts whose slowest stage takes longer
    are of no interest: the solve may say INFEASIBLE where only they fit."""
    n, p, v, big_k = len(costs.block_time_s), costs.pp, costs.vpp, costs.num_chunks
    if chunks_without_layers(sum(costs.is_layer), p, v):
        return LayoutSolve(None, "INFEASIBLE", slowest_bound_s=np.inf)
    # The bounds alone decide where no layout fits, or none under the cutoff.
    quick = quick_slowest_bound_s(costs)
    if quick is not None and (np.isinf(quick) or (cutoff_s is not None and quick > cutoff_s)):
        return LayoutSolve(None, "INFEASIBLE", slowest_bound_s=quick)
    runs = cost_runs(costs)
    stack = stack_of(costs, runs)
    if stack is not None:
        return balance_stack(costs, stack, work_limit=work_limit, wall_limit_s=wall_limit_s)
    first = [s for s, _ in runs]
    run_time = ints([costs.block_time_s[s] for s in first], TIME_UNIT_S, up=False)
    run_state = ints([costs.block_state_bytes[s] for s in first], MEMORY_UNIT_BYTES, up=True)
    run_act = ints([costs.block_activation_bytes[s] for s in first], MEMORY_UNIT_BYTES, up=True)
    run_layer = [int(costs.is_layer[s]) for s in first]
    stage_time = ints(costs.stage_time_s, TIME_UNIT_S, up=False)
    stage_mem = ints(costs.stage_bytes, MEMORY_UNIT_BYTES, up=True)
    capacity = int(costs.capacity_bytes // MEMORY_UNIT_BYTES)

    model = cp_model.CpModel()
    # Cut k is where chunk k starts; chunk 0 starts at the chain's head, the last ends at n.
    # A chunk ends with a layer: blocks between layers (a middle norm) go with the layer
    # after them, as in a layout given by layer counts (layout.layout_from_layer_counts).
    allowed = allowed_cuts(costs)
    domain = cp_model.Domain.from_values(allowed)
    cuts = [model.new_constant(0)] + [model.new_int_var_from_domain(domain, f"cut[{k}]")
                                      for k in range(1, big_k)] + [model.new_constant(n)]
    for k in range(big_k):
        model.add(cuts[k + 1] >= cuts[k] + 1)                 # chunks are not empty
    prefix = _Prefix(model, cuts, runs, n)
    time_at = prefix.sums(run_time, "time")
    state_at = prefix.sums(run_state, "state")
    act_at = prefix.sums(run_act, "act")
    layers_at = prefix.sums(run_layer, "layers")
    # Every chunk holds at least one repeated layer, and a stage's chunks stay within one
    # layer of each other (as a stack's do, `stack_layout._chunk_counts`): the interleaved
    # schedule's time (`pipeline.pipeline_time_s`) holds for near-equal chunks, while skewed
    # ones stall it far beyond (`costing.schedule.simulate`, tests/costing/test_schedule.py).
    for k in range(big_k):
        model.add(layers_at[k + 1] - layers_at[k] >= 1)
    # The extra layers go to the chunks holding the fewest micro-batches in flight, as a
    # stack's (which also leaves the solver no equivalent layouts to tell apart).
    if v > 1:
        most = sum(costs.is_layer)
        for r in range(p):
            least = model.new_int_var(1, most, f"least_layers[{r}]")
            held = [layers_at[c * p + r + 1] - layers_at[c * p + r] for c in range(v)]
            for count in held:
                model.add(count >= least)
                model.add(count <= least + 1)
            order = extra_layer_order(costs, r)
            for first, then in zip(order, order[1:]):
                model.add(held[first] >= held[then])
    terms = TermEncoder(model, costs, cuts, runs, prefix, layers_at, allowed)
    total_time = sum(t * length for t, (_, length) in zip(run_time, runs))
    extra = sum(terms.bound(t, TIME_UNIT_S) for t in costs.time_terms)
    slowest = model.new_int_var(0, total_time + max(stage_time, default=0) + extra,
                                "slowest_stage")
    # Redundant: the slowest stage takes at least the average stage time (the terms of a
    # stage's time are never negative).
    model.add(p * slowest >= total_time + sum(stage_time))
    if cutoff_s is not None:
        # Above the cutoff by as much as rounding each block and term piece may remove.
        model.add(slowest <= max(0, int(np.ceil(cutoff_s / TIME_UNIT_S)))
                  + len(costs.block_time_s) * (1 + len(costs.time_terms)) + 16)
    for r in range(p):
        chunks = [c * p + r for c in range(v)]
        # Stage r's time per micro-batch bounds the slowest stage.
        model.add(sum(time_at[k + 1] - time_at[k] for k in chunks) + stage_time[r]
                  + sum(terms.encode(t, r, TIME_UNIT_S, up=False) for t in costs.time_terms)
                  <= slowest)
        # Stage r's memory: states of its blocks, activations times micro-batches in flight,
        # and the terms.
        model.add(sum(state_at[k + 1] - state_at[k]
                      + costs.in_flight[r][c] * (act_at[k + 1] - act_at[k])
                      for c, k in enumerate(chunks)) + stage_mem[r]
                  + sum(terms.encode(t, r, MEMORY_UNIT_BYTES, up=True)
                        for t in costs.memory_terms) <= capacity)
    model.minimize(slowest)
    start = _greedy_cuts(costs) or hint or _even_time_cuts(costs)
    for var, value in zip(cuts[1:-1], start[1:-1]):
        model.add_hint(var, value)
    with_options = any(isinstance(t, Term) for t in (*costs.time_terms, *costs.memory_terms))
    linearization = LINEARIZATION_WITH_TERMS if with_options else None
    solver = layout_solver(work_limit * (QUICK_SHARE if with_options else 1.0), wall_limit_s,
                           presolve=False, linearization=linearization)
    status = solver.solve(model)
    work = solver.deterministic_time
    if with_options and status not in (cp_model.OPTIMAL, cp_model.INFEASIBLE):
        # Not settled quickly: again with presolve, in the rest of the work.
        second = layout_solver(max(work_limit - work, 0.0), wall_limit_s, presolve=True,
                               linearization=linearization)
        found = _values(solver, status, cuts)
        if found:
            model.clear_hints()
            for var, value in zip(cuts[1:-1], found):
                model.add_hint(var, value)
        second_status = second.solve(model)
        work += second.deterministic_time
        if second_status != cp_model.UNKNOWN or status != cp_model.FEASIBLE:
            solver, status = second, second_status  # else keep the layout the first one found
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return unsolved(solver, status, costs, bounded=not terms.exact, work=work)
    return solved(solver, status, costs, [int(solver.value(c)) for c in cuts],
                  bounded=not terms.exact, work=work)


def _values(solver: cp_model.CpSolver, status, cuts: list) -> list[int]:
    """The interior cuts of the layout a solve found, [] if none."""
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return []
    return [int(solver.value(c)) for c in cuts[1:-1]]


def exact_partition(costs: ChainCosts) -> tuple[float, tuple[int, ...]] | None:
    """The same problem for vpp = 1 by dynamic programming (Skiena's linear partition,
    generalised to per-stage constants and memory limits): (slowest stage time, bounds)."""
    assert costs.vpp == 1, "the reference handles one chunk per stage"
    assert not costs.time_terms and not costs.memory_terms, "the reference is linear"
    n, p = len(costs.block_time_s), costs.pp
    time = [0.0, *accumulate(costs.block_time_s)]
    state = [0.0, *accumulate(costs.block_state_bytes)]
    act = [0.0, *accumulate(costs.block_activation_bytes)]
    layers = [0, *accumulate(int(x) for x in costs.is_layer)]
    inf = float("inf")
    # best[k][j]: slowest stage over chunks 0..k-1 covering blocks 0..j-1; cut[k][j]: argmin.
    best = [[inf] * (n + 1) for _ in range(p + 1)]
    cut = [[0] * (n + 1) for _ in range(p + 1)]
    best[0][0] = 0.0
    for k in range(1, p + 1):
        r = k - 1
        for j in (*allowed_cuts(costs), n):
            for i in (0, *allowed_cuts(costs)):
                if i >= j or best[k - 1][i] == inf or layers[j] - layers[i] < 1:
                    continue
                mem = (state[j] - state[i] + costs.in_flight[r][0] * (act[j] - act[i])
                       + costs.stage_bytes[r])
                if mem > costs.capacity_bytes:
                    continue
                value = max(best[k - 1][i], time[j] - time[i] + costs.stage_time_s[r])
                if value < best[k][j]:
                    best[k][j], cut[k][j] = value, i
    if best[p][n] == inf:
        return None
    bounds = [n]
    for k in range(p, 0, -1):
        bounds.append(cut[k][bounds[-1]])
    return best[p][n], tuple(reversed(bounds))
