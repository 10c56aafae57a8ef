"""The B200's GEMM share of peak, from OpenXLA's measured GEMM tables, relative to the H100's.

    python bench/blackwell_gemm_share.py

`gemm_peak_fraction` of dgx-h100 is fitted on H100 training runs (bench/calibrate_frameworks.py).
No B200 run was used to fit the B200's; instead the training share is carried over by the ratio
of what the two chips reach on the same GEMM, measured by the same tool in the same XLA release
(bench/data/xla_matmul_perf_table.yaml, sm_100 = B200, sm_90 = H100, bf16):

    B200 fraction = H100 fraction x (B200 TFLOP/s / B200 peak) / (H100 TFLOP/s / H100 peak)

taken at the largest GEMM of the tables (b 4, m n k 4096: 2.7e11 multiply-adds; one micro-batch's
MLP up-projection of an 8B model at 8K tokens is 4.8e11). The H100 is saturated there
(0.78-0.81 of peak from b 1 to b 4); the B200 is still climbing (0.63 at b 1, 0.74 at b 4): its
148 SMs and 2-SM 256-wide tiles need more work per GEMM. Training GEMMs are at least this
large, so the ratio is an upper bound on the B200's shortfall.

The GB200 is the same B200 die at a higher power limit; its datasheet peak is 11% above the
B200's (2.5 against 2.25 PFLOP/s bf16), but at one layout in one release it measures 3-4.5%
faster, not 11% (Megatron-Bridge 25.09 / 25.11, Llama 3 8B on 8 GPUs: `SAME_LAYOUT_PAIRS`). So
gb200-nvl72 takes the B200's absolute rate: fraction = B200 fraction x 2250 / 2500, and those
pairs check it (printed).

The GB300 has the GB200's datasheet peaks at a higher power limit (1,400 W against 1,200 W),
and measures 1.19x the GB200's tokens per second at one layout in one release (Megatron-Bridge
25.11, Llama 3 8B FP8-CS on 8 GPUs, tp 1 dp 8 mb 2: `GB300_PAIR`). No GEMM table measures it,
so gb300-nvl72's fraction is fitted to that pair: the fraction at which the planner's
GB200 / GB300 step ratio on the two runs equals the measured one (bisection). The GB300's
other published runs are held out (printed; `bench/published_errors.py` has them all).
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TABLE = ROOT / "bench" / "data" / "xla_matmul_perf_table.yaml"
PRESETS = ROOT / "planner" / "inputs" / "presets"
LARGEST = (4, 4096, 4096, 4096)          # b, m, n, k
RELEASES = ("xla-2025-10-21", "xla-2025-08-14")   # the two releases that measured both chips
SAME_LAYOUT_PAIRS = (                     # (B200 run, GB200 run, tokens/s per GPU each)
    ("llama3-8b-b200-8-fp8cs-2509", "llama3-8b-gb200-8-fp8cs-2509", 29994, 31357),
    ("llama3-8b-b200-8-fp8cs-2511", "llama3-8b-gb200-8-fp8cs-2511", 30624, 31508),
)


GB300_PAIR = ("llama3-8b-gb200-8-fp8cs-2511", "llama3-8b-gb300-8-fp8cs-2511", 31508, 37556)
"""(GB200 run, GB300 run, tokens/s per GPU each): Megatron-Bridge 25.11's performance summary."""


def _preset(name: str) -> dict:
    return yaml.safe_load((PRESETS / f"{name}.yaml").read_text())


def share_ratio(release: str, shape: tuple[int, int, int, int] = LARGEST) -> float:
    """(B200 share of its bf16 peak) / (H100 share of its bf16 peak) at `shape` in `release`."""
    data = yaml.safe_load(TABLE.read_text())
    peaks = {"sm_100": _preset("dgx-b200")["gpu"]["peak_tflops"]["bf16"],
             "sm_90": _preset("dgx-h100")["gpu"]["peak_tflops"]["bf16"]}
    share = {}
    for table in data["tables"]:
        if table["file"] == release and table["arch"] in peaks:
            (entry,) = [e for e in table["entries"] if (e["b"], e["m"], e["n"], e["k"]) == shape]
            share[table["arch"]] = entry["bf16"] / peaks[table["arch"]]
    return share["sm_100"] / share["sm_90"]


