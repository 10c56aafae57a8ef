"""Fit the constants that published runs, not datasheets, must set; print the error per run.

    python bench/calibrate_frameworks.py

Two fits, each one set of constants for a whole source, never one per row:

1. H100 with Megatron-Core: `gemm_peak_fraction` of the dgx-h100 preset (its GEMM shape
   constants are measured on kernels, bench/fit_gemm_shape.py, not fitted here) and
   `tp_comm_overlap_fraction` of the Megatron profile, on the Megatron-Core r0.8
   weak-scaling table (bench/data/megatron_lm_readme_h100.yaml, 9 runs, 1.7B-462B on 48-6144
   H100, all with --tp-comm-overlap).
2. DeepSpeed ZeRO-3 of 2021: `zero3.collective_efficiency` and `zero3.overlap_fraction`, on
   the six ZeRO-3 runs of SC21 Table 2; they go to that source's `framework_overrides`
   (bench/data/sc21_table2_zero3.yaml), the version it measured, not to today's profile.
3. DeepSpeed's pipeline engine: `pipeline_layer_overhead_s` of the DeepSpeed profile (per
   layer a stage holds and micro-batch), on BLOOM-176B (6 runs) and MT-NLG 530B (3 runs), both
   Megatron-DeepSpeed; BLOOM's topology search (bench/data/bloom_176b_prequel.yaml, 124 runs
   of the same framework and cluster at 8-384 GPUs, pp 1-48, micro-batches 1-8) is held out
   and printed after the fit.

A grid search minimises the mean absolute percentage error; copy the results into
planner/inputs/presets/dgx-h100.yaml, planner/inputs/profiles/{megatron,deepspeed}.yaml and
the SC21 Table 2 source's framework_overrides.
Strategies are resolved once with the shipped constants (bench/published.py fill rules).
"""

from __future__ import annotations

import itertools
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.published import load_runs, predict  # noqa: E402


def _with(problem, *, efficiency=None, framework=None, zero3=None):
    cluster, fw = problem.cluster, problem.framework
    if efficiency:
        cluster = cluster.model_copy(
            update={"efficiency": cluster.efficiency.model_copy(update=efficiency)})
    if framework:
        fw = fw.model_copy(update=framework)
    if zero3:
        fw = fw.model_copy(update={"zero3": fw.zero3.model_copy(update=zero3)})
    return replace(problem, cluster=cluster, framework=fw)


def _mape(predictions) -> float:
    return float(np.mean([abs(p.error) for p in predictions]))


def _fit(runs, grid: dict, make) -> tuple[float, dict]:
    best = (np.inf, {})
    for values in itertools.product(*grid.values()):
        point = dict(zip(grid, values))
        error = _mape(predict([replace(r, problem=make(r.problem, point)) for r in runs]))
        best = min(best, (error, point), key=lambda b: b[0])
    return best


def _report(title, runs, make, point):
    print(f"\n{title}: " + ", ".join(f"{k} {v:g}" for k, v in point.items()))
    predictions = predict([replace(r, problem=make(r.problem, point)) for r in runs])
    for p in predictions:
        print(f"  {p.run.name:40s} measured {p.run.measured_tflops:6.1f} predicted "
              f"{p.predicted_tflops:6.1f} ({100 * p.error:+.1f}%)")
    print(f"  MAPE {100 * _mape(predictions):.1f}%")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        runs, _ = load_runs(Path(tmp))
    h100 = [r for r in runs if r.source == "megatron_lm_readme_h100"]
    zero3 = [r for r in runs if r.source == "narayanan2021_table2" and r.strategy.zero_stage == 3]

    def h100_make(problem, p):
        return _with(problem, efficiency={"gemm_peak_fraction": p["gemm_peak_fraction"]},
                     framework={"tp_comm_overlap_fraction": p["tp_comm_overlap_fraction"]})

    error, point = _fit(h100, {"gemm_peak_fraction": np.round(np.arange(0.55, 0.86, 0.01), 3),
                               "tp_comm_overlap_fraction": (0.0, 0.25, 0.5, 0.75, 0.9, 1.0)},
                        h100_make)
    _report("H100 + Megatron-Core", h100, h100_make, point)

    def zero3_make(problem, p):
        return _with(problem, zero3=p)

    error, point = _fit(zero3, {"collective_efficiency": np.round(np.arange(0.04, 0.31, 0.01), 3),
                                "overlap_fraction": np.round(np.arange(0.0, 1.01, 0.1), 2)},
                        zero3_make)
    _report("DeepSpeed ZeRO-3", zero3, zero3_make, point)

    engine = [r for r in runs if r.source in ("bloom_176b_tr11", "mt_nlg_530b")]

    def engine_make(problem, p):
        return _with(problem, framework=p)

    error, point = _fit(engine, {"pipeline_layer_overhead_s":
                                 np.round(np.arange(0.0, 0.0201, 0.0005), 4)}, engine_make)
    _report("DeepSpeed pipeline engine", engine, engine_make, point)
    held_out = [r for r in runs if r.source == "bloom_176b_prequel"]
    predictions = predict([replace(r, problem=engine_make(r.problem, point)) for r in held_out])
    print(f"  held out, BLOOM's topology search ({len(held_out)} runs): "
          f"MAPE {100 * _mape(predictions):.1f}%")


if __name__ == "__main__":
    main()
