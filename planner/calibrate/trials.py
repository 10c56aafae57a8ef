"""Trial runs of the top plans (`planner plan --emit-trials K --out DIR`): a short Megatron-LM
run of each, one launcher that runs them in turn, and the RUNS.yaml that `planner calibrate`
reads their logs from. The loop: plan, run the trials on the cluster, calibrate on their logs.

    DIR/trial-1/pretrain_gpt.sh   the plan's launch script, cut to a benchmark run
    DIR/trial-1/train.log         (written by the run)
    DIR/run_trials.sh             every trial, one after another, past failures
    DIR/runs.yaml                 one run per trial: `log: trial-1/train.log`
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import yaml

from planner.calibrate.runs import RunsFile
from planner.core.problem import Problem
from planner.frameworks import LaunchPlan, megatron
from planner.schemas.report import PlanReport
from planner.schemas.strategy import Strategy

LAUNCHER = "run_trials.sh"
RUNS_FILE = "runs.yaml"


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
                out_dir: str | Path, trial: megatron.Trial = megatron.Trial()
                ) -> dict[str, str]:
    """{path under DIR: text} for a trial of each plan, in rank order: its script, the
    launcher and runs.yaml."""
    files: dict[str, str] = {}
    labels = []
    for rank, (report, strategy) in enumerate(plans, start=1):
        name, text = megatron.emit_trial(LaunchPlan(problem, strategy, report), trial)
        files[f"{trial_dir(rank)}/{name}"] = text
        labels.append((trial_dir(rank), name, degrees_label(strategy)))
    files[LAUNCHER] = _launcher(problem, labels, trial)
    files[RUNS_FILE] = _runs_yaml(problem, plans, model_reference(model_ref, out_dir), trial)
    return files


def _launcher(problem: Problem, labels: list[tuple[str, str, str]],
              trial: megatron.Trial) -> str:
    lines = [
        "#!/usr/bin/env bash",
        f"# Trial runs of the planner's top {len(labels)} plans for {problem.model.name} on "
        f"{problem.num_gpus} x {problem.cluster.gpu.name}: each a {trial.train_iters}-iteration "
        f"Megatron-LM run,",
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
        f'  RDZV_ID="$RDZV_BASE-$1" LOG_FILE="$1/{trial.log_file}" bash "$1/$2"',
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
               trial: megatron.Trial) -> str:
    t = problem.training
    lines = [f"# Trial runs of the planner's top {len(plans)} plans: `bash {LAUNCHER}` writes "
             f"each log, then",
             f"# `planner calibrate CLUSTER {RUNS_FILE}` reads them (the step time: the median "
             f"of the logged intervals",
             "# after the first; the strategy: the arguments Megatron-LM prints).",
             "runs:"]
    entries = []
    for rank, (report, strategy) in enumerate(plans, start=1):
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
        entry["log"] = f"{trial_dir(rank)}/{trial.log_file}"
        entries.append(entry)
        lines.append(f"  # plan {rank}: predicted {report.time.step_s:.3g} s per step")
        dumped = yaml.safe_dump([entry], sort_keys=False, default_flow_style=False)
        lines += ["  " + line for line in dumped.splitlines()]
    RunsFile.model_validate({"runs": entries})      # the format `calibrate` reads
    return "\n".join(lines) + "\n"
