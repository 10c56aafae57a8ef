"""DeepSpeed 0.19 configs as DeepSpeed runs them: expert parallelism in the `expert_parallel`
section (AutoEP), the data-parallel groups AutoTP needs from the caller, blocks DeepSpeed reads
but the planner cannot price, and the Hugging Face Trainer's "auto" values.

Facts from deepspeedai/DeepSpeed @edaa7221 (0.19.6): runtime/config.py get_expert_parallel_config,
module_inject/auto_ep_config.py parse_autoep_config, module_inject/auto_ep_folding.py
validate_folding_global, runtime/engine.py _configure_expert_parallel and the AutoEP ZeRO-3
checks, op_builder/sparse_attn.py.
"""

from __future__ import annotations

import json

import pytest

from planner.inputs.loader import make_problem
from planner.rules.gate import RuleOptions
from planner.rules.validate import validate
from planner.schemas.strategy import LaunchTarget, Strategy


def _validate(cli, write, text, *args, model="mixtral-8x7b", gpus="64"):
    path = write("ds_config.json", text)
    code, out, err = cli("validate", model, "dgx-h100", path, "--gpus", gpus, "--json",
                         "--no-compare", *args)
    return code, json.loads(out), err


def _config(**sections) -> str:
    return json.dumps({"train_batch_size": 1024, "train_micro_batch_size_per_gpu": 1,
                       "zero_optimization": {"stage": 2}, "bf16": {"enabled": True},
                       **sections})


def test_autoep_size_is_the_expert_parallel_degree(cli, write):
    # Before: the section was "silently ignored" and the run priced with ep 1, which does not
    # fit mixtral-8x7b's experts on 80 GB.
    code, result, _ = _validate(cli, write, _config(
        expert_parallel={"enabled": True, "autoep_size": 8}))
    assert code == 0, result["violations"]
    assert result["strategy"]["ep"] == 8 and result["strategy"]["etp"] == 1
    assert result["memory"]["fits"]


def test_autoep_needs_enabled(cli, write):
    # parse_autoep_config: enabled defaults to false, and then nothing else is read.
    code, result, _ = _validate(cli, write, _config(expert_parallel={"autoep_size": 8}))
    assert result["strategy"]["ep"] == 1
    assert ("expert_parallel.enabled is not true: DeepSpeed ignores the section (autoep_size "
            "8); priced with ep 1") in result["notes"]
    assert not any(v["rule"] == "deepspeed_unknown_key" for v in result["violations"])


def test_an_unknown_autoep_key_is_silently_ignored(cli, write):
    code, result, _ = _validate(cli, write, _config(
        expert_parallel={"enabled": True, "autoep_sise": 8}))
    assert ("deepspeed_unknown_key", "DeepSpeed silently ignores expert_parallel.autoep_sise "
            "(did you mean 'autoep_size'?)") in [(v["rule"], v["message"])
                                                 for v in result["violations"]]


@pytest.mark.parametrize(("fields", "message"), [
    (dict(dp=16, tp=4, ep=8, etp=4, zero_stage=2, sequence_parallel=True),
     "etp 4 with ep 8: DeepSpeed AutoEP keeps experts whole "
     "(expert_parallel.expert_tensor_parallel_size is reserved: only 1)"),
    (dict(dp=8, tp=4, pp=2, ep=8, etp=1, zero_stage=1, sequence_parallel=True),
     "ep 8 with tp 4 and pp 2: DeepSpeed's AutoEP+AutoTP folding supports pp_size=1 only"),
    (dict(dp=32, cp=2, ep=8, etp=1, zero_stage=3, cp_comm="a2a"),
     "ep 8 with zero_stage 3 and cp 2: AutoEP with ZeRO Stage 3 does not support sequence "
     "parallelism"),
    (dict(dp=64, ep=8, etp=1, zero_stage=3, dp_shard=8),
     "ep 8 with zero_stage 3 and dp_shard 8: AutoEP with ZeRO Stage 3 does not support MiCS"),
])
def test_what_autoep_refuses(fields, message):
    problem = make_problem("mixtral-8x7b", "dgx-h100", gpus=64, framework="deepspeed")
    strategy = Strategy(global_batch=1024, recompute="full", **fields)
    check = validate(problem, strategy, options=RuleOptions(targets=(LaunchTarget.DEEPSPEED,)))
    assert message in [v.message for v in check.violations
                       if v.rule == "deepspeed_expert_parallel"]


