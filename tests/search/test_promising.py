"""The search evaluates only the candidates whose step bound can reach its plans
(`pool.evaluate_promising`, `evaluate.step_lower_bound_s`).

The bound must stay under every candidate's evaluated step (all pipeline depths, offload, ZeRO
0-3, CP, MoE), and the pruned pool must give the plans the whole pool gives: the fastest
fitting candidate of every set of degrees within the plans' reach, and the rule of thumb's
pick. Judged against evaluating every candidate, as the search did before.
"""

from __future__ import annotations

import numpy as np
import pytest

from planner.inputs.loader import make_problem
from planner.rules.gate import memory_violations
from planner.search.candidates import SearchSpace, generate
from planner.search.pool import (evaluate_pending, evaluate_promising, pareto, passes, pending,
                                 plan_limit_s)
from planner.search.solver import _fastest_per_degrees, _heuristic
from tests.conftest import TINY_MOE_DENSE, TINY_MOE_EXPERTS

TINY_MOE = TINY_MOE_DENSE.format(seq_len=8192) + TINY_MOE_EXPERTS

# (model, cluster, gpus, make_problem overrides, search space overrides)
CASES = {
    "llama3-8b-cp": ("llama3-8b", "dgx-h100", 32, dict(seq_len=16384), {}),
    "gpt3-offload": ("gpt3-175b", "dgx-a100-80gb", 256, {},
                     dict(offload=("optimizer", "activations"))),
    "moe": (TINY_MOE, "dgx-h100", 16, {}, dict(offload=("optimizer", "params"))),
    "mixtral-fp8": ("mixtral-8x7b", "dgx-h100", 64, dict(precision="fp8"), {}),
    "deepspeed": ("llama2-13b", "dgx-a100-80gb", 32, dict(framework="deepspeed"), {}),
}


def _todo(write, case: str):
    model, cluster, gpus, overrides, space_overrides = CASES[case]
    if "\n" in model:
        model = write(f"{case}.yaml", model)
    problem = make_problem(model, cluster, gpus=gpus, **overrides).with_margin()
    space = SearchSpace(**space_overrides)
    options = space.rule_options(problem)
    masks = [(g, passes(problem, g.cands, space.pins(), options))
             for g in generate(problem, space)]
    return problem, pending(problem, masks, drop_unfittable=True)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_bound_is_under_every_step(write, case):
    problem, todo = _todo(write, case)
    pool = evaluate_pending(problem, todo)
    origin = np.concatenate([b.origin for b in pool.batches])
    assert len(pool) > 0
    assert np.all(todo.bound_s[origin] <= pool.step_s * (1 + 1e-12)), case
    # Not a trivial bound: within 2x of the step for the median candidate.
    assert np.median(pool.step_s / todo.bound_s[origin]) < 2.0


def _plans(problem, pool, limit):
    """{degrees: step} of the fastest fitting candidate of each set of degrees within
    `limit`, and the rule of thumb's pick (degrees, step)."""
    fits = ~memory_violations(pool.peak_bytes, problem.usable_bytes, conservative=True)
    best = pool.take(_fastest_per_degrees(pool, fits))
    rows = best.degree_rows()
    plans = {tuple(r): s for r, s in zip(rows.tolist(), best.step_s) if s <= limit}
    hint = _heuristic(best, np.ones(len(best), dtype=bool))
    return plans, (tuple(rows[hint].tolist()), best.step_s[hint])


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("tolerance", [0.0, 0.08])
def test_the_pruned_pool_gives_the_plans_of_the_whole_pool(write, case, tolerance):
    problem, todo = _todo(write, case)
    whole = pareto(evaluate_pending(problem, todo))
    pruned = evaluate_promising(problem, todo, plans=5, tolerance=tolerance)
    limit = plan_limit_s(whole, problem.usable_bytes, plans=5, tolerance=tolerance)
    assert np.isfinite(limit)
    assert _plans(problem, pruned, limit) == _plans(problem, whole, limit), case
    assert len(pruned) <= len(whole)


def test_the_pruning_prunes(write):
    """On the issue's case (DeepSeek-V3 on 2,048 H100) most candidates are never evaluated."""
    problem = make_problem("deepseek-v3", "dgx-h100", gpus=2048).with_margin()
    space = SearchSpace()
    options = space.rule_options(problem)
    masks = [(g, passes(problem, g.cands, space.pins(), options))
             for g in generate(problem, space)]
    todo = pending(problem, masks, drop_unfittable=True)
    pruned = evaluate_promising(problem, todo, plans=5, tolerance=0.0)
    evaluated = sum(len(b.cands) for b in pruned.batches)
    assert evaluated < 0.25 * len(todo)
