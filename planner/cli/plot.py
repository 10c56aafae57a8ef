"""`planner sweep --plot`: how a job scales with its GPU count, as an SVG written by hand (no
plotting dependency), and as a PNG too where matplotlib is installed.

Panels, each against the GPU count on a log axis:
* throughput (tokens/s) on a log axis, with ideal scaling: a line through the first count's
  throughput, proportional to the GPUs (on log-log axes, linear scaling is a line of slope 1,
  and how far the points fall below it is the loss);
* strong-scaling efficiency in percent, 100% marked;
* with --tokens, time to train on a log axis, with its ideal line (inversely proportional);
* with --gpu-hour-price, the cost to train on a linear axis from 0 (constant under ideal
  scaling).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.cli import svg

PANEL_W, PANEL_H = 420, 300
"""Pixels of one panel, its axis labels included."""
LEFT, RIGHT, TOP, BOTTOM = 66, 14, 30, 50
"""Pixels around a panel's plotting area: tick labels and the axis title on the left, the GPU
ticks and the x axis title below."""
COLUMNS = 2
LINE, IDEAL = "#1f77b4", "#888888"


@dataclass(frozen=True)
class Panel:
    """One panel: `values` against the sweep's GPU counts (None where nothing fits)."""

    title: str
    y_label: str
    """The axis title, with its unit."""
    values: list[float | None]
    log_y: bool = False
    ideal: list[float | None] | None = None
    """Ideal scaling from the first count with a value (drawn dashed)."""
    percent: bool = False
    """Values are fractions, shown in percent with 100% marked."""
    tick_format: str = "si"
    """'si' (1.5K, 2M) or 'usd' ($1.5K)."""


def sweep_panels(rows) -> list[Panel]:
    """The panels of a sweep (`planner.search.sweep.SweepRow`s): throughput and scaling
    efficiency; time to train when the token budget is known; cost when priced."""
    xs = [r.gpus for r in rows]
    tokens = [r.plan.throughput.tokens_per_s if r.plan else None for r in rows]
    panels = [Panel("Throughput", "tokens/s (log scale)", tokens, log_y=True,
                    ideal=_ideal(xs, tokens, power=1)),
              Panel("Scaling efficiency", "tokens/s per GPU vs. first (%)",
                    [r.scaling_efficiency for r in rows], percent=True)]
    train = [r.plan.throughput.time_to_train_s if r.plan else None for r in rows]
    if any(t is not None for t in train):
        longest = max(t for t in train if t is not None)
        unit, scale = ("days", 86_400.0) if longest >= 2 * 86_400 else ("hours", 3600.0)
        values = [t / scale if t is not None else None for t in train]
        panels.append(Panel("Time to train", f"{unit} (log scale)", values, log_y=True,
                            ideal=_ideal(xs, values, power=-1)))
    costs = [r.plan.throughput.cost_usd if r.plan else None for r in rows]
    if any(c is not None for c in costs):
        panels.append(Panel("Cost to train", "USD", costs, tick_format="usd"))
    return panels


def _ideal(xs: list[int], ys: list[float | None], *, power: int) -> list[float | None] | None:
    """y of the first count with a value, times (x / that count) ** power, at that count and
    every one after it (None before it: nothing fits there)."""
    first = next(((x, y) for x, y in zip(xs, ys) if y is not None), None)
    if first is None:
        return None
    return [first[1] * (x / first[0]) ** power if x >= first[0] else None for x in xs]


def _gpu_labels(xs: list[int], px) -> list[str]:
    """The GPU counts as tick labels, '' for those left out so that none overlaps the next
    where the axis puts them (`px`)."""
    labels = [str(x) for x in xs]
    kept = set(svg.thin([px(x) for x in xs], [svg.text_width(s) for s in labels]))
    return [s if i in kept else "" for i, s in enumerate(labels)]


def _tick_label(value: float, panel: Panel) -> str:
    if panel.percent:
        return f"{value * 100:.0f}%"
    if panel.tick_format == "usd":
        return "$" + svg.si(value)
    return svg.si(value)


def _y_axis(panel: Panel) -> tuple[float, float, list[float]]:
    """(bottom, top, ticks) of a panel's y axis."""
    known = [y for y in panel.values + (panel.ideal or []) if y is not None and y > 0]
    if panel.log_y and known:
        return svg.log_ticks(min(known), max(known))
    top = max(known, default=1.0)
    if panel.percent:
        top = max(top, 1.0)
    ticks = svg.linear_ticks(top * 1.05)
    return 0.0, ticks[-1] or 1.0, ticks


