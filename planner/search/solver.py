"""Find the fastest strategies that fit, with OR-Tools CP-SAT.

1. `candidates.generate` lists the search space; the degree rules (`planner.rules.gate`) and the
   user's pins remove what is invalid; `costing.evaluate` prices the remaining candidates in
   float arithmetic, in batches that share a pipeline layout: those whose step bound
   (`evaluate.step_lower_bound_s`, under their step in every layout) can reach the plans
   asked for, and the rule of thumb's (`pool.evaluate_promising`).
2. Within one set of degrees (dp, tp, pp, vpp, micro-batch) a candidate that another beats on
   both step time and peak memory can never be chosen, so it is dropped (exact, not a
   heuristic: the memory rule is the only constraint left).
3. CP-SAT picks one candidate: memory fits (the rule as an assumption literal, so an
   infeasible request names it), step time minimal. Plans 2..K are found by excluding the
   degrees already chosen and solving again. With `rank_ties`, the first pick gives way to
   the plans tied with it (within the model's measured ranking error), the conventional first
   (`search.ties`).
4. Every plan is checked again by `validate` in float arithmetic; a disagreement is our bug.

Scaling to integers happens in one place (`_objective`): time in microseconds, rounded to
nearest, with ties broken by a deterministic order; memory is compared in whole MiB, the peak
rounded up (`rules.memory_violations(conservative=True)`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from ortools.sat.python import cp_model

from planner.search.candidates import SearchSpace, generate
from planner.search.explain import explain_infeasible
from planner.search.cpsat import SolverSettings, make_solver
from planner.costing.evaluate import report
from planner.errors import InfeasibleError, InputError, shown
from planner.core.problem import Problem
from planner.core.rules import is_power_of_two
from planner.search.pool import (Pool, evaluate_promising, passes, pending,
                                 rule_of_thumb_key)
from planner.search.rebalance import LayoutStats, WallClock, rebalance
from planner.search.ties import tied_first, tied_with
from planner.costing.uncertainty import ranking_tolerance
from planner.rules.gate import Rule, RuleOptions, memory_violations
from planner.schemas.report import PlanReport, SearchReport
from planner.schemas.strategy import strategy_label
from planner.rules.validate import validate

US_PER_S = 1e6


@dataclass(frozen=True)
class SearchResult:
    plans: list[PlanReport]
    search: SearchReport


def _objective(pool: Pool) -> np.ndarray:
    """Integer cost per candidate: step time in microseconds, then a deterministic tie-break,
    so the optimum is unique. Ties happen when communication hides entirely behind compute;
    they go to the simpler strategy: lower ZeRO stage, less recomputation, fewer pipeline
    stages and chunks, less tensor parallelism, larger micro-batches, then lower memory."""
    step_us = np.rint(pool.step_s * US_PER_S).astype(np.int64)
    c = pool.cands
    keys = (pool.peak_bytes, c.rc_modules, c.dp_comm, c.sp, -c.mb, c.tp, c.vpp, c.pp,
            c.recompute, c.zero, step_us)
    order = np.lexsort(keys)                       # the last key sorts first
    tie_break = np.empty(len(pool), dtype=np.int64)
    tie_break[order] = np.arange(len(pool))
    return step_us * len(pool) + tie_break


def _fastest_per_degrees(pool: Pool, fits: np.ndarray) -> np.ndarray:
    """Indices of the fastest fitting candidate of each distinct set of degrees."""
    idx = np.flatnonzero(fits)
    rows = pool.degree_rows()
    order = idx[np.lexsort((pool.step_s[idx], *rows[idx].T[::-1]))]
    degrees = rows[order]
    first = np.r_[True, (degrees[1:] != degrees[:-1]).any(1)]
    return np.sort(order[first])


def _heuristic(pool: Pool, fits: np.ndarray) -> int | None:
    """Megatron-LM's rule of thumb (Narayanan et al. 2021, Sec. 3.3 takeaways): the largest
    tensor parallelism inside a node, then the fewest pipeline stages that fit, micro-batch 1.
    A hint for the solver, and a baseline the report compares with."""
    idx = np.flatnonzero(fits)
    if not len(idx):
        return None
    keys = tuple(key[idx] for key in rule_of_thumb_key(pool.cands))
    return int(idx[np.lexsort((pool.step_s[idx], *keys[::-1]))[0]])


class _PlanModel:
    """CP-SAT: choose one candidate, memory must fit, minimise step time."""

    def __init__(self, pool: Pool, over_memory: np.ndarray, hint: int | None) -> None:
        self.pool = pool
        self.model = cp_model.CpModel()
        n = len(pool)
        # choice[i] is true when candidate i is the plan.
        self.choice = [self.model.new_bool_var(f"choice[{i}]") for i in range(n)]
        # Exactly one strategy is chosen.
        self.model.add_exactly_one(self.choice)
        # Rule memory_fits (rules.memory_violations): the peak stage fits the GPU. Enforced
        # through an assumption literal so that an infeasible model names the rule.
        self.enforce_memory = self.model.new_bool_var(f"enforce[{Rule.MEMORY_FITS.value}]")
        too_big = [self.choice[i] for i in np.flatnonzero(over_memory)]
        if too_big:
            self.model.add_bool_and([~x for x in too_big]).only_enforce_if(self.enforce_memory)
        self.model.add_assumptions([self.enforce_memory])
        # Objective: the predicted step time for the global batch (microseconds).
        self.objective = _objective(pool)
        self.model.minimize(cp_model.LinearExpr.weighted_sum(self.choice,
                                                             self.objective.tolist()))
        if hint is not None:
            self.model.add_hint(self.choice[hint], True)
        # Branch on the candidates fastest first, each chosen before it is ruled out: the
        # first leaf that fits is the optimum, and the objective bound proves it at once
        # (DeepSeek-V3 on 2,048 H100, 800 candidates: 3 ms a pick instead of 15-50 ms).
        fastest_first = np.argsort(self.objective, kind="stable")
        self.model.add_decision_strategy([self.choice[i] for i in fastest_first],
                                         cp_model.CHOOSE_FIRST, cp_model.SELECT_MAX_VALUE)

    def exclude_degrees(self, i: int) -> None:
        """Plans after the first must differ in their degrees (dp, tp, pp, vpp, micro-batch)."""
        same = np.flatnonzero(self.pool.same_degrees(i))
        self.model.add_bool_and([~self.choice[j] for j in same])

    def solve(self, settings: SolverSettings) -> tuple[str, int | None, bool]:
        """(status, the chosen candidate or None, whether the wall-clock net stopped it)."""
        solver = make_solver(settings)
        solver.parameters.search_branching = cp_model.FIXED_SEARCH
        status = solver.solve(self.model)
        wall_stopped = status not in (cp_model.OPTIMAL, cp_model.INFEASIBLE) and \
            solver.deterministic_time < settings.work_limit
        chosen = None
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            chosen = next(i for i, x in enumerate(self.choice) if solver.boolean_value(x))
        return solver.status_name(status), chosen, wall_stopped


def search(problem: Problem, space: SearchSpace = SearchSpace(),
           settings: SolverSettings = SolverSettings(), *,
           num_tokens: float | None = None) -> SearchResult:
    """The top `settings.top_k` plans with distinct degrees, fastest first.

    Raises InfeasibleError (with the conflicting rules, the closest miss and what would make
    it fit) when no candidate passes every rule.

    Without --min-free (`Problem.default_margin`) the plans keep the default margin free;
    where none can, the plans that fit the whole GPU are returned and the note says that
    they break the margin (a pinned plan that breaks it, say).
    """
    wall = WallClock(settings.time_limit_s)
    if not problem.default_margin:
        return _search_widening(problem, space, settings, num_tokens, wall)
    try:
        return _search_widening(problem.with_margin(), space, settings, num_tokens, wall)
    except InfeasibleError:
        result = _search_widening(replace(problem, min_free_bytes=0.0), space, settings,
                                  num_tokens, wall)
    note = (f"no plan keeps the default margin of {problem.margin_bytes / 2**30:.1f} GiB free "
            f"per GPU; these fit only without it (marked !): they may run out of memory; "
            f"pass --min-free 0 to plan without the margin")
    return _with_note(result, note)


def _with_note(result: SearchResult, note: str) -> SearchResult:
    """`result` with `note` after the notes it already has."""
    return SearchResult(result.plans, result.search.model_copy(
        update={"note": "; ".join(filter(None, (result.search.note, note)))}))


def _search_widening(problem: Problem, space: SearchSpace, settings: SolverSettings,
                     num_tokens: float | None, wall: WallClock) -> SearchResult:
    """`_search`, and where nothing fits a pp that is a power of two, every pp that divides
    the GPUs (`widened`), said so in the note; where the power-of-two space has plans, the
    note names the rule's cost when a wider pp is faster (`_pp_rule_cost`)."""
    try:
        result = _search(problem, space, settings, num_tokens, wall)
    except InfeasibleError:
        wider = widened(problem, space)
        if wider is None:
            raise
    else:
        return _pp_rule_cost(problem, space, settings, num_tokens, wall, result)
    try:
        result = _search(problem, wider, settings, num_tokens, wall)
    except InfeasibleError:
        raise _search_error(problem, space, wider) from None
    pps = sorted({p.strategy.pp for p in result.plans})
    note = (f"no plan with pp a power of two on {problem.num_gpus} GPUs; pp widened to the "
            f"divisors of the GPUs (pp {', '.join(map(str, pps))}), layers balanced over "
            f"uneven stages")
    return SearchResult(result.plans, result.search.model_copy(update={"note": note}))


