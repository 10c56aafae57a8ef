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
from tests.calibrate.framework_logs import megatron_memory, torchtitan_log

PLAN = ("plan", "llama2-7b", "dgx-h100", "--gpus", "16")
STEP_MS = (7950.4, 7918.7, 7963.0, 7937.9, 7941.6)
"""The intervals after the first, which holds the start-up: their median is the step."""
MAX_ALLOCATED_MB = (30000.0, 31500.0)
"""'max allocated' of the two model-parallel ranks that report memory."""


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
        if k == 1 or 5 * k == int(iters):      # after the first interval, and at the end
            lines += [megatron_memory(rank, 5 * k, max_allocated_mb=mb, max_reserved_mb=mb + 2048)
                      for rank, mb in enumerate(MAX_ALLOCATED_MB)]
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
        assert "--log-memory-interval 30" in text          # a memory report at the end too
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


@pytest.mark.parametrize("targets, message", [
    ("deepspeed", "Error: --emit-trials: no trials for deepspeed: the planner writes DeepSpeed's "
                  "ds_config.json, not the training script DeepSpeed launches; run your script "
                  "with --emit deepspeed's config and give calibrate its step time (runs.yaml: "
                  "config, measured: step_s); trials run on megatron or torchtitan"),
    ("megatron,torchtitan", "Error: --emit-trials: trials run on one target at a time (got "
                            "megatron, torchtitan); write each target's trials with its own "
                            "--emit and --out"),
    ("torchrun", "Error: --emit-trials: no trials for torchrun: the planner writes no trial run "
                 "for torchrun; trials run on megatron or torchtitan"),
])
def test_other_targets_and_mixed_targets_are_refused_in_one_line(cli, tmp_path, targets,
                                                                 message):
    code, _, err = cli(*PLAN, "--emit", targets, "--emit-trials", "2", "--out",
                       str(tmp_path))
    assert code == 2
    assert err.strip() == message
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


def test_calibrate_reports_the_logged_peak_against_the_planners(trials, cli):
    from cost_models.memory import allocator_bytes_of_total
    from planner.inputs.loader import load_cluster

    out, _, _ = trials
    for i in (1, 2):
        script = (out / f"trial-{i}" / "pretrain_gpt.sh").read_text()
        (out / f"trial-{i}" / "train.log").write_text(megatron_log(script, 16))
    code, stdout, err = cli("calibrate", "dgx-h100", str(out / "runs.yaml"),
                            "--fit", "gemm_peak_fraction", "--json")
    assert code == 0, err
    runs = json.loads(stdout)["runs"]
    code, plan_json, _ = cli(*PLAN, "--json")
    plans = json.loads(plan_json)["plans"][:2]
    reserve = load_cluster("dgx-h100").reserve
    for run, plan in zip(runs, plans):
        logged = run["logged_memory"]
        # The fullest rank's 'max allocated' (31500 MB), against the plan's peak less its
        # reserve: allocated = (peak - framework_gib) / (1 + fragmentation_fraction).
        assert logged["kind"] == "max allocated"
        assert logged["measured_gib"] == pytest.approx(31500 / 1024)
        allocated, _ = allocator_bytes_of_total(
            total_bytes=plan["memory"]["peak_bytes"], framework_bytes=reserve.framework_gib
            * 2**30, fragmentation_fraction=reserve.fragmentation_fraction)
        assert logged["predicted_gib"] == pytest.approx(allocated / 2**30, rel=1e-9)
        assert logged["error"] == pytest.approx(allocated / (31500 * 2**20) - 1, rel=1e-9)
    code, table, err = cli("calibrate", "dgx-h100", str(out / "runs.yaml"),
                           "--fit", "gemm_peak_fraction")
    assert code == 0, err
    assert "30.8 alloc" in table and "mean |error| of the logged peak memory" in table


TT_PLAN = ("plan", "llama3-8b", "dgx-h100", "--gpus", "16", "--emit", "torchtitan")


@pytest.fixture
def titan_trials(cli, tmp_path):
    out = tmp_path / "tt"
    code, stdout, err = cli(*TT_PLAN, "--emit-trials", "2", "--out", str(out))
    assert code == 0, err
    return out


