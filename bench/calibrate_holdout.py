"""Calibrate on half of a group of published runs of one cluster, predict the other half.

    python bench/calibrate_holdout.py [--min-runs 6]

A group is one source of bench/data on one GPU type: one cluster, one framework, one period.
Its runs, sorted by name, go alternately to a fitting half and a held-out half. `planner
calibrate`'s fit runs on the fitting half with every constant those runs determine (the
subset its refusal would name); the held-out half is then predicted with the preset's
constants and with the fitted ones. The held-out error is the honest number: the fit never
saw those runs.

Sources that give TFLOP/s per GPU are compared as step times: for a fixed run, step time and
TFLOP/s are inversely proportional, so measured_step = predicted_step x predicted_TFLOP/s /
measured_TFLOP/s at any constants.
"""

from __future__ import annotations

import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.published import load_runs, predict  # noqa: E402
from planner.calibrate import fit  # noqa: E402
from planner.calibrate.runs import MeasuredRun  # noqa: E402
from planner.errors import InfeasibleError  # noqa: E402


def measured_runs(predictions) -> list[MeasuredRun]:
    out = []
    for p in predictions:
        step = p.report.time.step_s
        measured = p.run.measured_step_s if p.run.measured_tflops is None else \
            step * p.predicted_tflops / p.run.measured_tflops
        out.append(MeasuredRun(p.run.name, p.run.problem, p.run.strategy, measured))
    return out


def mape(cal_runs) -> float:
    return sum(abs(e) for e in cal_runs) / len(cal_runs)


def main() -> None:
    min_runs = int(sys.argv[sys.argv.index("--min-runs") + 1]) if "--min-runs" in sys.argv \
        else 6
    with tempfile.TemporaryDirectory() as tmp:
        runs, _ = load_runs(Path(tmp))
        predictions = predict(runs)
    groups = defaultdict(list)
    for p in predictions:
        groups[(p.run.source, p.run.problem.cluster.gpu.name)].append(p)
    print(f"{'source':34s} {'GPU':15s} {'fit':>3s} {'held':>4s} {'preset':>7s} "
          f"{'fitted':>7s}  constants fitted")
    totals = [0.0, 0.0, 0]
    for (source, gpu), preds in sorted(groups.items()):
        if len(preds) < min_runs:
            continue
        measured = sorted(measured_runs(preds), key=lambda r: r.name)
        train, held = measured[0::2], measured[1::2]
        cluster = train[0].problem.cluster
        try:
            calibration = fit.calibrate(cluster, train)   # what the half determines
        except InfeasibleError as e:
            print(f"{source:34s} {gpu:15s} {len(train):3d} {len(held):4d}  not fitted: {e}")
            continue
        measured_s = [r.step_s for r in held]
        e_before, e_after = (
            [p.step_s / m - 1 for p, m in zip(fit.predict(held, {c.constant.path: getattr(c, which)
                                                                 for c in calibration.constants}),
                                               measured_s)]
            for which in ("before", "after"))
        totals[0] += sum(map(abs, e_before))
        totals[1] += sum(map(abs, e_after))
        totals[2] += len(held)
        print(f"{source:34s} {gpu:15s} {len(train):3d} {len(held):4d} "
              f"{100 * mape(e_before):6.1f}% {100 * mape(e_after):6.1f}%  "
              + ", ".join(f"{c.constant.name} {c.before:g}->{c.after:g}"
                          for c in calibration.constants))
    if totals[2]:
        print(f"all held-out runs: {totals[2]}, MAPE {100 * totals[0] / totals[2]:.1f}% with "
              f"the presets, {100 * totals[1] / totals[2]:.1f}% calibrated")


if __name__ == "__main__":
    main()
