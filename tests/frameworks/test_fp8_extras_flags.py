"""The low-precision run settings in launch configs: Megatron-LM's --fp8-output-proj and
--first-last-layers-bf16 (with its two counts) written and read back, FP8 attention refused
where no flag asks for it, and torchtitan's filter_fqns for the output layer."""

import json
from pathlib import Path

import pytest

from planner.frameworks.megatron import KNOWN_FLAGS

MEGATRON_BASE = ("--num-layers 32 --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 "
                 "--micro-batch-size 1 --global-batch-size 64 --use-distributed-optimizer --bf16 ")


def _plan_emit(cli, tmp_path, target, *args, cluster="dgx-b200"):
    out = tmp_path / "out"
    code, _, err = cli("plan", "llama3-8b", cluster, "--gpus", "8", "--top", "1", "--tp", "1",
                       "--pp", "1", "--emit", target, "--out", str(out), "--json", *args)
    return code, out, err


def _validate(cli, path, *args, model="llama3-8b", cluster="dgx-b200"):
    code, out, err = cli("validate", model, cluster, str(path), "--no-compare", "--json", *args)
    return code, (json.loads(out) if out else None), err


def test_megatron_writes_and_reads_back_the_output_layer_and_bf16_layers(cli, tmp_path):
    run = ("--precision", "mxfp8", "--fp8-output-layer", "--bf16-first-layers", "1",
           "--bf16-last-layers", "2")
    code, out, err = _plan_emit(cli, tmp_path, "megatron", *run)
    assert code == 0, err
    script = (out / "pretrain_gpt.sh").read_text()
    flags = ["--fp8-output-proj", "--first-last-layers-bf16", "--num-layers-at-start-in-bf16 1",
             "--num-layers-at-end-in-bf16 2"]
    assert all(f"  {flag}\n" in script for flag in flags)
    # Real flags at the checked commit (generated from TransformerConfig fields).
    assert {f.split()[0] for f in flags} <= KNOWN_FLAGS
    code, result, err = _validate(cli, out / "pretrain_gpt.sh")
    assert code == 0, err
    assert (result["fp8_recipe"], result["fp8_output_layer"], result["bf16_first_layers"],
            result["bf16_last_layers"]) == ("mxfp8", True, 1, 2)
    planned = json.loads(cli("plan", "llama3-8b", "dgx-b200", "--gpus", "8", "--top", "1",
                             "--tp", "1", "--pp", "1", "--json", *run)[1])
    assert result["time"]["step_s"] == pytest.approx(planned["plans"][0]["time"]["step_s"])


def test_megatron_has_no_flag_for_fp8_attention(cli, tmp_path):
    # arguments.py @d98e8a64 leaves fp8_dot_product_attention out of the generated flags.
    assert "--fp8-dot-product-attention" not in KNOWN_FLAGS
    code, out, err = _plan_emit(cli, tmp_path, "megatron", "--precision", "fp8",
                                "--fp8-attention", cluster="dgx-h100")
    assert code == 2
    assert err.splitlines()[-1] == (
        "Error: --emit megatron: fp8_attention has no Megatron-LM flag (pretrain_gpt.py leaves "
        "TransformerConfig.fp8_dot_product_attention out of its arguments); Megatron-Bridge "
        "sets it as mixed_precision.fp8_dot_product_attention, or plan without --fp8-attention")
    assert not out.exists()


def test_validate_prices_fp8_attention_on_a_megatron_script(cli, write):
    # A script cannot ask for it; the command line can, and the script's FP8 settings stay.
    path = write("args.txt", MEGATRON_BASE + "--fp8-format hybrid --fp8-recipe tensorwise\n")
    _, plain, _ = _validate(cli, path, cluster="dgx-h100")
    code, fast, err = _validate(cli, path, "--fp8-attention", cluster="dgx-h100")
    assert code in (0, 1), err
    assert fast["fp8_attention"] and not plain["fp8_attention"]
    assert fast["time"]["step_s"] < plain["time"]["step_s"]


