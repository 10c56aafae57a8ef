"""The planner's GEMM model against GEMM kernel times measured on the GPU.

    python bench/gemm_model_vs_kernels.py [bench/data/kernels_h100.json] [--preset dgx-h100]

For every bf16 GEMM and grouped expert GEMM that bench/device_kernels.py timed, prints the rate
`cost_models.compute.gemm_time_s` gives the same shape with the preset's calibrated constants
(`gemm_peak_fraction`, `gemm_half_efficiency_dim`) next to the measured one. The grouped rows
are priced as the planner prices routed experts: one GEMM of tokens-per-expert rows per local
expert (the gated first layer, [t x h] @ [h x 2f]); measured is the faster of
torch._grouped_mm and one cuBLAS GEMM per expert. A diagnostic: nothing is fitted here.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cost_models.compute import Gemm, gemm_flops, gemm_time_s  # noqa: E402
from planner.inputs.loader import load_cluster  # noqa: E402

DEFAULT = Path(__file__).resolve().parent / "data" / "kernels_h100.json"


def model_tflops(cluster, m: int, n: int, k: int, batch: int = 1) -> float:
    eff = cluster.efficiency
    g = Gemm(m, n, k, batch)
    seconds = gemm_time_s(g, peak_flops=cluster.gpu.peak_tflops.bf16 * 1e12,
                          peak_fraction=eff.gemm_peak_fraction,
                          half_efficiency_k=eff.gemm_half_efficiency_k, fill_dim=eff.gemm_fill_dim,
                          hbm_bytes_per_s=cluster.gpu.hbm_gb_per_s * 1e9,
                          hbm_fraction=eff.hbm_fraction)
    return float(gemm_flops(g) / seconds / 1e12)


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    path = Path(args[0]) if args else DEFAULT
    preset = sys.argv[sys.argv.index("--preset") + 1] if "--preset" in sys.argv else "dgx-h100"
    cluster = load_cluster(preset)
    data = json.loads(path.read_text())
    print(f"{data['meta']['gpu']} against {preset}'s GEMM model")
    ratios = {"gemm": [], "grouped": []}
    print(f"{'shape':38s} {'model':>7s} {'measured':>9s} {'model/measured':>15s}")
    for r in data["rows"]:
        if r.get("section") == "gemm" and "bf16_fwd_tflops" in r:
            measured = r["bf16_fwd_tflops"]
            model = model_tflops(cluster, r["m"], r["n"], r["k"])
            label = f"dense m {r['m']} n {r['n']} k {r['k']}"
            kind = "gemm"
        elif r.get("section") == "grouped" and "loop_mm_tflops" in r:
            measured = max(r.get("grouped_mm_tflops", 0.0), r["loop_mm_tflops"])
            model = model_tflops(cluster, r["tokens_per_expert"], 2 * r["ffn"], r["hidden"],
                                 r["experts"])
            label = f"{r['model']} {r['experts']} experts x {r['tokens_per_expert']} tokens"
            kind = "grouped"
        else:
            continue
        ratios[kind].append(model / measured)
        print(f"{label:38s} {model:7.0f} {measured:9.0f} {model / measured:15.2f}")
    for kind, values in ratios.items():
        if values:
            print(f"{kind}: model / measured median {statistics.median(values):.2f}, "
                  f"range {min(values):.2f}-{max(values):.2f} over {len(values)} shapes")


if __name__ == "__main__":
    main()
