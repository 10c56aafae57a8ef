"""torchtitan recipes in the current config API, the models torchtitan registers, and what
torchtitan refuses: DDP beside other axes, unsharded states with context parallelism, CUDA
graphs with pipelines and expert parallelism, an unknown activation-checkpoint mode.

Facts from pytorch/torchtitan @b5bcd76c (config/configs.py, trainer.py, distributed/
activation_checkpoint.py, distributed/parallel_dims.py, models/*/config_registry.py) and
v0.2.2 (models/*/infra/parallelize.py). Where the mirror of torchtitan is on this machine, the
emitted names are also checked against its source (skipped elsewhere).
"""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path

import pytest

from planner.costing.evaluate import evaluate_strategy
from planner.frameworks import LaunchPlan, emit_files
from planner.inputs.loader import make_problem
from planner.review.config import review_config
from planner.rules.gate import RuleOptions
from planner.rules.validate import validate
from planner.schemas.strategy import LaunchTarget, Strategy
from tests.frameworks.cases import CASES

T = LaunchTarget.TORCHTITAN


def _plan(model, gpus, cluster="dgx-h100", **fields) -> LaunchPlan:
    problem = make_problem(model, cluster, gpus=gpus, framework="torchtitan")
    strategy = Strategy(global_batch=problem.training.global_batch, **fields)
    return LaunchPlan(problem, strategy, evaluate_strategy(problem, strategy))


REGISTERED_PLANS = {
    "deepseek-v3": dict(gpus=256, dp=256, ep=64, etp=1, recompute="full", zero_stage=3),
    "gpt-oss-120b": dict(gpus=64, dp=64, ep=8, etp=1, recompute="full", zero_stage=3),
    "qwen3-30b-a3b": dict(gpus=16, dp=16, ep=8, etp=1, recompute="full", zero_stage=3),
    "qwen3-235b-a22b": dict(gpus=256, dp=256, ep=64, etp=1, recompute="full", zero_stage=3),
    "llama3-405b": dict(gpus=512, dp=8, tp=8, pp=8, sequence_parallel=True,
                        recompute="full", zero_stage=2),
}
WANT = {  # zoo name: (recipe import, TOML [model] name and flavor)
    "deepseek-v3": ("from torchtitan.models.deepseek_v3.config_registry import "
                    "deepseek_v3_671b as base_config", 'name = "deepseek_v3"', 'flavor = "671B"'),
    "gpt-oss-120b": ("from torchtitan.models.gpt_oss.config_registry import gpt_oss_120b as "
                     "base_config", 'name = "gpt_oss"', 'flavor = "120b"'),
    "qwen3-30b-a3b": ("from torchtitan.models.qwen3.config_registry import qwen3_30b_a3b as "
                      "base_config", 'name = "qwen3"', 'flavor = "30B-A3B"'),
    "qwen3-235b-a22b": ("from torchtitan.models.qwen3.config_registry import qwen3_30b_a3b as "
                        "base_config", 'name = "qwen3"', 'flavor = "235B-A22B"'),
    "llama3-405b": ("from torchtitan.models.llama3.config_registry import llama3_405b as "
                    "base_config", 'name = "llama3"', 'flavor = "405B"'),
}


@pytest.mark.parametrize("model", sorted(REGISTERED_PLANS))
def test_registered_models_are_emitted_by_their_registered_names(model, tmp_path):
    fields = dict(REGISTERED_PLANS[model])
    plan = _plan(model, fields.pop("gpus"), **fields)
    files = emit_files([T], plan)
    recipe, toml = files["torchtitan_recipe.py"], files["torchtitan.toml"]
    assert "ships no" not in recipe and "ships no" not in toml
    assert WANT[model][0] in recipe
    assert all(line in toml.splitlines() for line in WANT[model][1:])
    for name, text in files.items():          # and read back to the plan
        (tmp_path / name).write_text(text)
        review = review_config(plan.problem, str(tmp_path / name), gpus_given=None,
                               options=RuleOptions(), compare=False)
        assert review.strategy.ep == plan.strategy.ep and review.strategy.tp == plan.strategy.tp
        assert review.report.time.step_s == pytest.approx(plan.report.time.step_s, rel=1e-12)


def test_a_bf16_llama3_405b_undoes_the_base_recipes_float8():
    fields = dict(REGISTERED_PLANS["llama3-405b"])
    recipe = emit_files([T], _plan("llama3-405b", fields.pop("gpus"), **fields))[
        "torchtitan_recipe.py"]
    assert "from torchtitan.models.llama3 import model_registry" in recipe
    assert "    config.model_spec = model_registry('405B')" in recipe
    # The base turns async TP on; this plan prices it off.
    assert "enable_async_tensor_parallel=False" in recipe


