"""What a layout solve is: its units, answer and status, the chain's runs of like blocks, the
CP-SAT settings, for the general model (`balance`) and the stack model (`stack_layout`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from planner.costing.stage_costs import ChainCosts
from planner.costing.stage_terms import Linear, Peak, Term

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
    slowest_bound_s: float = 0.0
    """No layout that fits has a faster slowest stage (seconds per micro-batch): CP-SAT's
    objective bound less its rounding, the optimum where solved, inf where none fits. No bound
    where `bounded`."""

    @property
    def stopped(self) -> bool:
        """A limit stopped the solve: a better layout, or one that fits, may exist."""
        return self.status in ("FEASIBLE", "UNKNOWN")


def ints(values, unit: float, *, up: bool) -> list[int]:
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


def cost_runs(costs: ChainCosts) -> list[tuple[int, int]]:
    """(start, length) of each run of consecutive blocks with identical costs: an LM chain
    (embedding, L identical layers, norm, head) is four runs whatever L is."""
    keys = costs.position_keys()
    runs, start = [], 0
    for b in range(1, len(keys) + 1):
        if b == len(keys) or keys[b] != keys[start]:
            runs.append((start, b - start))
            start = b
    return runs


def stack_of(costs: ChainCosts, runs: list[tuple[int, int]]) -> tuple[int, int] | None:
    """(start, count) of the layers when they are one run of identical blocks with only
    other blocks (embedding, norm, output) before and after them: a transformer stack."""
    layer_runs = [(s, n) for s, n in runs if costs.is_layer[s]]
    return layer_runs[0] if len(layer_runs) == 1 else None


LINEARIZATION_WITH_TERMS = 2
"""CP-SAT's linearization level where a chain carries terms with options (data-parallel
traffic, host copies): their min-max structure leaves the default relaxation weak. Measured on
the option chains the searches of deepseek-v3 on 1,024 H100 balance (Megatron-LM, torchtitan):
3.6 s of solves instead of 6.4 s and 8.4 s with presolve and probing, as many proven (presolve
spends wall time its work units do not count: 0.8 s for pp 16 x vpp 3)."""
QUICK_SHARE = 0.3
"""Share of such a solve's work tried without presolve; what that does not settle (prove
optimal or infeasible) is solved again with presolve in the rest, from the layout found."""


def layout_solver(work_limit: float, wall_limit_s: float | None, *,
                  presolve: bool = True, linearization: int | None = None) -> cp_model.CpSolver:
    """One worker and a limit in deterministic time: the same answer on every run. The wall
    limit is only a safety net (its caller says so when it fires)."""
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.max_deterministic_time = work_limit
    if wall_limit_s is not None:
        solver.parameters.max_time_in_seconds = max(wall_limit_s, 1e-3)
    # Probing costs more than it saves on these models (0.5 s of a 0.6 s solve, 200 blocks).
    solver.parameters.cp_model_probing_level = 0
    solver.parameters.cp_model_presolve = presolve
    if linearization is not None:
        solver.parameters.linearization_level = linearization
    solver.parameters.catch_sigint_signal = False       # Ctrl-C is Python's (see make_solver)
    return solver


def slowest_bound_s(solver: cp_model.CpSolver, status, costs: ChainCosts) -> float:
    """CP-SAT's bound on the slowest stage, in seconds, less what rounding each block's time
    and each term's pieces to whole nanoseconds may have added."""
    if status == cp_model.INFEASIBLE:
        return np.inf
    rounded = len(costs.block_time_s) * (1 + len(costs.time_terms)) + 16
    return (solver.best_objective_bound - rounded) * TIME_UNIT_S


def unsolved(solver: cp_model.CpSolver, status, costs: ChainCosts, *,
              bounded: bool = False, work: float | None = None) -> LayoutSolve:
    return LayoutSolve(None, solver.status_name(status),
                       solver.deterministic_time if work is None else work, bounded,
                       slowest_bound_s(solver, status, costs))


def solved(solver: cp_model.CpSolver, status, costs: ChainCosts, bounds, *,
           bounded: bool = False, work: float | None = None) -> LayoutSolve:
    times, memory = stage_totals(costs, bounds)
    # Memory is rounded up and bounded from above: what fits the model fits in bytes.
    assert max(memory) <= costs.capacity_bytes * (1 + 1e-12), (memory, costs.capacity_bytes)
    name = solver.status_name(status)
    return LayoutSolve(Balanced(tuple(bounds), max(times), name), name,
                       solver.deterministic_time if work is None else work, bounded,
                       slowest_bound_s(solver, status, costs))




