"""Synthetic measured runs: the planner's own predictions under known constants, so that a fit
must give those constants back."""

from __future__ import annotations

from dataclasses import replace

import yaml

from planner.calibrate.fit import with_values
from planner.calibrate.runs import MeasuredRun
from planner.costing.evaluate import evaluate_strategy
from planner.inputs.loader import make_problem, resolve_strategy
from planner.schemas.strategy import Strategy

TRUE_CONSTANTS = {"efficiency.gemm_peak_fraction": 0.50, "efficiency.step_overhead_s": 0.3,
                  "efficiency.flash_attention_fraction": 0.4,
                  "efficiency.inter_node_bus_fraction": 0.6}
"""A cluster slower than the dgx-h100 preset in four ways (preset: 0.56, 0, 0.5, 0.94)."""

RUNS = [   # name, GPUs, seq_len, global batch, strategy: chosen to tell the four apart
    ("8b-8gpu", 8, 2048, 64, dict(dp=8, micro_batch=1, zero_stage=1)),
    ("8b-cp4", 8, 32768, 64, dict(dp=1, tp=2, cp=4, micro_batch=1, zero_stage=1)),
    ("8b-32gpu", 32, 8192, 64, dict(dp=8, tp=4, micro_batch=1, zero_stage=1,
                                    overlap_grad_reduce=False)),
    ("8b-64gpu", 64, 4096, 64, dict(dp=64, micro_batch=1, overlap_grad_reduce=False)),
    ("8b-small-batch", 8, 2048, 8, dict(dp=8, micro_batch=1, zero_stage=1)),
    ("8b-256gpu", 256, 2048, 256, dict(dp=256, micro_batch=1, overlap_grad_reduce=False)),
]


def synthetic_runs(true: dict[str, float] = TRUE_CONSTANTS, runs=RUNS,
                   cluster: str = "dgx-h100", peaks: bool = False) -> list[MeasuredRun]:
    """The runs, measured as the planner prices them with `true` (step time; `peaks`: the
    peak memory too)."""
    out = []
    for name, gpus, seq_len, batch, fields in runs:
        problem = make_problem("llama3-8b", cluster, gpus=gpus, seq_len=seq_len,
                               global_batch=batch)
        strategy = resolve_strategy(Strategy(**fields), problem)
        truth = replace(problem, cluster=with_values(problem.cluster, true))
        report = evaluate_strategy(truth, strategy)
        out.append(MeasuredRun(name, problem, strategy, report.time.step_s,
                               report.memory.peak_bytes if peaks else None))
    return out


def runs_yaml(runs: list[MeasuredRun], *, peaks: bool = False) -> str:
    """The runs as a RUNS.yaml (measured numbers to 6 digits, as a log would give them)."""
    entries = []
    for (name, gpus, seq_len, batch, fields), run in zip(RUNS, runs):
        measured = {"step_s": float(f"{run.step_s:.6g}")}
        if peaks:
            measured["peak_gib"] = float(f"{run.peak_bytes / 2**30:.6g}")
        entries.append({"name": name, "model": "llama3-8b", "seq_len": seq_len,
                        "global_batch": batch, "strategy": fields, "measured": measured})
    return yaml.safe_dump({"runs": entries}, sort_keys=False)