def test_qwen3_235b_swaps_the_model_of_a_stand_in_recipe():
    fields = dict(REGISTERED_PLANS["qwen3-235b-a22b"])
    recipe = emit_files([T], _plan("qwen3-235b-a22b", fields.pop("gpus"), **fields))[
        "torchtitan_recipe.py"]
    assert "    config.model_spec = model_registry('235B-A22B')" in recipe


def test_deepseek_v3_trains_its_multi_token_prediction_module():
    fields = dict(REGISTERED_PLANS["deepseek-v3"])
    recipe = emit_files([T], _plan("deepseek-v3", fields.pop("gpus"), **fields))[
        "torchtitan_recipe.py"]
    assert "num_mtp_layers=1" in recipe and "config.loss = MTPLoss.Config(" in recipe


RECIPES = [c for c in CASES if c.target is T and c.precision is None]


@pytest.mark.parametrize("case", RECIPES, ids=lambda c: c.name)
def test_recipes_use_the_current_config_api(case):
    recipe = emit_files([T], case.plan())["torchtitan_recipe.py"]
    ast.parse(recipe)
    for gone in ("ActivationCheckpointConfig", "local_batch_size", "global_batch_size",
                 "seq_len=", "pipeline_parallel_microbatch_size", "'output'"):
        assert gone not in recipe
    s = case.plan().strategy
    needs_no_graphs = s.pp > 1 or s.ep > 1
    assert ("disable_cuda_graphs=True" in recipe) == needs_no_graphs


def test_recipe_batches_count_tokens():
    case = next(c for c in CASES if c.name == "llama3-70b-3d")
    plan = case.plan()
    recipe = emit_files([T], plan)["torchtitan_recipe.py"]
    seq, s = plan.problem.training.seq_len, plan.strategy
    assert f"num_tokens_per_microbatch_per_dp_rank={s.micro_batch * seq}," in recipe
    assert f"num_tokens_per_train_step={s.global_batch * seq}," in recipe
    assert f"num_pp_microbatches={s.global_batch // (s.dp * s.micro_batch)}," in recipe


# --------------------------------------------------------------------------- the mirror

MIRROR = Path("/work/.mirror/pytorch+torchtitan/repo")
COMMIT = "b5bcd76c66d0acb1a08b176d9639425bc55e0b2a"


def _source(path: str) -> str:
    return subprocess.run(["git", "-C", str(MIRROR), "show", f"{COMMIT}:{path}"], check=True,
                          capture_output=True, text=True).stdout


def _fields(source: str, cls: str) -> set[str]:
    tree = ast.parse(source)
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls)
    return {s.target.id for s in node.body if isinstance(s, ast.AnnAssign)}


def _recipe_text(name: str) -> str:
    if name in REGISTERED_PLANS:
        fields = dict(REGISTERED_PLANS[name])
        plan = _plan(name, fields.pop("gpus"), **fields)
    else:
        plan = next(c for c in RECIPES if c.name == name).plan()
    return emit_files([T], plan)["torchtitan_recipe.py"]


def _module_source(module: str) -> str:
    path = module.replace(".", "/")
    try:
        return _source(f"{path}.py")
    except subprocess.CalledProcessError:
        return _source(f"{path}/__init__.py")


def _defined(source: str) -> set[str]:
    """Names a module defines or imports at its top level."""
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {a.asname or a.name for a in node.names}
    return names


@pytest.mark.skipif(not MIRROR.exists(), reason="no torchtitan mirror on this machine")
@pytest.mark.parametrize("name", [c.name for c in RECIPES] + sorted(REGISTERED_PLANS))
def test_recipe_names_exist_in_torchtitan(name):
    configs = _source("torchtitan/config/configs.py")
    known = {"ParallelismConfig": _fields(configs, "ParallelismConfig"),
             "training": _fields(configs, "TrainingConfig"),
             "compile": _fields(configs, "CompileConfig")}
    recipe = ast.parse(_recipe_text(name))
    imported = {}
    for node in (n for n in ast.walk(recipe) if isinstance(n, ast.ImportFrom)
                 and n.module.startswith("torchtitan")):
        source = _module_source(node.module)
        for alias in node.names:
            assert alias.name in _defined(source), (node.module, alias.name)
            imported[alias.name] = source
    for call in (n for n in ast.walk(recipe) if isinstance(n, ast.Call)):
        called = getattr(call.func, "id", getattr(call.func, "attr", None))
        section = called if called in known else (
            call.args[0].attr if called == "replace" and call.args
            and isinstance(call.args[0], ast.Attribute) else None)
        if section in known:
            assert {k.arg for k in call.keywords} <= known[section], section
        if called == "model_registry":       # the flavor is registered, the keywords taken
            source = imported["model_registry"]
            assert f'"{call.args[0].value}":' in source
            signature = source[source.index("def model_registry("):]
            signature = signature[:signature.index(")")]
            assert all(f"{k.arg}:" in signature for k in call.keywords)


