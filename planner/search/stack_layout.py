"""Stage layouts of a transformer stack (one run of identical layers between other blocks):
CP-SAT, or bisection, over each stage's layer count instead of p * v cuts.
"""

from __future__ import annotations

import numpy as np
from ortools.sat.python import cp_model

from planner.costing.stage_costs import ChainCosts
from planner.costing.stage_terms import Occupancy
from planner.rules.gate import chunks_without_layers
from planner.search.layout_solve import (DEFAULT_WORK_LIMIT, MEMORY_UNIT_BYTES, TIME_UNIT_S,
                                         Balanced, LayoutSolve, ints, layout_solver, cost_runs,
                                         solved, stage_totals, unsolved)


def extra_layer_order(costs: ChainCosts, stage: int) -> list[int]:
    """The chunks of `stage` in the order they take a layer beyond an even split: fewest
    micro-batches in flight first (the least memory), the later chunk on a tie."""
    return sorted(range(costs.vpp), key=lambda c: (costs.in_flight[stage][c], -c))


def _chunk_counts(costs: ChainCosts, layers: int, stage: int) -> list[int]:
    """Layers of each chunk of `stage` holding `layers` of a stack: layers // v each, the
    remainder one by one to the chunks that hold the fewest micro-batches in flight (the least
    memory; the later chunk on a tie), so a stage's chunks stay within one layer of each other,
    as Megatron-LM's uneven-stage flags keep them."""
    v = costs.vpp
    order = extra_layer_order(costs, stage)
    per_chunk, extra = divmod(layers, v)
    counts = [per_chunk] * v
    for c in order[:extra]:
        counts[c] += 1
    return counts


def stack_tables(costs: ChainCosts, stack: tuple[int, int], *,
                 linear: bool = True) -> tuple[list[int], np.ndarray, np.ndarray]:
    """(layer counts, time (R, p), memory (R, p)): each stage's exact time and memory
    (`ChainCosts.totals`) when it holds each count of the stack's layers, the blocks before
    them in its first chunk on stage 0 and those after them in the last chunk on the last
    stage. A stage's costs depend on its own blocks only, so one occupancy per count (every
    stage holding that many) gives every stage's column at once. `linear` False: the terms
    alone."""
    p, v = costs.pp, costs.vpp
    big_k = p * v
    start, num_layers = stack
    # Block types: each run of identical blocks, standing for its first position.
    runs = cost_runs(costs)
    index = {run_start: j for j, (run_start, _) in enumerate(runs)}
    layer_type = index[start]
    head = [index[s] for s, _ in runs if s < start]
    tail = [index[s] for s, _ in runs if s >= start + num_layers]
    counts_of_stage = list(range(v, num_layers - v * (p - 1) + 1))
    counts = np.zeros((len(counts_of_stage), big_k, len(runs)))
    last = np.full((len(counts_of_stage), big_k), layer_type)
    for i, count in enumerate(counts_of_stage):
        for r in range(p):
            for c, layers in enumerate(_chunk_counts(costs, count, r)):
                counts[i, c * p + r, layer_type] = layers
    for j in head:
        counts[:, 0, j] += runs[j][1]
    for j in tail:
        counts[:, -1, j] += runs[j][1]
    if tail:
        last[:, -1] = tail[-1]
    occ = Occupancy(p, v, counts, last, np.array([costs.is_layer[s] for s, _ in runs]))
    time, memory = costs.totals(occ, columns=[s for s, _ in runs], linear=linear)
    return counts_of_stage, time, memory


