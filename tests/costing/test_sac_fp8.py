"""torchtitan's per-op checkpointing under FP8: the 0.2.x releases the planner's FP8 plans
run (an explicit save list until #2357, 2026-03-23) see torchao's Float8Linear as aten.mm and
keep every second one as in bf16 (the logged FP8 and bf16 peaks of its 2024 benchmarks agree to
0.3%); today's policy keeps every FP8 linear's output (aten._scaled_mm is a compute-intensive
op) and re-runs none."""

from dataclasses import replace

import pytest

from planner.costing.evaluate import evaluate_strategy
from planner.inputs.loader import make_problem
from planner.schemas.strategy import Strategy

STRATEGY = Strategy(dp=8, tp=1, pp=1, micro_batch=2, global_batch=16, zero_stage=3,
                    recompute="selective")


def _report(precision, **profile):
    problem = make_problem("llama3-8b", "dgx-h100", gpus=8, framework="torchtitan",
                           precision=precision, compile=True)
    if profile:
        problem = replace(problem, framework=problem.framework.model_copy(update=profile))
    return evaluate_strategy(problem, STRATEGY)


def test_fp8_linears_seen_as_mm_keep_what_bf16_keeps():
    bf16 = _report("bf16")
    as_mm = _report("fp8", selective_fp8_linears_as_mm=True)
    saved = _report("fp8", selective_fp8_linears_as_mm=False)
    assert _report("fp8").memory.stages[0].activations_bytes == \
        as_mm.memory.stages[0].activations_bytes           # the profile's default
    assert as_mm.memory.stages[0].activations_bytes == pytest.approx(bf16.memory.stages[0].activations_bytes)
    assert saved.memory.stages[0].activations_bytes > as_mm.memory.stages[0].activations_bytes


def test_fp8_linears_kept_are_not_rerun():
    as_mm = _report("fp8", selective_fp8_linears_as_mm=True)
    saved = _report("fp8", selective_fp8_linears_as_mm=False)
    assert saved.time.compute_s < as_mm.time.compute_s