MOE_ZOO = [("mixtral-8x7b", 64), ("mixtral-8x22b", 256), ("qwen3-30b-a3b", 64),
           ("deepseek-v3", 256), ("gpt-oss-120b", 64)]


@pytest.mark.parametrize(("model", "gpus"), MOE_ZOO)
def test_emitted_moe_ds_configs_price_the_planned_ep(cli, tmp_path, model, gpus):
    out = tmp_path / model
    code, stdout, err = cli("plan", model, "dgx-h100", "--gpus", str(gpus), "--framework",
                            "deepspeed", "--emit", "deepspeed", "--out", str(out), "--json",
                            "--top", "1")
    assert code == 0, err
    best = json.loads(stdout)["plans"][0]
    config = json.loads((out / "ds_config.json").read_text())
    ep = best["strategy"]["ep"]
    assert config.get("expert_parallel") == ({"enabled": True, "autoep_size": ep} if ep > 1
                                             else None)
    code, stdout, err = cli("validate", model, "dgx-h100", str(out / "ds_config.json"),
                            "--json", "--no-compare")
    assert code == 0, err
    checked = json.loads(stdout)
    assert checked["strategy"]["ep"] == ep and checked["memory"]["fits"]
    assert checked["time"]["step_s"] == pytest.approx(best["time"]["step_s"])


def test_autotp_says_the_caller_builds_the_data_parallel_groups(tmp_path):
    from planner.frameworks import emit_files
    from tests.frameworks.cases import CASES

    case = next(c for c in CASES if c.name == "gpt3-175b-pipeline-fp16")
    comment = json.loads(emit_files([case.target], case.plan())["ds_config.json"])["_comment"]
    assert any("shards the data by data-parallel group" in line
               and "Data inconsistency within the TP group" in line for line in comment)
    assert any("PipeModelDataParallelTopology(num_pp=8, num_mp=8, num_dp=16)" in line
               for line in comment)


@pytest.mark.parametrize(("section", "rule"), [
    ({"sparse_attention": {"mode": "fixed", "block": 16}}, "deepspeed_sparse_attention"),
    ({"progressive_layer_drop": {"enabled": True, "theta": 0.5, "gamma": 0.001}},
     "deepspeed_layer_drop"),
    ({"compression_training": {"weight_quantization": {"shared_parameters": {
        "enabled": True}}}}, "deepspeed_compression"),
])
def test_blocks_the_planner_cannot_price_are_findings(cli, write, section, rule):
    code, result, _ = _validate(cli, write, _config(**section), model="llama3-8b", gpus="8")
    assert code == 1
    assert rule in [v["rule"] for v in result["violations"]]


def test_switched_off_blocks_are_no_finding(cli, write):
    text = _config(progressive_layer_drop={"enabled": False},
                   compression_training={"weight_quantization": {"shared_parameters": {
                       "enabled": False}}})
    code, result, _ = _validate(cli, write, text, model="llama3-8b", gpus="8")
    assert code == 0, result["violations"]


HF_TRAINER = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
              "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
              "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"},
              "zero_optimization": {"stage": 3, "overlap_comm": True}}
"""A config in the Hugging Face Trainer's style (its DeepSpeed integration docs)."""