def _linear_stack(costs: ChainCosts, stack: tuple[int, int], term_time_s, term_bytes, *,
                  work_limit: float, wall_limit_s: float | None) -> LayoutSolve:
    """`balance_stack` where the terms add a constant to each stage (`term_time_s`,
    `term_bytes`): a linear model in each stage's layer count and its chunks' split."""
    n, p, v = len(costs.block_time_s), costs.pp, costs.vpp
    start, num_layers = stack
    t = ints([costs.block_time_s[start]], TIME_UNIT_S, up=False)[0]
    s = ints([costs.block_state_bytes[start]], MEMORY_UNIT_BYTES, up=True)[0]
    a = ints([costs.block_activation_bytes[start]], MEMORY_UNIT_BYTES, up=True)[0]
    head, tail = range(0, start), range(start + num_layers, n)
    stage_time = [x + y for x, y in zip(ints(costs.stage_time_s, TIME_UNIT_S, up=False),
                                        ints(term_time_s, TIME_UNIT_S, up=False))]
    stage_mem = [x + y for x, y in zip(ints(costs.stage_bytes, MEMORY_UNIT_BYTES, up=True),
                                       ints(term_bytes, MEMORY_UNIT_BYTES, up=True))]
    # Blocks before the layers sit in chunk 0 (stage 0), after them in the last chunk.
    for blocks, r, c in ((head, 0, 0), (tail, p - 1, v - 1)):
        stage_time[r] += sum(ints([costs.block_time_s[b] for b in blocks], TIME_UNIT_S,
                                   up=False))
        stage_mem[r] += sum(ints([costs.block_state_bytes[b] + costs.in_flight[r][c]
                                   * costs.block_activation_bytes[b] for b in blocks],
                                  MEMORY_UNIT_BYTES, up=True))
    capacity = int(costs.capacity_bytes // MEMORY_UNIT_BYTES)
    order = [extra_layer_order(costs, r) for r in range(p)]

    def stage_memory(r: int, count: int) -> int:
        flights = [costs.in_flight[r][c] for c in order[r]]
        per_round, extra = divmod(count, v)
        return s * count + a * (sum(flights) * per_round + sum(flights[:extra])) + stage_mem[r]

    # The most layers each stage can hold (its memory grows with every layer): these domains
    # let CP-SAT see at once when no split fits, instead of searching for a proof.
    most = []
    for r in range(p):
        count = v - 1
        while count < num_layers - v * (p - 1) and stage_memory(r, count + 1) <= capacity:
            count += 1
        most.append(count)
    if min(most) < v or sum(most) < num_layers:
        return LayoutSolve(None, "INFEASIBLE", slowest_bound_s=np.inf)
    model = cp_model.CpModel()
    layers = [model.new_int_var(v, most[r], f"layers[{r}]") for r in range(p)]
    model.add(sum(layers) == num_layers)
    slowest = model.new_int_var(0, t * num_layers + max(stage_time), "slowest_stage")
    # Redundant: the slowest stage takes at least the average stage time.
    model.add(p * slowest >= t * num_layers + sum(stage_time))
    for r in range(p):
        flights = [costs.in_flight[r][c] for c in order[r]]
        per_round = model.new_int_var(1, num_layers, f"per_chunk[{r}]")
        extra = model.new_int_var(0, v - 1, f"extra[{r}]")
        # n_r = v * (layers per chunk) + (chunks with one layer more).
        model.add(layers[r] == v * per_round + extra)
        extra_flight = model.new_int_var(0, sum(flights), f"extra_flight[{r}]")
        model.add_element(extra, [sum(flights[:e]) for e in range(v)], extra_flight)
        # Stage r's time per micro-batch bounds the slowest stage.
        model.add(t * layers[r] + stage_time[r] <= slowest)
        # Its memory: the layers' states, their activations times micro-batches in flight.
        model.add(s * layers[r] + a * (sum(flights) * per_round + extra_flight)
                  + stage_mem[r] <= capacity)
    model.minimize(slowest)
    return _solve_counts(model, layers, costs, stack, work_limit, wall_limit_s)


def _level_counts(counts_of_stage: list[int], time: np.ndarray, fits: np.ndarray,
                  num_layers: int) -> list[int] | None:
    """Per-stage layer counts minimising the slowest stage where every stage's time rises with
    its layer count and the counts that fit are a run (otherwise None): the least level at
    which the most layers each stage can take within it add up to the stack, found by
    bisection over the tables' values; then, of the layers over the stack, those whose removal
    saves the most time go (the last stage first on a tie), which leaves the least total time
    among the fastest layouts."""
    counts = np.array(counts_of_stage)
    p = time.shape[1]
    spans = []
    for r in range(p):
        rows = np.flatnonzero(fits[:, r])
        if not len(rows) or rows[-1] - rows[0] + 1 != len(rows) \
                or np.any(np.diff(time[rows, r]) < 0):
            return None
        spans.append((rows[0], rows[-1]))

    def most(level: float) -> list[int] | None:
        out = []
        for r, (lo, hi) in enumerate(spans):
            if time[lo, r] > level:
                return None
            out.append(lo + int(np.searchsorted(time[lo:hi + 1, r], level, side="right")) - 1)
        return out

    levels = np.unique(np.concatenate([time[lo:hi + 1, r] for r, (lo, hi) in enumerate(spans)]))
    low, high = 0, len(levels) - 1
    if (top := most(levels[high])) is None or counts[top].sum() < num_layers:
        return []                                            # no layout fits
    while low < high:
        mid = (low + high) // 2
        taken = most(levels[mid])
        if taken is not None and counts[taken].sum() >= num_layers:
            high = mid
        else:
            low = mid + 1
    rows = most(levels[low])
    for _ in range(int(counts[rows].sum()) - num_layers):
        saving = [time[rows[r], r] - time[rows[r] - 1, r] if rows[r] > spans[r][0] else -np.inf
                  for r in range(p)]
        r = max(range(p), key=lambda q: (saving[q], q))
        rows[r] -= 1
    return [int(counts[i]) for i in rows]


def _table_stack(costs: ChainCosts, stack: tuple[int, int], counts_of_stage: list[int],
                 time: np.ndarray, memory: np.ndarray, *, work_limit: float,
                 wall_limit_s: float | None) -> LayoutSolve:
    """`balance_stack` over each stage's exact costs per layer count (`stack_tables`): by
    bisection where each stage's time rises with its layers (`_level_counts`, no CP-SAT work),
    else by CP-SAT over the tables."""
    p, v = costs.pp, costs.vpp
    _, num_layers = stack
    fits = memory <= costs.capacity_bytes                                    # (R, p)
    allowed = [[c for c, ok in zip(counts_of_stage, fits[:, r]) if ok] for r in range(p)]
    if any(not a for a in allowed) or sum(max(a) for a in allowed) < num_layers \
            or sum(min(a) for a in allowed) > num_layers:
        return LayoutSolve(None, "INFEASIBLE", slowest_bound_s=np.inf)
    levelled = _level_counts(counts_of_stage, time, fits, num_layers)
    if levelled == []:
        return LayoutSolve(None, "INFEASIBLE", slowest_bound_s=np.inf)
    if levelled is not None:
        bounds = _stack_bounds(costs, stack, levelled)
        times, _ = stage_totals(costs, bounds)
        return LayoutSolve(Balanced(tuple(bounds), max(times), "OPTIMAL"), "OPTIMAL",
                           slowest_bound_s=max(times))
    stage_time = [ints(time[:, r], TIME_UNIT_S, up=False) for r in range(p)]
    model = cp_model.CpModel()
    layers = [model.new_int_var_from_domain(cp_model.Domain.from_values(allowed[r]),
                                            f"layers[{r}]") for r in range(p)]
    model.add(sum(layers) == num_layers)
    slowest = model.new_int_var(0, max(max(t) for t in stage_time), "slowest_stage")
    for r in range(p):
        # Stage r's time per micro-batch, read from its table, bounds the slowest stage.
        row = model.new_int_var(0, len(counts_of_stage) - 1, f"row[{r}]")
        model.add(row == layers[r] - v)
        taken = model.new_int_var(min(stage_time[r]), max(stage_time[r]), f"time[{r}]")
        model.add_element(row, stage_time[r], taken)
        model.add(taken <= slowest)
    model.minimize(slowest)
    return _solve_counts(model, layers, costs, stack, work_limit, wall_limit_s)


def _solve_counts(model: cp_model.CpModel, layers: list, costs: ChainCosts,
                  stack: tuple[int, int], work_limit: float,
                  wall_limit_s: float | None) -> LayoutSolve:
    """Solve a stack model over per-stage layer counts `layers`."""
    # Presolve turns these p-variable models into harder ones: gpt3-175b, pp 16, vpp 3 took
    # 1.07 s with it and 26 ms without.
    solver = layout_solver(work_limit, wall_limit_s, presolve=False)
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return unsolved(solver, status, costs)
    return solved(solver, status, costs,
                   _stack_bounds(costs, stack, [solver.value(x) for x in layers]))


def _stack_bounds(costs: ChainCosts, stack: tuple[int, int], layers: list[int]) -> list[int]:
    """The cuts giving stage r `layers[r]` of the stack's layers."""
    n, p, v = len(costs.block_time_s), costs.pp, costs.vpp
    start, _ = stack
    counts = [0] * (p * v)
    for r in range(p):
        for c, count in enumerate(_chunk_counts(costs, layers[r], r)):
            counts[c * p + r] = count
    bounds, position = [0], start
    for count in counts[:-1]:
        position += count
        bounds.append(position)
    bounds.append(n)
    return bounds


def balance_stack(costs: ChainCosts, stack: tuple[int, int], *,
                  work_limit: float = DEFAULT_WORK_LIMIT,
                  wall_limit_s: float | None = None) -> LayoutSolve:
    """The balanced layout of a transformer stack, stage by stage.

    With identical layers a stage's costs depend only on how many layers n_r it holds
    (`_chunk_counts` spreads them over its chunks), which leaves p integer variables instead
    of p * v cuts. Where the terms add a constant per stage (a working set, pipeline sends
    between layers), the model stays linear in n_r; otherwise (data-parallel traffic and host
    copies hidden behind compute) CP-SAT reads each stage's exact costs from a table per n_r.
    """
    p, v = costs.pp, costs.vpp
    _, num_layers = stack
    if chunks_without_layers(num_layers, p, v):
        return LayoutSolve(None, "INFEASIBLE", slowest_bound_s=np.inf)
    limits = dict(work_limit=work_limit, wall_limit_s=wall_limit_s)
    if not costs.time_terms and not costs.memory_terms:
        return _linear_stack(costs, stack, np.zeros(p), np.zeros(p), **limits)
    counts_of_stage, term_time, term_memory = stack_tables(costs, stack, linear=False)
    if all(np.ptp(x, axis=0).max(initial=0.0) <= 1e-12 * max(np.abs(x).max(initial=0.0), 1e-300)
           for x in (term_time, term_memory)):
        return _linear_stack(costs, stack, term_time[0], term_memory[0], **limits)
    _, time, memory = stack_tables(costs, stack)
    return _table_stack(costs, stack, counts_of_stage, time, memory, **limits)


