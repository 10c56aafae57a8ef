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

from dataclasses import dataclass
from itertools import accumulate

import numpy as np
from ortools.sat.python import cp_model

from planner.costing.stage_costs import ChainCosts
from planner.costing.stage_terms import Occupancy, Term
from planner.rules.gate import chunks_without_layers
from planner.search.terms_cp import TermEncoder

TIME_UNIT_S = 1e-9
"""CP-SAT works in integers: block times in nanoseconds (rounded to nearest)."""
MEMORY_UNIT_BYTES = 1024
"""Memory in KiB, each block's bytes rounded up, so a layout that fits here fits in bytes."""


@dataclass(frozen=True)
class Balanced:
    bounds: tuple[int, ...]
    """Chain cut positions: chunk k holds blocks[bounds[k]:bounds[k + 1]]."""
    max_stage_time_s: float
    status: str


DEFAULT_WORK_LIMIT = 10.0
"""CP-SAT deterministic time one layout solve may use when its caller sets no budget. CP-SAT
counts its work in these units (about a second of one core each, whatever the machine's load),
so a solve stopped by them stops at the same point on every run; callers that must bound their
total (the plan search, `planner.search.rebalance`) pass less."""


@dataclass(frozen=True)
class LayoutSolve:
    """One layout solve: its answer, CP-SAT's status and the work it used."""

    balanced: Balanced | None
    """The layout, or None when none fits or none was found within the limits."""
    status: str
    """CP-SAT's status: OPTIMAL, FEASIBLE (stopped by a limit with a layout), INFEASIBLE (no
    layout fits), UNKNOWN (stopped by a limit without one)."""
    work: float = 0.0
    """CP-SAT deterministic time used (0 when the bounds alone decide)."""
    bounded: bool = False
    """The model bounds a term it cannot state exactly (`terms_cp`): its OPTIMAL is optimal
    for that bound, on the safe side of the chain's costs."""

    @property
    def stopped(self) -> bool:
        """A limit stopped the solve: a better layout, or one that fits, may exist."""
        return self.status in ("FEASIBLE", "UNKNOWN")


