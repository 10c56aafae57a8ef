"""Selective recompute by module (Megatron-LM --recompute-modules) through the whole costing:
memory, time, rules, the search's module sets."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from cost_models.enums import Fp8Recipe, RecomputeModule
from planner.core.rules import Rule
from planner.costing.evaluate import evaluate_strategy
from planner.inputs.loader import make_problem
from planner.rules.gate import rule_violations
from planner.schemas.strategy import Strategy
from planner.search.candidates import recompute_module_sets

M = RecomputeModule
DSV3 = dict(dp=128, tp=8, pp=1, ep=128, etp=1, micro_batch=1, sequence_parallel=True,
            zero_stage=1, recompute="selective")


@pytest.fixture(scope="module")
def deepseek():
    problem = make_problem("deepseek-v3", "dgx-h100", gpus=1024)
    batch = problem.training.global_batch
    return problem, {mods: evaluate_strategy(problem, Strategy(**DSV3, global_batch=batch,
                                                               recompute_modules=mods))
                     for mods in (("core_attn",), ("moe_act",), ("layernorm", "moe_act"),
                                  ("layernorm", "mla_up_proj", "moe_act"), ("moe",))}


def test_each_module_trades_activations_for_recompute(deepseek):
    _, plans = deepseek
    order = [("moe_act",), ("layernorm", "moe_act"), ("layernorm", "mla_up_proj", "moe_act")]
    act = [plans[m].memory.stages[0].activations_bytes for m in order]
    compute = [plans[m].time.compute_s for m in order]
    # Each set adds a module to the one before: fewer bytes kept, more forward work re-run.
    assert act[0] > act[1] > act[2]
    assert compute[0] < compute[1] < compute[2]
    # core_attn under fused attention keeps only the softmax statistics anyway: it saves
    # little and re-runs the attention kernel (Megatron-Core warns "you have no need to set
    # 'core_attn' to recompute" with fused attention).
    core = plans[("core_attn",)]
    assert core.memory.stages[0].activations_bytes > act[0]
    assert core.time.compute_s > compute[1]
    # moe keeps none of the MoE layer's activations and re-runs its dispatch and combine.
    assert plans[("moe",)].memory.stages[0].activations_bytes < act[2]
    assert plans[("moe",)].time.ep_comm_s > plans[("moe_act",)].time.ep_comm_s


def test_default_modules_are_todays_selective(deepseek):
    problem, plans = deepseek
    default = evaluate_strategy(problem, Strategy(**DSV3,
                                                  global_batch=problem.training.global_batch))
    assert default.time.step_s == plans[("core_attn",)].time.step_s
    assert default.strategy.recompute_modules is None
    assert plans[("moe_act",)].strategy.recompute_modules == (M.MOE_ACT,)


def test_modules_need_selective_recompute():
    with pytest.raises(ValidationError, match="recompute_modules needs recompute selective"):
        Strategy(recompute="full", recompute_modules=("moe_act",))
    # One spelling per set, in RecomputeModule's order.
    s = Strategy(recompute="selective", recompute_modules=("moe_act", "layernorm", "moe_act"))
    assert s.recompute_modules == (M.LAYERNORM, M.MOE_ACT)


def test_only_megatron_takes_modules():
    s = Strategy(dp=8, global_batch=1024, recompute="selective", recompute_modules=("layernorm",))
    for framework in ("torchtitan", "deepspeed", "mindspore"):
        problem = make_problem("llama3-8b", "dgx-h100", gpus=8, framework=framework)
        assert Rule.TARGET_RECOMPUTE_MODULES.value in [v.rule for v in
                                                      rule_violations(problem, s)], framework
    problem = make_problem("llama3-8b", "dgx-h100", gpus=8)
    assert not rule_violations(problem, s)


def test_megatron_refuses_what_megatron_core_refuses():
    # transformer_config.py __post_init__ @d98e8a64.
    problem = make_problem("llama3-8b", "dgx-h100", gpus=8)
    s = Strategy(dp=8, global_batch=1024, recompute="selective",
                 recompute_modules=("mla_up_proj",))
    assert [v.rule for v in rule_violations(problem, s)] == [Rule.MEGATRON_RECOMPUTE_MODULES.value]
    problem = make_problem("llama3-8b", "dgx-h100", gpus=8, precision="fp8",
                           fp8_recipe=Fp8Recipe.DELAYED.value)
    s = Strategy(dp=8, global_batch=1024, recompute="selective", recompute_modules=("layernorm",))
    assert Rule.MEGATRON_RECOMPUTE_MODULES.value in [v.rule for v in rule_violations(problem, s)]


@pytest.mark.parametrize("model, framework, sets", [
    ("llama3-8b", "megatron", [{M.CORE_ATTN}]),                  # dense: today's selective
    ("qwen3-30b-a3b", "megatron", [{M.CORE_ATTN}, {M.LAYERNORM, M.MOE_ACT}]),
    ("deepseek-v3", "megatron", [{M.CORE_ATTN}, {M.LAYERNORM, M.MLA_UP_PROJ, M.MOE_ACT}]),
    ("deepseek-v3", "torchtitan", [{M.CORE_ATTN}]),              # no --recompute-modules
])
def test_search_module_sets(model, framework, sets):
    problem = make_problem(model, "dgx-h100", gpus=64, framework=framework)
    assert [set(m) for m in recompute_module_sets(problem)] == sets


def test_modules_without_their_layers_are_notes():
    from planner.rules.ineffective import ineffective_settings
    problem = make_problem("llama3-8b", "dgx-h100", gpus=8)
    s = Strategy(dp=8, global_batch=1024, recompute="selective",
                 recompute_modules=("moe_act", "mlp"))
    assert ineffective_settings(problem, s) == [
        "recompute_modules moe_act has no effect on llama3-8b: it has no MoE layers"]
