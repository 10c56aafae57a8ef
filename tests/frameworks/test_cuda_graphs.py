"""CUDA graphs as a run setting: Megatron-LM's --cuda-graph-impl written and read back
(docs/user-guide/features/cuda_graph.md @d98e8a64, and its migration table for the deprecated
flags), carried to the report, priced where an MoE layer's token path runs eagerly, and said
so in a note where it changes nothing."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from cost_models.enums import CudaGraphs
from planner.costing.evaluate import evaluate_strategy
from planner.frameworks import LaunchPlan, emit_files
from planner.frameworks.megatron import parse
from planner.inputs.loader import make_problem
from planner.rules.ineffective import ineffective_settings
from planner.schemas.strategy import LaunchTarget, Strategy

ZOO = Path(__file__).resolve().parents[2] / "model_zoo"


def _script(graphs: CudaGraphs | None) -> tuple:
    problem = make_problem("llama3-8b", "dgx-h100", gpus=16)
    s = Strategy(dp=16, tp=1, pp=1, micro_batch=1, global_batch=problem.training.global_batch,
                 cuda_graphs=graphs)
    text = next(iter(emit_files([LaunchTarget.MEGATRON],
                                LaunchPlan(problem, s, evaluate_strategy(problem, s))).values()))
    return problem, s, text


@pytest.mark.parametrize(("graphs", "flags"), [
    (CudaGraphs.LAYER, ["--cuda-graph-impl local"]),
    # full_iteration "requires --no-check-for-nan-in-loss-and-grad" (the NaN check syncs).
    (CudaGraphs.FULL_ITERATION, ["--cuda-graph-impl full_iteration",
                                 "--no-check-for-nan-in-loss-and-grad"]),
])
def test_megatron_writes_and_reads_back_cuda_graphs(graphs, flags):
    problem, _, text = _script(graphs)
    assert all(flag in text for flag in flags)
    parsed = parse(text, file="train.sh", problem=problem, num_gpus=16)
    assert parsed.strategy["cuda_graphs"] is graphs


def test_default_writes_nothing_and_reads_nothing():
    problem, _, text = _script(None)
    assert "cuda-graph" not in text
    assert "cuda_graphs" not in parse(text, file="train.sh", problem=problem,
                                      num_gpus=16).strategy


@pytest.mark.parametrize(("old", "graphs"), [
    ("--enable-cuda-graph", CudaGraphs.LAYER),                  # -> --cuda-graph-impl local
    ("--external-cuda-graph", CudaGraphs.LAYER),                # -> transformer_engine
    ("--cuda-graph-impl transformer_engine", CudaGraphs.LAYER),
    ("--cuda-graph-impl local --cuda-graph-scope full_iteration", CudaGraphs.FULL_ITERATION),
    ("--cuda-graph-impl none", CudaGraphs.NONE),
])
def test_deprecated_and_other_spellings_are_read(old, graphs):
    problem, _, text = _script(None)
    text = text.replace("--bf16", f"--bf16 {old}", 1)
    assert parse(text, file="train.sh", problem=problem, num_gpus=16).strategy[
        "cuda_graphs"] is graphs


def test_dense_not_priced_carried_and_noted():
    problem, s, _ = _script(CudaGraphs.FULL_ITERATION)
    plain = evaluate_strategy(problem, s.model_copy(update={"cuda_graphs": None}))
    graphed = evaluate_strategy(problem, s)
    assert graphed.time.step_s == plain.time.step_s
    assert graphed.strategy.cuda_graphs is CudaGraphs.FULL_ITERATION
    assert plain.strategy.cuda_graphs is None
    notes = ineffective_settings(problem, s)
    assert any(n.startswith("cuda_graphs full_iteration changes no price here") for n in notes)
    assert not any("cuda_graphs" in n for n in ineffective_settings(
        problem, s.model_copy(update={"cuda_graphs": None})))


def test_graphs_remove_the_moe_token_paths_host_time(tmp_path):
    # Qwen3-30B-A3B on 8 B200, EP 8, micro-batch 1 (Megatron-Bridge 25.11's recipe): 16 local
    # experts per layer launched eagerly keep the GPU waiting; a full-iteration graph does not.
    problem = make_problem("qwen3-30b-a3b", "dgx-b200", gpus=8, precision="fp8")
    s = Strategy(dp=8, ep=8, micro_batch=1, global_batch=512, zero_stage=1)
    eager = evaluate_strategy(problem, s)
    layer = s.model_copy(update={"cuda_graphs": CudaGraphs.LAYER})
    full = evaluate_strategy(problem, s.model_copy(
        update={"cuda_graphs": CudaGraphs.FULL_ITERATION}))
    assert eager.time.host_wait_s > 0.25 * eager.time.step_s
    assert full.time.host_wait_s == 0.0
    assert eager.time.step_s - full.time.step_s == pytest.approx(eager.time.host_wait_s)
    # Per-layer graphs capture the token path only with drop-padding ("moe cuda graph is only
    # supported with drop-padding MoE", Megatron-Core transformer_config.py @d98e8a64): not
    # for this dropless model, said in a note; with a capacity factor, yes.
    assert evaluate_strategy(problem, layer).time.step_s == eager.time.step_s
    assert any(n.startswith("cuda_graphs layer changes no price for a dropless MoE")
               for n in ineffective_settings(problem, layer))
    spec = yaml.safe_load((ZOO / "qwen3-30b-a3b.yaml").read_text())
    spec["capacity_factor"] = 1.0
    (tmp_path / "padded.yaml").write_text(yaml.safe_dump(spec))
    padded = make_problem(str(tmp_path / "padded.yaml"), "dgx-b200", gpus=8, precision="fp8")
    assert evaluate_strategy(padded, layer).time.host_wait_s == 0.0
    assert evaluate_strategy(padded, s).time.host_wait_s > 0.0
    assert not any("cuda_graphs" in n for n in ineffective_settings(padded, layer))
    # Without host costs in the profile the setting changes nothing.
    fw = problem.framework.model_copy(update={"moe_token_path_host_s": 0.0,
                                              "moe_gemm_launch_host_s": 0.0,
                                              "moe_quantize_launch_host_s": 0.0})
    bare = replace(problem, framework=fw)
    assert evaluate_strategy(bare, s).time.step_s == full.time.step_s


# Megatron-Core's TransformerConfig.__post_init__ @d98e8a64 refuses per-layer graphs with full
# recompute ("full recompute is only supported with full iteration CUDA graph.") and with
# activation CPU offloading ("CUDA graphs not supported with CPU offloading."); found by
# running it on the emitted script (bench/framework_parsers.py).
@pytest.mark.parametrize("strategy", [dict(recompute="full"),
                                      dict(activation_offload_layers=4)])
def test_per_layer_graphs_are_not_emitted_where_megatron_core_stops(strategy):
    from planner.errors import InputError

    problem = make_problem("llama3-8b", "dgx-h100", gpus=8)
    s = Strategy(dp=8, micro_batch=1, global_batch=problem.training.global_batch,
                 zero_stage=1, cuda_graphs=CudaGraphs.LAYER, **strategy)
    with pytest.raises(InputError, match="Megatron-Core stops"):
        emit_files([LaunchTarget.MEGATRON], LaunchPlan(problem, s, evaluate_strategy(problem, s)))
    # full_iteration captures them: written as planned.
    s = s.model_copy(update=dict(cuda_graphs=CudaGraphs.FULL_ITERATION))
    text = next(iter(emit_files([LaunchTarget.MEGATRON],
                                LaunchPlan(problem, s, evaluate_strategy(problem, s))).values()))
    assert "--cuda-graph-impl full_iteration" in text


@pytest.mark.parametrize("extra", ["--recompute-granularity full --recompute-method uniform "
                                   "--recompute-num-layers 1", "--cpu-offloading-num-layers 4"])
def test_per_layer_graphs_with_what_they_cannot_capture_break_a_rule(cli, write, extra):
    # One rule (megatron_cuda_graphs) gates a script and a strategy file alike.
    import json

    problem, _, text = _script(CudaGraphs.LAYER)
    path = write("train.sh", text.replace("--bf16", f"--bf16 {extra}", 1))
    code, out, _ = cli("validate", "llama3-8b", "dgx-h100", path, "--no-compare", "--json")
    rules = {v["rule"]: v["message"] for v in json.loads(out)["violations"]}
    assert "Megatron-Core stops" in rules["megatron_cuda_graphs"], rules
    strategy = write("s.yaml", "dp: 16\nmicro_batch: 1\nzero_stage: 1\ncuda_graphs: layer\n"
                     + ("recompute: full\n" if "full" in extra
                        else "activation_offload_layers: 4\n"))
    code, out, _ = cli("validate", "llama3-8b", "dgx-h100", strategy, "--no-compare", "--json",
                       "--gpus", "16")
    assert "megatron_cuda_graphs" in {v["rule"] for v in json.loads(out)["violations"]}
    # Captured whole (full_iteration), the same settings break nothing here.
    code, out, _ = cli("validate", "llama3-8b", "dgx-h100",
                       write("f.yaml", Path(strategy).read_text().replace("graphs: layer",
                                                                "graphs: full_iteration")),
                       "--no-compare", "--json", "--gpus", "16")
    assert "megatron_cuda_graphs" not in {v["rule"] for v in json.loads(out)["violations"]}