def test_hf_trainer_auto_values_come_from_the_launcher(cli, write):
    code, result, _ = _validate(cli, write, json.dumps(HF_TRAINER), "--precision", "bf16",
                                "--global-batch", "64", model="llama3-8b", gpus="8")
    assert code == 0, result["violations"]
    assert not any("DeepSpeed stops" in v["message"] for v in result["violations"])
    assert result["strategy"]["global_batch"] == 64 and result["strategy"]["micro_batch"] == 1
    assert result["strategy"]["zero_stage"] == 3
    assert ("train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps "
            "\"auto\": taken from the launcher (the Hugging Face Trainer fills them from its "
            "own arguments); priced with the run's global batch (--global-batch) and "
            "micro-batch 1") in result["notes"]
    assert any(n.startswith("fp16.enabled and bf16.enabled \"auto\": taken from the launcher")
               for n in result["notes"])


def test_auto_train_batch_size_is_derived_as_the_trainer_does(cli, write):
    text = json.dumps({**HF_TRAINER, "train_micro_batch_size_per_gpu": 2,
                       "gradient_accumulation_steps": 4, "bf16": {"enabled": True},
                       "activation_checkpointing": {}})
    code, result, _ = _validate(cli, write, text, model="llama3-8b", gpus="8")
    assert code == 0, result["violations"]
    assert result["strategy"]["global_batch"] == 2 * 4 * 8
    assert ("train_batch_size \"auto\": taken from the launcher (the Hugging Face Trainer "
            "fills it from its own arguments); priced with global batch 64, micro-batch 2 "
            "and 4 accumulation steps, as DeepSpeed derives them") in result["notes"]


def test_bloom_runs_70_layers_on_12_deepspeed_stages(cli, tmp_path):
    # BLOOM-176B's 70 layers over 12 stages (tr11-176B-ml: PipelineModule partition_method
    # 'type:transformer|embedding'): the plan takes DeepSpeed's uneven partition, records it,
    # and validate reads the same layout back.
    code, out, err = cli("plan", "bloom-176b", "dgx-a100-80gb", "--gpus", "384",
                         "--global-batch", "2048", "--framework", "deepspeed", "--emit",
                         "deepspeed", "--out", str(tmp_path), "--json", "--top", "1")
    assert code == 0, err
    best = json.loads(out)["plans"][0]["strategy"]
    assert 70 % best["pp"] != 0
    config = json.loads((tmp_path / "ds_config.json").read_text())
    assert config["pipeline"]["stages"] == best["pp"]
    assert config["pipeline"]["partition"].startswith("type:transformer")
    code, out, err = cli("validate", "bloom-176b", "dgx-a100-80gb",
                         str(tmp_path / "ds_config.json"), "--json", "--no-compare")
    assert code == 0, err
    assert json.loads(out)["strategy"]["layers_per_stage"] == best["layers_per_stage"]


def test_mics_config_says_which_deepspeed_runs_it():
    """DeepSpeedConfig 0.19.7+ stops on zero_optimization.mics_shard_size ("MiCS ZeRO-3
    sharding has been removed", issue 8489), 0.19.6 reads it (bench/framework_parsers.py runs
    both): the emitted HSDP config says so, and reading it back notes it without a finding."""
    from planner.costing.evaluate import evaluate_strategy
    from planner.frameworks import LaunchPlan, emit_files
    from planner.frameworks.deepspeed import parse

    problem = make_problem("llama3-8b", "dgx-h100", gpus=64, framework="deepspeed")
    s = Strategy(dp=64, micro_batch=1, global_batch=problem.training.global_batch,
                 recompute="full", zero_stage=3, dp_shard=8)
    text = emit_files([LaunchTarget.DEEPSPEED],
                      LaunchPlan(problem, s, evaluate_strategy(problem, s)))["ds_config.json"]
    config = json.loads(text)
    assert config["zero_optimization"]["mics_shard_size"] == 8
    comment = " ".join(config["_comment"])
    assert "DeepSpeed 0.19.7 removed it" in comment and "0.19.6 or earlier" in comment
    parsed = parse(text, file="ds_config.json", problem=problem, num_gpus=64)
    assert parsed.strategy["dp_shard"] == 8 and not parsed.findings
    assert any("DeepSpeed 0.19.7 and later stop on it" in note for note in parsed.notes)
