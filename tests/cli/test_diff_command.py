"""`planner diff`: two strategies side by side, term by term, and one sentence on the gap."""

import json
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parent.parent / "frameworks" / "golden"
MEGATRON_32 = str(GOLDEN / "llama3-8b-balanced.pretrain_gpt.sh")   # dp 8, tp 1, pp 4: 32 GPUs
PROBLEM = ("llama2-7b", "dgx-h100", "--gpus", "16", "--global-batch", "64")
STRATEGY = "tp: 1\npp: {pp}\nmicro_batch: 1\nrecompute: full\nzero_stage: 1\n"


@pytest.fixture
def files(tmp_path):
    """pp1.yaml and pp8.yaml: the same strategy but for its pipeline stages."""
    for pp in (1, 8):
        (tmp_path / f"pp{pp}.yaml").write_text(STRATEGY.format(pp=pp))
    return tmp_path


def _diff_json(cli, *args):
    code, out, err = cli("diff", *args, "--json")
    return code, json.loads(out), err


def test_a_strategy_against_itself_is_equally_fast(cli, files):
    path = str(files / "pp8.yaml")
    code, out, _ = _diff_json(cli, *PROBLEM, path, path)
    assert code == 0
    assert out["terms"] and all(t["delta"] == 0 for t in out["terms"])
    assert out["explaining"] == []
    assert out["summary"].startswith("A and B are about equally fast")
    code, text, _ = cli("diff", *PROBLEM, path, path)
    assert code == 0 and "A and B are about equally fast" in text
    assert "Memory: the same peak on both" in text


def test_json_shape(cli, files):
    code, out, _ = _diff_json(cli, *PROBLEM, str(files / "pp1.yaml"), str(files / "pp8.yaml"))
    assert code == 0
    for key in ("model", "params", "cluster", "num_gpus", "framework", "notes", "a", "b",
                "terms", "summary", "memory_summary"):
        assert key in out, key
    assert out["num_gpus"] == 16 and out["model"] == "llama2-7b"
    for side, pp in (("a", 1), ("b", 8)):
        plan = out[side]
        assert plan["strategy"]["pp"] == pp and plan["valid"] and plan["fits"]
        assert plan["violations"] == [] and plan["step_s"] == plan["time"]["step_s"]
        assert plan["label"] == f"pp{pp}.yaml"
    for term in out["terms"]:
        assert set(term) == {"name", "a", "b", "delta"}
        assert term["delta"] == pytest.approx(term["b"] - term["a"])
        assert (term["a"], term["b"]) == (_value(out["a"], term["name"]),
                                          _value(out["b"], term["name"]))


def _value(plan: dict, name: str) -> float:
    """Where a term's value sits in a plan's JSON."""
    if name == "peak_bytes":
        return plan["memory"]["peak_bytes"]
    if name.endswith("_bytes"):
        return plan["memory"]["stages"][plan["memory"]["peak_stage"]][name]
    if name in ("tokens_per_s", "mfu"):
        return plan["throughput"][name]
    return plan["time"][name]


def test_time_terms_add_up_to_the_step_and_pipelining_is_the_bubble(cli, files):
    code, out, _ = _diff_json(cli, *PROBLEM, str(files / "pp1.yaml"), str(files / "pp8.yaml"))
    terms = {t["name"]: t for t in out["terms"]}
    time = [t for name, t in terms.items() if name.endswith("_s") and name != "step_s"
            and name != "tokens_per_s"]
    assert len(time) == 15    # the fixed per-step terms (grad zeroing, norm, loss), host wait,
    # the pipeline engine
    assert sum(t["delta"] for t in time) == pytest.approx(terms["step_s"]["delta"], rel=1e-12)
    assert out["explaining"][0]["name"] == "bubble_s"
    ratio = out["b"]["step_s"] / out["a"]["step_s"]
    assert out["summary"].startswith(f"pp8.yaml is {ratio:.2f}x slower than pp1.yaml: "
                                     f"pipeline bubble +")
    assert "with pp 8 and 32 micro-batches vs pp 1" in out["summary"]


def test_human_table_fits_80_columns_and_names_both_files(cli, files):
    code, out, err = cli("diff", *PROBLEM, str(files / "pp1.yaml"), str(files / "pp8.yaml"))
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert lines[0] == "llama2-7b (6.74B params) on 16 x H100-SXM5-80GB"
    assert any(line.split()[:3] == ["pp1.yaml", "pp8.yaml", "B"] for line in lines)
    for row in ("weights", "pipeline bubble", "step", "tokens/s", "MFU"):
        assert any(line.strip().startswith(row) for line in lines), row
    assert "Memory: peak" in out and "None" not in out and "True" not in out


def test_megatron_script_against_a_strategy_yaml_on_its_own_gpu_count(cli, tmp_path):
    yaml = tmp_path / "dp16.yaml"
    yaml.write_text("dp: 16\ntp: 1\npp: 4\nmicro_batch: 1\nrecompute: full\nzero_stage: 1\n")
    code, out, _ = _diff_json(cli, "llama3-8b", "dgx-h100", MEGATRON_32, str(yaml))
    assert code == 0
    assert (out["a"]["num_gpus"], out["b"]["num_gpus"]) == (32, 64)
    assert out["num_gpus"] is None                      # they differ: each side says its own
    assert out["a"]["target"] == "megatron" and out["b"]["target"] is None
    assert out["same_work"] is False
    tokens = out["b"]["throughput"]["tokens_per_s"] / out["a"]["throughput"]["tokens_per_s"]
    assert out["speedup"] == pytest.approx(tokens)
    assert "in tokens/s" in out["summary"] and "64 vs 32 GPUs" in out["summary"]
    code, text, _ = cli("diff", "llama3-8b", "dgx-h100", MEGATRON_32, str(yaml))
    assert text.startswith("llama3-8b (8.03B params) on 32 (A) and 64 (B) x H100-SXM5-80GB")


def test_a_broken_rule_exits_1_and_is_listed(cli, files):
    broken = files / "tp16.yaml"
    broken.write_text("tp: 16\npp: 1\nmicro_batch: 1\nrecompute: full\nzero_stage: 1\n")
    code, out, _ = cli("diff", *PROBLEM, str(files / "pp1.yaml"), str(broken))
    assert code == 1
    assert "tp16.yaml: " in out and "tp_within_node" in out
    code, out, _ = _diff_json(cli, *PROBLEM, str(files / "pp1.yaml"), str(broken))
    assert code == 1 and out["a"]["valid"] and not out["b"]["valid"]
    assert "tp_within_node" in {v["rule"] for v in out["b"]["violations"]}


def test_a_missing_file_is_one_line_and_exit_2(cli, files):
    missing = str(files / "nope.yaml")
    code, out, err = cli("diff", *PROBLEM, str(files / "pp1.yaml"), missing)
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("Error: ") and "nope.yaml" in err
