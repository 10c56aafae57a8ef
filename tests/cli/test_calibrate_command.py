"""`planner calibrate`: tables, JSON, the calibrated cluster.yaml (planned with as any other),
exit 1 when the runs cannot determine the constants, exit 2 for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.calibrate.calibration_cases import TRUE_CONSTANTS, runs_yaml, synthetic_runs

FOUR = ",".join(path.split(".")[1] for path in TRUE_CONSTANTS)


@pytest.fixture(scope="module")
def runs_text():
    return runs_yaml(synthetic_runs())


def test_writes_a_cluster_that_plans_as_the_runs_measured(cli, write, runs_text, tmp_path):
    runs = write("runs.yaml", runs_text)
    out = tmp_path / "calibrated.yaml"
    code, stdout, err = cli("calibrate", "dgx-h100", runs, "--fit", FOUR, "--out", str(out))
    assert code == 0, err
    assert "gemm_peak_fraction" in stdout and err == f"wrote {out}\n"
    assert "mean |error| of the step time" in " ".join(stdout.split())
    text = out.read_text()
    assert text.startswith("# Calibrated by `planner calibrate` on 6 runs of runs.yaml")
    # The preset's comments stay; the fitted lines say what they were.
    assert "# calibrated: 0.5 +- " in text and "(was 0.56)" in text
    assert "nccl-tests" in text
    data = yaml.safe_load(text)
    assert data["efficiency"]["gemm_peak_fraction"] == pytest.approx(0.50, abs=1e-3)
    assert data["efficiency"]["hbm_fraction"] == 0.8                # not fitted: unchanged
    # Planned with, the calibrated cluster prices a run as it was measured.
    strategy = write("s.yaml", "dp: 8\nmicro_batch: 1\nzero_stage: 1\n")
    code, stdout, _ = cli("validate", "llama3-8b", str(out), strategy, "--gpus", "8",
                          "--seq-len", "2048", "--global-batch", "64", "--no-compare", "--json")
    measured = yaml.safe_load(runs_text)["runs"][0]["measured"]["step_s"]
    assert json.loads(stdout)["time"]["step_s"] == pytest.approx(measured, rel=2e-3)


def test_json(cli, write, runs_text):
    runs = write("runs.yaml", runs_text)
    code, stdout, _ = cli("calibrate", "dgx-h100", runs, "--fit", "gemm_peak_fraction", "--json")
    assert code == 0
    result = json.loads(stdout)
    assert set(result) == {"cluster", "runs_file", "out", "iterations", "constants", "runs",
                           "not_fitted", "mean_abs_error"}
    (c,) = result["constants"]
    assert c["name"] == "gemm_peak_fraction" and c["before"] == 0.56
    assert c["bounds"] == [0.2, 0.95] and c["standard_error"] > 0 and result["out"] is None
    assert [r["name"] for r in result["runs"]] == ["8b-8gpu", "8b-cp4", "8b-32gpu", "8b-64gpu",
                                                   "8b-small-batch", "8b-256gpu"]
    first = result["runs"][0]
    assert first["before_error"] == pytest.approx(
        first["before_step_s"] / first["measured_step_s"] - 1)
    assert first["strategy"]["dp"] == 8 and first["num_gpus"] == 8
    assert result["mean_abs_error"]["after"] < result["mean_abs_error"]["before"]


STEP_CONSTANTS = ("gemm_peak_fraction,gemm_half_efficiency_k,flash_attention_fraction,"
                  "hbm_fraction,intra_node_bus_fraction,inter_node_bus_fraction,"
                  "overlap_interference,step_overhead_s")


def test_without_fit_the_determined_constants_are_fitted(cli, write, runs_text):
    runs = write("runs.yaml", runs_text)
    code, stdout, _ = cli("calibrate", "dgx-h100", runs, "--json")
    assert code == 0
    result = json.loads(stdout)
    fitted = {c["name"] for c in result["constants"]}
    kept = {c["name"] for c in result["not_fitted"]}
    assert "gemm_peak_fraction" in fitted and "intra_node_bus_fraction" in kept
    assert fitted | kept == set(STEP_CONSTANTS.split(",")) and not fitted & kept
    code, stdout, _ = cli("calibrate", "dgx-h100", runs)
    assert "not fitted, kept at the cluster's values" in stdout


def test_undetermined_is_exit_1_with_what_would_fit(cli, write, runs_text):
    runs = write("runs.yaml", runs_text)
    code, stdout, err = cli("calibrate", "dgx-h100", runs, "--fit", STEP_CONSTANTS)
    assert code == 1 and stdout == ""
    lines = err.splitlines()
    assert lines[0] == "Error: 6 measurements cannot determine 8 constants"
    assert lines[-1].startswith("  these the runs do determine: --fit gemm_peak_fraction")


@pytest.mark.parametrize("args, message", [
    (("--fit", "gemm"), "Error: --fit: no constant named 'gemm'"),
    (("--fit", " , "), "Error: --fit: name at least one constant"),
    (("--out", ""), "Error: --out: empty path"),
])
def test_bad_options_are_exit_2(cli, write, runs_text, args, message):
    runs = write("runs.yaml", runs_text)
    code, _, err = cli("calibrate", "dgx-h100", runs, *args)
    assert code == 2 and err.startswith(message) and len(err.splitlines()) == 1


def test_missing_runs_file(cli, tmp_path):
    code, _, err = cli("calibrate", "dgx-h100", str(tmp_path / "nope.yaml"))
    assert code == 2 and "nope.yaml" in err and len(err.splitlines()) == 1


def test_a_user_cluster_file_keeps_its_own_text(cli, write, small_cluster, tmp_path):
    runs = write("runs.yaml", """\
        runs:
          - {model: llama2-7b, gpus: 8, seq_len: 1024, global_batch: 16,
             strategy: {tp: 4, pp: 2, micro_batch: 1}, measured: {step_s: 40.0}}
        """)
    out = tmp_path / "c.yaml"
    code, _, err = cli("calibrate", small_cluster, runs, "--fit", "gemm_peak_fraction",
                       "--out", str(out))
    assert code == 0, err
    text = out.read_text()
    assert "name: small" in text and "gemm_peak_fraction:" in text
    assert Path(small_cluster).read_text().count("\n") + 1 == text.count("\n")   # + header
