"""Fit Megatron-Core's host time per MoE layer (outside CUDA graphs) on the published MoE runs;
check each release against a fit on the others.

    python bench/calibrate_moe_host.py

Megatron-Bridge's performance summaries (bench/data/megatron_bridge_moe.yaml) run fine-grained
MoE models eagerly or with part of each layer in CUDA graphs (attention, router and
preprocess: the token path stays eager), and with the whole step graphed. Three constants of
the Megatron profile (planner/inputs/profiles/megatron.yaml) are fitted by a grid search that
minimises the mean absolute log ratio of measured to predicted step time (symmetric, so that
the few runs measured at 2-3x their prediction do not set it alone): `moe_token_path_host_s`
(host seconds per layer and pass of the dispatcher's and permutation's kernels, 0-3 ms),
`moe_gemm_launch_host_s` (per expert GEMM: Transformer Engine's per-GEMM Python and C++ work
and one cuBLASLt launch with its descriptors and heuristic query, 0-100 us) and
`moe_quantize_launch_host_s` (per quantize kernel of the experts' FP8 casts, counted by
cost_models.expert_parallel.expert_quantizations from Transformer Engine's split_quantize:
three per expert under current scaling, one under MXFP8, 0-60 us).

Fitted on all 80 rows of the source (6 releases, 25.09 to 26.08, every model and GPU, bf16
and FP8). Held out: each release is predicted from a fit on the other five (leave one release
out; the error over all rows predicted that way is the held-out number, and
bench/error_bands.py prices the rows that way), and the skills source's BF16 runs
(bench/data/megatron_bridge_skills_moe.yaml), never fitted. Copy the result into megatron.yaml.
A few minutes on 2 cores.
"""

from __future__ import annotations

import math
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.published import BRIDGE_RELEASE_IN_NAME, load_runs  # noqa: E402
from planner.costing.evaluate import evaluate_strategy  # noqa: E402

SOURCE = "megatron_bridge_moe"
ALSO_HELD_OUT = "megatron_bridge_skills_moe"
TOKEN_PATH_S = [i * 0.5e-3 for i in range(0, 7)]
GEMM_LAUNCH_S = [i * 20e-6 for i in range(0, 6)]
QUANTIZE_LAUNCH_S = [i * 10e-6 for i in range(0, 7)]
GRID = [(t, g, q) for t in TOKEN_PATH_S for g in GEMM_LAUNCH_S for q in QUANTIZE_LAUNCH_S]


def with_host(problem, point):
    """`problem` priced with the host constants `point` (token path, per GEMM, per quantize)."""
    token_path_s, gemm_launch_s, quantize_s = point
    fw = problem.framework.model_copy(update={"moe_token_path_host_s": token_path_s,
                                              "moe_gemm_launch_host_s": gemm_launch_s,
                                              "moe_quantize_launch_host_s": quantize_s})
    return replace(problem, framework=fw)


def step_s(run, point) -> float:
    return evaluate_strategy(with_host(run.problem, point), run.strategy).time.step_s


def release(run) -> str:
    """The release a row was measured on: its name's yymm (25.09 ... 26.08; a patch release
    goes with its release)."""
    return BRIDGE_RELEASE_IN_NAME.search(run.name).group(1)[:4]


def mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def mape(errors) -> float:
    return mean(abs(e) for e in errors)


def grid_steps(runs) -> dict[str, list[float]]:
    """Each run's predicted step time at every point of GRID."""
    return {r.name: [step_s(r, point) for point in GRID] for r in runs}


def best_point(rows, steps) -> int:
    """The GRID index of least mean |log(measured / predicted)| over `rows`."""
    return min(range(len(GRID)), key=lambda i: mean(
        abs(math.log(r.measured_step_s / steps[r.name][i])) for r in rows))


def source_rows(runs) -> list:
    return [r for r in runs if r.source == SOURCE and r.measured_step_s]


def held_out_points(rows, steps) -> dict[str, tuple[float, float, float]]:
    """Per row of the source, the constants fitted on the other releases' rows: what predicts
    it held out."""
    out = {}
    for name in sorted({release(r) for r in rows}):
        point = GRID[best_point([r for r in rows if release(r) != name], steps)]
        out.update({r.name: point for r in rows if release(r) == name})
    return out


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        runs, _ = load_runs(Path(tmp))
    runs = [r for r in runs if r.source in (SOURCE, ALSO_HELD_OUT) and r.measured_step_s]
    rows = source_rows(runs)
    steps = grid_steps(runs)
    without = {r.name: step_s(r, (0.0, 0.0, 0.0)) for r in runs}

    def error(run, i: int) -> float:
        return run.measured_step_s / steps[run.name][i] - 1

    best = best_point(rows, steps)
    token, gemm, cast = GRID[best]
    edges = [name for name, value, grid in (("gemm", gemm, GEMM_LAUNCH_S),
                                            ("cast", cast, QUANTIZE_LAUNCH_S),
                                            ("token path", token, TOKEN_PATH_S))
             if value == grid[-1]]
    print(f"fitted on {len(rows)} runs: moe_token_path_host_s {token * 1e3:.2f} ms, "
          f"moe_gemm_launch_host_s {gemm * 1e6:.0f} us, moe_quantize_launch_host_s "
          f"{cast * 1e6:.0f} us" + (f" (at the grid's bound: {', '.join(edges)})" if edges else ""))
    print(f"fitted    {len(rows):3d} runs  MAPE "
          f"{100 * mape(r.measured_step_s / without[r.name] - 1 for r in rows):5.1f}% without "
          f"the host term -> {100 * mape(error(r, best) for r in rows):5.1f}% with it")
    held = held_out_points(rows, steps)
    for name in sorted({release(r) for r in rows}):
        test = [r for r in rows if release(r) == name]
        t, g, q = held[test[0].name]
        i = GRID.index((t, g, q))
        print(f"  release {name}: {len(test):2d} runs predicted from the other releases' fit "
              f"({t * 1e3:.1f} ms, {g * 1e6:.0f} us, {q * 1e6:.0f} us): MAPE "
              f"{100 * mape(error(r, i) for r in test):5.1f}%")
    print(f"held out  {len(rows):3d} runs  MAPE "
          f"{100 * mape(error(r, GRID.index(held[r.name])) for r in rows):5.1f}% (each release "
          f"from a fit on the others)")
    skills = [r for r in runs if r.source == ALSO_HELD_OUT]
    print(f"held out ({ALSO_HELD_OUT}) {len(skills)} runs  MAPE "
          f"{100 * mape(r.measured_step_s / without[r.name] - 1 for r in skills):5.1f}% without "
          f"the host term -> {100 * mape(error(r, best) for r in skills):5.1f}% with it")


if __name__ == "__main__":
    main()