def _ints(values, unit: float, *, up: bool) -> list[int]:
    if up:
        return [int(-(-v // unit)) for v in values]
    return [int(round(v / unit)) for v in values]


def stage_totals(costs: ChainCosts, bounds) -> tuple[list[float], list[float]]:
    """(time per stage, memory per stage) of a layout, in seconds and bytes (floats)."""
    return costs.stage_totals(bounds)


def allowed_cuts(costs: ChainCosts) -> list[int]:
    """Positions a chunk may start at: right after a layer (and not at the chain's end)."""
    n = len(costs.is_layer)
    return [x for x in range(1, n) if costs.is_layer[x - 1]]


def _runs(costs: ChainCosts) -> list[tuple[int, int]]:
    """(start, length) of each run of consecutive blocks with identical costs: an LM chain
    (embedding, L identical layers, norm, head) is four runs whatever L is."""
    keys = costs.position_keys()
    runs, start = [], 0
    for b in range(1, len(keys) + 1):
        if b == len(keys) or keys[b] != keys[start]:
            runs.append((start, b - start))
            start = b
    return runs


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


def _stack(costs: ChainCosts, runs: list[tuple[int, int]]) -> tuple[int, int] | None:
    """(start, count) of the layers when they are one run of identical blocks with only
    other blocks (embedding, norm, output) before and after them: a transformer stack."""
    layer_runs = [(s, n) for s, n in runs if costs.is_layer[s]]
    return layer_runs[0] if len(layer_runs) == 1 else None


PROBING_WITH_TERMS = 2
"""CP-SAT probing (and presolve) where a chain carries terms with options (data-parallel
traffic, host copies): deepseek-v3 on 1,024 H100, ZeRO-3, pp 2 x vpp 10, proved its layout in
0.012 work units with them and did not in 3 without."""


def _solver(work_limit: float, wall_limit_s: float | None, *,
            presolve: bool = True, probing: int = 0) -> cp_model.CpSolver:
    """One worker and a limit in deterministic time: the same answer on every run. The wall
    limit is only a safety net (its caller says so when it fires)."""
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.max_deterministic_time = work_limit
    if wall_limit_s is not None:
        solver.parameters.max_time_in_seconds = max(wall_limit_s, 1e-3)
    # Probing costs more than it saves on linear models (0.5 s of a 0.6 s solve, 200 blocks).
    solver.parameters.cp_model_probing_level = probing
    solver.parameters.cp_model_presolve = presolve
    return solver


def _chunk_counts(costs: ChainCosts, layers: int, stage: int) -> list[int]:
    """Layers of each chunk of `stage` holding `layers` of a stack: layers // v each, the
    remainder one by one to the chunks that hold the fewest micro-batches in flight (the least
    memory; the later chunk on a tie), so a stage's chunks stay within one layer of each other,
    as Megatron-LM's uneven-stage flags keep them."""
    v = costs.vpp
    order = sorted(range(v), key=lambda c: (costs.in_flight[stage][c], -c))
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
    n, p, v = len(costs.block_time_s), costs.pp, costs.vpp
    big_k = p * v
    start, num_layers = stack
    # Block types: each run of identical blocks, standing for its first position.
    runs = _runs(costs)
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
    t = _ints([costs.block_time_s[start]], TIME_UNIT_S, up=False)[0]
    s = _ints([costs.block_state_bytes[start]], MEMORY_UNIT_BYTES, up=True)[0]
    a = _ints([costs.block_activation_bytes[start]], MEMORY_UNIT_BYTES, up=True)[0]
    head, tail = range(0, start), range(start + num_layers, n)
    stage_time = [x + y for x, y in zip(_ints(costs.stage_time_s, TIME_UNIT_S, up=False),
                                        _ints(term_time_s, TIME_UNIT_S, up=False))]
    stage_mem = [x + y for x, y in zip(_ints(costs.stage_bytes, MEMORY_UNIT_BYTES, up=True),
                                       _ints(term_bytes, MEMORY_UNIT_BYTES, up=True))]
    # Blocks before the layers sit in chunk 0 (stage 0), after them in the last chunk.
    for blocks, r, c in ((head, 0, 0), (tail, p - 1, v - 1)):
        stage_time[r] += sum(_ints([costs.block_time_s[b] for b in blocks], TIME_UNIT_S,
                                   up=False))
        stage_mem[r] += sum(_ints([costs.block_state_bytes[b] + costs.in_flight[r][c]
                                   * costs.block_activation_bytes[b] for b in blocks],
                                  MEMORY_UNIT_BYTES, up=True))
    capacity = int(costs.capacity_bytes // MEMORY_UNIT_BYTES)
    # Chunks of a stage, fewest micro-batches in flight first (the later chunk on a tie).
    order = [sorted(range(v), key=lambda c: (costs.in_flight[r][c], -c)) for r in range(p)]

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
        return LayoutSolve(None, "INFEASIBLE")
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
        return LayoutSolve(None, "INFEASIBLE")
    levelled = _level_counts(counts_of_stage, time, fits, num_layers)
    if levelled == []:
        return LayoutSolve(None, "INFEASIBLE")
    if levelled is not None:
        bounds = _stack_bounds(costs, stack, levelled)
        times, _ = stage_totals(costs, bounds)
        return LayoutSolve(Balanced(tuple(bounds), max(times), "OPTIMAL"), "OPTIMAL")
    stage_time = [_ints(time[:, r], TIME_UNIT_S, up=False) for r in range(p)]
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
    solver = _solver(work_limit, wall_limit_s, presolve=False)
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return _unsolved(solver, status)
    return _solved(solver, status, costs,
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


def _unsolved(solver: cp_model.CpSolver, status) -> LayoutSolve:
    return LayoutSolve(None, solver.status_name(status), solver.deterministic_time)


def _solved(solver: cp_model.CpSolver, status, costs: ChainCosts, bounds, *,
            bounded: bool = False) -> LayoutSolve:
    times, memory = stage_totals(costs, bounds)
    # Memory is rounded up and bounded from above: what fits the model fits in bytes.
    assert max(memory) <= costs.capacity_bytes * (1 + 1e-12), (memory, costs.capacity_bytes)
    name = solver.status_name(status)
    return LayoutSolve(Balanced(tuple(bounds), max(times), name), name,
                       solver.deterministic_time, bounded)


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
        return LayoutSolve(None, "INFEASIBLE")
    limits = dict(work_limit=work_limit, wall_limit_s=wall_limit_s)
    if not costs.time_terms and not costs.memory_terms:
        return _linear_stack(costs, stack, np.zeros(p), np.zeros(p), **limits)
    counts_of_stage, term_time, term_memory = stack_tables(costs, stack, linear=False)
    if all(np.ptp(x, axis=0).max(initial=0.0) <= 1e-12 * max(np.abs(x).max(initial=0.0), 1e-300)
           for x in (term_time, term_memory)):
        return _linear_stack(costs, stack, term_time[0], term_memory[0], **limits)
    _, time, memory = stack_tables(costs, stack)
    return _table_stack(costs, stack, counts_of_stage, time, memory, **limits)


def balance(costs: ChainCosts, *, hint: tuple[int, ...] | None = None,
            work_limit: float = DEFAULT_WORK_LIMIT) -> Balanced | None:
    """The layout minimising the slowest stage's time with every stage fitting; None when no
    layout fits (or none is found within `work_limit`, CP-SAT deterministic time)."""
    return solve_layout(costs, hint=hint, work_limit=work_limit).balanced


def solve_layout(costs: ChainCosts, *, hint: tuple[int, ...] | None = None,
                 work_limit: float = DEFAULT_WORK_LIMIT,
                 wall_limit_s: float | None = None) -> LayoutSolve:
    """`balance`, with CP-SAT's status and the work it used: a solve stopped by `work_limit`
    stops at the same point on every run; `wall_limit_s` is a safety net only. Its layout is
    OPTIMAL for the chain's costs (up to the integer units) unless `bounded`: a term the model
    can only bound (`terms_cp`)."""
    n, p, v, big_k = len(costs.block_time_s), costs.pp, costs.vpp, costs.num_chunks
    if chunks_without_layers(sum(costs.is_layer), p, v):
        return LayoutSolve(None, "INFEASIBLE")
    runs = _runs(costs)
    stack = _stack(costs, runs)
    if stack is not None:
        return balance_stack(costs, stack, work_limit=work_limit, wall_limit_s=wall_limit_s)
    first = [s for s, _ in runs]
    run_time = _ints([costs.block_time_s[s] for s in first], TIME_UNIT_S, up=False)
    run_state = _ints([costs.block_state_bytes[s] for s in first], MEMORY_UNIT_BYTES, up=True)
    run_act = _ints([costs.block_activation_bytes[s] for s in first], MEMORY_UNIT_BYTES, up=True)
    run_layer = [int(costs.is_layer[s]) for s in first]
    stage_time = _ints(costs.stage_time_s, TIME_UNIT_S, up=False)
    stage_mem = _ints(costs.stage_bytes, MEMORY_UNIT_BYTES, up=True)
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
    # Every chunk holds at least one repeated layer.
    for k in range(big_k):
        model.add(layers_at[k + 1] - layers_at[k] >= 1)
    terms = TermEncoder(model, costs, cuts, runs, prefix, layers_at, allowed)
    total_time = sum(t * length for t, (_, length) in zip(run_time, runs))
    extra = sum(terms.bound(t, TIME_UNIT_S) for t in costs.time_terms)
    slowest = model.new_int_var(0, total_time + max(stage_time, default=0) + extra,
                                "slowest_stage")
    # Redundant: the slowest stage takes at least the average stage time (the terms of a
    # stage's time are never negative).
    model.add(p * slowest >= total_time + sum(stage_time))
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
    solver = _solver(work_limit, wall_limit_s, presolve=with_options,
                     probing=PROBING_WITH_TERMS if with_options else 0)
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return _unsolved(solver, status)
    return _solved(solver, status, costs, [int(solver.value(c)) for c in cuts],
                   bounded=not terms.exact)


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
