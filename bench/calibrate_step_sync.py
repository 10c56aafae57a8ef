"""Fit Megatron-Core's per-step host and synchronisation time on one system's small steps;
check it on every other system's.

    python bench/calibrate_step_sync.py

MLPerf Training v5.1's Llama 3.1 8B runs (bench/data/mlperf_training_v51_llama31_8b.yaml)
take 1K-16K tokens per GPU per step, so the time a step spends once, whatever its size,
shows. Two constants of the Megatron profile (planner/inputs/profiles/megatron.yaml) are
fitted, by least squares on the seconds each step is measured above its prediction without
them: `step_host_s` (every step) and `step_cross_node_s` (where the job spans more than one
NVLink domain). The indicator regressors make the fit the mean gap of the single-domain runs
and the mean extra gap of the multi-domain ones, each at least 0. Fitted on the University of Florida's DGX
B200 series (1 to 32 nodes, one software stack, the same recipe); held out: NVIDIA's
GB200/GB300 NVL72, HPE's H200, Dell's and Lenovo's B300 and B200 (other stacks: Cisco's H100
and AMD's MI355X are printed, not in the headline). Copy the result into megatron.yaml.
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.published import load_runs  # noqa: E402
from planner.costing.evaluate import evaluate_strategy  # noqa: E402

SOURCE = "mlperf_training_v51_llama31_8b"
FITTED = "-uf-"                       # the runs whose names hold this are fitted
OTHER_STACKS = ("-cisco-", "-amd-")   # older NeMo on H100; ROCm: printed, not in the headline


def step_s(run, host_s: float, cross_node_s: float) -> float:
    fw = run.problem.framework.model_copy(update={"step_host_s": host_s,
                                                  "step_cross_node_s": cross_node_s})
    return evaluate_strategy(replace(run.problem, framework=fw), run.strategy).time.step_s


def spans(run) -> bool:
    return run.problem.num_gpus > run.problem.cluster.nvlink_gpus


def mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        runs, _ = load_runs(Path(tmp), only=None)
    runs = [r for r in runs if r.source == SOURCE]
    fitted = [r for r in runs if FITTED in r.name]
    gaps = {r.name: r.measured_step_s - step_s(r, 0.0, 0.0) for r in runs}
    # A time cannot be negative: where the single-domain runs are predicted at or above what
    # was measured, the host term is 0 and the multi-domain gap is all cross-node.
    host = max(0.0, mean(gaps[r.name] for r in fitted if not spans(r)))
    cross = max(0.0, mean(gaps[r.name] for r in fitted if spans(r)) - host)
    host, cross = round(host, 3), round(cross, 3)
    print(f"megatron step_host_s: {host}  step_cross_node_s: {cross}")
    errors = {"fitted": [], "held out": [], "other stacks": []}
    for r in runs:
        before, after = step_s(r, 0.0, 0.0), step_s(r, host, cross)
        kind = ("fitted" if FITTED in r.name else
                "other stacks" if any(s in r.name for s in OTHER_STACKS) else "held out")
        errors[kind].append(abs(r.measured_step_s / after - 1))
        print(f"  {r.name:46s} {kind:12s} measured {r.measured_step_s * 1e3:6.1f} ms  "
              f"predicted {before * 1e3:6.1f} -> {after * 1e3:6.1f} ms "
              f"({r.measured_step_s / before - 1:+.1%} -> {r.measured_step_s / after - 1:+.1%})")
    for kind, values in errors.items():
        if values:
            print(f"{kind}: {len(values)} runs, MAPE {mean(values):.1%}, worst {max(values):.1%}")


if __name__ == "__main__":
    main()