def quick_slowest_bound_s(costs: ChainCosts) -> float | None:
    """A slowest stage (seconds per micro-batch) no layout that fits goes below, inf where no
    layout fits, from the chain's linear costs alone; None where the relaxations below do not
    hold (a negative cost, as offloaded activations give, or a single chunk).

    What the divisible water level (`rebalance.stage_bounds`) cannot see: the memory a
    pipeline's first stages keep for their micro-batches in flight caps the layers they can
    hold and pushes the rest onto the others. Fixed: the first chunk holds the chain up to its
    first layer, the last chunk everything after the last layer but one. The other layers
    ("free") go anywhere, each chunk holding at least one layer; stage r takes n_r of them,
    each beyond those one-per-chunk in its chunk of the fewest micro-batches in flight, and
    its memory caps n_r. Two relaxations, each a bound (leaving out costs that are never
    negative, the terms among them, can only lower it): the most common kind of free layer
    alone, the chunks the other kinds cannot fill; every free layer at the least time and
    memory of any kind. Each gives the least level M with sum_r clip(floor((M - T_r) / t),
    least_r, cap_r) >= L over the levels T_r + k t."""
    p, v = costs.pp, costs.vpp
    if p * v < 2 or any(_negative(term) for term in (*costs.time_terms, *costs.memory_terms)):
        return None
    time = np.asarray(costs.block_time_s)
    state = np.asarray(costs.block_state_bytes)
    act = np.asarray(costs.block_activation_bytes)
    flight = np.asarray(costs.in_flight, dtype=float)                        # (p, v)
    layers = np.flatnonzero(np.asarray(costs.is_layer, dtype=bool))
    if (time < 0).any() or (state + act * flight.min() < 0).any() or len(layers) < p * v:
        return None
    last = p * v - 1
    base_time = np.asarray(costs.stage_time_s, dtype=float).copy()
    base_memory = np.asarray(costs.stage_bytes, dtype=float).copy()
    held = np.zeros(p, dtype=np.int64)                 # chunks a fixed layer already fills
    for blocks, stage, chunk in ((np.arange(layers[0] + 1), 0, 0),
                                 (np.arange(layers[-2] + 1, len(time)), last % p, last // p)):
        base_time[stage] += time[blocks].sum()
        base_memory[stage] += (state[blocks] + flight[stage, chunk] * act[blocks]).sum()
        held[stage] += 1
    free = layers[1:-1]
    if not len(free):
        return float(base_time.max()) if (base_memory <= costs.capacity_bytes).all() \
            else np.inf
    keys = [(time[b], state[b], act[b]) for b in free]
    tally = Counter(keys)
    kind = max(tally, key=lambda k: (tally[k], k))
    count = tally[kind]
    chunk_open = np.ones(p * v, dtype=bool)              # chunk k = c * p + r, no layer yet
    chunk_open[[0, last]] = False
    # The i-th layer can sit only in chunks i - (L - K) .. i: every chunk before it and
    # after it holds a layer. The other kinds fill at most the open chunks they reach.
    reached = np.zeros(p * v, dtype=bool)
    spare = len(layers) - p * v
    for i in np.flatnonzero([key != kind for key in keys]) + 1:
        reached[max(0, i - spare):min(i, last) + 1] = True
    stage_of = np.arange(p * v) % p
    open_count = np.bincount(stage_of[chunk_open], minlength=p)
    reach = np.bincount(stage_of[chunk_open & reached], minlength=p)
    others = len(free) - count
    open_flights = [np.sort(flight[r, chunk_open[r::p]]) for r in range(p)]
    relaxations = [((time[free].min(), state[free].min(), act[free].min()), len(free),
                    open_count),
                   (kind, count, np.maximum(open_count - np.minimum(reach, others), 0))]
    return max(_capped_level(costs, base_time, base_memory, open_flights, flight.min(1),
                             kind_, number, least)
               for kind_, number, least in relaxations)


def _capped_level(costs: ChainCosts, base_time: np.ndarray, base_memory: np.ndarray,
                  open_flights: list[np.ndarray], least_flight: np.ndarray, kind: tuple,
                  count: int, least: np.ndarray) -> float:
    """`quick_slowest_bound_s` for `count` layers of one (time, state, activation) `kind`:
    stage r holds at least `least[r]` of them, one per chunk, at best in its open chunks of
    the fewest micro-batches in flight (`open_flights`, ascending)."""
    t, s, a = kind
    memory = base_memory + np.array([(s + a * f[:n]).sum() - n * (s + a * low)
                                     for f, n, low in zip(open_flights, least, least_flight)])
    per_layer = s + a * least_flight                                        # (p,)
    # Room to spare, with a rounding's worth more (a bound may only err low).
    room = costs.capacity_bytes * (1 + 1e-9) - memory
    if (room < 0).any():
        return np.inf
    cap = np.where(per_layer > 0,
                   np.floor(room / np.where(per_layer > 0, per_layer, 1.0) + 1e-9), count)
    cap = np.minimum(cap, count)
    if (cap < least).any() or cap.sum() < count or least.sum() > count:
        return np.inf
    floor = base_time + least * t
    if t <= 0:
        return float(floor.max())
    # The least level M of the form T_r + k t that places every layer.
    levels = np.unique((base_time[:, None] + t * np.arange(count + 1)[None, :]).ravel())
    levels = levels[levels >= floor.max() * (1 - 1e-12)]

    def placed(level: float) -> float:
        return np.clip(np.floor((level - base_time) / t + 1e-9), least, cap).sum()

    lo, hi = 0, len(levels) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if placed(levels[mid]) >= count:
            hi = mid
        else:
            lo = mid + 1
    return float(levels[lo])


def _negative(term) -> bool:
    """Whether a `stage_terms` term over the chain may take a negative value."""
    if isinstance(term, Peak):
        return bool(np.min(term.value) < 0)
    if isinstance(term, Linear):
        return any(part is not None and np.min(part) < 0
                   for part in (term.const, term.block, term.in_flight, term.end,
                                term.end_in_flight, term.final))
    if isinstance(term, Term):
        # scale x the least over options of each option's largest piece: never negative
        # where every option has a piece that never is.
        return bool(np.min(term.scale) < 0) or not all(
            any(not _negative(piece) for piece in option) for option in term.options)
    return True
