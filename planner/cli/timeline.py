"""`--timeline FILE.svg`: one step of a plan as a pipeline timeline, one row per stage.

Each row shows the stage's forward and backward passes (by micro-batch; by model chunk too
when the schedule interleaves), the exposed communication at the end of each pass, its idle
time (the bubble), and, across all rows, what the step does before its first micro-batch and
after its last. The times are the plan's own (`planner.costing.schedule.step_timeline`);
widths are proportional to seconds, and the step spans the width.

Bounded for long schedules, in two ways:
* When the passes would be too thin to see, the middle of the steady state is cut out: the
  picture shows the fill (warm-up and the first `STEADY_PAIRS` forward-backward pairs of every
  stage) and the drain (the last pairs and the cool-down) to scale, with a `BREAK_PX` gap
  between them that says how long the cut-out part lasts.
* A pass still narrower than `MIN_PASS_PX` is not drawn on its own: a run of such passes one
  after the other (waits under a pixel between them) is one block. Where that still leaves
  more than `MAX_ITEMS` blocks (pp 64 and beyond), both limits double until it does not; a
  run that then holds waits is drawn over its whole span, faded by its busy share.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.cli import svg
from planner.costing.schedule import Pass, Timeline, step_timeline
from planner.schemas.report import PlanReport

PLOT_W = 960
"""Pixels the step spans."""
LEFT, RIGHT = 76, 64
"""Pixels for the stage labels on the left and each row's idle share on the right."""
MIN_PASS_PX = 5.0
"""Passes narrower than this are drawn aggregated."""
MAX_ITEMS = 4000
"""At most about this many passes or runs of passes are drawn, about 350 KB of SVG: room for
the fill and drain of pp 64 (a 1F1B drain alone is p (p - 1) / 2 = 2,016 backward passes)."""
MAX_TIPS = 600
"""Passes get a hover text (<title>) only where there are at most this many."""
FADED = 0.97
"""A run of passes busy for less than this share of its span is drawn faded by that share."""
MIN_COMM_PX = 1.5
"""Exposed communication narrower than this is drawn as part of its pass."""
BREAK_PX = 44.0
"""Width of the gap that stands for the cut-out middle of the steady state."""
STEADY_PAIRS = 3
"""Forward-backward pairs of the steady state each stage shows after its warm-up and before
its cool-down when the middle is cut out."""

FORWARD, BACKWARD, COMM, IDLE = "#4e79a7", "#f28e2b", "#7b4f9d", "#e9e9e9"
SEGMENT_COLOURS = {"gradient zeroing": "#8cd17d", "data-parallel reduction": "#9c755f",
                   "gradient norm": "#bab0ac", "optimizer step": "#e15759",
                   "offloaded step": "#76b7b2", "loss all-reduce": "#edc948",
                   "host overhead": "#c7c7c7"}
"""The colour of each `schedule.Segment` name."""


