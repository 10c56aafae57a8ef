"""Choose stage layouts inside the plan search: branch and bound over candidates.

Every candidate with a pipeline is first evaluated in an even layout (Megatron-LM's split, the
remainder going to the middle chunks). Its best possible pipeline time is bounded below by
perfectly balanced stages: the stage times add up to the same work whatever the layout, so
the slowest stage takes at least their mean, and the 1F1B time (m - 1) max + (sum + (v - 1)
max) / v is at least that with max replaced by the mean. Candidates are taken in the order of
that bound; each gets the layout CP-SAT balances under its per-stage memory
(`planner.search.balance`), evaluated again by `costing.evaluate`; the search stops when the next
bound is no better than the best plan found, or than its tie (within the ranking tolerance)
when the search lists ties, so no candidate whose layout could win or tie is left unbalanced.
When nothing fits in an even layout, the closest misses are balanced first, since moving
layers off the fullest stage may make them fit. A solve looks only for layouts fast
enough to be among the plans the search lists (`stage_cutoff_s`), which a bound from memory
alone (`layout_solve.quick_slowest_bound_s`) often settles without CP-SAT.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from planner.search.balance import solve_layout
from cost_models.pipeline import in_flight_per_chunk, pipeline_time_s
from planner.core.candidates import Candidates
from planner.costing.evaluate import (block_costs, evaluate, evaluate_strategy, layout_for,
                                      step_lower_bound_s)
from planner.costing.stage_model import chain_types, stage_model, type_is_layer
from planner.costing.step_fixed import step_overhead_s
from planner.costing.stage_terms import (Linear, Occupancy, Peak, Term, active_pieces, by_stage,
                                         lower_linear)
from planner.costing.layout import Layout
from planner.core.problem import Problem
from planner.search.pool import Batch, Pool, plan_limit_s
from planner.schemas.report import PlanReport
from planner.schemas.strategy import Strategy
from planner.rules.gate import memory_violations
from planner.costing.uncertainty import tie_limit_s
from planner.costing.stage_costs import (chain_costs, chain_embedding_copy,
                                         embedding_copy_is_certain)

LAYOUT_WORK = 1.0
"""CP-SAT deterministic time (its work units, about a second of one core each) the layout
solves of one search may use together (`plan --layout-work`). Counted in work, not wall time,
so the same search stops at the same candidate on a busy machine. Measured with ortools 9.15:
gpt3-175b on 1,024 A100 proves 56 layouts in 0.11 units (50 more are settled by the quick
bound, `layout_solve.quick_slowest_bound_s`, without CP-SAT), deepseek-v3 on 1,024 H100 4 in
0.02 (51 by the bound); gpt-oss-120b on 64 H100 (alternating attention layers, the hard case)
needs about 93 and says its layouts are not proven optimal."""

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
    unproven: str | None = None
    """Why not every candidate whose bound could beat the best plan was balanced to
    optimality, in one plain line (None when all were)."""
    wall_clock_stopped: bool = False
    """The wall-clock safety net stopped the layout step (the result may vary run to run)."""


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
    inf without a pipeline (nothing to balance). See `stage_bounds`."""
    slowest, total, memory = stage_bounds(problem, pool)
    return _step_bound(problem, pool, slowest, total), memory


def _step_bound(problem: Problem, pool: Pool, slowest: np.ndarray, total: np.ndarray,
                free: np.ndarray | None = None) -> np.ndarray:
    """Step times no layout beats, from bounds on the slowest stage and on the stages' sum
    (`pipeline.pipeline_time_s` rises with both), or the search's own bound where it is the
    higher (`free`: `layout_free_bound`, computed here if not given); inf where there is no
    bound."""
    out = np.full(len(pool), np.inf)
    free = layout_free_bound(problem, pool) if free is None else free
    for index, batch in enumerate(pool.batches):
        rows = np.flatnonzero((pool.batch == index) & np.isfinite(slowest))
        if not len(rows):
            continue
        m, v = batch.cands.num_micro_batches[pool.row[rows]], batch.layout.vpp
        out[rows] = np.maximum(
            pipeline_time_s(max_stage_s=slowest[rows], sum_stage_s=total[rows],
                            num_micro_batches=m, vpp=v) + step_overhead_s(problem),
            free[rows])
    return out


