"""torchtitan's async TP share, fitted on its own A/B pairs (not a unit test).

    python bench/calibrate_async_tp.py

torchtitan's async tensor parallelism (parallelism.enable_async_tensor_parallel: torch's
micro-pipelined all-gather / reduce-scatter matmuls over symmetric memory) hides part of the TP
collectives behind the GEMMs they feed. How much is the profile's `tp_comm_overlap_fraction`.
bench/data/torchtitan_asynctp_h100_202506.yaml holds six pairs of runs measured on the same
machines with async TP off and on (Llama 3 8B on 64 H100 and 70B on 256, bf16 and FP8
tensorwise / rowwise, TP 8): the ratio of each pair's throughput is what the share sets, free
of everything the two runs share. The share is fitted on the three 70B pairs (least squares on
the log ratio) and checked on the three 8B pairs, held out. Prints both, per pair.
"""

from __future__ import annotations

import math
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.published import load_runs, with_overrides  # noqa: E402
from planner.costing.evaluate import evaluate_strategy  # noqa: E402

SOURCE = "torchtitan_asynctp_h100_202506"
FIT_ON = "llama3-70b"
"""The pairs the share is fitted on; the others are held out."""


def pairs(tmp: Path) -> list[tuple[str, object, object]]:
    """(name stem, vanilla-TP run, async-TP run) per pair of the source."""
    runs, _ = load_runs(tmp)
    mine = {r.name: r for r in runs if r.source == SOURCE}
    out = []
    for name, run in sorted(mine.items()):
        if "-vanillatp-" in name:
            other = mine.get(name.replace("-vanillatp-", "-asynctp-"))
            if other is not None:
                out.append((name.replace("-vanillatp", ""), run, other))
    return out


def measured_ratio(off, on) -> float:
    """Measured async-TP speed-up: the step times the pair's tokens per second give."""
    return off.measured_step_s / on.measured_step_s


def predicted_ratio(off, on, share: float) -> float:
    times = []
    for run in (off, on):
        problem = with_overrides(run.problem, SOURCE,
                                 framework={"tp_comm_overlap_fraction": share})
        times.append(evaluate_strategy(problem, run.strategy).time.step_s)
    return times[0] / times[1]


def fit(fit_pairs) -> float:
    """The share in [0, 1] (steps of 0.01) with the least squared log error of the ratios."""
    def loss(share):
        return sum(math.log(predicted_ratio(off, on, share) / measured_ratio(off, on)) ** 2
                   for _, off, on in fit_pairs)
    return min((i / 100 for i in range(101)), key=loss)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        all_pairs = pairs(Path(tmp))
    fitted_on = [p for p in all_pairs if FIT_ON in p[0]]
    share = fit(fitted_on)
    print(f"tp_comm_overlap_fraction fitted on {len(fitted_on)} {FIT_ON} pairs: {share:.2f}")
    for label, group in (("fitted", fitted_on),
                         ("held out", [p for p in all_pairs if FIT_ON not in p[0]])):
        errors = []
        for name, off, on in group:
            m, p = measured_ratio(off, on), predicted_ratio(off, on, share)
            p1 = predicted_ratio(off, on, 1.0)
            errors.append(abs(p / m - 1))
            print(f"  {label:8s} {name:44s} measured {m:.3f}x  predicted {p:.3f}x "
                  f"({p / m - 1:+.1%}; share 1.0: {p1:.3f}x)")
        print(f"  {label}: mean |error| of the ratio {100 * sum(errors) / len(errors):.1f}%")


if __name__ == "__main__":
    main()
