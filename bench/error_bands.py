"""The model's measured error per kind of run: the bands and ranking tolerance the planner
states (planner/costing/uncertainty.py explains both).

    python bench/error_bands.py            # print the table
    python bench/error_bands.py --write    # and rewrite planner/costing/error_bands.yaml

Every run of bench/data is priced as bench/published.py fills it; runs of a source whose
numbers a constant was fitted on (FITTED_ON, from bench/calibrate_frameworks.py) are left out,
and the runs of a source fitted whole release by release (CROSS_VALIDATED) are priced with the
constants fitted on its other releases, so every error here is held out (a few minutes: the
MoE host constants' grid). SC21 Table 1, the A100
calibration set, is not in bench/data.
"""

from __future__ import annotations

import datetime
import itertools
import math
import re
import sys
import tempfile
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import calibrate_moe_host  # noqa: E402
from bench.published import (BRIDGE_RELEASE_IN_NAME, Prediction, load_runs,  # noqa: E402
                             predict)
from planner.costing.evaluate import evaluate_strategy  # noqa: E402
from planner.costing.uncertainty import (BANDS_FILE, ErrorBands, RunKind,  # noqa: E402
                                         run_kinds)

FITTED_ON = {
    ("megatron_lm_readme_h100", "megatron"): "H100 GEMM fractions, Megatron TP overlap share",
    ("narayanan2021_table2", "deepspeed"): "DeepSpeed ZeRO-3 efficiency and overlap",
    ("bloom_176b_tr11", "deepspeed"): "DeepSpeed pipeline-engine overhead",
    ("mt_nlg_530b", "deepspeed"): "DeepSpeed pipeline-engine overhead",
    ("megatron_bridge_nvfp4", "megatron"): "NVFP4 GEMM rate on GB200 (bench/calibrate_nvfp4.py)",
    # Its UF B200 runs set the per-step host and sync time; the source's other systems are
    # held out there (bench/calibrate_step_sync.py) but go with it here, per source.
    ("mlperf_training_v51_llama31_8b", "megatron"): "per-step host + sync time "
                                                     "(bench/calibrate_step_sync.py)",
    # Its 70B pairs set torchtitan's async-TP share; the 8B pairs are held out there
    # (bench/calibrate_async_tp.py) but go with it here, per source.
    ("torchtitan_asynctp_h100_202506", "torchtitan"): "torchtitan async-TP share "
                                                      "(bench/calibrate_async_tp.py)",
}
"""(source, framework) whose runs set a constant (bench/calibrate_frameworks.py): not held out."""

CROSS_VALIDATED = {
    calibrate_moe_host.SOURCE: "MoE host times (bench/calibrate_moe_host.py), fitted on every "
                               "release: each release's runs are priced here with the constants "
                               "fitted on the other releases",
}
"""Sources a constant was fitted on whole, their runs kept here at their held-out prediction."""


def cross_validated(predictions) -> list:
    """`predictions` with each run of a CROSS_VALIDATED source priced held out (its release
    from the other releases' fit; bench/calibrate_moe_host.py)."""
    rows = calibrate_moe_host.source_rows([p.run for p in predictions])
    points = calibrate_moe_host.held_out_points(rows, calibrate_moe_host.grid_steps(rows))
    out = []
    for p in predictions:
        if p.run.name in points and p.run.source in CROSS_VALIDATED:
            run = replace(p.run, problem=calibrate_moe_host.with_host(p.run.problem,
                                                                      points[p.run.name]))
            p = Prediction(run, evaluate_strategy(run.problem, run.strategy))
        out.append(p)
    return out


def fitted(run) -> bool:
    return (run.source, run.framework) in FITTED_ON


QUANTILES = (0.1, 0.9)
"""The band holds the middle 80% of a kind's runs: wide enough that a run outside it is
news, narrow enough to say something with the few runs some kinds have."""

MIN_RUNS = 8
"""A framework with fewer held-out base runs than this gets the base band of all frameworks:
below it the 10th and 90th percentiles are the extreme runs themselves."""

SESSION_IN_NAME = {
    "bloom_176b_prequel": re.compile(r"^bloom-prequel-(\d{4})-"),
    "megatron_bridge_moe": BRIDGE_RELEASE_IN_NAME,
    "megatron_bridge_perf_summary": BRIDGE_RELEASE_IN_NAME,
    "dgxc_benchmarking": BRIDGE_RELEASE_IN_NAME,    # its GSW release (2501, 2505)
}
"""Where a source's runs span software releases or days of cluster work, the part of a run's
name that says which (BLOOM's log day, Megatron-Bridge's container release, DGX Cloud
Benchmarking's release): two runs are a
strategy comparison only within one. Across them the same strategy moves by up to 40% (Qwen3-30B
on 8 GB200: -15% in 26.06, +31% in 26.04), which is not the model's ranking error."""

OUT = Path(__file__).resolve().parent.parent / "planner" / "costing" / BANDS_FILE


def _band(preds) -> dict:
    errors = np.array([p.error for p in preds])
    low, high = np.quantile(errors, QUANTILES)
    return {"runs": len(preds), "low": round(float(low), 4), "high": round(float(high), 4),
            "mean_abs": round(float(np.mean(np.abs(errors))), 4),
            "sources": sorted({p.run.source for p in preds})}


