"""Trial runs of the top plans (`planner plan --emit-trials K --out DIR`): a short run of
each on one target (Megatron-LM, or torchtitan with `--emit torchtitan`), one launcher that runs
them in turn, and the RUNS.yaml that `planner calibrate` reads their logs from. The loop: plan,
run the trials on the cluster, calibrate on their logs.

    DIR/trial-1/pretrain_gpt.sh   the plan's launch script, cut to a benchmark run
                                  (torchtitan: torchtitan_recipe.py and run_torchtitan.sh)
    DIR/trial-1/train.log         (written by the run)
    DIR/run_trials.sh             every trial, one after another, past failures
    DIR/runs.yaml                 one run per trial: `log: trial-1/train.log` (torchtitan,
                                  whose log does not hold its config: `config:` too)

DeepSpeed has no trials: the planner writes its ds_config.json, not the training script
DeepSpeed launches, so there is nothing it could run.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import yaml

from cost_models.units import GiB
from planner.calibrate.runs import RunsFile
from planner.core.problem import Problem
from planner.frameworks import LaunchPlan, megatron, torchtitan
from planner.frameworks.base import Trial
from planner.schemas.report import PlanReport
from planner.schemas.strategy import LaunchTarget, Strategy

LAUNCHER = "run_trials.sh"
RUNS_FILE = "runs.yaml"
TARGETS = {LaunchTarget.MEGATRON: "Megatron-LM", LaunchTarget.TORCHTITAN: "torchtitan"}
"""The targets a trial runs on, by the name the launcher gives them."""
NOT_RUNNABLE = {
    LaunchTarget.DEEPSPEED: "the planner writes DeepSpeed's ds_config.json, not the training "
                            "script DeepSpeed launches; run your script with --emit deepspeed's "
                            "config and give calibrate its step time (runs.yaml: config, "
                            "measured: step_s)",
}
"""Why a target has no trials, where the reason is more than 'not written yet'."""


def _emit_trial(target: LaunchTarget, plan: LaunchPlan, trial: Trial
                ) -> tuple[str, dict[str, str], str | None]:
    """(the script to run, {file name: text}, the config runs.yaml names beside the log)."""
    if target is LaunchTarget.TORCHTITAN:
        files = torchtitan.emit_trial(plan, trial)
        config = next(name for name in files if name != torchtitan.TRIAL_SCRIPT)
        return torchtitan.TRIAL_SCRIPT, files, config
    name, text = megatron.emit_trial(plan, trial)
    return name, {name: text}, None        # the log holds Megatron-LM's arguments


def trial_dir(rank: int) -> str:
    """'trial-1' for the best plan (ranks from 1, as `planner plan` lists them)."""
    return f"trial-{rank}"


def degrees_label(s: Strategy) -> str:
    """'dp8 tp2 pp1', with cp, ep and vpp where used: how a trial's run is named."""
    parts = [f"dp{s.dp}", f"tp{s.tp}", f"pp{s.pp}"]
    parts += [f"{name}{value}" for name, value in (("vpp", s.vpp), ("cp", s.cp), ("ep", s.ep))
              if value > 1]
    return " ".join(parts) + f" mb{s.micro_batch}"


def model_reference(model_ref: str, out_dir: str | Path) -> str:
    """The model as runs.yaml names it: a file relative to the directory runs.yaml is in
    (`calibrate.runs` reads files beside it), else the zoo name as given."""
    path = Path(model_ref)
    if not path.is_file():
        return model_ref
    return os.path.relpath(path.resolve(), Path(out_dir).resolve())


def trial_files(problem: Problem, plans: list[tuple[PlanReport, Strategy]], model_ref: str,
                out_dir: str | Path, target: LaunchTarget = LaunchTarget.MEGATRON,
                trial: Trial = Trial()) -> dict[str, str]:
    """{path under DIR: text} for a trial of each plan on `target`, in rank order: its
    files, the launcher and runs.yaml."""
    files: dict[str, str] = {}
    labels, configs = [], []
    for rank, (report, strategy) in enumerate(plans, start=1):
        script, texts, config = _emit_trial(target, LaunchPlan(problem, strategy, report), trial)
        files.update({f"{trial_dir(rank)}/{name}": text for name, text in texts.items()})
        labels.append((trial_dir(rank), script, degrees_label(strategy)))
        configs.append(config and f"{trial_dir(rank)}/{config}")
    files[LAUNCHER] = _launcher(problem, labels, TARGETS[target], trial)
    files[RUNS_FILE] = _runs_yaml(problem, plans, model_reference(model_ref, out_dir), configs,
                                  trial)
    return files


