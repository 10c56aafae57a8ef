"""The model's error on every published run in bench/data, per run and per source.

    python bench/published_errors.py [--runs] [--bias] [--max-tokens-per-gpu N]

Prints, for each source (one bench/data/*.yaml), the mean absolute percentage error of the
predicted TFLOP/s per GPU (hardware FLOPs where the source counts the recompute pass, model
FLOPs otherwise; the step time where the source's TFLOP/s are not trusted), its worst run,
the Spearman rank correlation of its runs, the error of the predicted peak memory where the
source measured it, and with --runs every run. --max-tokens-per-gpu keeps the runs whose
step gives each GPU at most N tokens (global batch x sequence length / GPUs): the small steps
where fixed per-step work weighs most. --bias adds the signed error across sources, grouped by
GPU, precision, pricing framework and dense/MoE (mean, median, MAPE): a group priced slow on one
framework and fast on another with the same GPU rates points at a framework term, not the GPU.
SC21 Table 1 (the calibration set) is printed by bench/calibrate_sc21.py.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.published import load_runs, predict, spearman, speed  # noqa: E402


def tokens_per_gpu(run) -> float:
    """Tokens each GPU's step processes: global batch x sequence length / GPUs."""
    s = run.strategy
    num_gpus = (s.dp or 1) * s.tp * s.pp * s.cp
    return s.global_batch * run.problem.training.seq_len / num_gpus


def bias_groups(predictions) -> dict[tuple[str, str, str, str], list[float]]:
    """Signed errors (predicted speed / measured - 1) grouped by GPU, precision, pricing
    framework and dense/MoE."""
    groups = defaultdict(list)
    for p in predictions:
        problem = p.run.problem
        key = (problem.cluster.gpu.name, problem.training.precision.value, p.run.framework,
               "moe" if problem.model.is_moe else "dense")
        groups[key].append(p.error)
    return dict(sorted(groups.items()))


def print_bias(predictions) -> None:
    print(f"\n{'gpu':18s} {'prec':5s} {'framework':10s} {'kind':5s} {'runs':>4s} {'mean':>7s} "
          f"{'median':>7s} {'MAPE':>6s}")
    for (gpu, precision, framework, kind), errors in bias_groups(predictions).items():
        mape = sum(abs(e) for e in errors) / len(errors)
        print(f"{gpu:18s} {precision:5s} {framework:10s} {kind:5s} {len(errors):4d} "
              f"{100 * statistics.mean(errors):+6.1f}% {100 * statistics.median(errors):+6.1f}% "
              f"{100 * mape:5.1f}%")


def main() -> None:
    show_runs = "--runs" in sys.argv
    max_tokens = None
    if "--max-tokens-per-gpu" in sys.argv:
        max_tokens = float(sys.argv[sys.argv.index("--max-tokens-per-gpu") + 1])
    with tempfile.TemporaryDirectory() as tmp:
        runs, skipped = load_runs(Path(tmp))
        if max_tokens is not None:
            runs = [r for r in runs if tokens_per_gpu(r) <= max_tokens]
        predictions = predict(runs)
    by_source = defaultdict(list)
    for p in predictions:
        by_source[p.run.source].append(p)
    print(f"{'source':32s} {'runs':>4s} {'MAPE':>7s} {'worst':>8s} {'rank':>5s} "
          f"{'memory':>7s}  worst run")
    for source, preds in by_source.items():
        worst = max(preds, key=lambda p: abs(p.error))
        mape = sum(abs(p.error) for p in preds) / len(preds)
        rho = spearman([speed(p, measured=True) for p in preds],
                       [speed(p, measured=False) for p in preds])
        memory = [abs(p.memory_error) for p in preds if p.memory_error is not None]
        memory_text = f"{100 * sum(memory) / len(memory):6.1f}%" if memory else "      -"
        print(f"{source:32s} {len(preds):4d} {100 * mape:6.1f}% {100 * worst.error:+7.1f}% "
              f"{rho:5.2f} {memory_text}  {worst.run.name}")
        if show_runs:
            for p in preds:
                s = p.report.strategy
                print(f"    {p.run.name:44s} {p.run.framework:10s} tp{s.tp} pp{s.pp} dp{s.dp} "
                      f"mb{s.micro_batch} z{int(s.zero_stage)} {s.recompute.value:9s} "
                      f"measured {p.measured:6.1f} predicted {p.predicted:6.1f} "
                      f"({100 * p.error:+.1f}%){'' if p.run.measured_tflops else ' s/step'}")
    total = sum(abs(p.error) for p in predictions) / len(predictions)
    print(f"all: {len(predictions)} runs, MAPE {100 * total:.1f}%; skipped "
          + (", ".join(f"{n} ({why})" for why, n in skipped.items()) or "none"))
    if "--bias" in sys.argv:
        print_bias(predictions)


if __name__ == "__main__":
    main()
