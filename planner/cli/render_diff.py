"""`planner diff` for the terminal and the JSON summary: two plans side by side, term by term,
and the sentence that explains the gap."""

from __future__ import annotations

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from planner.cli.render import (MEMORY_ROWS, OPTIONAL_TIME_ROWS, TIME_ROWS, count, gib, run_label,
                                percent, rate, seconds, strategy_phrase, violations_text)


DIFF_TERMS = {"compute_s": "compute", "tp_comm_s": "tensor-parallel communication",
              "pp_comm_s": "pipeline communication", "dp_comm_s": "data-parallel communication",
              "ep_comm_s": "expert-parallel communication",
              "cp_comm_s": "context-parallel communication",
              "host_wait_s": "MoE host launch wait",
              "pipeline_engine_s": "pipeline engine overhead", "bubble_s": "pipeline bubble",
              "optimizer_s": "optimizer step", "offload_s": "CPU offload",
              "grad_zero_s": "gradient buffer zeroing", "grad_norm_s": "gradient norm + clipping",
              "loss_reduce_s": "loss all-reduce",
              "overhead_s": "host + sync per step", "weights_bytes": "weights",
              "gradients_bytes": "gradients", "optimizer_bytes": "optimizer states",
              "activations_bytes": "activations", "other_bytes": "reserve"}
"""The terms as the explanation sentence names them."""

LABEL_CHARS = 14
"""The longest file name `planner diff` heads a column with: the table stays within 80
columns."""


def diff_labels(path_a: str, path_b: str) -> tuple[str, str]:
    """Short labels for two files: their names ('a.yaml') where both are short and differ,
    else 'A' and 'B' (the lines above the table say which file is which)."""
    from pathlib import Path

    a, b = Path(path_a).name, Path(path_b).name
    if a == b or not 0 < max(len(a), len(b)) <= LABEL_CHARS or not min(len(a), len(b)):
        return "A", "B"
    return a, b


def _signed(delta: float, unit) -> str:
    """'+2.10 s', '-1.50 GiB': the sign, then `unit` (a formatter) of the size; '0' for none."""
    if not delta:
        return "0"
    return ("+" if delta > 0 else "-") + unit(abs(delta))


def _reason(reason) -> str:
    term = reason.term
    unit = seconds if term.name.endswith("_s") else gib
    why = f" with {reason.why}" if reason.why else ""
    return f"{DIFF_TERMS[term.name]} {_signed(term.delta, unit)}{why}"


def diff_summary(diff, labels: tuple[str, str]) -> str:
    """The one sentence: how much faster or slower B is, and the terms that explain it."""
    a, b = labels
    step = diff.step
    fair = ""
    if not diff.same_work:
        work = [f"{diff.num_gpus.b:g} vs {diff.num_gpus.a:g} GPUs"] if diff.num_gpus.delta else []
        if diff.tokens_per_step.delta:
            work.append(f"{count(diff.tokens_per_step.b)} vs {count(diff.tokens_per_step.a)} "
                        f"tokens per step")
        fair = (f" in tokens/s ({rate(diff.tokens_per_s.b)} vs {rate(diff.tokens_per_s.a)} "
                f"with {' and '.join(work)}: the fair measure here)")
    if diff.equally_fast:
        head = f"{a} and {b} are about equally fast{fair}"
        if diff.same_work:
            head += f" ({seconds(step.a)} vs {seconds(step.b)} per step)"
    else:
        ratio = diff.speedup
        head = (f"{b} is {ratio:.2f}x faster than {a}{fair}" if ratio > 1
                else f"{b} is {1 / ratio:.2f}x slower than {a}{fair}")
    if not diff.explaining:
        return head + "."
    reasons = [_reason(r) for r in diff.explaining]
    if diff.others_s:
        reasons.append(f"other terms {_signed(diff.others_s, seconds)}")
    per_step = "" if diff.same_work else (
        f"; its step is {seconds(step.b)} vs {seconds(step.a)}")
    return f"{head}{per_step}: {'; '.join(reasons)}."


def diff_memory_summary(diff, labels: tuple[str, str]) -> str:
    """The memory gap in one sentence: both peaks and the term that moves it most."""
    a, b = labels
    peak = diff.peak
    if not diff.memory_driver:
        return f"Memory: the same peak on both, {gib(peak.a)} per GPU."
    return (f"Memory: peak {gib(peak.b)} ({b}) vs {gib(peak.a)} ({a}) per GPU, "
            f"{_signed(peak.delta, gib)}; the largest change: "
            f"{_reason(diff.memory_driver)}.")


def _side_line(tag: str, label: str, review) -> Text:
    """'A = a.yaml (megatron): dp 8, tp 1, ...; 32 GPUs, batch 512 x 8192, bf16, megatron;
    fits', naming the whole path where the label is short for it."""
    p, report = review.problem, review.report
    name = tag if label == tag else f"{tag} = {label}"
    where = [part for part in (review.file if review.file != label else "",
                               review.target.value if review.target else "") if part]
    where = f" ({', '.join(where)})" if where else ""
    fits = "fits" if report.memory.fits else "does NOT fit"
    return Text(f"{name}{where}: {strategy_phrase(review.strategy)}; "
                f"{p.num_gpus} GPUs, batch {review.strategy.global_batch} x "
                f"{p.training.seq_len}, {run_label(p)}, {p.framework.name}; "
                f"{fits}")


def diff_table(diff, labels: tuple[str, str]) -> Table:
    """Rows: memory at each peak stage, time per step, throughput; columns A, B, B - A."""
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False)
    table.add_column("", no_wrap=True)
    for name in (*labels, "B - A"):
        table.add_column(name, justify="right", no_wrap=True)

    def row(name: str, term, unit) -> None:
        table.add_row(name, unit(term.a), unit(term.b), _signed(term.delta, unit))

    table.add_row(Text("memory per GPU, peak stage", style="bold"), "", "", "")
    memory = {t.name: t for t in diff.memory}
    for name, field in MEMORY_ROWS:
        row(f"  {name}", memory[field], gib)
    row("  peak", diff.peak, gib)
    table.add_section()
    table.add_row(Text("time per step", style="bold"), "", "", "")
    time = {t.name: t for t in diff.time}
    for name, field in TIME_ROWS:
        term = time[field]
        if field in OPTIONAL_TIME_ROWS and not (term.a or term.b):
            continue
        row(f"  {name}", term, seconds)
    row("  step", diff.step, seconds)
    table.add_section()
    row("tokens/s", diff.tokens_per_s, rate)
    table.add_row("MFU", percent(diff.mfu.a), percent(diff.mfu.b),
                  _signed(diff.mfu.delta * 100, lambda v: f"{v:.1f} pt"))
    return table


def diff_view(heading: str, diff, reviews, labels: tuple[str, str]) -> Group:
    """`planner diff`: the two plans, the table, the explanation, and each file's problems."""
    parts = [Text(heading, style="bold"),
             *(_side_line(tag, label, r) for tag, label, r in zip("AB", labels, reviews)),
             diff_table(diff, labels),
             Text(diff_summary(diff, labels), style="bold"),
             Text(diff_memory_summary(diff, labels))]
    for label, review in zip(labels, reviews):
        if review.violations:
            parts.append(Text(f"{label}: ", style="bold") + violations_text(review.violations))
        parts += [Text(f"note ({label}): {note}", style="dim") for note in review.notes]
    return Group(*parts)