def test_torchtitan_trials_are_its_recipe_cut_short_with_a_launcher(titan_trials):
    out = titan_trials
    for i in (1, 2):
        recipe = (out / f"trial-{i}" / "torchtitan_recipe.py").read_text()
        assert "steps=30," in recipe and "log_freq=5," in recipe
        assert "disable_color_printing=True," in recipe
        assert "checkpoint=replace(config.checkpoint,\n            enable=False," in recipe
        assert "validator=replace(config.validator,\n            enable=False," in recipe
        compile(recipe, "torchtitan_recipe.py", "exec")
        script = (out / f"trial-{i}" / "run_torchtitan.sh").read_text()
        assert ("-m torchtitan.train --module torchtitan_recipe --config planner_plan \\\n"
                '  2>&1 | tee -a "$LOG_FILE"') in script
        assert 'export PYTHONPATH="$HERE' in script and 'cd "$TORCHTITAN_PATH"' in script
    launcher = (out / "run_trials.sh").read_text()
    assert "run_trial trial-1 run_torchtitan.sh" in launcher and "30-step torchtitan" in launcher
    assert 'LOG_FILE="$PWD/$1/train.log"' in launcher    # the script leaves the directory


def test_torchtitan_trials_read_back_to_their_plans(titan_trials, cli):
    # Round trip: the trial recipe, read by the planner's own torchtitan reader through
    # runs.yaml, is the plan it was written from.
    out = titan_trials
    code, plan_json, _ = cli(*TT_PLAN, "--json", "--out", str(out / "x"))
    plans = json.loads(plan_json)["plans"][:2]
    for i in (1, 2):
        (out / f"trial-{i}" / "train.log").write_text(torchtitan_log(
            {1: 900.0, 5: 4400.0, 10: 4410.0, 15: 4390.0}, memory_gib=dict.fromkeys(
                (1, 5, 10, 15), 60.0)))
    runs = load_runs(str(out / "runs.yaml"), "dgx-h100")
    keys = ("dp", "tp", "pp", "cp", "vpp", "micro_batch", "global_batch", "zero_stage",
            "recompute", "sequence_parallel")
    for run, plan in zip(runs, plans):
        read = run.strategy.model_dump(mode="json")
        assert {k: read[k] for k in keys} == {k: plan["strategy"][k] for k in keys}
        assert run.problem.framework.name == "torchtitan"
        assert run.step_s == pytest.approx(plan["strategy"]["global_batch"] * 8192
                                           / (4400.0 * 16))
        assert run.logged_memory.reserved_bytes == 60.0 * 2**30
    code, stdout, err = cli("calibrate", "dgx-h100", str(out / "runs.yaml"), "--json",
                            "--fit", "gemm_peak_fraction")
    assert code == 0, err
    assert json.loads(stdout)["runs"][0]["logged_memory"]["kind"] == "max reserved"


def test_fp8_torchtitan_trials_are_the_toml(cli, tmp_path):
    out = tmp_path / "fp8"
    code, _, err = cli(*TT_PLAN, "--precision", "fp8", "--emit-trials", "1", "--out", str(out))
    assert code == 0, err
    toml = (out / "trial-1" / "torchtitan.toml").read_text()
    assert "steps = 30" in toml and "[metrics]\nlog_freq = 5" in toml
    assert not (out / "trial-1" / "torchtitan_recipe.py").exists()
    script = (out / "trial-1" / "run_torchtitan.sh").read_text()
    assert '--job.config_file "$HERE/torchtitan.toml"' in script
    (run,) = yaml.safe_load((out / "runs.yaml").read_text())["runs"]
    assert run["config"] == "trial-1/torchtitan.toml"


@pytest.mark.parametrize("log, message", [
    ("", "neither a Megatron-LM log"),
    ("cut", "1 logged step after the start of training; the first holds the start-up, so log "
            "at least two (metrics.log_freq)"),
])
def test_calibrate_on_a_bad_torchtitan_log_is_one_line(titan_trials, cli, log, message):
    out = titan_trials
    text = torchtitan_log({1: 900.0}, memory_gib={1: 50.0}) if log == "cut" else "\n"
    for i in (1, 2):
        (out / f"trial-{i}" / "train.log").write_text(text)
    code, _, err = cli("calibrate", "dgx-h100", str(out / "runs.yaml"))
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("Error: ") and message in err
    assert "runs[0].log: " in err