def _job(p) -> tuple:
    """What two runs must share to compare their strategies: everything but the strategy."""
    pr = p.run.problem
    fp8 = pr.training.fp8_recipe
    pattern = SESSION_IN_NAME.get(p.run.source)
    session = pattern.search(p.run.name).group(1) if pattern else None
    return (p.run.source, session, pr.model.num_params, pr.model.num_layers, pr.num_gpus,
            pr.training.global_batch, pr.training.seq_len, pr.training.precision.value,
            fp8.value if fp8 else None, pr.cluster.gpu.name, pr.framework.name)


def _strategy(p) -> tuple:
    s = p.report.strategy
    return (s.dp, s.tp, s.pp, s.vpp, s.cp, s.ep, s.etp, s.micro_batch, s.zero_stage.value,
            s.recompute.value)


def _ranking(preds) -> dict:
    """Median |log(measured ratio / predicted ratio)| over pairs of runs of one job with
    different strategies; error = measured / predicted - 1, so the log ratio error of a pair
    is log(1 + e_a) - log(1 + e_b)."""
    jobs = defaultdict(list)
    for p in preds:
        jobs[_job(p)].append(p)
    gaps, used, sources = [], 0, set()
    for members in jobs.values():
        pairs = [(a, b) for a, b in itertools.combinations(members, 2)
                 if _strategy(a) != _strategy(b)]
        if pairs:
            used += 1
            sources |= {p.run.source for p in members}
        gaps += [abs(math.log1p(a.error) - math.log1p(b.error)) for a, b in pairs]
    if not gaps:
        return {"pairs": 0}
    return {"tolerance": round(math.expm1(float(np.median(gaps))), 4), "pairs": len(gaps),
            "jobs": used, "sources": sorted(sources)}


def bands(predictions) -> dict:
    held = [p for p in predictions if not fitted(p.run)]
    kinds = {p.run.name: run_kinds(p.run.problem, p.report.strategy.cp) for p in held}
    base_runs = [p for p in held if not kinds[p.run.name]]
    base = {"any": _band(base_runs)}
    for framework in sorted({p.run.framework for p in base_runs}):
        mine = [p for p in base_runs if p.run.framework == framework]
        if len(mine) >= MIN_RUNS:
            base[framework] = _band(mine)
    of_kind = {kind.value: _band(mine) for kind in RunKind
               if (mine := [p for p in held if kind in kinds[p.run.name]])}
    moe = [p for p in held if p.run.problem.model.is_moe]
    dense = [p for p in held if not p.run.problem.model.is_moe]
    return {
        "generated_by": "python bench/error_bands.py --write",
        "generated_on": datetime.date.today().isoformat(),
        "error": "measured step time / predicted step time - 1 (TFLOP/s sources: predicted "
                 "TFLOP/s / measured TFLOP/s - 1, the same for a fixed run)",
        "quantiles": list(QUANTILES),
        "min_runs": MIN_RUNS,
        "held_out": f"{len(held)} of the {len(predictions)} priced runs of bench/data; left "
                    f"out: the runs of each fitted_on entry",
        "fitted_on": ([f"{s}/{f}: {why}" for (s, f), why in FITTED_ON.items()]
                      + [f"{s}: {why}" for s, why in CROSS_VALIDATED.items()]),
        "base": base,
        "kinds": of_kind,
        # Only kinds with a measured pair: a kind without one is ranked with the dense tolerance.
        "ranking": {name: ranking for name, ranking in (("dense", _ranking(dense)),
                                                         ("moe", _ranking(moe)))
                    if ranking["pairs"]},
    }


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        runs, _ = load_runs(Path(tmp))
        predictions = cross_validated(predict(runs))
    table = bands(predictions)
    ErrorBands.model_validate(table)            # what the planner will read
    print(f"{'kind':22s} {'runs':>4s} {'p10':>7s} {'p90':>7s} {'MAPE':>6s}  sources")
    for group in ("base", "kinds"):
        for name, b in table[group].items():
            print(f"{group + ' ' + name:22s} {b['runs']:4d} {100 * b['low']:+6.1f}% "
                  f"{100 * b['high']:+6.1f}% {100 * b['mean_abs']:5.1f}%  "
                  f"{', '.join(b['sources'])}")
    for name, r in table["ranking"].items():
        print(f"ranking {name:14s} {r['pairs']:4d} pairs in {r['jobs']} jobs: tied within "
              f"{100 * r['tolerance']:.1f}%  ({', '.join(r['sources'])})")
    print(table["held_out"])
    held = [abs(p.error) for p in predictions if not fitted(p.run)]
    every = [abs(p.error) for p in predictions]
    print(f"MAPE: {100 * sum(held) / len(held):.1f}% over the {len(held)} held-out runs, "
          f"{100 * sum(every) / len(every):.1f}% over all {len(every)} priced")
    if "--write" in sys.argv:
        header = ("# The model's measured error per kind of run (planner/costing/uncertainty.py)."
                  "\n# Written by `python bench/error_bands.py --write`; do not edit by hand.\n")
        OUT.write_text(header + yaml.safe_dump(table, sort_keys=False, width=100))
        print(f"wrote {OUT.relative_to(Path.cwd()) if OUT.is_relative_to(Path.cwd()) else OUT}")


if __name__ == "__main__":
    main()
