"""CPU offload in launch configs: each framework's settings are emitted, read back, and
refused where the framework refuses them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def _validate(cli, write, name, text, *args, model="llama3-8b"):
    path = write(name, text)
    code, out, err = cli("validate", model, "dgx-h100", path, "--no-compare", "--json",
                         "--gpus", "8", *args)
    return code, (json.loads(out) if out else None), err


def _rules(result) -> dict[str, str]:
    """Rules broken, but whether the strategy fits the GPU (not what these tests are about)."""
    return {v["rule"]: v["message"] for v in result["violations"] if v["rule"] != "memory_fits"}


MEGATRON = ("--num-layers 32 --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 "
            "--micro-batch-size 1 --global-batch-size 64 --bf16 --use-distributed-optimizer ")


def test_megatron_optimizer_offload_is_read_with_its_fraction(cli, write):
    code, result, err = _validate(cli, write, "args.txt", MEGATRON + (
        "--optimizer-cpu-offload --optimizer-offload-fraction 0.5 "
        "--use-precision-aware-optimizer --overlap-cpu-optimizer-d2h-h2d\n"))
    assert result["strategy"]["optimizer_offload"] == 0.5, err
    assert result["memory"]["host_bytes"] > 0 and result["time"]["offload_s"] > 0
    assert not _rules(result)


def test_megatron_offload_refusals(cli, write):
    # arguments.py: the hybrid optimizer needs --use-precision-aware-optimizer.
    _, result, _ = _validate(cli, write, "a.txt", MEGATRON + "--optimizer-cpu-offload\n")
    assert "conjunction with --use-precision-aware-optimizer" in _rules(result)["megatron_flag"]
    assert "priced overlapped" in _rules(result)["megatron_offload"]
    # transformer_config.py: no activation offload with a pipeline or with recompute.
    _, result, _ = _validate(cli, write, "b.txt", MEGATRON.replace(
        "--pipeline-model-parallel-size 1", "--pipeline-model-parallel-size 2")
        + "--cpu-offloading-num-layers 4\n")
    assert "no support for Pipeline parallelism" in _rules(result)["megatron_offload"]
    _, result, _ = _validate(cli, write, "c.txt", MEGATRON + (
        "--cpu-offloading-num-layers 32\n"))
    assert "keeps at least one of a stage's 32 layers" in _rules(result)["offload_framework"]


def test_offloaded_plans_round_trip(cli, tmp_path):
    for framework, flags, expected in (
            ("megatron", ["--offload", "optimizer"], {"optimizer_offload": 1.0}),
            ("torchtitan", ["--offload", "optimizer", "--offload", "params"],
             {"optimizer_offload": 1.0, "param_offload": True}),
            ("deepspeed", ["--offload", "optimizer", "--zero", "1", "--zero", "2"],
             {"optimizer_offload": 1.0})):
        out = tmp_path / framework
        code, _, err = cli("plan", "llama3-70b", "dgx-h100", "--gpus", "8", "--global-batch",
                           "64", "--framework", framework, "--top", "1", "--emit", framework,
                           "--out", str(out), *flags)
        assert code == 0, err
        config = next(p for p in sorted(Path(out).iterdir()) if p.suffix in (".sh", ".toml",
                                                                               ".json"))
        code, text, err = cli("validate", "llama3-70b", "dgx-h100", str(config), "--gpus", "8",
                              "--framework", framework, "--no-compare", "--json")
        result = json.loads(text)
        assert code == 0 and not result["violations"], (framework, result["violations"], err)
        for key, value in expected.items():
            assert result["strategy"][key] == value, (framework, key)


@pytest.mark.parametrize(("config", "strategy", "rule"), [
    ({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "ratio": 0.3}}},
     {"optimizer_offload": 0.3}, "deepspeed_offload"),
    ({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                            "offload_param": {"device": "cpu"}}},
     {"optimizer_offload": 1.0, "param_offload": True}, None),
    ({"zero_optimization": {"stage": 1, "cpu_offload": True}}, {"optimizer_offload": 1.0}, None),
    ({"zero_optimization": {"stage": 1}, "activation_checkpointing": {"cpu_checkpointing": True}},
     {"activation_offload_layers": 32, "recompute": "full"}, None),
])
def test_deepspeed_offload_keys(cli, write, config, strategy, rule):
    data = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
            **config}
    code, result, err = _validate(cli, write, "ds.json", json.dumps(data))
    for key, value in strategy.items():
        assert result["strategy"][key] == value, (key, err)
    assert (rule in _rules(result)) if rule else not _rules(result), result["violations"]


def test_deepspeed_offload_device_typo_is_one_line(cli, write):
    code, result, err = _validate(cli, write, "ds.json", json.dumps(
        {"train_batch_size": 64, "zero_optimization": {"stage": 2,
                                                        "offload_optimizer": {"device": "gpu"}}}))
    assert code == 2 and err.strip().endswith(
        "zero_optimization.offload_optimizer.device: must be none, cpu or nvme (got 'gpu')")


def test_torchtitan_cpu_offload_without_fsdp_is_refused(cli, write):
    text = ("[parallelism]\ndata_parallel_replicate_degree = 8\ndata_parallel_shard_degree = 1\n"
            "[training]\nlocal_batch_size = 1\nglobal_batch_size = 64\nenable_cpu_offload = true\n")
    _, result, _ = _validate(cli, write, "job.toml", text)
    assert result["strategy"]["optimizer_offload"] == 1.0
    assert "offload_framework" in _rules(result) or "torchtitan_offload" in _rules(result)