def layout_free_bound(problem: Problem, pool: Pool) -> np.ndarray:
    """Per candidate, `evaluate.step_lower_bound_s`: a step no layout beats, from what every
    layout adds up to the same."""
    out = np.empty(len(pool))
    for index, batch in enumerate(pool.batches):
        rows = np.flatnonzero(pool.batch == index)
        if len(rows):
            at = pool.row[rows]
            out[rows] = step_lower_bound_s(problem, batch.cands.take(at), batch.costs.take(at))
    return out


def stage_bounds(problem: Problem, pool: Pool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per candidate, bounds no layout can beat: (the slowest stage's time per micro-batch,
    the sum of the stages' times, the fullest stage's memory); inf without a pipeline.

    The bounds come from `evaluate`'s own per-stage terms (`stage_model`), each replaced by a
    linear function below it (`stage_terms.lower_linear`; the working set by its least).
    A layout moves layers between stages; the blocks before the first layer stay in the first
    chunk and those after the last in the last chunk, and every chunk ends with a layer. So
    each stage keeps a fixed part no layout changes, and the layers, divisible at will, can at
    best fill the stages to one level (`water_level`): for time, their total time over the
    fixed parts; for memory, every chunk holding at least its cheapest layer and the rest at
    least the cheapest layer per stage (a layer's states plus its activations at the fewest
    micro-batches a chunk of that stage holds), or the most common layer type alone, the
    others left out. Blocks between layers that are not layers themselves count for nothing.
    """
    model = problem.model
    types = chain_types(model)
    position_type = types.type_of_position
    is_layer = type_is_layer(model)
    layer_positions = np.flatnonzero(is_layer[position_type])
    layer_types = np.unique(position_type[layer_positions])
    num_types = len(types.unique_blocks)
    layer_counts = np.bincount(position_type[layer_positions], minlength=num_types)
    head = np.bincount(position_type[:layer_positions[0]], minlength=num_types)
    tail = np.bincount(position_type[layer_positions[-1] + 1:], minlength=num_types)
    copy = (chain_embedding_copy(model, 2) if embedding_copy_is_certain(model)
            else np.zeros(num_types))
    slowest_all, total_all = np.full(len(pool), np.inf), np.full(len(pool), np.inf)
    memory = np.full(len(pool), np.inf)
    for index, batch in enumerate(pool.batches):
        p, v = batch.layout.pp, batch.layout.vpp
        if p == 1:
            continue
        rows = np.flatnonzero(pool.batch == index)
        cands = batch.cands.take(pool.row[rows])
        sm = stage_model(problem, cands, batch.costs.take(pool.row[rows]), pp=p,
                         embedding_copy=Linear(block=copy[None, :]))
        n, k = len(cands), p * v
        m = cands.num_micro_batches
        group = cands.schedule_group(problem.framework.micro_batch_groups)
        flight = in_flight_per_chunk(stage=np.arange(p)[None, :, None], pp=p, vpp=v,
                                     num_micro_batches=m[:, None, None],
                                     chunk=np.arange(v)[None, None, :],
                                     group=group[:, None, None]).astype(float)
        fixed = np.zeros((k, num_types))
        fixed[0] += head
        fixed[-1] += tail

        def fixed_part(lb: Linear) -> np.ndarray:
            """(N, p): the stage constants, the fixed blocks, and the least a chunk's last
            block (a layer) can add."""
            out = np.zeros((n, p)) + lb.const
            for part, weighted in ((lb.block, False), (lb.in_flight, True)):
                if part is not None:
                    chunk = by_stage(part @ fixed.T, p, v)
                    out = out + (chunk * flight if weighted else chunk).sum(2)
            sends = np.ones((p, v))
            sends[(k - 1) % p, (k - 1) // p] = 0.0             # the last chunk sends nothing
            for part, weighted in ((lb.end, False), (lb.end_in_flight, True)):
                if part is not None:
                    least = part[:, layer_types].min(1)[:, None, None]
                    out = out + (least * sends * (flight if weighted else 1.0)).sum(2)
            if lb.final is not None:
                out[:, (k - 1) % p] += lb.final[:, layer_types].min(1)
            return out

        # ---- time: the layers' time fills the stages above their fixed parts. Each term is
        # bounded by a linear function tight in the even layout's slowest stage (its pieces
        # largest there), or, where that leaves a layer a negative time, by non-negative ones.
        even = Occupancy.of_bounds(p, v, batch.layout.bounds, position_type, is_layer)
        slowest_even = batch.ev.slowest_stage[pool.row[rows]]
        bases, rates = [], []
        parts = ([(np.arange(n), t) for t in sm.time_terms]
                 + [(x.rows, x.term(problem, cands, sm)) for x in sm.dp])
        for tight in (True, False):
            base, rate = np.zeros((n, p)), np.zeros((n, num_types))
            for term_rows, term in parts:
                active = None
                if tight and isinstance(term, Term):
                    active = active_pieces(term, even, flight[term_rows],
                                           slowest_even[term_rows])
                lb = _rows_linear(lower_linear(term, active), term_rows, n, num_types)
                base = base + fixed_part(lb)
                if lb.block is not None:
                    rate = rate + lb.block
            bases.append(base)
            rates.append(rate)
        # Layers of negative time (a term that hides traffic behind them) may fill a stage
        # below its fixed part: the tight bound then only says the slowest stage takes at
        # least the mean.
        amounts = [r[:, layer_types] @ layer_counts[layer_types] for r in rates]
        totals = [b.sum(1) + a for b, a in zip(bases, amounts)]
        tight_ok = (rates[0][:, layer_types] >= 0).all(1)
        slowest = np.maximum(
            np.where(tight_ok, water_level(bases[0], np.ones_like(bases[0]), amounts[0]),
                     totals[0] / p),
            water_level(bases[1], np.ones_like(bases[1]), amounts[1]))
        total = np.maximum(totals[0], totals[1])
        slowest_all[rows], total_all[rows] = slowest, total

        # ---- memory: every chunk holds a layer; the other layers fill the stages.
        scale = 1 + sm.fragmentation
        items = [x for x in sm.allocated if not isinstance(x, Peak)]
        memory_lb = sum((lower_linear(x) for x in items), Linear())
        # A stage's working set is its largest block's: keep only what no layout removes (its
        # fixed blocks', or the smallest layer's, as it holds one).
        working = sm.working.value
        held = fixed.reshape(v, p, -1).sum(0) > 0                               # (p, U)
        least = np.maximum((working[:, None, :] * held[None]).max(2),
                           working[:, layer_types].min(1)[:, None])
        base = sm.framework_bytes + scale * (fixed_part(memory_lb) + least)
        state = np.zeros((n, num_types)) if memory_lb.block is None else memory_lb.block
        act = np.zeros((n, num_types)) if memory_lb.in_flight is None else memory_lb.in_flight
        per_chunk = (state[:, None, None, layer_types]
                     + act[:, None, None, layer_types] * flight[..., None])     # (N, p, v, L)
        mandatory = per_chunk.min(3).sum(2)                                      # (N, p)
        rate = (state[:, None, layer_types]
                + act[:, None, layer_types] * flight.min(2)[..., None]).min(2)   # (N, p)
        fullest = water_level(base + scale * mandatory, scale * rate, model.num_layers - p * v)
        major = layer_types[np.argmax(layer_counts[layer_types])]
        major_rate = state[:, major][:, None] + act[:, major][:, None] * flight.min(2)
        fullest = np.maximum(fullest, water_level(base, scale * major_rate,
                                                  int(layer_counts[major])))
        memory[rows] = fullest
    return slowest_all, total_all, memory


def _rows_linear(x: Linear, rows: np.ndarray, n: int, num_types: int) -> Linear:
    """A `Linear` of some rows as one of all n rows, zero elsewhere."""
    def spread(part, width):
        if part is None:
            return None
        out = np.zeros((n, width))
        out[rows] = np.broadcast_to(part, (len(rows), width))
        return out

    width = np.shape(x.const)[1] if np.ndim(x.const) == 2 else 1
    const = np.broadcast_to(np.asarray(x.const, dtype=float), (len(rows), width))
    return Linear(spread(const, width),
                  *(spread(getattr(x, f), num_types) for f in
                    ("block", "in_flight", "end", "end_in_flight", "final")))


def stage_cutoff_s(problem: Problem, limit_s: float, *, sum_stage_s: float,
                   num_micro_batches: float, vpp: int) -> float | None:
    """The slowest stage (seconds per micro-batch) above which a layout's step exceeds
    `limit_s`, given a bound on the stages' sum: `pipeline_time_s`, linear in the slowest
    stage, plus the step overhead is at most the step. None where the step does not rise with
    the slowest stage alone (one micro-batch, one chunk) or nothing limits it."""
    kw = dict(num_micro_batches=num_micro_batches, vpp=vpp)
    slope = pipeline_time_s(max_stage_s=1.0, sum_stage_s=0.0, **kw)
    if not np.isfinite(limit_s) or slope <= 0:
        return None
    rest = pipeline_time_s(max_stage_s=0.0, sum_stage_s=sum_stage_s, **kw)
    return (limit_s - step_overhead_s(problem) - rest) / slope


def rebalance(problem: Problem, pool: Pool, *, work: float = LAYOUT_WORK,
              wall: WallClock | None = None, plans: int | None = None,
              tolerance: float = 0.0) -> tuple[Pool, LayoutStats]:
    """The pool with balanced layouts added for every candidate that could win, within `work`
    units of CP-SAT deterministic time (and the `wall` safety net). With `plans` (the search
    lists that many, and those tied within `tolerance`), a layout solve looks only for layouts
    fast enough to be among them (`stage_cutoff_s`)."""
    capacity = problem.usable_bytes
    fits = ~memory_violations(pool.peak_bytes, capacity, conservative=True)
    best = float(pool.step_s[fits].min()) if fits.any() else np.inf
    limit = (np.inf if plans is None else
             plan_limit_s(pool, capacity, plans=plans, tolerance=tolerance))
    # The stage bounds of the candidates whose layout-free bound is under the best plan's tie
    # (no other can beat or tie it in any layout).
    slowest_bounds, total_bounds, memory_bounds = (np.full(len(pool), np.inf) for _ in range(3))
    free = layout_free_bound(problem, pool)
    promising = np.flatnonzero(free < tie_limit_s(best, tolerance))
    if len(promising):
        some = pool.take(promising)
        slowest_bounds[promising], total_bounds[promising], memory_bounds[promising] = \
            stage_bounds(problem, some)
    bounds = _step_bound(problem, pool, slowest_bounds, total_bounds, free)
    eligible = np.flatnonzero(np.isfinite(bounds) & (memory_bounds <= capacity))
    by_bound = list(eligible[np.argsort(bounds[eligible], kind="stable")])
    # Nothing fits yet: balance the smallest peaks first until something does; then go by
    # the bound, which lets the search stop.
    by_peak = [] if np.isfinite(best) else list(
        eligible[np.argsort(pool.peak_bytes[eligible], kind="stable")])
    tried: set[int] = set()
    balanced = improved = 0
    used, bounded, wall_stopped, out_of_work = 0.0, 0, False, False
    stopped: list[float] = []
    while by_peak or by_bound:
        if by_peak and not np.isfinite(best):
            i = int(by_peak.pop(0))
        else:
            by_peak = []
            i = int(by_bound.pop(0))
            if bounds[i] >= tie_limit_s(best, tolerance):
                break                              # no later candidate can beat or tie the best
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
        costs = chain_costs(problem, batch.cands, batch.costs, batch.layout, row)
        solve = solve_layout(costs, hint=batch.layout.bounds,
                             work_limit=min(work - used, work / LAYOUT_SOLVE_SHARE),
                             wall_limit_s=None if wall is None else wall.left_s(),
                             cutoff_s=stage_cutoff_s(
                                 problem, limit, sum_stage_s=total_bounds[i],
                                 num_micro_batches=batch.cands.num_micro_batches[row],
                                 vpp=batch.layout.vpp))
        used += solve.work
        if wall is not None and wall.left_s() <= 0 and solve.stopped:
            wall_stopped = True
        if solve.stopped:                          # a better layout (or one that fits) may exist
            # ... unless its bound on the slowest stage, with the candidate's bound on the
            # stages' sum, shows that no layout of it beats the best plan (judged at the end,
            # against the final best).
            slowest = max(slowest_bounds[i], solve.slowest_bound_s)
            stopped.append(-np.inf if solve.bounded else pipeline_time_s(
                max_stage_s=slowest, sum_stage_s=max(total_bounds[i], slowest),
                num_micro_batches=batch.cands.num_micro_batches[row], vpp=batch.layout.vpp)
                + step_overhead_s(problem))
        bounded += solve.bounded and not solve.stopped
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
        if plans is not None:
            limit = plan_limit_s(pool, capacity, plans=plans, tolerance=tolerance)
    capped = sum(1 for least_step in stopped if least_step < tie_limit_s(best, tolerance))
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
    elif bounded:
        unproven = (f"{bounded} stage layout solve(s) bounded the offloaded activations of "
                    f"unlike layers or interleaved chunks, which their model cannot state "
                    f"exactly, so their layouts are not proven optimal")
    return pool, LayoutStats(balanced, improved, unproven, wall_stopped)


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
    result = solve_layout(chain_costs(problem, cands, block, layout, 0), hint=layout.bounds,
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