def _pp_rule_cost(problem: Problem, space: SearchSpace, settings: SolverSettings,
                  num_tokens: float | None, wall: WallClock,
                  result: SearchResult) -> SearchResult:
    """`result`, with a note when a pp outside the powers of two (one that divides the GPUs,
    as `widened`) is predicted faster than its fastest plan by more than the model's ranking
    error: the cost of the rule, and the pin that prices that plan. The plans stay in the
    rule; NVIDIA runs Llama 3.1 405B with pp 9 on 576 H100 (DGX Cloud Benchmarking), BLOOM
    ran pp 12 on 384 A100, MT-NLG pp 35 on 2,240."""
    wider = widened(problem, space)
    if wider is None:
        return result
    try:
        other = _search(problem, wider, replace(settings, top_k=1, rank_ties=False,
                                                export_path=None), num_tokens, wall)
    except InfeasibleError:
        return result
    best = min(p.time.step_s for p in result.plans)
    plan = other.plans[0]
    pp = plan.strategy.pp
    gain = best / plan.time.step_s - 1
    if is_power_of_two(pp) or gain <= ranking_tolerance(problem):
        return result
    layers = problem.model.num_layers
    uneven = "" if layers % pp == 0 else f", its {layers} layers balanced over uneven stages"
    note = (f"pp is kept to powers of two; pp {pp} (--pp {pp}{uneven}) is predicted "
            f"{plan.time.step_s:.2f} s, {gain:.1%} faster than the best plan here: "
            f"{strategy_label(plan.strategy)}")
    return _with_note(result, note)


