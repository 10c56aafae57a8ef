"""torchtitan's zero-bubble pipeline schedules priced as themselves: each schedule's bubble
(`cost_models.pipeline.schedule_bubble_s`) from the slowest stage's forward, weight-gradient
and other backward time, its held activations, and the rule that gates it."""

from __future__ import annotations

import pytest

from cost_models.compute import Gemm
from cost_models.enums import PipelineSchedule
from cost_models.pipeline import schedule_bubble_s
from planner.costing.block_costs import weight_gradients
from planner.costing.evaluate import evaluate_strategy
from planner.inputs.loader import make_problem
from planner.rules.gate import rule_violations
from planner.schemas.strategy import Strategy

ZB, ZBV, DPV = PipelineSchedule.ZERO_BUBBLE, PipelineSchedule.ZBV, PipelineSchedule.DUALPIPEV


def _problem(framework="torchtitan", global_batch=64):
    return make_problem("llama3-70b", "dgx-h100", gpus=64, framework=framework,
                        global_batch=global_batch)


@pytest.fixture(scope="module")
def problem():
    return _problem()


def _strategy(problem, schedule=None, *, pp=4, vpp=1, recompute="full"):
    return Strategy(tp=8, pp=pp, vpp=vpp, dp=64 // (8 * pp), micro_batch=1,
                    global_batch=problem.training.global_batch, sequence_parallel=True,
                    recompute=recompute, zero_stage=3, pipeline_schedule=schedule)


def _rules(problem, strategy) -> set[str]:
    return {getattr(v.rule, "value", v.rule) for v in rule_violations(problem, strategy)}


def test_weight_gradient_gemm_is_a_transposed_reduction():
    # dB = A^T dC: [k x m] @ [m x n], reducing over the m tokens (compute.backward_gemms).
    assert weight_gradients([Gemm(4096, 1024, 512), None]) == [Gemm(512, 1024, 4096)]


@pytest.mark.parametrize("recompute", ["full", "none"])
@pytest.mark.parametrize(("schedule", "vpp"), [(ZB, 1), (ZB, 2), (ZBV, 2), (DPV, 2)])
def test_only_the_bubble_changes(problem, schedule, vpp, recompute):
    base = _strategy(problem, vpp=vpp, recompute=recompute)
    a = evaluate_strategy(problem, base)
    b = evaluate_strategy(problem, base.model_copy(update={"pipeline_schedule": schedule}))
    assert b.strategy.pipeline_schedule is schedule and not _rules(problem, base)
    for name in ("compute_s", "tp_comm_s", "pp_comm_s", "dp_comm_s", "optimizer_s"):
        assert getattr(a.time, name) == pytest.approx(getattr(b.time, name)), name
    assert b.time.step_s - a.time.step_s == pytest.approx(b.time.bubble_s - a.time.bubble_s)
    # The zero-bubble schedules run the weight gradients in the bubble; torch's DualPipeV
    # runs its pairs one after the other, so without an overlap it gains nothing here.
    if schedule is not DPV:
        assert b.time.bubble_s < a.time.bubble_s


def test_zero_bubble_bubble_between_the_start_up_forwards_and_1f1b(problem):
    s = _strategy(problem, recompute="none")
    one = evaluate_strategy(problem, s)
    zb = evaluate_strategy(problem, s.model_copy(update={"pipeline_schedule": ZB}))
    stage = one.time.stages[one.time.slowest_stage]
    m = one.strategy.num_micro_batches
    # ZB-H1: (p - 1) max(F, B, F + B - W) with W > 0, at least the p - 1 forwards.
    assert 3 * stage.forward_s / m <= zb.time.bubble_s < one.time.bubble_s


def test_held_activations_follow_the_schedule(problem):
    s = _strategy(problem)
    one = evaluate_strategy(problem, s)
    zb = evaluate_strategy(problem, s.model_copy(update={"pipeline_schedule": ZB}))
    # 1F1B: p - r micro-batches on stage r; ZB-H1: p on every stage (W-pending counted whole).
    assert [x.in_flight_micro_batches for x in one.memory.stages] == [4, 3, 2, 1]
    assert [x.in_flight_micro_batches for x in zb.memory.stages] == [4, 4, 4, 4]
    assert zb.memory.stages[-1].activations_bytes > one.memory.stages[-1].activations_bytes


