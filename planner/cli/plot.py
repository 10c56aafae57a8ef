"""`planner sweep --plot`: throughput and cost against GPU count, as an SVG written by hand
(no plotting dependency), and as a PNG too where matplotlib is installed."""

from __future__ import annotations

import math
from html import escape

PANEL_W, PANEL_H, MARGIN = 360, 240, 56
"""Pixels of one panel and of the room for its axis labels."""


def _ticks(top: float, count: int = 5) -> list[float]:
    """Round y ticks from 0 to at least `top` (1, 2 or 5 times a power of ten apart)."""
    raw = top / count if top > 0 else 1.0
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    return [i * step for i in range(count + 1) if i * step <= top + step]


def _label(value: float) -> str:
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= scale:
            return f"{value / scale:g}{suffix}"
    return f"{value:g}"


def _panel(x0: float, title: str, xs: list[int], ys: list[float | None]) -> list[str]:
    """One panel: GPU count on a log2 axis, the value on a linear one from 0."""
    known = [(x, y) for x, y in zip(xs, ys) if y is not None]
    ticks = _ticks(max((y for _, y in known), default=1.0) * 1.05)
    top = ticks[-1] or 1.0
    lo, hi = math.log2(min(xs)), math.log2(max(xs))
    span = hi - lo or 1.0

    def px(x):
        return x0 + MARGIN + (math.log2(x) - lo) / span * (PANEL_W - MARGIN - 16)

    def py(y):
        return 24 + (1 - y / top) * (PANEL_H - 24 - MARGIN)

    base = py(0)
    out = [f'<text x="{x0 + PANEL_W / 2:.1f}" y="16" text-anchor="middle" '
           f'font-weight="bold">{escape(title)}</text>',
           f'<line x1="{x0 + MARGIN}" y1="{base:.1f}" x2="{x0 + PANEL_W - 8}" y2="{base:.1f}" '
           f'stroke="black"/>',
           f'<line x1="{x0 + MARGIN}" y1="24" x2="{x0 + MARGIN}" y2="{base:.1f}" '
           f'stroke="black"/>']
    for t in ticks:
        out.append(f'<text x="{x0 + MARGIN - 6}" y="{py(t) + 4:.1f}" text-anchor="end">'
                   f'{_label(t)}</text>')
        out.append(f'<line x1="{x0 + MARGIN}" y1="{py(t):.1f}" x2="{x0 + PANEL_W - 8}" '
                   f'y2="{py(t):.1f}" stroke="#ddd"/>')
    for x in xs:
        out.append(f'<text x="{px(x):.1f}" y="{base + 16:.1f}" text-anchor="middle">{x}</text>')
    out.append(f'<text x="{x0 + PANEL_W / 2:.1f}" y="{PANEL_H - 8}" '
               f'text-anchor="middle">GPUs</text>')
    if known:
        points = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in known)
        out.append(f'<polyline points="{points}" fill="none" stroke="#1f77b4" '
                   f'stroke-width="2"/>')
        out += [f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="#1f77b4"/>'
                for x, y in known]
    return out


def sweep_svg(title: str, xs: list[int], panels: list[tuple[str, list[float | None]]]) -> str:
    """An SVG of one panel per (title, values) against the GPU counts `xs`."""
    width = PANEL_W * len(panels)
    body = [f'<text x="{width / 2:.1f}" y="14" text-anchor="middle">{escape(title)}</text>']
    for k, (name, ys) in enumerate(panels):
        body.append('<g transform="translate(0,20)">')
        body += _panel(k * PANEL_W, name, xs, ys)
        body.append("</g>")
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{PANEL_H + 20}" '
            f'font-family="sans-serif" font-size="11">\n'
            f'<rect width="100%" height="100%" fill="white"/>\n' + "\n".join(body) + "\n</svg>\n")


def sweep_png(path: str, title: str, xs: list[int],
              panels: list[tuple[str, list[float | None]]]) -> bool:
    """The same figure as a PNG with matplotlib; False where it is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    figure, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.2))
    for axis, (name, ys) in zip(axes if len(panels) > 1 else [axes], panels):
        known = [(x, y) for x, y in zip(xs, ys) if y is not None]
        axis.plot([x for x, _ in known], [y for _, y in known], marker="o")
        axis.set_xscale("log", base=2)
        axis.set_xticks(xs, [str(x) for x in xs])
        axis.set_ylim(bottom=0)
        axis.set_title(name)
        axis.set_xlabel("GPUs")
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return True
