"""planner/costing/diff.py: terms, deltas, and the terms picked to explain a gap."""

from dataclasses import replace

import pytest

from planner.costing.diff import (MEMORY_TERMS, TIME_TERMS, Reason, Term, diff_plans,
                                  explaining_terms)
from planner.costing.evaluate import evaluate_strategy
from planner.inputs.loader import make_problem
from planner.schemas.strategy import Strategy


def _terms(*deltas: float) -> tuple[Term, ...]:
    return tuple(Term(f"t{i}", 10.0, 10.0 + d) for i, d in enumerate(deltas))


def test_the_largest_term_alone_when_it_explains_the_gap():
    # gap 1.0: 0.9 leaves 0.1, within the 20% allowed, so one term suffices.
    chosen = explaining_terms(_terms(0.05, 0.9, 0.05), gap_s=1.0)
    assert [t.name for t in chosen] == ["t1"]


def test_a_term_against_the_gap_is_named_with_the_one_it_offsets():
    # +7 s of one term offset by -5 s of another is the account of a +2 s gap: 7 alone
    # overshoots by 5 (250%), 7 - 5 leaves 0.1.
    chosen = explaining_terms(_terms(7.0, -5.0, 0.1), gap_s=2.1)
    assert [t.name for t in chosen] == ["t0", "t1"]


def test_at_most_three_terms():
    chosen = explaining_terms(_terms(0.25, 0.25, 0.25, 0.25), gap_s=1.0)
    assert len(chosen) == 3


def _plan(problem, **strategy):
    s = Strategy(global_batch=problem.training.global_batch, micro_batch=1,
                 recompute="full", zero_stage=1, **strategy)
    return evaluate_strategy(problem, s)


@pytest.fixture(scope="module")
def problem():
    return make_problem("llama2-7b", "dgx-h100", gpus=16, global_batch=64)


def test_a_plan_against_itself_has_no_gap(problem):
    plan = _plan(problem, dp=16, tp=1, pp=1)
    diff = diff_plans(problem, plan, problem, plan)
    assert all(t.delta == 0 for t in diff.terms)
    assert diff.equally_fast and diff.same_work and diff.speedup == 1
    assert diff.explaining == () and diff.memory_driver is None


def test_pipeline_stages_are_explained_by_the_bubble(problem):
    a = _plan(problem, dp=16, tp=1, pp=1)
    b = _plan(problem, dp=2, tp=1, pp=8)
    diff = diff_plans(problem, a, problem, b)
    # The parts of the step add up to it, so their deltas add up to its delta.
    assert sum(t.delta for t in diff.time) == pytest.approx(diff.step.delta, rel=1e-12)
    assert [t.name for t in diff.time] == list(TIME_TERMS)
    # Memory terms are read at each plan's own peak stage and add up to its peak.
    assert [t.name for t in diff.memory] == list(MEMORY_TERMS)
    assert sum(t.b for t in diff.memory) == pytest.approx(b.memory.peak_bytes, rel=1e-12)
    assert diff.speedup == pytest.approx(a.time.step_s / b.time.step_s)
    assert diff.speedup < 1 and not diff.equally_fast
    first = diff.explaining[0]
    assert first.term.name == "bubble_s" and first.term.delta == b.time.bubble_s
    # 64 sequences over dp 2 with micro-batch 1: 32 micro-batches per pipeline.
    assert first.why == "pp 8 and 32 micro-batches vs pp 1"
    assert abs(diff.unexplained_s) <= 0.2 * abs(diff.step.delta)
    assert diff.memory_driver.term.name == "gradients_bytes"    # sharded over 8 stages


def test_plans_on_other_gpu_counts_compare_by_tokens_per_second():
    small = make_problem("llama2-7b", "dgx-h100", gpus=8, global_batch=64)
    large = make_problem("llama2-7b", "dgx-h100", gpus=16, global_batch=64)
    a, b = _plan(small, dp=8, tp=1, pp=1), _plan(large, dp=16, tp=1, pp=1)
    diff = diff_plans(small, a, large, b)
    assert not diff.same_work and diff.num_gpus.delta == 8
    assert diff.speedup == pytest.approx(b.throughput.tokens_per_s / a.throughput.tokens_per_s)
    assert "16 GPUs vs 8 GPUs" in diff.explaining[0].why


def test_what_three_terms_leave_is_named_as_the_others():
    problem = make_problem("llama2-7b", "dgx-h100", gpus=16, global_batch=64)
    a = _plan(problem, dp=16, tp=1, pp=1)
    diff = diff_plans(problem, a, problem, a)
    spread = _terms(0.25, 0.25, 0.25, 0.25)
    picked = explaining_terms(spread, gap_s=1.0)
    many = replace(diff, step=Term("step_s", 10.0, 11.0),
                   explaining=tuple(Reason(t, "") for t in picked))
    assert many.others_s == pytest.approx(0.25)        # a quarter of the gap: worth naming
    one = replace(many, explaining=(Reason(Term("bubble_s", 0.0, 0.9), ""),))
    assert one.others_s == 0.0                           # a tenth: within the 20% let go
