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

from cost_models.compute import ROOFLINE_SHARPNESS, Gemm, gemm_time_s  # noqa: E402
from planner.inputs.loader import load_cluster  # noqa: E402

DEFAULT = Path(__file__).resolve().parent / "data" / "kernels_h100_gemm_grid.json"
MIN_TOKENS = 256                # the fewest tokens per GEMM the grid holds: routed experts run 128-4096


class Grid:
    """A measured grid: its shapes, bf16 and FP8 times, and the memory side its GPU prices
    them with (the preset's HBM bandwidth and achieved fraction)."""

    def __init__(self, rows, *, preset: str, gpu: str = "") -> None:
        self.gpu = gpu
        self.rows = [r for r in rows if r.get("section") == "gemm_grid" and "bf16_s" in r
                     and r["m"] >= MIN_TOKENS]
        self.m, self.n, self.k = (np.array([r[key] for r in self.rows], float)
                                  for key in ("m", "n", "k"))
        self.gemms = Gemm(self.m, self.n, self.k)
        self.bf16 = np.array([r["bf16_s"] for r in self.rows])
        self.fp8 = np.array([r.get("fp8_fast_s", np.nan) for r in self.rows])
        cluster = load_cluster(preset)
        self.hbm = dict(hbm_bytes_per_s=cluster.gpu.hbm_gb_per_s * 1e9,
                        hbm_fraction=cluster.efficiency.hbm_fraction)

    @classmethod
    def load(cls, path: Path, *, preset: str) -> "Grid":
        data = json.loads(Path(path).read_text())
        return cls(data["rows"], preset=preset, gpu=data["meta"]["gpu"])

    def times(self, *, rate, half_k, fill_dim, loss_rate=None, value_bytes=2,
              sharpness=ROOFLINE_SHARPNESS):
        return gemm_time_s(self.gemms, peak_flops=rate, peak_fraction=1.0,
                           half_efficiency_k=half_k, fill_dim=fill_dim, **self.hbm,
                           bytes_per_value=value_bytes, shape_loss_flops=loss_rate,
                           roofline_sharpness=sharpness)


def _rms(predicted, measured) -> float:
    return float(np.sqrt(np.mean(np.log(predicted / measured) ** 2)))


def best_rate(measured, times_at, low: float = 3e14, high: float = 4e15) -> float:
    """The rate (FLOP/s) that minimises the log error of `times_at(rate)`, by golden-section
    search."""
    golden = (np.sqrt(5) - 1) / 2
    a, b = np.log(low), np.log(high)
    for _ in range(60):
        c, d = b - golden * (b - a), a + golden * (b - a)
        if _rms(times_at(np.exp(c)), measured) < _rms(times_at(np.exp(d)), measured):
            b = d
        else:
            a = c
    return float(np.exp((a + b) / 2))


def priced_with(grid: Grid, *, half_k: float, fill_dim: float) -> tuple[float, float]:
    """(rate, log-time RMS) of the bf16 times priced with these shape constants, the rate
    alone fitted: how well another GPU's constants price this grid."""
    rate = best_rate(grid.bf16, lambda r: grid.times(rate=r, half_k=half_k, fill_dim=fill_dim))
    return rate, _rms(grid.times(rate=rate, half_k=half_k, fill_dim=fill_dim), grid.bf16)


def fit(grid: Grid, sharpness: float = ROOFLINE_SHARPNESS):
    """(RMS, (rate, half_k, fill_dim)) minimising the bf16 log-time error: a coarse search,
    then a fine one around its best."""
    def search(half_ks, fill_dims):
        best = (np.inf, None)
        for half_k in half_ks:
            for fill_dim in fill_dims:
                rate = best_rate(grid.bf16, lambda r: grid.times(
                    rate=r, half_k=half_k, fill_dim=fill_dim, sharpness=sharpness))
                error = _rms(grid.times(rate=rate, half_k=half_k, fill_dim=fill_dim,
                                        sharpness=sharpness), grid.bf16)
                best = min(best, (error, (rate, half_k, fill_dim)), key=lambda b: b[0])
        return best
    _, (_, half_k, fill_dim) = search(np.arange(0, 401, 20), np.arange(0, 2001, 100))
    return search(np.arange(max(half_k - 20, 0), half_k + 21, 2),
                  np.arange(max(fill_dim - 100, 0), fill_dim + 101, 10))


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    preset = "dgx-h100"
    if "--preset" in sys.argv:
        preset = sys.argv[sys.argv.index("--preset") + 1]
        args.remove(preset)
    path = Path(args[0]) if args else DEFAULT
    grid = Grid.load(path, preset=preset)
    error, (rate, half_k, fill_dim) = fit(grid)
    print(f"{grid.gpu}: {len(grid.rows)} shapes "
          f"(m >= {MIN_TOKENS}), memory side of {preset}")
    print(f"bf16: rate {rate / 1e12:.0f} TFLOP/s, gemm_half_efficiency_k {half_k:.0f}, "
          f"gemm_fill_dim {fill_dim:.0f}: log-time error RMS {error:.3f}")
    shape = dict(half_k=half_k, fill_dim=fill_dim)
    fp8_rate = best_rate(grid.fp8, lambda r: grid.times(rate=r, loss_rate=rate, value_bytes=1,
                                                        **shape))
    fp8_times = grid.times(rate=fp8_rate, loss_rate=rate, value_bytes=1, **shape)
    print(f"fp8 (fast accumulation), shape loss at the bf16 rate: rate "
          f"{fp8_rate / 1e12:.0f} TFLOP/s ({fp8_rate / rate:.2f}x bf16): log-time error RMS "
          f"{_rms(fp8_times, grid.fp8):.3f}")
    same = best_rate(grid.fp8, lambda r: grid.times(rate=r, value_bytes=1, **shape))
    print(f"  (shape loss at the FP8 rate instead: RMS "
          f"{_rms(grid.times(rate=same, value_bytes=1, **shape), grid.fp8):.3f})")
    for sharpness in (3, 4, 8, 16):
        other, constants = fit(grid, sharpness)
        print(f"  (roofline sharpness {sharpness}: RMS {other:.3f} at rate "
              f"{constants[0] / 1e12:.0f}, k {constants[1]:.0f}, fill {constants[2]:.0f})")
    m, n, k = grid.m, grid.n, grid.k
    wide = (m == m.min()) & (n * k >= 4096 * 4096)
    bf16_times = grid.times(rate=rate, **shape)
    print(f"m {m.min():.0f} with n k >= 4096^2: mean log error "
          f"{np.mean(np.log(bf16_times[wide] / grid.bf16[wide])):+.3f}")
    print("k       bf16 error (mean, RMS)   fp8 error (mean, RMS)")
    for value in sorted(set(k)):
        at = k == value
        e16 = np.log(bf16_times[at] / grid.bf16[at])
        e8 = np.log(fp8_times[at] / grid.fp8[at])
        print(f"{value:6.0f}  {e16.mean():+.3f} {np.sqrt(np.mean(e16**2)):.3f}"
              f"              {e8.mean():+.3f} {np.sqrt(np.mean(e8**2)):.3f}")


if __name__ == "__main__":
    main()