def widened(problem: Problem, space: SearchSpace) -> SearchSpace | None:
    """The space with every pp that divides the GPUs (`SearchSpace.wide_pp`), when the user
    left pp free and that adds a pp; None otherwise."""
    if space.pp is not None or space.wide_pp:
        return None
    wider = replace(space, wide_pp=True)
    from planner.search.candidates import degree_tuples

    if {d[2] for d in degree_tuples(problem, wider)} == {d[2] for d in degree_tuples(problem, space)}:
        return None
    return wider


def _search_error(problem: Problem, space: SearchSpace, wider: SearchSpace) -> InfeasibleError:
    """Why the widened space has no plan either (its explanation covers the narrow one)."""
    return explain_infeasible(problem, wider, generate(problem, wider),
                              wider.rule_options(problem))


def _search(problem: Problem, space: SearchSpace, settings: SolverSettings,
            num_tokens: float | None, wall: WallClock) -> SearchResult:
    # Plans carry their own layouts (balanced when the rules allow uneven ones).
    options = space.rule_options(problem)
    uneven = options.explicit_layouts
    pins = space.pins()
    groups = generate(problem, space)
    num_candidates = sum(len(g.cands) for g in groups)
    masks = [(g, passes(problem, g.cands, pins, options)) for g in groups]
    num_valid = int(sum(mask.sum() for _, mask in masks))
    tolerance = ranking_tolerance(problem) if settings.rank_ties else 0.0
    pool = evaluate_promising(problem, pending(problem, masks, drop_unfittable=True),
                              plans=settings.top_k, tolerance=tolerance)
    num_evaluated = sum(len(b.cands) for b in pool.batches)
    capacity = problem.usable_bytes
    layouts = LayoutStats(0, 0)
    if uneven:
        pool, layouts = rebalance(problem, pool, work=settings.layout_work, wall=wall,
                                  plans=settings.top_k, tolerance=tolerance)
    over = memory_violations(pool.peak_bytes, capacity, conservative=True)
    if not len(pool) or over.all():
        raise explain_infeasible(problem, space, groups, options)
    # Plans must fit and differ in their degrees: only the fastest fitting candidate of each
    # set of degrees can be chosen, so the model holds those alone.
    pool = pool.take(_fastest_per_degrees(pool, ~over))
    over = np.zeros(len(pool), dtype=bool)
    hint = _heuristic(pool, ~over)
    plan_model = _PlanModel(pool, over, hint)
    if settings.export_path and not plan_model.model.export_to_file(settings.export_path):
        raise InputError(f"--export-model {shown(settings.export_path)}: cannot write the "
                         f"model there")
    chosen, statuses, pick_wall_stopped = [], [], False
    while len(chosen) < settings.top_k:
        status, i, stopped = plan_model.solve(settings)
        pick_wall_stopped |= stopped
        if i is None:
            break
        statuses.append(status)
        # After the fastest, the plans tied with it come first, the conventional first; the
        # picks after them are the fastest of the rest again.
        picked = (tied_first(problem, pool, i, tolerance, plan_model.objective, settings.top_k)
                  if not chosen and tolerance else [i])
        chosen += picked
        for j in picked:
            plan_model.exclude_degrees(j)
    if not chosen:
        limit = (f"the {settings.time_limit_s:g} s wall-clock safety net (--time-limit)"
                 if pick_wall_stopped else f"{settings.work_limit:g} CP-SAT work units")
        raise InfeasibleError(f"CP-SAT found no plan within {limit} ({len(pool):,} "
                              f"candidates)")
    tied = tied_with(pool.step_s[chosen], float(min(pool.step_s[chosen])), tolerance)
    plans = [_checked_report(problem, pool, i, options, num_tokens)
             .model_copy(update={"tied_with_best": bool(t)}) for i, t in zip(chosen, tied)]
    heuristic = None if hint is None else float(pool.step_s[hint])
    unproven = layouts.unproven
    wall_stopped = layouts.wall_clock_stopped or pick_wall_stopped
    if statuses[0] != "OPTIMAL":
        unproven = unproven or (
            f"the {settings.time_limit_s:g} s wall-clock safety net (--time-limit) stopped "
            f"CP-SAT; this result may differ from run to run" if pick_wall_stopped else
            f"CP-SAT reached its work limit ({settings.work_limit:g} units) before proving "
            f"the best plan")
    stats = SearchReport(
        status=statuses[0], proven_optimal=unproven is None, unproven=unproven,
        wall_clock_stopped=wall_stopped,
        num_candidates=num_candidates, num_valid=num_valid, num_evaluated=num_evaluated,
        num_in_model=len(pool),
        num_layouts_balanced=layouts.num_balanced, num_layouts_improved=layouts.num_improved,
        seconds=wall.elapsed_s(), heuristic_step_s=heuristic,
        heuristic_strategy=None if hint is None else pool.label(hint),
        tie_tolerance=tolerance)
    return SearchResult(plans=plans, search=stats)


def _checked_report(problem: Problem, pool: Pool, i: int, options: RuleOptions,
                    num_tokens: float | None) -> PlanReport:
    """The plan's report, after `validate` agrees in float arithmetic (else it is our bug)."""
    b = pool.batches[pool.batch[i]]
    row = int(pool.row[i])
    plan = report(problem, b.layout, b.cands, b.ev, row, num_tokens=num_tokens)
    check = validate(problem, b.strategy(row, problem.model), options=options,
                     num_tokens=num_tokens)
    if not check.valid:
        raise AssertionError(f"search returned {pool.label(i)}, which validate rejects: "
                             f"{[v.rule for v in check.violations]}")
    if check.report is None or not np.isclose(check.report.time.step_s, plan.time.step_s,
                                              rtol=1e-9):
        raise AssertionError(f"search and validate disagree on the step time of {pool.label(i)}")
    return plan

