"""Every command judges a strategy by the same rules: those of the framework that prices it
(always) and of the targets asked for (`rules.rule_targets`). Two strategies that `plan`
refused and `validate` accepted (issue 23) are refused by both, naming the same rule."""

from __future__ import annotations

import json

import pytest

# (strategy.yaml, problem flags, the search's pins for the same strategy, the rule it breaks)
CASES = [
    # Plain PyTorch scripts split no sequence.
    ("tp: 2\ncp: 2\npp: 1\nmicro_batch: 1\nsequence_parallel: true\nzero_stage: 1\n",
     ("--framework", "torchrun", "--gpus", "16", "--seq-len", "16384"),
     ("--tp", "2", "--cp", "2", "--pp", "1", "--micro-batch", "1", "--sp", "--zero", "1"),
     "target_context_parallel"),
    # Megatron-LM (the default pricing framework) configures no rowwise FP8 scaling.
    ("tp: 2\npp: 1\nmicro_batch: 1\nsequence_parallel: true\nzero_stage: 1\n"
     "recompute: selective\n",
     ("--gpus", "8", "--precision", "fp8", "--fp8-recipe", "rowwise"),
     ("--tp", "2", "--pp", "1", "--micro-batch", "1", "--sp", "--zero", "1",
      "--recompute", "selective"),
     "megatron_fp8"),
]


@pytest.mark.parametrize(("text", "flags", "pins", "rule"), CASES, ids=[c[3] for c in CASES])
def test_validate_refuses_what_plan_refuses(cli, write, text, flags, pins, rule):
    strategy = write("strategy.yaml", text)
    code, out, _ = cli("validate", "llama3-8b", "dgx-h100", strategy, *flags, "--no-compare",
                       "--json")
    assert code == 1
    assert [v["rule"] for v in json.loads(out)["violations"]] == [rule]
    code, _, err = cli("plan", "llama3-8b", "dgx-h100", *flags, *pins)
    assert code == 1
    error = [line for line in err.splitlines() if not line.startswith("note: ")]
    assert error[0].startswith("Error: no strategy for llama3-8b") and rule in err


@pytest.mark.parametrize(("text", "flags", "pins", "rule"), CASES, ids=[c[3] for c in CASES])
def test_diff_refuses_it_too(cli, write, text, flags, pins, rule):
    strategy = write("strategy.yaml", text)
    code, out, _ = cli("diff", "llama3-8b", "dgx-h100", strategy, strategy, *flags, "--json")
    assert code == 1
    sides = json.loads(out)
    assert [v["rule"] for v in sides["a"]["violations"]] == [rule]


def test_the_same_strategy_passes_where_its_framework_runs_it(cli, write):
    """The rule is the framework's, not the strategy's: Megatron-LM prices and runs the
    torchrun case above, and torchtitan the rowwise one."""
    strategy, flags = CASES[0][0], ("--gpus", "16", "--seq-len", "16384")
    code, out, _ = cli("validate", "llama3-8b", "dgx-h100", write("a.yaml", strategy), *flags,
                       "--no-compare", "--json")
    assert code == 0 and json.loads(out)["violations"] == []
    # torchtitan shards with FSDP2: ZeRO-2 (its own rule refuses ZeRO-1).
    strategy = CASES[1][0].replace("zero_stage: 1", "zero_stage: 2")
    flags = ("--gpus", "8", "--precision", "fp8", "--fp8-recipe", "rowwise", "--framework",
             "torchtitan")
    code, out, _ = cli("validate", "llama3-8b", "dgx-h100", write("b.yaml", strategy), *flags,
                       "--no-compare", "--json")
    assert code == 0 and json.loads(out)["violations"] == []