# --------------------------------------------------------------------------- rules

def test_ddp_beside_other_axes_is_refused():
    problem = make_problem("gpt3-175b", "dgx-h100", gpus=512, framework="torchtitan")
    strategy = Strategy(dp=8, tp=8, pp=8, vpp=4, micro_batch=2, sequence_parallel=True,
                        zero_stage=0, global_batch=1536)
    check = validate(problem, strategy, options=RuleOptions(targets=(T,)))
    assert [(v.message, v.fix) for v in check.violations if v.rule == "torchtitan_ddp"] == [(
        "zero_stage 0 with dp 8, tp 8 and pp 8: torchtitan's DDP runs data parallelism alone "
        "(\"DDP has not supported > 1D parallelism\")",
        "use zero_stage 2 or 3 (FSDP), or tp 1 and pp 1")]


def test_the_search_never_picks_ddp_beside_other_axes(cli):
    code, out, err = cli("plan", "gpt3-175b", "dgx-h100", "--gpus", "512", "--framework",
                         "torchtitan", "--json")
    assert code == 0, err
    for plan in json.loads(out)["plans"]:
        s = plan["strategy"]
        assert s["zero_stage"] > 0 or (s["tp"] == s["pp"] == s["cp"] == 1), s


CP_TOML = """\
[parallelism]
data_parallel_replicate_degree = 4
data_parallel_shard_degree = 1
context_parallel_degree = 2
[training]
local_batch_size = 1
seq_len = 8192
[activation_checkpoint]
mode = "full"
"""


def test_context_parallelism_shards_over_the_cp_ranks(cli, write):
    path = write("cp.toml", CP_TOML)
    code, out, err = cli("validate", "llama3-8b", "dgx-h100", path, "--gpus", "8", "--json",
                         "--no-compare")
    result = json.loads(out)
    # FSDP over dp_shard x cp = 2 ranks, replicated 4 times: not ZeRO-0.
    assert result["strategy"]["zero_stage"] == 3 and result["strategy"]["dp_shard"] == 1
    assert not any(v["rule"] == "torchtitan_ddp" for v in result["violations"])


def test_a_misspelled_checkpoint_mode_is_bad_input(cli, write):
    path = write("job.toml", CP_TOML.replace('mode = "full"', 'mode = "ful"'))
    code, out, err = cli("validate", "llama3-8b", "dgx-h100", path, "--gpus", "8")
    assert (code, out) == (2, "")
    assert err.splitlines() == [f"Error: {path}: activation_checkpoint.mode: 'ful' is not one "
                                f"of selective, full, memory_budget, none (did you mean "
                                f"'full'?)"]


# --------------------------------------------------------------------------- reading recipes

REGISTRY = """\
from torchtitan.config import ParallelismConfig, TrainingConfig
from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC
from torchtitan.trainer import Trainer


def llama3_8b() -> Trainer.Config:
    return Trainer.Config(
        training=TrainingConfig(num_tokens_per_microbatch_per_dp_rank=8192,
                                max_context_length=8192),
        parallelism=ParallelismConfig(tensor_parallel_degree=2),
        activation_checkpoint=SelectiveAC.Config(),
    )


def llama3_8b_tp4() -> Trainer.Config:
    config = llama3_8b()
    config.parallelism.tensor_parallel_degree = 4
    config.activation_checkpoint = FullAC.Config()
    return config


def llama3_70b() -> Trainer.Config:
    return Trainer.Config(
        training=TrainingConfig(num_tokens_per_microbatch_per_dp_rank=8192,
                                max_context_length=8192),
        parallelism=ParallelismConfig(tensor_parallel_degree=8),
        activation_checkpoint=FullAC.Config(),
    )
"""


def _read(cli, path, model="llama3-8b"):
    code, out, err = cli("validate", model, "dgx-h100", path, "--gpus", "8", "--json",
                         "--no-compare")
    assert code in (0, 1), err
    return json.loads(out)


def test_a_registry_file_is_read_one_function_at_a_time(cli, write):
    path = write("config_registry.py", REGISTRY)
    # Before: the constructors of every function merged (tp 8, the last one written).
    result = _read(cli, path)
    assert result["strategy"]["tp"] == 2 and result["strategy"]["recompute"] == "selective"
    assert (f"{path} defines 3 recipes (llama3_8b, llama3_8b_tp4, llama3_70b): read llama3_8b, "
            f"the one named after llama3-8b; name another as {path}:FUNCTION") in result["notes"]


