"""`--memory-chart FILE.svg`: a plan's memory per GPU, one stacked bar per pipeline stage.

Each bar stacks the stage's weights, gradients, optimizer states, activations and the rest
(framework reserve, fragmentation, gathered ZeRO-3 weights, buffers), as `MemoryReport`
gives them, against the GPU's capacity and the margin the plan keeps free (--min-free). Bars
are drawn to scale from 0 GiB; long pipelines get thinner bars and thinned stage labels.
"""

from __future__ import annotations

from cost_models.units import GiB
from planner.cli import svg
from planner.schemas.report import PlanReport

PLOT_W, PLOT_H = 760, 320
"""Pixels of the plotting area."""
LEFT, RIGHT, BOTTOM = 70, 150, 56
"""Pixels beside and below it: GiB ticks on the left, the capacity labels on the right, the
stage labels below (the title, wrapped, and the legend go above)."""

PARTS = (("weights", "weights_bytes", "#4e79a7"),
         ("gradients", "gradients_bytes", "#f28e2b"),
         ("optimizer states", "optimizer_bytes", "#59a14f"),
         ("activations", "activations_bytes", "#e15759"),
         ("other (reserve, buffers)", "other_bytes", "#bab0ac"))
"""The stacked parts, bottom to top: name, `StageMemory` field, colour."""
CAPACITY, MARGIN = "#222222", "#f4c7c3"


def memory_chart_svg(plan: PlanReport, *, heading: str) -> str:
    """The SVG of `plan`'s memory per stage, titled `heading`."""
    from planner.cli.render import gib

    from planner.cli.render import default_margin

    memory = plan.memory
    stages = memory.stages
    p = len(stages)
    margin = memory.min_free_bytes or default_margin(memory)
    margin_name = ("margin kept free" if memory.min_free_bytes
                   else "default margin (a warning under it)")
    usable = memory.capacity_bytes - margin
    top_bytes = max(memory.capacity_bytes, memory.peak_bytes) * 1.06
    ticks = [t * GiB for t in svg.linear_ticks(top_bytes / GiB, count=6)]
    top_bytes = ticks[-1]
    width = LEFT + PLOT_W + RIGHT
    doc = svg.Svg(width, 0, title=heading)
    y = doc.paragraph(8, 18, heading, max_width=width - 16, size=13, bold=True)
    verdict = "fits" if memory.fits else "does NOT fit"
    y = doc.paragraph(8, y + 16, f"Memory per GPU by pipeline stage: peak "
                      f"{gib(memory.peak_bytes)} on stage {memory.peak_stage} of "
                      f"{gib(memory.capacity_bytes)}, {verdict}"
                      + (f" keeping {gib(memory.min_free_bytes)} free"
                         if memory.min_free_bytes else ""),
                      max_width=width - 16, kind="subtitle")
    y = doc.legend(8, y + 20, [(name, colour) for name, _, colour in PARTS]
                   + [(margin_name, MARGIN)], max_width=width - 16)
    top = y + 12
    base = top + PLOT_H
    doc.height = base + BOTTOM

    def py(num_bytes: float) -> float:
        return base - num_bytes / top_bytes * PLOT_H

    # Grid and GiB ticks, thinned to a line of text apart.
    positions = [py(t) for t in ticks]
    kept = set(svg.thin([-y for y in positions], [svg.FONT_SIZE] * len(ticks), gap=3))
    for i, (t, y) in enumerate(zip(ticks, positions)):
        doc.line(LEFT, y, LEFT + PLOT_W, y, stroke="#e4e4e4")
        if i in kept:
            doc.text(LEFT - 6, y + 4, f"{t / GiB:g}", anchor="end", kind="ytick")
    doc.text(16, top + PLOT_H / 2, "GiB per GPU", anchor="middle", rotate=True, kind="ylabel")
    # The margin: from the usable limit up to the capacity.
    doc.rect(LEFT, py(memory.capacity_bytes), PLOT_W, py(usable) - py(memory.capacity_bytes),
             fill=MARGIN, kind="margin", tip=f"{margin_name}: {gib(margin)}")
    slot = PLOT_W / p
    bar = slot * (0.7 if p < 16 else 0.8)
    labels = ["all layers"] if p == 1 else [str(s.stage) for s in stages]
    label_kept = set(svg.thin([LEFT + slot * (k + 0.5) for k in range(p)],
                              [svg.text_width(s) for s in labels]))
    for k, stage in enumerate(stages):
        x = LEFT + slot * k + (slot - bar) / 2
        doc.add(f'<g class="bar" data-stage="{stage.stage}">')
        level = 0.0
        for name, field, colour in PARTS:
            value = getattr(stage, field)
            if value > 0:
                doc.rect(x, py(level + value), bar, py(level) - py(level + value),
                         fill=colour, kind=field.removesuffix("_bytes"),
                         tip=f"stage {stage.stage}: {name} {gib(value)}")
            level += value
        total = f"{stage.total_bytes / GiB:.1f}"
        if svg.text_width(total, 10) <= slot:
            doc.text(x + bar / 2, py(level) - 4, total, anchor="middle", size=10,
                     bold=stage.stage == memory.peak_stage, kind="total")
        if k in label_kept:
            doc.text(x + bar / 2, base + 16, labels[k], anchor="middle", kind="xtick",
                     bold=stage.stage == memory.peak_stage)
        doc.add("</g>")
    doc.line(LEFT, base, LEFT + PLOT_W, base)
    doc.line(LEFT, top, LEFT, base)
    doc.text(LEFT + PLOT_W / 2, base + 36, "pipeline stage" + (" (bold: the peak)" if p > 1
                                                               else ""),
             anchor="middle", kind="xlabel")
    # The capacity, and the limit the plan keeps to.
    doc.line(LEFT, py(memory.capacity_bytes), LEFT + PLOT_W, py(memory.capacity_bytes),
             stroke=CAPACITY, width=1.5, kind="capacity")
    doc.text(LEFT + PLOT_W + 6, py(memory.capacity_bytes) + 4,
             f"capacity {gib(memory.capacity_bytes)}", kind="capacity-label")
    doc.line(LEFT, py(usable), LEFT + PLOT_W, py(usable), stroke="#c0392b", dash="5,3",
             kind="usable")
    gap = py(usable) - py(memory.capacity_bytes)
    doc.text(LEFT + PLOT_W + 6, py(usable) + 4 + max(0.0, 12 - gap),
             f"{'limit' if memory.min_free_bytes else 'margin at'} {gib(usable)}", fill="#c0392b",
             kind="usable-label")
    return doc.render()
