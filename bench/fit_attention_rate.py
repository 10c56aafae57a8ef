"""Fit the attention kernel's rate curve to measured kernel times.

    python bench/fit_attention_rate.py [bench/data/kernels_h200.json]
    python bench/fit_attention_rate.py --sinks FITTED.json [HELD_OUT.json ...]

`cost_models.compute.attention_kernel_fraction` gives a fused attention kernel's share of
peak, forward and backward, as reference x shape(keys, d) / shape(4096, 128) with
shape = keys / (keys + half_keys) x d / (d + half_head_dim). This fits half_keys and
half_head_dim (shared by the kernels: both are properties of the tiles and of the GPU's
exponential rate) and each kernel's share at the reference point, by least squares on the
log of the measured rates (a grid: the same data give the same constants). Input: the
attention rows of bench/device_kernels.py (PyTorch SDPA per backend, causal, bf16). Prints
the constants the presets take and each measured point against the curve.

With --sinks: the time attention sinks add to cuDNN's backward, per query row and head
(`cost_models.compute.attention_sink_backward_s`), from the cudnn rows of
bench/device_kernels.py (each shape with and without a sink): the median over the first file's
shapes is the constant (`attention_sink_row_s`); every shape of every file is printed against
it, the later files held out.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cost_models.compute import (ATTENTION_REFERENCE_HEAD_DIM,  # noqa: E402
                                 ATTENTION_REFERENCE_KEYS, attended_keys,
                                 attention_kernel_fraction)
from planner.inputs.loader import load_cluster  # noqa: E402

KERNELS = {"cudnn": "flash", "flash2": "flash2"}
"""SDPA backend -> the planner's attention kind it stands for (cuDNN fused attention is what
Transformer Engine runs on Hopper; PyTorch SDPA's flash backend is FlashAttention-2)."""

DEFAULT = Path(__file__).resolve().parent / "data" / "kernels_h200.json"


def attention_points(path: Path) -> tuple[str, list[dict]]:
    """The measured attention rows: (GPU name, [{kernel, keys, head_dim, fraction}])."""
    data = json.loads(path.read_text())
    peak = load_cluster(PRESET_OF_GPU[data["meta"]["gpu"]]).gpu.peak_tflops.bf16
    points = []
    for row in data["rows"]:
        if row.get("section") != "attention" or row.get("backend") not in KERNELS:
            continue
        if "fwd_bwd_tflops" not in row:
            continue
        points.append({"kernel": KERNELS[row["backend"]], "seq": row["seq"],
                       "keys": float(attended_keys(row["seq"], causal=True)),
                       "head_dim": row["head_dim"], "fraction": row["fwd_bwd_tflops"] / peak})
    return data["meta"]["gpu"], points


PRESET_OF_GPU = {"NVIDIA H200": "dgx-h200", "NVIDIA H100 80GB HBM3": "dgx-h100"}
"""The preset of each GPU measured, whose dense bf16 peak the rates are shares of."""


def fit(points: list[dict]) -> dict:
    """Least squares on log(rate): half_keys on a 5-key grid, half_head_dim on a 1-unit grid,
    each kernel's reference share in closed form (the mean log ratio)."""
    best = None
    kernels = sorted({p["kernel"] for p in points})
    measured = np.log([p["fraction"] for p in points])
    for half_keys in np.arange(0.0, 2000.0, 5.0):
        for half_head_dim in np.arange(0.0, 200.0, 1.0):
            shape = np.log([attention_kernel_fraction(
                keys=p["keys"], head_dim=p["head_dim"], reference_fraction=1.0,
                half_keys=half_keys, half_head_dim=half_head_dim) for p in points])
            residual = measured - shape
            refs, error = {}, 0.0
            for kernel in kernels:
                mine = np.array([p["kernel"] == kernel for p in points])
                refs[kernel] = float(np.exp(residual[mine].mean()))
                error += float(((residual[mine] - np.log(refs[kernel])) ** 2).sum())
            if best is None or error < best["error"]:
                best = {"error": error, "half_keys": float(half_keys),
                        "half_head_dim": float(half_head_dim), "reference": refs}
    return best


def sink_points(path: Path) -> tuple[str, list[dict]]:
    """(GPU name, [{shape, variant, rows, extra_s}]): per cudnn shape and mask, the backward
    time a sink adds and the query rows x heads it ran over."""
    data = json.loads(path.read_text())
    timed = [r for r in data["rows"] if r.get("section") == "cudnn" and "bwd_s" in r]
    plain = {(r["shape"], r["batch"], r["window"]): r for r in timed if not r["sink"]}
    points = []
    for r in timed:
        base = plain.get((r["shape"], r["batch"], r["window"]))
        if r["sink"] and base is not None:
            points.append({"shape": f"{r['shape']} b{r['batch']} h{r['heads']} s{r['seq']}",
                           "variant": r["variant"], "rows": r["batch"] * r["seq"] * r["heads"],
                           "extra_s": r["bwd_s"] - base["bwd_s"]})
    return data["meta"]["gpu"], points


def fit_sinks(paths: list[Path]) -> float:
    """Print the per-row sink time fitted on paths[0] and every shape against it; return it."""
    gpu, points = sink_points(paths[0])
    row_s = float(np.median([p["extra_s"] / p["rows"] for p in points]))
    print(f"{gpu}: attention_sink_row_s {row_s * 1e9:.2f} ns per query row and head "
          f"(median of {len(points)})")
    for i, path in enumerate(paths):
        gpu, points = sink_points(path)
        print(f"{gpu} ({'fitted' if i == 0 else 'held out'}):")
        for p in points:
            model = p["rows"] * row_s
            print(f"  {p['shape']:28s} {p['variant']:15s} measured {p['extra_s'] * 1e3:6.3f} ms"
                  f"  model {model * 1e3:6.3f} ms  {100 * (model / p['extra_s'] - 1):+6.1f}%")
    return row_s


def main() -> None:
    if "--sinks" in sys.argv:
        fit_sinks([Path(a) for a in sys.argv[sys.argv.index("--sinks") + 1:]])
        return
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    gpu, points = attention_points(path)
    best = fit(points)
    print(f"{gpu}: attention_half_keys {best['half_keys']:.0f}, attention_half_head_dim "
          f"{best['half_head_dim']:.0f}; at {ATTENTION_REFERENCE_KEYS} keys, d "
          f"{ATTENTION_REFERENCE_HEAD_DIM}: "
          + ", ".join(f"{k} {v:.3f}" for k, v in best["reference"].items()))
    print(f"{'kernel':8s} {'seq':>6s} {'d':>4s} {'measured':>9s} {'curve':>7s} {'error':>7s}")
    for p in points:
        curve = attention_kernel_fraction(
            keys=p["keys"], head_dim=p["head_dim"],
            reference_fraction=best["reference"][p["kernel"]], half_keys=best["half_keys"],
            half_head_dim=best["half_head_dim"])
        print(f"{p['kernel']:8s} {p['seq']:6d} {p['head_dim']:4d} {p['fraction']:9.3f} "
              f"{curve:7.3f} {100 * (curve / p['fraction'] - 1):+6.1f}%")


if __name__ == "__main__":
    main()