def test_the_function_a_user_names_and_its_base(cli, write):
    path = write("config_registry.py", REGISTRY)
    result = _read(cli, f"{path}:llama3_8b_tp4")
    assert result["strategy"]["tp"] == 4 and result["strategy"]["recompute"] == "full"
    assert result["strategy"]["micro_batch"] == 1         # from its base, llama3_8b
    assert not any("defines 3 recipes" in n for n in result["notes"])


def test_a_function_that_is_not_there(cli, write):
    path = write("config_registry.py", REGISTRY)
    code, out, err = cli("validate", "llama3-8b", "dgx-h100", f"{path}:llama3_8", "--gpus", "8")
    assert code == 2
    assert err.splitlines() == [f"Error: {path}: no function 'llama3_8'; its recipes are "
                                f"llama3_8b, llama3_8b_tp4, llama3_70b (did you mean "
                                f"'llama3_8b'?)"]


def test_a_zero_context_length_is_bad_input(cli, write):
    # Was an internal error (the token counts divided by it).
    path = write("config_registry.py", REGISTRY.replace("max_context_length=8192),\n"
                                                        "        parallelism=ParallelismConfig("
                                                        "tensor_parallel_degree=2)",
                                                        "max_context_length=0),\n"
                                                        "        parallelism=ParallelismConfig("
                                                        "tensor_parallel_degree=2)"))
    code, _, err = cli("validate", "llama3-8b", "dgx-h100", path, "--gpus", "8")
    assert code == 2
    assert err.splitlines() == [f"Error: {path}: training.max_context_length: must be at "
                                f"least 1 (got 0)"]


def test_cuda_graphs_with_a_pipeline(cli, write):
    text = REGISTRY.replace("parallelism=ParallelismConfig(tensor_parallel_degree=2)",
                            "parallelism=ParallelismConfig(pipeline_parallel_degree=2, "
                            "num_pp_microbatches=4)")
    result = _read(cli, write("config_registry.py", text))
    assert ("torchtitan_cuda_graphs", "torchtitan stops: pipeline_parallel_degree 2: CUDA "
            "graphs do not support pipeline parallelism") in [
        (v["rule"], v["message"]) for v in result["violations"]]


def test_an_uneven_pipeline_is_spelled_out_module_by_module(tmp_path):
    """DeepSeek-V3's 61 layers on 8 stages: pipeline_parallel_layers_per_stage 61 // 8 = 7
    makes torchtitan build ceil(61 / 7) = 9 stages and stop ("Number of virtual stages (9)
    must be divisible by pipeline parallel size (8)", pipeline_parallel.py
    _get_pipeline_metadata @b5bcd76c; found by running it on the emitted recipe:
    bench/framework_parsers.py). Both files name each stage's modules instead, in the layer
    counts the plan was priced with, and read back to the same price."""
    plan = _plan("deepseek-v3", 512, dp=64, pp=8, ep=64, etp=1, recompute="full",
                 zero_stage=3)
    counts = plan.report.strategy.layers_per_stage
    assert sum(counts) == 61 and len(set(counts)) > 1
    files = emit_files([T], plan)
    for name, text in files.items():
        assert "pipeline_parallel_layers_per_stage" not in text, name
        assert "module_fqns_per_model_part" in text, name
        (tmp_path / name).write_text(text)
        review = review_config(plan.problem, str(tmp_path / name), gpus_given=None,
                               options=RuleOptions(), compare=False)
        assert review.strategy.layers_per_stage == tuple(counts), name
        assert not review.violations, (name, review.violations)
        assert review.report.time.step_s == pytest.approx(plan.report.time.step_s, rel=1e-12)
    recipe = files["torchtitan_recipe.py"]
    parts = ast.literal_eval(recipe.split("module_fqns_per_model_part=")[1].split("],\n")[0]
                             + "]")
    assert [sum(m.startswith("layers.") for m in part) for part in parts] == list(counts)
    assert parts[-1][-2:] == ["norm", "lm_head"] and parts[0][0] == "tok_embeddings"


@pytest.mark.parametrize(("compile_loss", "components"), [
    (None, ["model", "loss"]), (False, ["model"]), (True, ["model", "loss"])])
def test_compile_components_say_what_the_plan_is_priced_with(compile_loss, components):
    from dataclasses import replace
    plan = _plan("llama3-8b", 8, dp=8, zero_stage=3)
    problem = replace(plan.problem, training=plan.problem.training.model_copy(
        update={"compile_loss": compile_loss}))
    plan = LaunchPlan(problem, plan.strategy, evaluate_strategy(problem, plan.strategy))
    files = emit_files([T], plan)
    assert "components = " + json.dumps(components) in files["torchtitan.toml"]
    assert f"components={components!r}," in files["torchtitan_recipe.py"].replace(" ", "") \
        .replace("','", "', '")
