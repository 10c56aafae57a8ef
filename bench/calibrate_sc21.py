"""Fit the A100 GEMM efficiency constants to SC21 Table 1 and print the error per row.

    python bench/calibrate_sc21.py

One set of constants for all ten runs, never one per row: `gemm_peak_fraction` (the share of
peak large GEMMs reach inside a training step) and `gemm_half_efficiency_k` (the reduction
length at which each output tile's fixed cost halves it; no A100 kernel grid measures it, and
`gemm_fill_dim` stays the preset's). A grid search minimises the mean
absolute percentage error; copy the result into planner/inputs/presets/dgx-a100-80gb.yaml.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import sc21  # noqa: E402
from planner.inputs.loader import load_cluster  # noqa: E402

PEAK_FRACTIONS = np.round(np.arange(0.55, 0.90, 0.005), 3)
HALF_EFFICIENCY_KS = (0, 16, 32, 64, 96, 128, 170, 256)


def with_constants(cluster, peak_fraction: float, half_dim: float):
    efficiency = cluster.efficiency.model_copy(update={"gemm_peak_fraction": peak_fraction,
                                                       "gemm_half_efficiency_k": half_dim})
    return cluster.model_copy(update={"efficiency": efficiency})


def main() -> None:
    base = load_cluster(sc21.CLUSTER)
    results = []
    for half_dim in HALF_EFFICIENCY_KS:
        for fraction in PEAK_FRACTIONS:
            predictions = sc21.predict(with_constants(base, float(fraction), half_dim))
            results.append((sc21.mean_absolute_error(predictions), float(fraction), half_dim))
    error, fraction, half_dim = min(results)
    print(f"best: gemm_peak_fraction {fraction}, gemm_half_efficiency_k {half_dim}: "
          f"mean absolute error {100 * error:.2f}%")
    current = sc21.predict(base)
    print(f"\npreset now: gemm_peak_fraction {base.efficiency.gemm_peak_fraction}, "
          f"gemm_half_efficiency_k {base.efficiency.gemm_half_efficiency_k}")
    print(f"{'run':12s} {'measured':>9s} {'predicted':>9s} {'error':>7s}")
    for p in current:
        print(f"{p.name:12s} {p.measured_tflops:9.0f} {p.predicted_tflops:9.1f} "
              f"{100 * p.error:+6.1f}%")
    print(f"mean absolute error {100 * sc21.mean_absolute_error(current):.2f}%, "
          f"largest {100 * max(abs(p.error) for p in current):.2f}%")


if __name__ == "__main__":
    main()