def _shade(colour: str, amount: float) -> str:
    """`colour` mixed with white by `amount` (0: itself, 1: white)."""
    rgb = [int(colour[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c + (255 - c) * amount):02x}" for c in rgb)


def _pass_colour(q: Pass, vpp: int) -> str:
    base = BACKWARD if q.backward else FORWARD
    return _shade(base, 0.45 * q.chunk / (vpp - 1)) if vpp > 1 else base


@dataclass
class _Run:
    """Consecutive thin passes of one row, drawn as one block."""

    start_s: float
    end_s: float
    forward_s: float = 0.0
    backward_s: float = 0.0
    num_forward: int = 0
    num_backward: int = 0

    def add(self, q: Pass) -> None:
        if q.backward:
            self.backward_s += q.end_s - q.start_s
            self.num_backward += 1
        else:
            self.forward_s += q.end_s - q.start_s
            self.num_forward += 1
        self.end_s = q.end_s


def _defs(doc: svg.Svg) -> None:
    """The striped fill of aggregated runs: forward and backward stripes."""
    doc.add('<defs><pattern id="fb" width="6" height="6" patternUnits="userSpaceOnUse" '
            'patternTransform="rotate(45)">'
            f'<rect width="3" height="6" fill="{FORWARD}"/>'
            f'<rect x="3" width="3" height="6" fill="{BACKWARD}"/></pattern></defs>')


class _TimeMap:
    """Seconds from the start of the step to x pixels: one scale, with the cut-out window
    [cut_start_s, cut_end_s] (if any) replaced by a `BREAK_PX` gap."""

    def __init__(self, x0: float, step_s: float, cut: tuple[float, float] | None) -> None:
        self.x0, self.step_s, self.cut = x0, step_s, cut
        shown = step_s - (cut[1] - cut[0] if cut else 0.0)
        self.scale = (PLOT_W - (BREAK_PX if cut else 0.0)) / shown

    def x(self, seconds: float) -> float:
        if self.cut is None or seconds <= self.cut[0]:
            return self.x0 + seconds * self.scale
        if seconds < self.cut[1]:
            return self.x(self.cut[0]) + BREAK_PX / 2
        return self.x0 + (seconds - (self.cut[1] - self.cut[0])) * self.scale + BREAK_PX

    def spans(self, start_s: float, end_s: float) -> list[tuple[float, float, float]]:
        """(x, width, seconds) of the visible pieces of [start_s, end_s]."""
        pieces = [(start_s, end_s)]
        if self.cut is not None:
            a, b = self.cut
            pieces = [(start_s, min(end_s, a)), (max(start_s, b), end_s)]
        return [(self.x(lo), (hi - lo) * self.scale, hi - lo) for lo, hi in pieces if hi > lo]


def _cut(timeline: Timeline) -> tuple[float, float] | None:
    """The middle of the steady state to leave out, or None where every pass is wide enough
    to see at full scale (or the steady state is too short to gain from a cut)."""
    scale = PLOT_W / timeline.step_s
    widths = sorted((q.end_s - q.start_s) * scale for row in timeline.passes for q in row)
    if not widths or widths[len(widths) // 2] >= MIN_PASS_PX:
        return None
    start, end = 0.0, timeline.step_s
    for row in timeline.passes:
        first_b = next((i for i, q in enumerate(row) if q.backward), len(row) - 1)
        last_f = max((i for i, q in enumerate(row) if not q.backward), default=0)
        start = max(start, row[min(first_b + 2 * STEADY_PAIRS - 2, len(row) - 1)].end_s)
        end = min(end, row[max(0, last_f - 2 * STEADY_PAIRS + 1)].start_s)
    if end - start < 0.15 * timeline.step_s:
        return None
    return start, end


class _Row:
    """Draws one stage's row."""

    def __init__(self, doc: svg.Svg, timeline: Timeline, stage: int, times: _TimeMap,
                 y: float, height: float, *, tips: bool) -> None:
        self.doc, self.timeline, self.stage, self.times = doc, timeline, stage, times
        self.y, self.height, self.tips = y, height, tips
        self.comm = timeline.comm_share[stage]

    def piece(self, start_s: float, seconds: float, *, fill: str, kind: str, tip: str | None,
              label: str = "", opacity: float | None = None) -> None:
        extra = f'fill-opacity="{opacity:.2f}"' if opacity is not None else ""
        for x, width, _ in self.times.spans(start_s, start_s + seconds):
            if width <= 0.01:
                continue
            self.doc.rect(x, self.y, width, self.height, fill=fill, kind=kind,
                          tip=tip if self.tips else None, extra=extra)
            size = min(9.0, self.height - 3)
            if label and size >= 7 and svg.text_width(label, size) + 4 <= width:
                self.doc.text(x + width / 2, self.y + self.height / 2 + size * 0.35, label,
                              anchor="middle", size=size, fill="white", kind="pass-label")

    def idle(self, start_s: float, seconds: float) -> None:
        self.piece(start_s, seconds, fill=IDLE, kind="idle", tip=None)

    def busy(self, start_s: float, seconds: float, *, fill: str, kind: str, tip: str,
             label: str = "", opacity: float | None = None) -> None:
        """A pass (or a run of them, faded to `opacity` where it holds waits): its work, then
        its exposed communication."""
        work = seconds * (1 - self.comm)
        if seconds * self.comm * self.times.scale < MIN_COMM_PX:
            work = seconds
        self.piece(start_s, work, fill=fill, kind=kind, tip=tip, label=label, opacity=opacity)
        if work < seconds:
            self.piece(start_s + work, seconds * self.comm, fill=COMM, kind="comm",
                       tip=f"{tip}: exposed communication "
                           f"{svg.seconds_label(seconds * self.comm)}", opacity=opacity)

    def draw(self, items: list[Pass | _Run]) -> None:
        """The row's pipeline time as idle, and its passes over it."""
        t = self.timeline
        self.idle(t.pipeline_start_s, t.pipeline_s)
        for item in items:
            if isinstance(item, Pass):
                direction = "backward" if item.backward else "forward"
                chunk = f" chunk {item.chunk}" if t.vpp > 1 else ""
                self.busy(item.start_s, item.end_s - item.start_s,
                          fill=_pass_colour(item, t.vpp), kind=direction,
                          tip=f"stage {self.stage}{chunk}: micro-batch {item.micro_batch} "
                              f"{direction}, {svg.seconds_label(item.end_s - item.start_s)}",
                          label=str(item.micro_batch))
                continue
            busy = item.forward_s + item.backward_s
            span = item.end_s - item.start_s
            kind = ("forward" if not item.num_backward else
                    "backward" if not item.num_forward else "steady")
            fill = {"forward": FORWARD, "backward": BACKWARD, "steady": "url(#fb)"}[kind]
            counts = " + ".join(f"{n} {name}" for n, name in
                                ((item.num_forward, "forward"), (item.num_backward,
                                                                 "backward")) if n)
            share = busy / span if span > 0 else 1.0
            self.busy(item.start_s, span, fill=fill, kind=f"{kind} aggregated",
                      tip=f"stage {self.stage}: {counts} passes, {svg.seconds_label(busy)} "
                          f"busy in {svg.seconds_label(span)}",
                      label={"forward": f"F x{item.num_forward}",
                             "backward": f"B x{item.num_backward}",
                             "steady": f"1F1B x{item.num_backward}"}[kind],
                      opacity=share if share < FADED else None)


def _width(item: Pass | _Run, times: _TimeMap) -> float:
    """Pixels a pass or a run spans (at the picture's scale, cut or not)."""
    return (item.end_s - item.start_s) * times.scale


def _visible(row: list[Pass], times: _TimeMap) -> list[Pass]:
    """The passes of a row not wholly inside the cut."""
    if times.cut is None:
        return row
    a, b = times.cut
    return [q for q in row if q.end_s <= a or q.start_s >= b or q.start_s < a < q.end_s
            or q.start_s < b < q.end_s]


def _items(row: list[Pass], times: _TimeMap, thin_px: float,
           absorb_px: float) -> list[Pass | _Run]:
    """A row's passes, those under `thin_px` gathered into runs: a thin pass joins the run
    before it when it starts less than `absorb_px` after it."""
    items: list[Pass | _Run] = []
    for q in row:
        if (q.end_s - q.start_s) * times.scale >= thin_px:
            items.append(q)
            continue
        last = items[-1] if items else None
        crosses = times.cut is not None and isinstance(last, _Run) and \
            last.end_s <= times.cut[0] < q.end_s
        if isinstance(last, _Run) and not crosses and \
                (q.start_s - last.end_s) * times.scale < absorb_px:
            last.add(q)
        else:
            run = _Run(q.start_s, q.start_s)
            run.add(q)
            items.append(run)
    return items


def _all_items(rows: list[list[Pass]], times: _TimeMap) -> list[list[Pass | _Run]]:
    """Every row's items, within `MAX_ITEMS` (see the module's docstring)."""
    thin_px, absorb_px = MIN_PASS_PX, 1.0
    while True:
        items = [_items(row, times, thin_px, absorb_px) for row in rows]
        if sum(map(len, items)) <= MAX_ITEMS or absorb_px > PLOT_W:
            return items
        thin_px, absorb_px = 2 * thin_px, 2 * absorb_px


def timeline_svg(plan: PlanReport, *, heading: str) -> str:
    """The SVG of one step of `plan`, titled `heading`."""
    from planner.cli.render import percent, seconds

    t = step_timeline(plan)
    p = t.pp
    times = _TimeMap(LEFT, t.step_s, _cut(t))
    row_h = max(9.0, min(26.0, round(520 / p)))
    gap = max(2.0, round(row_h / 6))
    label_every = max(1, -(-12 // int(row_h + gap)))       # stage labels at least 12 px apart
    width = LEFT + PLOT_W + RIGHT
    bubble = plan.time.bubble_s
    end_s = t.step_s - t.pipeline_start_s - t.pipeline_s
    interleave = f" x {t.vpp} chunks (interleaved)" if t.vpp > 1 else ""
    through = (f"through {p} stages in {seconds(t.pipeline_s)} (bubble {seconds(bubble)}, "
               f"{percent(bubble / t.step_s)} of the step)" if p > 1
               else f"in {seconds(t.pipeline_s)} (no pipeline)")
    subtitle = (f"One step, {seconds(t.step_s)}: {t.num_micro_batches} micro-batches"
                f"{interleave} {through}, then {seconds(end_s)} of step end")
    items = _all_items([_visible(row, times) for row in t.passes], times)
    tips = sum(map(len, items)) <= MAX_TIPS
    entries = [("forward", FORWARD), ("backward + recompute", BACKWARD)]
    if any(share * _width(item, times) >= MIN_COMM_PX
           for share, row in zip(t.comm_share, items) for item in row):
        entries.append(("exposed communication", COMM))
    entries.append(("idle (bubble)", IDLE))
    if any(isinstance(i, _Run) and i.num_forward and i.num_backward
           for row in items for i in row):
        entries.append(("forward and backward passes too thin to draw apart", "url(#fb)"))
    # Parts of the step under a pixel are drawn (and named on hover) but not in the legend.
    entries += [(g.name, SEGMENT_COLOURS[g.name]) for g in t.segments
                if g.seconds * times.scale >= 1]

    doc = svg.Svg(width, 0, title=heading)
    _defs(doc)
    y = doc.paragraph(8, 18, heading, max_width=width - 16, size=13, bold=True)
    y = doc.paragraph(8, y + 16, subtitle, max_width=width - 16, kind="subtitle")
    y = doc.legend(8, y + 20, entries, max_width=width - 16)
    rows_top = y + 14
    rows_h = p * (row_h + gap) - gap
    for x, w, _ in times.spans(0.0, t.step_s):
        doc.rect(x, rows_top - 3, w, rows_h + 6, fill="none", stroke="#999", kind="step")
    for r, row in enumerate(items):
        y = rows_top + r * (row_h + gap)
        doc.add(f'<g class="stage" data-stage="{r}">')
        _Row(doc, t, r, times, y, row_h, tips=tips).draw(row)
        if r % label_every == 0 or r == p - 1:
            size = min(11.0, row_h)
            doc.text(LEFT - 6, y + row_h / 2 + size * 0.35, f"stage {r}", anchor="end",
                     size=size, bold=r == plan.time.slowest_stage, kind="stage-label")
            busy = plan.strategy.num_micro_batches * plan.time.stages[r].total_s
            doc.text(LEFT + PLOT_W + 6, y + row_h / 2 + size * 0.35,
                     f"idle {percent(max(0.0, 1 - busy / t.pipeline_s))}",
                     size=min(10.0, row_h), fill="#555", kind="idle-share")
        doc.add("</g>")
    for g in t.segments:
        for x, w, _ in times.spans(g.start_s, g.start_s + g.seconds):
            doc.rect(x, rows_top, w, rows_h, fill=SEGMENT_COLOURS[g.name], kind="segment",
                     tip=f"{g.name}: {seconds(g.seconds)}")
            if w >= 14 and svg.text_width(g.name, 10) <= rows_h:
                doc.text(x + w / 2 + 4, rows_top + rows_h / 2, g.name, anchor="middle",
                         rotate=True, size=10, kind="segment-label")
    notes = [f"bold: the slowest stage (it sets the pace); idle: share of the pipeline's "
             f"{seconds(t.pipeline_s)} the stage waits"]
    if times.cut is not None:
        _break(doc, times, rows_top, rows_h)
        a, b = times.cut
        hidden = sum(a <= q.start_s and q.end_s <= b for q in t.passes[0])
        notes.append(f"the break leaves out {seconds(b - a)} of the steady state ({hidden} "
                     f"passes on stage 0)")
    if abs(t.stretch - 1) > 1e-3:
        notes.append(f"passes scaled by {t.stretch:.3f} to the planner's pipeline time "
                     f"(its closed form for unequal stages)")
    _time_axis(doc, times, rows_top + rows_h + 6)
    if t.vpp > 1:
        notes.append(f"lighter shades: later model chunks (of {t.vpp})")
    doc.height = doc.paragraph(8, rows_top + rows_h + 66, "; ".join(notes),
                               max_width=width - 16, size=10, fill="#555", kind="note") + 8
    return doc.render()


def _break(doc: svg.Svg, times: _TimeMap, top: float, height: float) -> None:
    """The gap standing for the cut-out steady state: slanted marks, and its length."""
    from planner.cli.render import seconds

    a, b = times.cut
    left = times.x(a)
    doc.rect(left, top - 3, BREAK_PX, height + 6, fill="white", kind="cut",
             tip=f"{seconds(b - a)} of steady state not drawn")
    for x in (left + 4, left + BREAK_PX - 10):
        doc.line(x, top + height + 10, x + 6, top - 10, stroke="#666", width=1.5)
    label = seconds(b - a)
    doc.text(left + BREAK_PX / 2, top - 6, label, anchor="middle", size=10, bold=True,
             kind="cut-label")


def _time_axis(doc: svg.Svg, times: _TimeMap, y: float) -> None:
    """Seconds from the start of the step (none inside the cut), labels thinned so that none
    overlaps the next."""
    step = times.step_s
    ticks = [v for v in svg.linear_ticks(step, count=8) if v <= step * (1 + 1e-9)]
    if times.cut is not None:
        a, b = times.cut
        shown = step - (b - a)
        ticks = [v for v in svg.linear_ticks(step, count=max(8, round(8 * step / shown)))
                 if v <= step * (1 + 1e-9) and not a < v < b]
    labels = [svg.seconds_label(v) for v in ticks]
    positions = [times.x(v) for v in ticks]
    kept = set(svg.thin(positions, [svg.text_width(s) for s in labels]))
    for x, w, _ in times.spans(0.0, step):
        doc.line(x, y, x + w, y)
    for i, (x, label) in enumerate(zip(positions, labels)):
        doc.line(x, y, x, y + 4)
        if i in kept:
            doc.text(x, y + 16, label, anchor="middle", kind="xtick")
    doc.text(LEFT + PLOT_W / 2, y + 34, "time from the start of the step", anchor="middle",
             kind="xlabel")
