"""Every target has an emitter; emitted files match their golden copies; and every emitted
file reads back (emit -> validate) to exactly the strategy it was written for.

Regenerate the golden files after a deliberate change with PLANNER_UPDATE_GOLDEN=1.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from planner.frameworks import EMITTERS, emit_files
from planner.review.config import review_config
from planner.rules.gate import RuleOptions
from planner.schemas.strategy import LaunchTarget
from tests.frameworks.cases import CASES

GOLDEN = Path(__file__).parent / "golden"
STRATEGY_FIELDS = ("dp", "tp", "pp", "vpp", "micro_batch", "global_batch", "sequence_parallel",
                   "recompute", "recompute_modules", "zero_stage", "layers_per_stage")


def test_every_target_has_an_emitter():
    assert set(EMITTERS) == set(LaunchTarget)
    for target, emitter in EMITTERS.items():
        assert emitter.target is target
        assert "@" in emitter.checked_against or "torch" in emitter.checked_against


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_golden_files(case):
    files = emit_files([case.target], case.plan())
    for name, text in files.items():
        golden = GOLDEN / f"{case.name}.{name}"
        if os.environ.get("PLANNER_UPDATE_GOLDEN"):
            golden.write_text(text)
        assert text == golden.read_text(), f"{golden} differs (PLANNER_UPDATE_GOLDEN=1 rewrites)"


@pytest.mark.parametrize("case", [c for c in CASES if c.target is not LaunchTarget.TORCHRUN],
                         ids=lambda c: c.name)
def test_emit_then_validate_round_trips(case, tmp_path):
    plan = case.plan()
    for name, text in emit_files([case.target], plan).items():
        path = tmp_path / name
        path.write_text(text)
        review = review_config(plan.problem, str(path), gpus_given=None,
                               options=RuleOptions(), compare=False)
        got = {f: getattr(review.strategy, f) for f in STRATEGY_FIELDS + ("dp_shard",)}
        want = {f: getattr(plan.strategy, f) for f in STRATEGY_FIELDS + ("dp_shard",)}
        assert got == want, name
        assert review.problem.num_gpus == plan.problem.num_gpus
        # The file states the attention kernel the plan was priced with (Megatron-LM
        # --attention-backend, MindFormers use_flash_attention) and whether it compiles
        # (torchtitan [compile]): the framework's default where the run left it unsaid.
        unsaid = {"attention": None, "compile": None}
        assert review.problem.training.model_copy(update=unsaid) == \
            plan.problem.training.model_copy(update=unsaid)
        assert review.problem.attention is plan.problem.attention
        assert review.problem.eager_elementwise is plan.problem.eager_elementwise
        assert review.violations == [] and review.valid
        assert review.report.time.step_s == pytest.approx(plan.report.time.step_s, rel=1e-12)


@pytest.mark.parametrize("case", [c for c in CASES if c.target is LaunchTarget.TORCHRUN],
                         ids=lambda c: c.name)
def test_torchrun_round_trips_its_world_size(case, tmp_path):
    from planner.frameworks import read_config

    plan = case.plan()
    (name, text), = emit_files([case.target], plan).items()
    (tmp_path / name).write_text(text)
    parsed = read_config(str(tmp_path / name), plan.problem)
    assert parsed.world_size == plan.problem.num_gpus
    assert ("CUDA_DEVICE_MAX_CONNECTIONS=1" in text) == (plan.strategy.tp > 1
                                                        or plan.strategy.cp > 1)


def test_deepspeed_json_parses_back_structurally():
    case = next(c for c in CASES if c.name == "gpt3-175b-pipeline-fp16")
    config = json.loads(emit_files([case.target], case.plan())["ds_config.json"])
    s = case.plan().strategy
    # DeepSpeed's own consistency rule: train = micro * accumulation * data-parallel size.
    assert config["train_batch_size"] == (config["train_micro_batch_size_per_gpu"]
                                          * config["gradient_accumulation_steps"] * s.dp)
    assert config["zero_optimization"]["stage"] == 1
    assert config["fp16"] == {"enabled": True, "loss_scale": 0, "initial_scale_power": 16,
                              "loss_scale_window": 1000, "hysteresis": 2, "min_loss_scale": 1}
    # 96 layers over 8 stages: DeepSpeed's 'type:transformer' partition is the even split.
    assert config["pipeline"] == {"stages": 8, "partition": "type:transformer",
                                  "activation_checkpoint_interval": 1}
    assert config["tensor_parallel"] == {"autotp_size": 8}


def test_plan_emit_validate_round_trip_through_the_cli(cli, tmp_path):
    for target in ("megatron", "deepspeed", "torchtitan", "mindspore", "mindformers"):
        out = tmp_path / target
        code, stdout, err = cli("plan", "llama3-8b", "dgx-h100", "--gpus", "16", "--emit",
                                target, "--out", str(out), "--json", "--top", "1")
        assert code == 0, err
        planned = json.loads(stdout)
        best = planned["plans"][0]
        for path in planned["emitted"]:
            code, stdout, err = cli("validate", "llama3-8b", "dgx-h100", path, "--json",
                                    "--no-compare")
            assert code == 0, (path, err)
            checked = json.loads(stdout)
            for field in STRATEGY_FIELDS[:-1]:
                assert checked["strategy"][field] == best["strategy"][field], (path, field)
            assert checked["time"]["step_s"] == pytest.approx(best["time"]["step_s"])


def test_moe_a2a_overlap_round_trips_as_megatron_flags(tmp_path):
    # Megatron-Bridge's moe_a2a_overlap sets both flags (scripts/performance/utils/overrides.py
    # _set_moe_a2a_overlap_overrides); the reader takes the overlap from the first.
    case = next(c for c in CASES if c.name == "qwen3-30b-a3b-ep-overlap")
    plan = case.plan()
    assert plan.report.strategy.moe_a2a_overlap
    (name, text), = emit_files([case.target], plan).items()
    assert "--overlap-moe-expert-parallel-comm" in text and "--delay-wgrad-compute" in text
    path = tmp_path / name
    path.write_text(text)
    review = review_config(plan.problem, str(path), gpus_given=None, options=RuleOptions(),
                           compare=False)
    assert review.strategy.moe_a2a_overlap is True
    off = plan.strategy.model_copy(update={"moe_a2a_overlap": False})
    from planner.costing.evaluate import evaluate_strategy
    slower = evaluate_strategy(plan.problem, off)
    assert slower.time.ep_comm_s > review.report.time.ep_comm_s
    # Off, nothing is emitted: Megatron-LM's default.
    plain = replace(plan, strategy=off, report=slower)
    assert "--overlap-moe-expert-parallel-comm" not in emit_files([case.target], plain)[name]


def test_context_parallelism_alone_exports_one_cuda_connection():
    """validate_args @d98e8a64 stops before Blackwell without CUDA_DEVICE_MAX_CONNECTIONS=1 for
    tp > 1 *or* cp > 1 (found by running it on the emitted script: bench/framework_parsers.py);
    the script of a cp 2, tp 1 plan exports it, and reading it back finds nothing."""
    from planner.costing.evaluate import evaluate_strategy
    from planner.frameworks import LaunchPlan
    from planner.frameworks.megatron import parse
    from planner.inputs.loader import make_problem
    from planner.schemas.strategy import Strategy

    problem = make_problem("llama3-8b", "dgx-h100", gpus=8)
    s = Strategy(dp=4, tp=1, cp=2, micro_batch=1, global_batch=problem.training.global_batch,
                 zero_stage=1, recompute="full")
    text = next(iter(emit_files([LaunchTarget.MEGATRON],
                                LaunchPlan(problem, s, evaluate_strategy(problem, s))).values()))
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in text
    assert not parse(text, file="train.sh", problem=problem, num_gpus=8).findings
    parsed = parse(text.replace("export CUDA_DEVICE_MAX_CONNECTIONS=1\n", ""), file="train.sh",
                   problem=problem, num_gpus=8)
    assert [f.message for f in parsed.findings] == [
        "Megatron-LM stops on pre-Blackwell GPUs: context parallelism needs "
        "CUDA_DEVICE_MAX_CONNECTIONS=1 in the environment"]


def test_squared_relu_is_megatron_squared_relu(cli, write, tmp_path):
    # Nemotron-4 340B's shape (arXiv:2406.11704 Table 1; arXiv:2402.16819 Sec. 2: RoPE, squared
    # ReLU, no biases, no dropout, untied embeddings), planned and emitted for Megatron-LM,
    # whose --squared-relu (arguments.py @d98e8a64) selects core/activations.py squared_relu.
    model = write("nemotron.yaml", """\
        name: nemotron-4-340b
        num_layers: 96
        hidden: 18432
        num_heads: 96
        num_kv_heads: 8
        ffn_hidden: 73728
        vocab_size: 256000
        mlp: squared_relu
        norm: layernorm
        position: rotary
        bias: false
        dropout: false
        tie_embeddings: false
        """)
    out = tmp_path / "out"
    code, stdout, err = cli("plan", model, "dgx-h100", "--gpus", "128", "--emit", "megatron",
                            "--out", str(out), "--json", "--top", "1")
    assert code == 0, err
    planned = json.loads(stdout)
    assert abs(planned["params"]["total"] - 340e9) < 0.005 * 340e9     # "340B"
    script, = planned["emitted"]
    text = Path(script).read_text()
    assert "--squared-relu" in text and "--swiglu" not in text
    code, _, err = cli("validate", model, "dgx-h100", script, "--no-compare")
    assert code == 0, err
