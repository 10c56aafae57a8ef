"""Fit Megatron-Core's host time per MoE layer (outside CUDA graphs) on one release's MoE runs;
check it on every other release's.

    python bench/calibrate_moe_host.py

Megatron-Bridge's performance summaries (bench/data/megatron_bridge_moe.yaml) run fine-grained
MoE models eagerly or with part of each layer in CUDA graphs (attention, router and
preprocess: the token path stays eager), and with the whole step graphed. Three constants of
the Megatron profile (planner/inputs/profiles/megatron.yaml) are fitted by a grid search that
minimises the mean absolute log ratio of measured to predicted step time (symmetric, so that
the few runs measured at 3x their prediction do not set it alone): `moe_token_path_host_s`
(host seconds per layer and pass of the dispatcher's and permutation's kernels, 0-5 ms),
`moe_gemm_launch_host_s` (per expert GEMM: Transformer Engine's per-GEMM Python and C++ work
and one cuBLASLt launch with its descriptors and heuristic query, 0-100 us) and
`moe_quantize_launch_host_s` (per expert FP8 cast: its quantizer's amax, scale and cast
launches, 0-150 us). The error is flat along a ridge (less token path, more per expert): the
grid's minimum is reported, and the held-out error moves by under 1 point along the ridge.
Fitted on the 25.11 release's rows (one software stack, every model and GPU of the source, bf16
and FP8); held out: the rows of the seven other releases and the skills source's BF16 runs
(bench/data/megatron_bridge_skills_moe.yaml). Copy the result into megatron.yaml.
"""

from __future__ import annotations

import math
import sys
import tempfile
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.published import load_runs  # noqa: E402
from planner.costing.evaluate import evaluate_strategy  # noqa: E402

SOURCE = "megatron_bridge_moe"
ALSO_HELD_OUT = "megatron_bridge_skills_moe"
FITTED = "-2511"                     # the runs whose names hold this are fitted
TOKEN_PATH_S = [i * 0.5e-3 for i in range(0, 11)]
GEMM_LAUNCH_S = [i * 10e-6 for i in range(0, 11)]
QUANTIZE_LAUNCH_S = [i * 10e-6 for i in range(0, 16)]


def step_s(run, token_path_s: float, gemm_launch_s: float, quantize_s: float) -> float:
    fw = run.problem.framework.model_copy(update={"moe_token_path_host_s": token_path_s,
                                                  "moe_gemm_launch_host_s": gemm_launch_s,
                                                  "moe_quantize_launch_host_s": quantize_s})
    return evaluate_strategy(replace(run.problem, framework=fw), run.strategy).time.step_s


def error(run, predicted_s: float) -> float:
    return run.measured_step_s / predicted_s - 1


def log_error(run, predicted_s: float) -> float:
    return abs(math.log(run.measured_step_s / predicted_s))


def mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def mape(errors) -> float:
    return mean(abs(e) for e in errors)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        runs, _ = load_runs(Path(tmp))
    runs = [r for r in runs if r.source in (SOURCE, ALSO_HELD_OUT) and r.measured_step_s]
    fitted = [r for r in runs if r.source == SOURCE and FITTED in r.name]
    best = None
    for token in TOKEN_PATH_S:
        for gemm in GEMM_LAUNCH_S:
            for cast in QUANTIZE_LAUNCH_S:
                score = mean(log_error(r, step_s(r, token, gemm, cast)) for r in fitted)
                if best is None or score < best[0]:
                    best = (score, token, gemm, cast)
    _, token, gemm, cast = best
    edges = [name for name, value, grid in (("gemm", gemm, GEMM_LAUNCH_S),
                                            ("cast", cast, QUANTIZE_LAUNCH_S),
                                            ("token path", token, TOKEN_PATH_S))
             if value == grid[-1]]
    print(f"fitted on {len(fitted)} runs ({FITTED}): moe_token_path_host_s {token * 1e3:.2f} ms, "
          f"moe_gemm_launch_host_s {gemm * 1e6:.0f} us, moe_quantize_launch_host_s "
          f"{cast * 1e6:.0f} us" + (f" (at the grid's bound: {', '.join(edges)})" if edges else ""))
    by = defaultdict(lambda: ([], []))
    for r in runs:
        name = ("fitted" if r in fitted else
                "held out" if r.source == SOURCE else f"held out ({r.source})")
        before, after = by[name]
        before.append(error(r, step_s(r, 0.0, 0.0, 0.0)))
        after.append(error(r, step_s(r, token, gemm, cast)))
    for name, (before, after) in by.items():
        print(f"{name:9s} {len(after):3d} runs  MAPE {100 * mape(before):5.1f}% without the host "
              f"term -> {100 * mape(after):5.1f}% with it")

if __name__ == "__main__":
    main()
