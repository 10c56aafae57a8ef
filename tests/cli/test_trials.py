"""`planner plan --emit-trials K --out DIR`: a short Megatron-LM run of each top plan, a
launcher for them all, and the runs.yaml `planner calibrate` reads their logs from."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest
import yaml

from planner.calibrate.runs import load_runs

PLAN = ("plan", "llama2-7b", "dgx-h100", "--gpus", "16")
STEP_MS = (7950.4, 7918.7, 7963.0, 7937.9, 7941.6)
"""The intervals after the first, which holds the start-up: their median is the step."""


def megatron_log(script: str, world_size: int, steps_ms=STEP_MS) -> str:
    """A Megatron-LM training log of `script`'s run: its flags as the arguments block
    (megatron/training/arguments.py _print_args), then the iteration lines of
    training.py training_log (as tests/calibrate/data/megatron_llama3_8b_16gpu.log)."""
    values = {}
    for line in script.splitlines():
        m = re.fullmatch(r"\s+--([a-z0-9-]+)(?: (.+))?", line)
        if m and "$" not in line:
            values[m.group(1).replace("-", "_")] = m.group(2) or "True"
    values["world_size"] = str(world_size)
    iters = re.search(r'--train-iters "\$\{TRAIN_ITERS:-(\d+)\}"', script).group(1)
    values["train_iters"] = iters
    lines = ["------------------------ arguments ------------------------"]
    lines += [f"  {name} {'.' * (48 - len(name))} {value}" for name, value in sorted(values.items())]
    lines.append("-------------------- end of arguments ---------------------")
    for k, ms in enumerate((21337.3, *steps_ms), start=1):
        lines.append(f" [2026-11-20 10:0{k}:00] iteration {5 * k:8d}/{int(iters):8d} | "
                     f"consumed samples: {k * 5120:12d} | elapsed time per iteration (ms): "
                     f"{ms} | learning rate: 3.000000E-04 | lm loss: 7.1E+00 |")
    return "\n".join(lines) + "\n"


@pytest.fixture
def trials(cli, tmp_path):
    out = tmp_path / "trials"
    code, stdout, err = cli(*PLAN, "--emit-trials", "2", "--out", str(out))
    assert code == 0, err
    return out, stdout, err


def test_two_trials_are_written_with_their_launcher_and_runs(trials, cli):
    out, _, err = trials
    scripts = [out / f"trial-{i}" / "pretrain_gpt.sh" for i in (1, 2)]
    for script in scripts:
        text = script.read_text()
        assert '--train-iters "${TRAIN_ITERS:-30}"' in text and "--log-interval 5" in text
        assert "--eval-iters 0" in text and "--save " not in text and "--load " not in text
        assert 'tee -a "$LOG_FILE"' in text and '"$(dirname "$0")/train.log"' in text
    launcher = (out / "run_trials.sh").read_text()
    assert "run_trial trial-1 pretrain_gpt.sh" in launcher
    assert "run_trial trial-2 pretrain_gpt.sh" in launcher
    assert "set -e" not in launcher and 'exit_status' in launcher   # goes on past a failure
    assert f"planner calibrate dgx-h100 {out / 'runs.yaml'}" in err

    runs = yaml.safe_load((out / "runs.yaml").read_text())["runs"]
    code, plan_json, _ = cli(*PLAN, "--emit", "megatron", "--json", "--out", str(out / "x"))
    plans = json.loads(plan_json)["plans"][:2]
    assert len(runs) == 2
    for i, (run, plan) in enumerate(zip(runs, plans), start=1):
        s = plan["strategy"]
        assert run["name"].startswith(f"trial-{i} dp{s['dp']} tp{s['tp']} pp{s['pp']}")
        assert (run["model"], run["gpus"], run["global_batch"]) == ("llama2-7b", 16,
                                                                    s["global_batch"])
        assert run["log"] == f"trial-{i}/train.log" and run["precision"] == "bf16"
        script = scripts[i - 1].read_text()
        assert f"--tensor-model-parallel-size {s['tp']}" in script
        assert f"--pipeline-model-parallel-size {s['pp']}" in script


def test_calibrate_reads_the_trials_logs(trials, cli):
    out, _, _ = trials
    for i in (1, 2):
        script = (out / f"trial-{i}" / "pretrain_gpt.sh").read_text()
        (out / f"trial-{i}" / "train.log").write_text(megatron_log(script, 16))
    runs = load_runs(str(out / "runs.yaml"), "dgx-h100")
    assert [r.name.split()[0] for r in runs] == ["trial-1", "trial-2"]
    assert runs[0].step_s == pytest.approx(statistics.median(STEP_MS) / 1000)
    code, stdout, err = cli("calibrate", "dgx-h100", str(out / "runs.yaml"),
                            "--fit", "gemm_peak_fraction", "--json")
    assert code == 0, err
    measured = [r["measured_step_s"] for r in json.loads(stdout)["runs"]]
    assert measured[0] == pytest.approx(7.9416)


def test_a_model_file_is_named_relative_to_runs_yaml(cli, tiny_model, small_cluster, tmp_path):
    out = tmp_path / "deep" / "trials"
    code, _, err = cli("plan", tiny_model, small_cluster, "--emit-trials", "1", "--out",
                       str(out))
    assert code == 0, err
    (run,) = yaml.safe_load((out / "runs.yaml").read_text())["runs"]
    assert (out / run["model"]).resolve() == Path(tiny_model).resolve()


def test_other_targets_are_refused_in_one_line(cli, tmp_path):
    code, _, err = cli(*PLAN, "--emit", "deepspeed", "--emit-trials", "2", "--out",
                       str(tmp_path))
    assert code == 2
    assert err.strip().count("\n") == 0 and "megatron only" in err and "deepspeed" in err
    assert not any(tmp_path.iterdir())


def test_existing_trials_need_force(trials, cli):
    out, _, _ = trials
    code, _, err = cli(*PLAN, "--emit-trials", "2", "--out", str(out))
    assert code == 2 and "--force" in err
    code, _, err = cli(*PLAN, "--emit-trials", "2", "--out", str(out), "--force")
    assert code == 0, err


def test_every_trial_flag_is_one_megatron_knows(trials):
    from planner.frameworks.megatron import KNOWN_FLAGS

    out, _, _ = trials
    for script in out.glob("trial-*/pretrain_gpt.sh"):
        flags = set(re.findall(r"^\s+(--[a-z0-9-]+)", script.read_text(), re.M))
        assert flags and flags <= KNOWN_FLAGS | {"--rdzv-backend", "--rdzv-endpoint",
                                                 "--rdzv-id"}, flags - KNOWN_FLAGS
