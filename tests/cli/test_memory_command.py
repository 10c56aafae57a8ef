"""`planner memory`: a hand-derived tiny case, the JSON keys, and every zoo model."""

import json

import pytest

import model_zoo
from cost_models.units import GiB

STRATEGY = "tp: 2\npp: 2\nmicro_batch: 1\n"


def test_tiny_model_by_hand(cli, write, tiny_model, small_cluster):
    # tiny: L=4, h=64, a=8, V=512, s=128, global batch 32, bf16 + Adam (2 + 4 + 12 bytes),
    # dropout, tied output; 8 GPUs as tp 2, pp 2, dp 2, micro-batch 1 -> 16 micro-batches.
    # Unfused attention, as Korthikanti et al. 2022 count it (the 5as/h scores term).
    strategy = write("strategy.yaml", STRATEGY)
    code, out, _ = cli("memory", tiny_model, small_cluster, strategy, "--json",
                       "--attention", "unfused")
    assert code == 0
    result = json.loads(out)
    first, last = result["stages"]
    h, V, s = 64, 512, 128
    layer_sharded = (3 * h * h + 3 * h) + h * h + (4 * h * h + 4 * h) + 4 * h * h  # QKV, out, fc1, fc2
    layer_replicated = h + h + 2 * (2 * h)                   # two row-parallel biases, two LayerNorms
    stage0 = (V * h + 2 * layer_sharded) / 2 + s * h + 2 * layer_replicated   # + learned positions
    stage1 = (2 * layer_sharded + V * h) / 2 + 2 * layer_replicated + 2 * h   # tied copy, final norm
    assert first["weights_bytes"] == 2 * stage0
    assert first["gradients_bytes"] == 4 * stage0
    assert first["optimizer_bytes"] == 12 * stage0
    assert last["weights_bytes"] == 2 * stage1
    sbh = s * h
    layer = 10 * sbh + 24 * sbh / 2 + 5 * 8 * s * s / 2      # Korthikanti Table 2, TP 2
    embedding = 8 * s + sbh                                  # int64 ids, dropout mask
    assert first["activations_bytes"] == 2 * (embedding + 2 * layer)   # 2 micro-batches in flight
    output = 2 * sbh + 2 * sbh + 4 * s * V / 2               # final norm input, head input, fp32 logits
    assert last["activations_bytes"] == 1 * (2 * layer + output)
    allocated = first["weights_bytes"] + first["gradients_bytes"] + first["optimizer_bytes"] \
        + first["activations_bytes"]
    assert first["other_bytes"] == pytest.approx(1.0 * GiB + 0.05 * allocated)
    assert first["total_bytes"] == pytest.approx(allocated + first["other_bytes"])
    assert result["peak_bytes"] == max(first["total_bytes"], last["total_bytes"])
    assert result["capacity_bytes"] == 16 * GiB and result["fits"] is True


def test_memory_table_rows_sum_to_total(cli, write, tiny_model, small_cluster):
    strategy = write("strategy.yaml", STRATEGY)
    code, out, _ = cli("memory", tiny_model, small_cluster, strategy)
    assert code == 0
    assert "stage 0 (first)" in out and "stage 1 (last)" in out and "fits" in out


def test_a_strategy_that_does_not_fit_is_reported_and_exits_1(cli, write):
    # Like validate: the numbers are printed, and the exit status says it does not fit.
    strategy = write("strategy.yaml", "tp: 1\npp: 1\n")
    code, out, _ = cli("memory", "llama2-70b", "dgx-a100-80gb", strategy, "--gpus", "8", "--json")
    assert code == 1
    result = json.loads(out)
    assert result["fits"] is False and result["peak_bytes"] > result["capacity_bytes"]
    code, out, _ = cli("memory", "llama2-70b", "dgx-a100-80gb", strategy, "--gpus", "8")
    assert code == 1 and "does NOT fit" in out


