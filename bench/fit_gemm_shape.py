"""Fit the GEMM shape rule of `cost_models.compute.gemm_time_s` to a measured kernel grid.

    python bench/fit_gemm_shape.py [bench/data/kernels_h100_gemm_grid.json] [--preset dgx-h100]

The grid (bench/device_kernels.py --sections gemm_grid) times bf16 and FP8 GEMMs of every
tokens m, width n and reduction k it holds, each at the clock a GPU keeps under sustained load.
Fitted on the bf16 times (every m from 256, least squares in log time): the large-GEMM rate,
`gemm_half_efficiency_k` and `gemm_fill_dim`, at `compute.ROOFLINE_SHARPNESS` (printed: the
error at other sharpnesses, each refitted). The rate is the kernels' own; a preset's
`gemm_peak_fraction` is fitted on whole training steps instead (what a GEMM reaches among the
step's other kernels and collectives). Then, with that shape, the FP8 rate alone is fitted on
the FP8 times, their shape loss paid at the bf16 rate: the FP8 error is a check of that rule
(no shape constant is fitted to FP8). Prints the fit and the error by k.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cost_models import compute  # noqa: E402
from cost_models.compute import Gemm, gemm_time_s  # noqa: E402
from planner.inputs.loader import load_cluster  # noqa: E402

DEFAULT = Path(__file__).resolve().parent / "data" / "kernels_h100_gemm_grid.json"
HBM = {"hbm_bytes_per_s": 3.35e12, "hbm_fraction": 0.8}
"""The memory side: the --preset's HBM bandwidth and achieved fraction (dgx-h100 by default)."""
MIN_TOKENS = 256                # the fewest tokens per GEMM the grid holds: routed experts run 128-4096


def _times(grid, *, rate, half_k, fill_dim, loss_rate=None, value_bytes=2):
    return gemm_time_s(grid, peak_flops=rate, peak_fraction=1.0, half_efficiency_k=half_k,
                       fill_dim=fill_dim, **HBM, bytes_per_value=value_bytes,
                       shape_loss_flops=loss_rate)


def _rms(predicted, measured) -> float:
    return float(np.sqrt(np.mean(np.log(predicted / measured) ** 2)))


def _best_rate(measured, times_at, low, high) -> float:
    """The rate (FLOP/s) that minimises the log error, by golden-section search."""
    golden = (np.sqrt(5) - 1) / 2
    a, b = np.log(low), np.log(high)
    for _ in range(60):
        c, d = b - golden * (b - a), a + golden * (b - a)
        if _rms(times_at(np.exp(c)), measured) < _rms(times_at(np.exp(d)), measured):
            b = d
        else:
            a = c
    return float(np.exp((a + b) / 2))


def fit(rows):
    m = np.array([r["m"] for r in rows], float)
    n = np.array([r["n"] for r in rows], float)
    k = np.array([r["k"] for r in rows], float)
    grid = Gemm(m, n, k)
    bf16 = np.array([r["bf16_s"] for r in rows])
    def search(half_ks, fill_dims):
        best = (np.inf, None)
        for half_k in half_ks:
            for fill_dim in fill_dims:
                rate = _best_rate(bf16, lambda r: _times(grid, rate=r, half_k=half_k,
                                                         fill_dim=fill_dim), 3e14, 2e15)
                error = _rms(_times(grid, rate=rate, half_k=half_k, fill_dim=fill_dim), bf16)
                best = min(best, (error, (rate, half_k, fill_dim)), key=lambda b: b[0])
        return best
    _, (_, half_k, fill_dim) = search(np.arange(0, 401, 20), np.arange(0, 2001, 100))
    return search(np.arange(max(half_k - 20, 0), half_k + 21, 2),
                  np.arange(max(fill_dim - 100, 0), fill_dim + 101, 10))


def _at_sharpness(rows, sharpness: float):
    """`fit` with the roofline joined at `sharpness` (16: about max)."""
    kept = compute.ROOFLINE_SHARPNESS
    compute.ROOFLINE_SHARPNESS = sharpness
    try:
        return fit(rows)
    finally:
        compute.ROOFLINE_SHARPNESS = kept


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    preset = "dgx-h100"
    if "--preset" in sys.argv:
        preset = sys.argv[sys.argv.index("--preset") + 1]
        args.remove(preset)
    cluster = load_cluster(preset)
    HBM.update(hbm_bytes_per_s=cluster.gpu.hbm_gb_per_s * 1e9,
               hbm_fraction=cluster.efficiency.hbm_fraction)
    path = Path(args[0]) if args else DEFAULT
    data = json.loads(path.read_text())
    rows = [r for r in data["rows"] if r.get("section") == "gemm_grid" and "bf16_s" in r
            and r["m"] >= MIN_TOKENS]
    error, (rate, half_k, fill_dim) = fit(rows)
    print(f"{data['meta']['gpu']}: {len(rows)} shapes (m >= {MIN_TOKENS})")
    print(f"bf16: rate {rate / 1e12:.0f} TFLOP/s, gemm_half_efficiency_k {half_k:.0f}, "
          f"gemm_fill_dim {fill_dim:.0f}: log-time error RMS {error:.3f}")
    m = np.array([r["m"] for r in rows], float)
    n = np.array([r["n"] for r in rows], float)
    k = np.array([r["k"] for r in rows], float)
    grid = Gemm(m, n, k)
    shape = dict(half_k=half_k, fill_dim=fill_dim)
    bf16 = np.array([r["bf16_s"] for r in rows])
    fp8 = np.array([r["fp8_fast_s"] for r in rows])
    fp8_rate = _best_rate(fp8, lambda r: _times(grid, rate=r, loss_rate=rate, value_bytes=1,
                                                **shape), 5e14, 4e15)
    fp8_times = _times(grid, rate=fp8_rate, loss_rate=rate, value_bytes=1, **shape)
    print(f"fp8 (fast accumulation), shape loss at the bf16 rate: rate "
          f"{fp8_rate / 1e12:.0f} TFLOP/s ({fp8_rate / rate:.2f}x bf16): log-time error RMS "
          f"{_rms(fp8_times, fp8):.3f}")
    same = _best_rate(fp8, lambda r: _times(grid, rate=r, value_bytes=1, **shape), 5e14, 4e15)
    print(f"  (shape loss at the FP8 rate instead: RMS "
          f"{_rms(_times(grid, rate=same, value_bytes=1, **shape), fp8):.3f})")
    for sharpness in (3, 4, 8, 16):
        other, constants = _at_sharpness(rows, sharpness)
        print(f"  (roofline sharpness {sharpness}: RMS {other:.3f} at rate "
              f"{constants[0] / 1e12:.0f}, k {constants[1]:.0f}, fill {constants[2]:.0f})")
    wide = (m == m.min()) & (n * k >= 4096 * 4096)
    bf16_times = _times(grid, rate=rate, **shape)
    print(f"m {m.min():.0f} with n k >= 4096^2: mean log error "
          f"{np.mean(np.log(bf16_times[wide] / bf16[wide])):+.3f}")
    print("k       bf16 error (mean, RMS)   fp8 error (mean, RMS)")
    for value in sorted(set(k)):
        at = k == value
        e16, e8 = np.log(bf16_times[at] / bf16[at]), np.log(fp8_times[at] / fp8[at])
        print(f"{value:6.0f}  {e16.mean():+.3f} {np.sqrt(np.mean(e16**2)):.3f}"
              f"              {e8.mean():+.3f} {np.sqrt(np.mean(e8**2)):.3f}")


if __name__ == "__main__":
    main()