def _launcher(problem: Problem, labels: list[tuple[str, str, str]], framework: str,
              trial: Trial) -> str:
    lines = [
        "#!/usr/bin/env bash",
        f"# Trial runs of the planner's top {len(labels)} plans for {problem.model.name} on "
        f"{problem.num_gpus} x {problem.cluster.gpu.name}: each a {trial.train_iters}-step "
        f"{framework} run,",
        "# one after another. Run it on every node, as each trial's script: "
        f"MASTER_ADDR=<first node> bash {LAUNCHER}",
        "# A failed trial does not stop the others: its exit status is in "
        "trial-N/exit_status, and this",
        "# script exits 1 when any failed. Then: planner calibrate CLUSTER runs.yaml",
        "set -uo pipefail",
        'cd "$(dirname "$0")"',
        "RDZV_BASE=${RDZV_ID:-planner-trials}",
        "failed=0", "",
        "run_trial() {   # DIR SCRIPT LABEL",
        '  echo "== $1: $3" >&2',
        f'  RDZV_ID="$RDZV_BASE-$1" LOG_FILE="$PWD/$1/{trial.log_file}" bash "$1/$2"',
        "  local status=$?",
        '  echo "$status" > "$1/exit_status"',
        '  if [ "$status" -ne 0 ]; then',
        '    echo "== $1 failed (exit status $status); going on" >&2',
        "    failed=$((failed + 1))",
        "  fi",
        "}", "",
        *(f"run_trial {directory} {name} {shlex.quote(label)}"
          for directory, name, label in labels),
        "",
        f'echo "== $(( {len(labels)} - failed )) of {len(labels)} trials ran to the end; '
        f'their logs: trial-*/{trial.log_file}" >&2',
        '[ "$failed" -eq 0 ]', ""]
    return "\n".join(lines)


def _runs_yaml(problem: Problem, plans: list[tuple[PlanReport, Strategy]], model: str,
               configs: list[str | None], trial: Trial) -> str:
    t = problem.training
    strategy_from = ("the arguments Megatron-LM prints" if configs[0] is None else
                     "the config beside each log")
    lines = [f"# Trial runs of the planner's top {len(plans)} plans: `bash {LAUNCHER}` writes "
             f"each log, then",
             f"# `planner calibrate CLUSTER {RUNS_FILE}` reads them (the step time: the median "
             f"of the logged intervals",
             f"# after the first; the peak memory the log prints; the strategy: {strategy_from}).",
             "runs:"]
    entries = []
    for rank, ((report, strategy), config) in enumerate(zip(plans, configs), start=1):
        entry = {"name": f"{trial_dir(rank)} {degrees_label(strategy)}", "model": model,
                 "gpus": problem.num_gpus, "seq_len": t.seq_len,
                 "global_batch": strategy.global_batch, "precision": t.precision.value}
        if t.fp8_recipe is not None:
            entry["fp8_recipe"] = t.fp8_recipe.value
        if t.attention is not None:
            entry["attention"] = t.attention.value
        for key in ("fp8_output_layer", "bf16_first_layers", "bf16_last_layers"):
            if getattr(t, key):
                entry[key] = getattr(t, key)
        if problem.framework.name != "megatron":        # --framework priced the plans
            entry["framework"] = problem.framework.name
        if config is not None:
            entry["config"] = config
        entry["log"] = f"{trial_dir(rank)}/{trial.log_file}"
        entries.append(entry)
        lines.append(f"  # plan {rank}: predicted {report.time.step_s:.3g} s per step, peak "
                     f"{report.memory.peak_bytes / GiB:.1f} GiB")
        dumped = yaml.safe_dump([entry], sort_keys=False, default_flow_style=False)
        lines += ["  " + line for line in dumped.splitlines()]
    RunsFile.model_validate({"runs": entries})      # the format `calibrate` reads
    return "\n".join(lines) + "\n"
