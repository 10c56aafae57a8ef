"""Fit NVFP4's GEMM efficiency on GB200 to a paired published run; check it on the other pair.

    python bench/calibrate_nvfp4.py

Megatron-Bridge 26.04.01 ran Llama 3.1 405B and Llama 3 70B on GB200 in NVFP4 and in MXFP8 at
the same layout (bench/data/megatron_bridge_nvfp4.yaml). The ratio of a pair's speeds leaves
the recipe alone: everything but the linear layers' GEMMs and their quantization is the same
run. One constant, `efficiency.fp8_gemm_efficiency.nvfp4` of gb200-nvl72 (the FP4 GEMMs' share
of the FP4 peak relative to bf16's share of the bf16 peak), is bisected so that the 405B pair's
predicted ratio equals the measured one (its GEMMs are the widest, so its ratio is the
GEMMs'); the 70B pair, whose narrower GEMMs leave more to quantization, is held out.
Copy the result into planner/inputs/presets/gb200-nvl72.yaml (and dgx-b200.yaml, the same die).
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.published import load_runs  # noqa: E402
from cost_models.enums import Fp8Recipe  # noqa: E402
from planner.costing.evaluate import evaluate_strategy  # noqa: E402

SOURCE = "megatron_bridge_nvfp4"
PAIRS = {"405B (fitted)": ("llama31-405b-gb200-256-nvfp4-260401",
                           "llama31-405b-gb200-256-mxfp8-260401"),
         "70B (held out)": ("llama3-70b-gb200-64-nvfp4-260401",
                            "llama3-70b-gb200-64-mxfp8-260401")}


def step_s(run, efficiency: float) -> float:
    cluster = run.problem.cluster
    gemm = {**cluster.efficiency.fp8_gemm_efficiency, Fp8Recipe.NVFP4: efficiency}
    cluster = cluster.model_copy(update={"efficiency": cluster.efficiency.model_copy(
        update={"fp8_gemm_efficiency": gemm})})
    return evaluate_strategy(replace(run.problem, cluster=cluster), run.strategy).time.step_s


def ratio(runs, pair, efficiency: float) -> float:
    """Predicted NVFP4 / MXFP8 speed of a pair (MXFP8 step over NVFP4 step)."""
    nvfp4, mxfp8 = (runs[name] for name in pair)
    return step_s(mxfp8, efficiency) / step_s(nvfp4, efficiency)


def measured(runs, pair) -> float:
    """Measured NVFP4 / MXFP8 speed: the step times their tokens per second give."""
    nvfp4, mxfp8 = (runs[name] for name in pair)
    return mxfp8.measured_step_s / nvfp4.measured_step_s


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        loaded, _ = load_runs(Path(tmp), only={(SOURCE, n) for p in PAIRS.values() for n in p})
    runs = {r.name: r for r in loaded}
    fitted = PAIRS["405B (fitted)"]
    target = measured(runs, fitted)
    low, high = 0.3, 1.2
    for _ in range(20):                      # the ratio grows with the efficiency
        mid = (low + high) / 2
        low, high = (mid, high) if ratio(runs, fitted, mid) < target else (low, mid)
    efficiency = round((low + high) / 2, 3)
    print(f"nvfp4 GEMM efficiency on GB200: {efficiency}")
    for label, pair in PAIRS.items():
        predicted, actual = ratio(runs, pair, efficiency), measured(runs, pair)
        print(f"  {label:15s} NVFP4/MXFP8 speed measured {actual:.3f} predicted {predicted:.3f} "
              f"({predicted / actual - 1:+.1%})")


if __name__ == "__main__":
    main()