@pytest.mark.parametrize(("flags", "first", "last"), [
    ("--first-last-layers-bf16", 1, 1),                   # each count defaults to 1
    ("--first-last-layers-bf16 --num-layers-at-start-in-bf16 0 --num-layers-at-end-in-bf16 3",
     0, 3),
    ("", 0, 0),
])
def test_megatron_reads_the_bf16_layers(cli, write, flags, first, last):
    path = write("args.txt", MEGATRON_BASE + f"--fp8-format e4m3 --fp8-recipe mxfp8 {flags}\n")
    _, result, err = _validate(cli, path)
    assert (result["bf16_first_layers"], result["bf16_last_layers"]) == (first, last), err


def test_megatron_bf16_layers_with_delayed_scaling_break_its_rule(cli, write):
    # transformer_config.py: "Delayed scaling does not support first / last layer in BF16".
    path = write("args.txt", MEGATRON_BASE + "--fp8-format hybrid --first-last-layers-bf16\n")
    code, result, _ = _validate(cli, path, cluster="dgx-h100")
    assert code == 1
    assert [v["message"] for v in result["violations"] if v["rule"] == "megatron_fp8"] == [
        "bf16_first_layers / bf16_last_layers with fp8_recipe delayed: Megatron-LM keeps "
        "layers out of FP8 only with mxfp8, tensorwise, blockwise, nvfp4"]


def test_megatron_count_flags_alone_do_nothing(cli, write):
    path = write("args.txt", MEGATRON_BASE + "--fp8-format e4m3 --fp8-recipe mxfp8 "
                 "--num-layers-at-start-in-bf16 2\n")
    _, result, _ = _validate(cli, path)
    assert result["bf16_first_layers"] == 0
    assert any("--num-layers-at-start-in-bf16 without --first-last-layers-bf16: no effect"
               in note for note in result["notes"])


def test_megatron_output_proj_without_fp8_stops_it(cli, write):
    path = write("args.txt", MEGATRON_BASE + "--fp8-output-proj\n")
    _, result, _ = _validate(cli, path)
    assert ("Megatron-LM stops: --fp8-output-proj must be used together with fp8 mode "
            "(--fp8-format)") in [v["message"] for v in result["violations"]]


def test_torchtitan_writes_and_reads_back_the_output_layer(cli, tmp_path):
    code, out, err = _plan_emit(cli, tmp_path, "torchtitan", "--precision", "fp8",
                                "--fp8-recipe", "tensorwise", "--fp8-output-layer",
                                cluster="dgx-h100")
    assert code == 0, err
    toml = (out / "torchtitan.toml").read_text()
    assert "filter_fqns = []" in toml
    _, result, err = _validate(cli, out / "torchtitan.toml", cluster="dgx-h100")
    assert result["fp8_output_layer"] is True, err


TOML = """\
[model]
name = "llama3"
flavor = "8B"
converters = ["{converter}"]

[parallelism]
data_parallel_shard_degree = 8

[quantize.linear.{section}]
{options}
"""


@pytest.mark.parametrize(("converter", "section", "options", "fp8_head"), [
    # config/job_config.py @238fa995: float8's filter_fqns defaults to [], mx's to ["output"].
    ("quantize.linear.float8", "float8", 'recipe_name = "tensorwise"', True),
    ("quantize.linear.float8", "float8", 'filter_fqns = ["output"]', False),
    ("quantize.linear.float8", "float8", 'filter_fqns = ["attention.wq"]', True),
    ("quantize.linear.mx", "mx", 'recipe_name = "mxfp8_cublas"', False),
    ("quantize.linear.mx", "mx", "filter_fqns = []", True),
])
def test_torchtitan_reads_filter_fqns_as_torchtitan_applies_them(cli, write, converter, section,
                                                                 options, fp8_head):
    cluster = "dgx-b200" if section == "mx" else "dgx-h100"
    path = write("job.toml", TOML.format(converter=converter, section=section, options=options))
    _, result, err = _validate(cli, Path(path), cluster=cluster)
    assert result["fp8_output_layer"] is fp8_head, err


def test_cli_refuses_fp8_settings_without_fp8(cli):
    code, _, err = cli("plan", "llama3-8b", "dgx-h100", "--gpus", "8", "--fp8-attention")
    assert code == 2
    assert err.splitlines() == ["Error: command line: fp8_attention: only with precision fp8 "
                                "(precision is bf16)"]
