"""Choose stage layouts inside the plan search: branch and bound over candidates.

Every candidate with a pipeline is first evaluated in an even layout (Megatron-LM's split, the
remainder going to the middle chunks). Its best possible pipeline time is bounded below by
perfectly balanced stages: the stage times add up to the same work whatever the layout, so
the slowest stage takes at least their mean, and the 1F1B time (m - 1) max + (sum + (v - 1)
max) / v is at least that with max replaced by the mean. Candidates are taken in the order of
that bound; each gets the layout CP-SAT balances under its per-stage memory
(`planner.search.balance`), evaluated again by `costing.evaluate`; the search stops when the next
bound is no better than the best plan found, so no candidate whose layout could win is left
unbalanced. When nothing fits in an even layout, the closest misses are balanced first, since
moving layers off the fullest stage may make them fit.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from planner.search.balance import solve_layout
from cost_models.pipeline import in_flight_per_chunk
from planner.core.candidates import Candidates
from planner.costing.evaluate import (block_costs, chain_types, ep_exposed_s, evaluate,
                                      evaluate_strategy, layout_for, tp_exposed_s, type_params)
from planner.costing.layout import Layout
from planner.core.problem import Problem
from planner.search.pool import Batch, Pool
from planner.schemas.report import PlanReport
from planner.schemas.strategy import Strategy
from planner.rules.gate import memory_violations
from planner.costing.stage_costs import chain_costs, state_bytes_per_stored_param

LAYOUT_WORK = 1.0
"""CP-SAT deterministic time (its work units, about a second of one core each) the layout
solves of one search may use together (`plan --layout-work`). Counted in work, not wall time,
so the same search stops at the same candidate on a busy machine. Measured with ortools 9.15:
gpt3-175b on 1,024 A100 proves its 72 layouts in 0.14 units, deepseek-v3 on 1,024 H100 its 43
in 0.04; gpt-oss-120b on 64 H100 (alternating attention layers, the hard case) needs about 93
and says its layouts are not proven optimal."""

LAYOUT_SOLVE_SHARE = 8
"""One candidate's layout solve may use at most this fraction (1/8) of the layout work, so
that one hard case (a layout CP-SAT can neither find nor refute quickly) cannot use it all."""


class WallClock:
    """The safety net of a search: wall time it may take in all. Budgets in CP-SAT work decide
    every result; this fires only on pathological inputs or a machine so slow that the work
    budgets take longer than it, and whatever it stops says so (its result may then differ
    from run to run)."""

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        self._start = time.perf_counter()

    def left_s(self) -> float:
        return self.limit_s - (time.perf_counter() - self._start)

    def elapsed_s(self) -> float:
        return time.perf_counter() - self._start


@dataclass(frozen=True)
class LayoutStats:
    num_balanced: int
    """Candidates whose layout CP-SAT chose."""
    num_improved: int
    """Of those, how many beat their even layout (or fit only when balanced)."""
    complete: bool
    """Every candidate whose bound could beat the best plan was balanced, to optimality."""
    unproven: str | None = None
    """Why `complete` is False, in one plain line."""
    wall_clock_stopped: bool = False
    """The wall-clock safety net stopped the layout step (the result may vary run to run)."""
    work: float = field(default=0.0, compare=False)
    """CP-SAT work the layout solves used."""


def water_level(base: np.ndarray, rate: np.ndarray, amount: float) -> np.ndarray:
    """Per row, the least level M with sum_r max(0, (M - base_r) / rate_r) >= amount, or the
    highest base if above: the slowest (or fullest) stage when `amount` layers, divisible at
    will, fill stages that start at `base_r` and rise by `rate_r` per layer. No integer layout
    can do better."""
    # Water-filling, exactly: with the stages sorted by base, the level that submerges the
    # first j + 1 of them is (amount + sum b_i / r_i) / sum 1 / r_i; the answer is the first
    # such level that stays at or below the next stage's base.
    n = base.shape[0]
    order = np.argsort(base, axis=1)
    b = np.take_along_axis(base, order, 1)
    w = 1.0 / np.take_along_axis(np.maximum(rate, 1e-300), order, 1)
    need = np.broadcast_to(np.asarray(amount, dtype=float), (n,))[:, None]
    levels = (need + np.cumsum(b * w, 1)) / np.cumsum(w, 1)
    following = np.concatenate([b[:, 1:], np.full((n, 1), np.inf)], axis=1)
    high = levels[np.arange(n), (levels <= following).argmax(1)]
    # A stage that starts above the level is fuller still.
    return np.maximum(high, base.max(1))


def lower_bounds(problem: Problem, pool: Pool) -> tuple[np.ndarray, np.ndarray]:
    """Per candidate, bounds no layout can beat: (step time, peak memory of the fullest stage);
    inf without a pipeline (nothing to balance).

    A layout moves layers between stages; the embedding, output and MTP blocks stay. So each
    stage keeps a fixed part no layout changes (its time and memory less its layers'), and the
    layers, divisible at will, can at best fill the stages to one level (`water_level`): for
    time, their total time over the fixed parts; for memory, every chunk holding at least its
    cheapest layer and the rest at least the cheapest layer per stage (a layer's states plus
    its activations at the fewest micro-batches a chunk of that stage holds), or the most
    common layer type alone, the others left out.
    """
    model, reserve = problem.model, problem.cluster.reserve
    frag = 1 + reserve.fragmentation_fraction
    types = chain_types(model)
    layer_types = sorted({int(u) for u, b in zip(types.type_of_position, model.blocks)
                          if b.kind in ("transformer", "evoformer")})
    times, memory = np.full(len(pool), np.inf), np.full(len(pool), np.inf)
    for index, batch in enumerate(pool.batches):
        p, v = batch.layout.pp, batch.layout.vpp
        if p == 1:
            continue
        rows = np.flatnonzero(pool.batch == index)
        ev, r, cands = batch.ev, pool.row[rows], batch.cands
        tau = (ev.stage_compute_s + ev.stage_tp_s + ev.stage_ep_s + ev.stage_pp_s
               + ev.stage_dp_s)[r]
        # Per block type, the time one block adds to its stage (as `evaluate` sums it).
        layer_time = (batch.costs.forward_s + batch.costs.backward_s + batch.costs.recompute_s
                      + tp_exposed_s(problem, cands, batch.costs)
                      + ep_exposed_s(problem, batch.costs))[r]
        m = cands.num_micro_batches[r]
        chunk_counts = types.chunk_counts(batch.layout).reshape(v, p, -1)      # (v, p, U)
        per_stage = chunk_counts.sum(0)                                         # (p, U)
        movable = np.zeros(per_stage.shape[1])
        movable[layer_types] = 1.0
        held_time = (layer_time * movable[None, :]) @ per_stage.T              # (N, p)
        slowest = water_level(tau - held_time, np.ones_like(tau), held_time.sum(1))
        flight = in_flight_per_chunk(stage=np.arange(p)[None, :, None], pp=p, vpp=v,
                                     num_micro_batches=m[:, None, None],
                                     chunk=np.arange(v)[None, None, :])       # (N, p, v)
        held = np.zeros_like(tau)
        rate = np.full_like(tau, np.inf)
        first = np.full(flight.shape, np.inf)              # the cheapest layer in each chunk
        for u in layer_types:
            state = _layer_state_bytes(problem, cands, r, u)[:, None]             # (N, 1)
            act = batch.costs.activation_bytes[r, u][:, None]
            held += state * per_stage[:, u] + act * np.einsum(
                "npv,vp->np", flight, chunk_counts[:, :, u])
            rate = np.minimum(rate, state + act * flight.min(2))
            first = np.minimum(first, state[:, :, None] + act[:, :, None] * flight)
        # Every chunk holds a layer: those p * v are placed, the rest fill to a level.
        mandatory = first.sum(2)                                                    # (N, p)
        # A stage's recompute working set is its largest block's: keep only what no layout
        # removes (its fixed blocks', or the smallest layer's, as it holds one).
        working = batch.costs.recompute_working_bytes[r]                        # (N, U)
        fixed = np.setdiff1d(np.arange(working.shape[1]), layer_types)
        present = per_stage > 0                                                 # (p, U)
        even_working = (working[:, None, :] * present[None]).max(2)
        fixed_working = (working[:, None, fixed] * present[None][:, :, fixed]).max(
            2, initial=0.0)
        least = np.maximum(fixed_working, working[:, layer_types].min(1)[:, None])
        fixed_part = ev.stage_total[r] - frag * (held + even_working - least)
        fullest = water_level(fixed_part + frag * mandatory, frag * rate,
                              model.num_layers - p * v)
        type_counts = per_stage.sum(0)
        major = max(layer_types, key=lambda u: type_counts[u])
        major_rate = (_layer_state_bytes(problem, cands, r, major)[:, None]
                      + batch.costs.activation_bytes[r, major][:, None] * flight.min(2))
        fullest = np.maximum(fullest, water_level(fixed_part, frag * major_rate,
                                                  int(type_counts[major])))
        times[rows] = (m - 1) * slowest + (tau.sum(1) + (v - 1) * slowest) / v + ev.overhead_s
        memory[rows] = fullest
    return times, memory


def _layer_state_bytes(problem: Problem, cands, rows, layer_type: int) -> np.ndarray:
    """Bytes of model states one layer puts on a rank (after TP, EP and ZeRO sharding)."""
    sharded, replicated, expert = type_params(problem.model)
    params = sharded[layer_type] / cands.tp[rows] + replicated[layer_type]
    experts = expert[layer_type] / (cands.ep[rows] * cands.etp[rows])
    return (params * state_bytes_per_stored_param(problem, cands, rows)
            + experts * state_bytes_per_stored_param(problem, cands, rows, experts=True))


def rebalance(problem: Problem, pool: Pool, *, work: float = LAYOUT_WORK,
              wall: WallClock | None = None) -> tuple[Pool, LayoutStats]:
    """The pool with balanced layouts added for every candidate that could win, within `work`
    units of CP-SAT deterministic time (and the `wall` safety net)."""
    capacity = problem.usable_bytes
    fits = ~memory_violations(pool.peak_bytes, capacity, conservative=True)
    best = float(pool.step_s[fits].min()) if fits.any() else np.inf
    bounds, memory_bounds = lower_bounds(problem, pool)
    eligible = np.flatnonzero(np.isfinite(bounds) & (memory_bounds <= capacity))
    by_bound = list(eligible[np.argsort(bounds[eligible], kind="stable")])
    # Nothing fits yet: balance the smallest peaks first until something does; then go by
    # the bound, which lets the search stop.
    by_peak = [] if np.isfinite(best) else list(
        eligible[np.argsort(pool.peak_bytes[eligible], kind="stable")])
    tried: set[int] = set()
    balanced = improved = 0
    used, capped, wall_stopped, out_of_work = 0.0, 0, False, False
    while by_peak or by_bound:
        if by_peak and not np.isfinite(best):
            i = int(by_peak.pop(0))
        else:
            by_peak = []
            i = int(by_bound.pop(0))
            if bounds[i] >= best:
                break                              # no later candidate can beat the best
        if i in tried:
            continue
        tried.add(i)
        if used >= work:
            out_of_work = True
            break
        if wall is not None and wall.left_s() <= 0:
            wall_stopped = True
            break
        batch, row = pool.batches[pool.batch[i]], int(pool.row[i])
        costs = chain_costs(problem, batch.cands, batch.costs, batch.ev, batch.layout, row)
        solve = solve_layout(costs, hint=batch.layout.bounds,
                             work_limit=min(work - used, work / LAYOUT_SOLVE_SHARE),
                             wall_limit_s=None if wall is None else wall.left_s())
        used += solve.work
        if wall is not None and wall.left_s() <= 0 and solve.stopped:
            wall_stopped = True
        capped += solve.stopped                    # a better layout (or one that fits) may exist
        result = solve.balanced
        if result is None:
            continue
        balanced += 1
        if result.bounds == batch.layout.bounds:
            continue
        layout = Layout(batch.layout.pp, batch.layout.vpp, result.bounds)
        cands, block = batch.cands.take([row]), batch.costs.take([row])
        ev = evaluate(problem, layout, cands, block)
        if memory_violations(ev.peak_bytes, capacity, conservative=True)[0] or \
                (fits[i] and ev.step_s[0] >= pool.step_s[i]):
            continue
        improved += 1
        pool = pool.extend(Batch(layout, cands, block, ev))
        best = min(best, float(ev.step_s[0]))
    unproven = None
    if wall_stopped:
        unproven = (f"the {wall.limit_s:g} s wall-clock safety net (--time-limit) stopped the "
                    f"layout solves; this result may differ from run to run")
    elif out_of_work:
        unproven = (f"the layout work budget ran out (--layout-work {work:g}) before every "
                    f"candidate whose balanced layout could win was balanced")
    elif capped:
        unproven = (f"{capped} stage layout solve(s) stopped at their share of the work "
                    f"({work / LAYOUT_SOLVE_SHARE:g} of --layout-work {work:g}) before proving "
                    f"their layout optimal")
    return pool, LayoutStats(balanced, improved, unproven is None, unproven, wall_stopped,
                             used)


ADVICE_MIN_GAIN = 0.005
"""A balanced layout is suggested for a hand-written one when it saves at least 0.5% of the
step (less is within what the cost model can tell apart)."""


def layout_advice(problem: Problem, strategy: Strategy, report: PlanReport) -> str | None:
    """For a strategy with a pipeline: how to move layers so that its stages balance, with the
    step time it would save; None when its layout is balanced already."""
    if strategy.pp == 1:
        return None
    layout = layout_for(problem, strategy)
    cands = Candidates.from_strategy(strategy, problem.framework.defaults)
    block = block_costs(problem, cands)
    ev = evaluate(problem, layout, cands, block)
    result = solve_layout(chain_costs(problem, cands, block, ev, layout, 0), hint=layout.bounds,
                          work_limit=LAYOUT_WORK).balanced
    if result is None or result.bounds == layout.bounds:
        return None
    counts = tuple(Layout(layout.pp, layout.vpp, result.bounds).layers_per_chunk(problem.model))
    better = evaluate_strategy(problem, strategy.model_copy(update={"layers_per_stage": counts}))
    if better.time.step_s > report.time.step_s * (1 - ADVICE_MIN_GAIN) or not better.memory.fits:
        return None
    p, v = strategy.pp, strategy.vpp
    before = [s.num_layers for s in report.memory.stages]
    after = [sum(counts[c * p + r] for c in range(v)) for r in range(p)]
    times = [s.total_s for s in report.time.stages]
    slowest = max(range(p), key=times.__getitem__)
    moves = _moves(before, after)
    return (f"stage {slowest} is {times[slowest] / (sum(times) / p):.2f}x the mean: "
            f"{moves or 'redistribute layers within stages'} (layers_per_stage "
            f"{list(counts)}: {report.time.step_s:.2f} s -> {better.time.step_s:.2f} s per "
            f"step)")


def _moves(before: list[int], after: list[int]) -> str:
    """'move 2 layers from stage 0 to stage 3, ...': the fewest moves from one count list
    to the other, largest first."""
    give = [[b - a, r] for r, (b, a) in enumerate(zip(before, after)) if b > a]
    take = [[a - b, r] for r, (b, a) in enumerate(zip(before, after)) if a > b]
    phrases = []
    while give and take:
        give.sort(key=lambda x: (-x[0], x[1]))
        take.sort(key=lambda x: (-x[0], x[1]))
        amount = min(give[0][0], take[0][0])
        plural = "layer" if amount == 1 else "layers"
        phrases.append(f"move {amount} {plural} from stage {give[0][1]} to stage {take[0][1]}")
        give[0][0] -= amount
        take[0][0] -= amount
        give = [g for g in give if g[0]]
        take = [t for t in take if t[0]]
    return ", ".join(phrases)