def b200_fraction() -> float:
    """The B200's gemm_peak_fraction: the H100's, times the newest release's measured ratio."""
    h100 = _preset("dgx-h100")["efficiency"]["gemm_peak_fraction"]
    return round(h100 * share_ratio(RELEASES[0]), 3)


def gb200_fraction() -> float:
    """The GB200's: the B200's absolute rate over the GB200's higher datasheet peak."""
    b200, gb200 = _preset("dgx-b200")["gpu"], _preset("gb200-nvl72")["gpu"]
    return round(b200_fraction() * b200["peak_tflops"]["bf16"] / gb200["peak_tflops"]["bf16"], 3)


def _step_s(run, fraction: float | None = None) -> float:
    from bench.published import with_overrides
    from planner.costing.evaluate import evaluate_strategy
    problem = run.problem
    if fraction is not None:
        problem = with_overrides(problem, "blackwell_gemm_share",
                                 cluster={"efficiency": {"gemm_peak_fraction": fraction}})
    return evaluate_strategy(problem, run.strategy).time.step_s


def gb300_fit(runs) -> float:
    """gb300-nvl72's gemm_peak_fraction at which the predicted GB200 / GB300 step ratio of
    `GB300_PAIR` is the measured one."""
    gb200_run, gb300_run, gb200_tokens, gb300_tokens = GB300_PAIR
    by_name = {r.name: r for r in runs}
    gb200_s, target = _step_s(by_name[gb200_run]), gb300_tokens / gb200_tokens
    low, high = 0.3, 1.0
    for _ in range(40):
        mid = (low + high) / 2
        if gb200_s / _step_s(by_name[gb300_run], mid) < target:
            low = mid
        else:
            high = mid
    return round((low + high) / 2, 3)


def main() -> int:
    for release in RELEASES:
        print(f"{release}: B200 / H100 share of bf16 peak at b{LARGEST[0]} "
              f"{'x'.join(map(str, LARGEST[1:]))}: {share_ratio(release):.3f}")
    b200, gb200 = b200_fraction(), gb200_fraction()
    print(f"dgx-b200 gemm_peak_fraction: {b200}  (preset: "
          f"{_preset('dgx-b200')['efficiency']['gemm_peak_fraction']})")
    print(f"gb200-nvl72 gemm_peak_fraction: {gb200}  (preset: "
          f"{_preset('gb200-nvl72')['efficiency']['gemm_peak_fraction']})")
    for b_run, gb_run, b_tokens, gb_tokens in SAME_LAYOUT_PAIRS:
        print(f"check: {gb_run} / {b_run}: measured {gb_tokens / b_tokens:.3f}x, "
              f"the presets' GEMM rates 1.000x")
    import tempfile

    from bench.published import load_runs
    with tempfile.TemporaryDirectory() as tmp:
        runs, _ = load_runs(Path(tmp))
    gb300 = gb300_fit(runs)
    preset = _preset("gb300-nvl72")["efficiency"]["gemm_peak_fraction"]
    print(f"gb300-nvl72 gemm_peak_fraction: {gb300} fitted on {GB300_PAIR[1]} / {GB300_PAIR[0]} "
          f"({GB300_PAIR[3] / GB300_PAIR[2]:.3f}x)  (preset: {preset})")
    held = [r for r in runs
            if r.problem.cluster.name == "gb300-nvl72" and r.name != GB300_PAIR[1]]
    for r in held:
        print(f"held out: {r.name:45s} measured / predicted - 1: "
              f"{100 * (r.measured_step_s / _step_s(r) - 1):+5.1f}% at the preset's "
              f"fraction")
    return 0


if __name__ == "__main__":
    sys.exit(main())