def test_min_free_keeps_a_margin_in_memory_and_validate(cli, write):
    # llama2-7b, tp 1 pp 1 ZeRO-1 on 8 GPUs fits with room; asking to keep all but 1 GiB of
    # that room free turns it into "does not fit", in both commands, with the same numbers.
    strategy = write("strategy.yaml", "tp: 1\npp: 1\nzero_stage: 1\nrecompute: full\n")
    args = ("llama2-7b", "dgx-a100-80gb", strategy, "--gpus", "8")
    code, out, _ = cli("memory", *args, "--json")
    free = json.loads(out)["headroom_bytes"] / 2**30
    assert code == 0 and free > 2
    code, out, _ = cli("memory", *args, "--json", "--min-free", f"{free - 1:.3f}")
    result = json.loads(out)
    assert code == 0 and result["fits"] and result["min_free_bytes"] == pytest.approx(
        (free - 1) * 2**30, rel=1e-3)
    code, out, _ = cli("memory", *args, "--min-free", f"{free + 1:.3f}")
    flat = " ".join(out.split())
    assert code == 1 and f"keeping {free + 1:.2f} GiB free (--min-free): does NOT fit, over " \
        f"by 1.00 GiB" in flat
    code, out, _ = cli("validate", *args, "--no-compare", "--min-free", f"{free + 1:.3f}")
    flat = " ".join(out.split())
    assert code == 1 and "memory_fits" in flat and "kept free (--min-free)" in flat
    assert "(not compared with a search: --no-compare)" in flat and "None" not in flat


def test_min_free_larger_than_the_gpu_is_bad_input(cli, write):
    strategy = write("strategy.yaml", "tp: 1\n")
    code, _, err = cli("memory", "llama2-7b", "dgx-a100-80gb", strategy, "--min-free", "80")
    assert code == 2 and err.strip() == ("Error: --min-free: 80 GiB leaves nothing of the 80 "
                                         "GiB of a A100-SXM4-80GB")


@pytest.mark.parametrize("name", model_zoo.names())
def test_every_zoo_model(cli, write, name):
    strategy = write("strategy.yaml", "tp: 1\npp: 1\nrecompute: full\n")
    code, out, err = cli("memory", name, "dgx-h100", strategy, "--gpus", "8", "--json")
    result = json.loads(out)
    assert (code, err) == (0 if result["fits"] else 1, "")
    assert result["peak_bytes"] > 0
    for stage in result["stages"]:
        parts = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes",
                 "other_bytes")
        assert stage["total_bytes"] == pytest.approx(sum(stage[p] for p in parts))


def test_examples_run(cli):
    code, out, err = cli("memory", "gpt3-175b", "dgx-a100-80gb",
                         "examples/strategy-gpt3-175b.yaml", "--gpus", "1024")
    assert (code, err) == (0, "")
    assert "fits" in out


def test_params_total_and_active_in_every_output(cli, write):
    # Mixtral 8x7B: 46.7B parameters, 12.9B active per token (Jiang et al. 2024, Sec. 2.1:
    # "47B parameters, 13B active").
    strategy = write("strategy.yaml", "tp: 8\npp: 4\nep: 1\nrecompute: full\nzero_stage: 1\n"
                                      "sequence_parallel: true\n")
    base = ("mixtral-8x7b", "dgx-h100")
    for command, extra in (("memory", (strategy,)), ("validate", (strategy, "--no-compare")),
                           ("plan", ("--top", "1"))):
        _, out, _ = cli(command, *base, *extra, "--gpus", "64")
        assert "(46.7B params, 12.9B active)" in out, command
        _, out, _ = cli(command, *base, *extra, "--gpus", "64", "--json")
        params = json.loads(out)["params"]
        assert params["total"] == pytest.approx(46.7e9, rel=0.01)
        assert params["active"] == pytest.approx(12.9e9, rel=0.01)


@pytest.mark.parametrize(("value", "text"), [(999_885_952, "1B"), (6.74e9, "6.74B"),
                                             (999_400_000, "999M"), (999_600, "1M")])
def test_counts_roll_over_to_the_next_unit(value, text):
    # gemma-3-1b has 999,885,952 parameters (its config): "1B", never "1e+03M".
    from types import SimpleNamespace

    from planner.cli import render

    model = SimpleNamespace(num_params=value, is_moe=False)
    assert render.params_label(model) == f"{text} params"
    assert render.rate(value) == text.replace("B", "G")      # rates: K, M, G