@pytest.mark.parametrize(("schedule", "vpp", "framework", "broken"), [
    (ZBV, 2, "torchtitan", False), (ZBV, 1, "torchtitan", True), (DPV, 4, "torchtitan", True),
    (ZB, 1, "megatron", True), (PipelineSchedule.ONE_F_ONE_B, 1, "megatron", False),
    # InterleavedZeroBubble is a multi-stage schedule: torchtitan needs 2 stages per rank.
    (ZB, 1, "torchtitan", True), (ZB, 2, "torchtitan", False),
])
def test_the_rule_gates_schedules(schedule, vpp, framework, broken):
    problem = _problem(framework)
    assert ("pipeline_schedule" in _rules(problem, _strategy(problem, schedule, vpp=vpp))) \
        is broken


def test_dualpipev_needs_two_micro_batches_per_stage():
    problem = _problem(global_batch=4)
    assert "pipeline_schedule" in _rules(problem, _strategy(problem, DPV, vpp=2))
    kw = dict(pp=4, forward_s=1.0, input_grad_s=1.0, weight_grad_s=1.0)
    assert schedule_bubble_s(DPV, **kw) > schedule_bubble_s(ZBV, **kw)


def test_the_search_runs_the_schedule_asked_and_prices_its_plans_as_evaluate_does():
    from planner.api import search_space
    from planner.search.solver import search

    problem = _problem()
    space, settings = search_space(pipeline_schedule="zbv", pp=4)
    result = search(problem, space, settings)
    assert result.plans
    for plan in result.plans:
        s = plan.strategy
        assert (s.pipeline_schedule, s.vpp) == (ZBV, 2)
        again = evaluate_strategy(problem, Strategy(
            **{k: getattr(s, k) for k in ("dp", "tp", "pp", "vpp", "cp", "micro_batch",
                                          "global_batch", "sequence_parallel", "recompute",
                                          "zero_stage", "layers_per_stage", "cp_comm")},
            pipeline_schedule=s.pipeline_schedule, overlap_grad_reduce=s.overlap_grad_reduce))
        assert again.time.step_s == pytest.approx(plan.time.step_s, rel=1e-9)


def test_plan_pin_shows_the_schedule_and_megatron_refuses_it(cli, tmp_path):
    args = ("plan", "llama3-70b", "dgx-h100", "--gpus", "64", "--framework", "torchtitan",
            "--global-batch", "64", "--pp", "4", "--pipeline-schedule", "dualpipev")
    code, out, err = cli(*args)
    assert code == 0, err
    rows = [line for line in out.splitlines() if " vpp2 " in line and " mb" in line]
    assert len(rows) == 5 and all(" dpv " in row for row in rows)
    assert "zb/zbv/dpv pipeline schedule" in " ".join(out.split())
    code, _, err = cli(*args, "--emit", "megatron", "--out", str(tmp_path))
    assert code == 1
    assert "target_pipeline_schedule: the zero-bubble pipeline schedules only on torchtitan" \
        in err


def test_a_schedule_pin_the_framework_lacks_says_why_every_plan_has_pp_1(cli):
    code, out, err = cli("plan", "llama3-70b", "dgx-h100", "--gpus", "64", "--global-batch",
                         "64", "--pipeline-schedule", "zbv")
    assert code == 0, err
    assert ("note: pipeline_schedule zbv has no effect at pp 1: there is no pipeline to "
            "schedule (Megatron-LM / Megatron-Core runs 1f1b only, so no plan with a pipeline "
            "may use it)") in err


def test_timeline_of_a_zero_bubble_plan_says_what_it_draws(cli, tmp_path):
    picture = tmp_path / "t.svg"
    code, _, err = cli("plan", "llama3-70b", "dgx-h100", "--gpus", "64", "--framework",
                       "torchtitan", "--global-batch", "64", "--pp", "4", "--pipeline-schedule",
                       "zbv", "--timeline", str(picture))
    assert code == 0, err
    assert picture.exists()
    assert ("note: --timeline draws the passes in 1F1B's order, fitted to the zbv step; that "
            "schedule's own order (weight gradients run in the bubble) is not drawn") in err