def _panel(doc: svg.Svg, x0: float, y0: float, xs: list[int], panel: Panel) -> None:
    """Draw one panel with its top-left corner at (x0, y0)."""
    left, right = x0 + LEFT, x0 + PANEL_W - RIGHT
    top, base = y0 + TOP, y0 + PANEL_H - BOTTOM
    lo, hi = math.log2(min(xs)), math.log2(max(xs))
    pad = 0.25 if hi > lo else 1.0            # room so the end points sit off the frame
    lo, hi = lo - pad, hi + pad

    def px(x: float) -> float:
        return left + (math.log2(x) - lo) / (hi - lo) * (right - left)

    bottom_value, top_value, ticks = _y_axis(panel)

    def py(y: float) -> float:
        if panel.log_y:
            share = ((math.log10(y) - math.log10(bottom_value))
                     / (math.log10(top_value) - math.log10(bottom_value)))
        else:
            share = (y - bottom_value) / (top_value - bottom_value)
        return base - share * (base - top)

    doc.text(x0 + PANEL_W / 2, y0 + 18, panel.title, anchor="middle", bold=True, size=12)
    # Grid, y ticks (thinned: at least a line of text apart) and the frame.
    positions = [py(t) for t in ticks]
    kept = svg.thin([-p for p in positions], [svg.FONT_SIZE] * len(ticks), gap=3)
    for i, (t, y) in enumerate(zip(ticks, positions)):
        doc.line(left, y, right, y, stroke="#e4e4e4")
        if i in kept:
            doc.text(left - 6, y + 4, _tick_label(t, panel), anchor="end", kind="ytick")
    if panel.percent:
        doc.line(left, py(1.0), right, py(1.0), stroke=IDEAL, dash="5,4", kind="ideal")
    doc.line(left, base, right, base)
    doc.line(left, top, left, base)
    # GPU ticks: every count, labels thinned so that none overlaps the next.
    for x, label in zip(xs, _gpu_labels(xs, px)):
        doc.line(px(x), base, px(x), base + 4)
        if label:
            doc.text(px(x), base + 16, label, anchor="middle", kind="xtick")
    doc.text((left + right) / 2, base + 36, "GPUs (log scale)", anchor="middle",
             kind="xlabel")
    doc.text(x0 + 14, (top + base) / 2, panel.y_label, anchor="middle", rotate=True,
             kind="ylabel")
    if panel.ideal is not None:
        doc.polyline([(px(x), py(y)) for x, y in zip(xs, panel.ideal) if y is not None],
                     stroke=IDEAL, width=1.5, dash="5,4", kind="ideal")
    for x, y in zip(xs, panel.values):
        if y is None:         # nothing fits on this many GPUs
            doc.text(px(x), base - 6, "x", anchor="middle", fill="#c0392b", bold=True,
                     kind="none")
    known = [(x, y) for x, y in zip(xs, panel.values) if y is not None]
    if known:
        doc.polyline([(px(x), py(y)) for x, y in known], stroke=LINE, kind="series")
        for x, y in known:
            doc.circle(px(x), py(y), 3.5, fill=LINE, kind="point",
                       tip=f"{x} GPUs: {_tick_label(y, panel)}")


def sweep_svg(title: str, xs: list[int], panels: list[Panel]) -> str:
    """An SVG of `panels` against the GPU counts `xs`, two to a row, with a legend."""
    num_rows = math.ceil(len(panels) / COLUMNS)
    width = PANEL_W * min(COLUMNS, len(panels))
    head = 44
    doc = svg.Svg(width, head + PANEL_H * num_rows + 8, title=title)
    doc.text(width / 2, 18, title, anchor="middle", bold=True, size=13)
    entries = [("predicted (best plan per count)", f"line:{LINE}")]
    if any(p.ideal is not None or p.percent for p in panels):
        entries.append(("ideal (linear) scaling", f"line:{IDEAL}|5,4"))
    if any(y is None for y in panels[0].values):
        entries.append(("x: no plan fits", "line:#c0392b"))
    legend_w = sum(16 + svg.text_width(n) + 14 for n, _ in entries)
    doc.legend(max(8.0, (width - legend_w) / 2), 36, entries, max_width=width - 16)
    for k, panel in enumerate(panels):
        _panel(doc, (k % COLUMNS) * PANEL_W, head + (k // COLUMNS) * PANEL_H, xs, panel)
    return doc.render()


def sweep_png(path: str, title: str, xs: list[int], panels: list[Panel]) -> bool:
    """The same figure as a PNG with matplotlib; False where it is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter, NullFormatter
    except ImportError:
        return False
    num_rows = math.ceil(len(panels) / COLUMNS)
    num_cols = min(COLUMNS, len(panels))
    figure, axes = plt.subplots(num_rows, num_cols, figsize=(5 * num_cols, 3.6 * num_rows),
                                squeeze=False)
    for axis in axes.flat[len(panels):]:
        axis.set_visible(False)
    for axis, panel in zip(axes.flat, panels):
        known = [(x, y) for x, y in zip(xs, panel.values) if y is not None]
        axis.plot([x for x, _ in known], [y for _, y in known], marker="o", color=LINE,
                  label="predicted")
        if panel.ideal is not None:
            ideal = [(x, y) for x, y in zip(xs, panel.ideal) if y is not None]
            axis.plot([x for x, _ in ideal], [y for _, y in ideal], linestyle="--", color=IDEAL,
                      label="ideal")
        if panel.percent:
            axis.axhline(1.0, linestyle="--", color=IDEAL)
        axis.set_xscale("log", base=2)
        axis.xaxis.set_minor_formatter(NullFormatter())
        # About 360 points of axis per panel: thin the labels as the SVG does.
        lo, hi = math.log2(min(xs)), math.log2(max(xs))
        axis.set_xticks(xs, _gpu_labels(xs, lambda x: (math.log2(x) - lo) / (hi - lo or 1)
                                        * 360))
        if panel.log_y:
            axis.set_yscale("log")
        else:
            known = [y for y in panel.values if y is not None]
            axis.set_ylim(0, max(known + [1.0 if panel.percent else 0.0]) * 1.1 or 1.0)
        axis.yaxis.set_major_formatter(FuncFormatter(lambda v, _, p=panel: _tick_label(v, p)))
        axis.set_title(panel.title)
        axis.set_xlabel("GPUs (log scale)")
        axis.set_ylabel(panel.y_label)
        axis.grid(True, color="#e4e4e4")
    axes.flat[0].legend(loc="best")
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, metadata={"Software": None})
    plt.close(figure)
    return True
