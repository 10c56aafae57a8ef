"""Rich tables for the terminal: the only place that formats bytes, seconds and FLOP/s."""

from __future__ import annotations

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from cost_models.units import GiB
from planner.schemas.report import MemoryReport, PlanReport, StageMemory

MEMORY_ROWS = (
    ("weights", "weights_bytes"),
    ("gradients", "gradients_bytes"),
    ("optimizer states", "optimizer_bytes"),
    ("activations", "activations_bytes"),
    ("other (reserve)", "other_bytes"),
)


def gib(num_bytes: float) -> str:
    return f"{num_bytes / GiB:,.2f} GiB"


def seconds(value: float) -> str:
    if value >= 100:
        return f"{value:,.1f} s"
    if value >= 1:
        return f"{value:.2f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.1f} ms"
    return f"{value * 1e6:.0f} us"


def duration(value: float) -> str:
    days = value / 86_400
    return f"{days:,.1f} days" if days >= 1 else f"{value / 3600:,.1f} hours"


def count(value: float) -> str:
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if value >= scale:
            return f"{value / scale:,.2f}{suffix}"
    return f"{value:,.0f}"


def _stage_columns(memory: MemoryReport) -> list[tuple[str, StageMemory]]:
    """First, middle (the largest of the middle stages) and last stage."""
    stages = memory.stages
    if len(stages) == 1:
        return [("all layers", stages[0])]
    columns = [("stage 0 (first)", stages[0])]
    middle = stages[1:-1]
    if middle:
        biggest = max(middle, key=lambda s: s.total_bytes)
        label = (f"stage {biggest.stage}" if len(middle) == 1
                 else f"stages 1-{len(stages) - 2} (max: {biggest.stage})")
        columns.append((label, biggest))
    columns.append((f"stage {stages[-1].stage} (last)", stages[-1]))
    return columns


def memory_table(memory: MemoryReport, *, title: str) -> Table:
    columns = _stage_columns(memory)
    table = Table(title=title, title_justify="left")
    table.add_column("per GPU")
    for label, _ in columns:
        table.add_column(label, justify="right")
    for name, field in MEMORY_ROWS:
        table.add_row(name, *(gib(getattr(stage, field)) for _, stage in columns))
    table.add_section()
    table.add_row("total", *(gib(stage.total_bytes) for _, stage in columns), style="bold")
    table.add_row("layers", *(str(stage.num_layers) for _, stage in columns))
    table.add_row("micro-batches in flight", *(f"{stage.in_flight_micro_batches:g}"
                                               for _, stage in columns))
    return table


def fit_line(memory: MemoryReport) -> Text:
    headroom = memory.capacity_bytes - memory.peak_bytes
    verdict = "fits" if memory.fits else "does NOT fit"
    text = Text(f"peak {gib(memory.peak_bytes)} on stage {memory.peak_stage} of "
                f"{gib(memory.capacity_bytes)}: {verdict}, ")
    text.append(f"headroom {gib(headroom)}" if memory.fits else f"over by {gib(-headroom)}",
                style="green" if memory.fits else "bold red")
    return text


def strategy_label(plan: PlanReport) -> str:
    s = plan.strategy
    parts = [f"dp {s.dp}", f"tp {s.tp}", f"pp {s.pp}"]
    if s.vpp > 1:
        parts.append(f"vpp {s.vpp}")
    parts += [f"mb {s.micro_batch}"]
    if s.sequence_parallel:
        parts.append("sp")
    if s.recompute.value != "none":
        parts.append(f"recompute {s.recompute.value}")
    if s.zero_stage:
        parts.append(f"zero {int(s.zero_stage)}")
    return ", ".join(parts)


def memory_view(plan: PlanReport, *, heading: str) -> Group:
    return Group(memory_table(plan.memory, title=heading), fit_line(plan.memory))


def print_renderable(renderable, *, console: Console | None = None) -> None:
    (console or Console()).print(renderable)
