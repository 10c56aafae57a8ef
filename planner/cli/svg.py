"""A few SVG elements written by hand, for the pictures of `sweep --plot`, `--timeline` and
`--memory-chart`: no plotting dependency, and the same input gives the same bytes (every
coordinate in one fixed format, no timestamp, no random id).

Coordinates are pixels; text is 11 px sans-serif unless a size is given. `text_width` is an
estimate (no font metrics without a renderer): label thinning uses it with room to spare.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from html import escape

FONT_SIZE = 11
"""Pixels: the default text size."""

CHAR_WIDTH = 0.62
"""Average advance of a sans-serif character in font sizes (digits are 0.56 in DejaVu Sans
and Helvetica, capitals up to 0.72): what `text_width` assumes."""


def num(value: float) -> str:
    """A coordinate with one decimal, never '-0.0' (same input, same bytes)."""
    text = f"{value:.1f}"
    return "0.0" if text == "-0.0" else text


def text_width(text: str, size: float = FONT_SIZE) -> float:
    """Estimated pixels `text` takes at `size`."""
    return len(text) * size * CHAR_WIDTH


def wrap(text: str, max_width: float, size: float = FONT_SIZE) -> list[str]:
    """`text` in lines of at most `max_width` pixels (estimated), broken at spaces."""
    lines: list[str] = []
    for word in text.split(" "):
        if lines and text_width(lines[-1] + " " + word, size) <= max_width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


class Svg:
    """An SVG document built element by element."""

    def __init__(self, width: float, height: float, *, title: str | None = None) -> None:
        self.width, self.height = width, height
        self.parts: list[str] = []
        if title:
            self.parts.append(f"<title>{escape(title)}</title>")
        self.parts.append('<rect width="100%" height="100%" fill="white"/>')

    def add(self, element: str) -> None:
        self.parts.append(element)

    def rect(self, x: float, y: float, w: float, h: float, *, fill: str, kind: str | None = None,
             stroke: str | None = None, tip: str | None = None, extra: str = "") -> None:
        """A rectangle; `kind` becomes its class (what the tests and a stylesheet find it by),
        `tip` a <title> a browser shows on hover."""
        attrs = (f'x="{num(x)}" y="{num(y)}" width="{num(max(w, 0.0))}" '
                 f'height="{num(max(h, 0.0))}" fill="{fill}"')
        if kind:
            attrs = f'class="{kind}" ' + attrs
        if stroke:
            attrs += f' stroke="{stroke}" stroke-width="0.5"'
        if extra:
            attrs += " " + extra
        if tip:
            self.parts.append(f"<rect {attrs}><title>{escape(tip)}</title></rect>")
        else:
            self.parts.append(f"<rect {attrs}/>")

    def line(self, x1: float, y1: float, x2: float, y2: float, *, stroke: str = "black",
             width: float = 1.0, dash: str | None = None, kind: str | None = None) -> None:
        attrs = (f'x1="{num(x1)}" y1="{num(y1)}" x2="{num(x2)}" y2="{num(y2)}" '
                 f'stroke="{stroke}"')
        if width != 1.0:
            attrs += f' stroke-width="{num(width)}"'
        if dash:
            attrs += f' stroke-dasharray="{dash}"'
        if kind:
            attrs = f'class="{kind}" ' + attrs
        self.parts.append(f"<line {attrs}/>")

    def text(self, x: float, y: float, text: str, *, anchor: str = "start",
             size: float | None = None, bold: bool = False, fill: str | None = None,
             rotate: bool = False, kind: str | None = None) -> None:
        """Text with its baseline at y (`rotate`: reading upwards, centred on (x, y))."""
        attrs = f'x="{num(x)}" y="{num(y)}"'
        if kind:
            attrs = f'class="{kind}" ' + attrs
        if anchor != "start":
            attrs += f' text-anchor="{anchor}"'
        if size is not None:
            attrs += f' font-size="{num(size)}"'
        if bold:
            attrs += ' font-weight="bold"'
        if fill:
            attrs += f' fill="{fill}"'
        if rotate:
            attrs += f' transform="rotate(-90 {num(x)} {num(y)})"'
        self.parts.append(f"<text {attrs}>{escape(text)}</text>")

    def paragraph(self, x: float, y: float, text: str, *, max_width: float,
                  size: float = FONT_SIZE, bold: bool = False, kind: str | None = None,
                  fill: str | None = None) -> float:
        """`text` wrapped to `max_width`, its first baseline at y; returns the y below it."""
        step = size * 1.35
        for line in wrap(text, max_width, size):
            self.text(x, y, line, size=size, bold=bold, kind=kind, fill=fill)
            y += step
        return y - step + size * 0.9

    def polyline(self, points: Sequence[tuple[float, float]], *, stroke: str,
                 width: float = 2.0, dash: str | None = None, kind: str | None = None) -> None:
        coords = " ".join(f"{num(x)},{num(y)}" for x, y in points)
        attrs = f'points="{coords}" fill="none" stroke="{stroke}" stroke-width="{num(width)}"'
        if dash:
            attrs += f' stroke-dasharray="{dash}"'
        if kind:
            attrs = f'class="{kind}" ' + attrs
        self.parts.append(f"<polyline {attrs}/>")

    def circle(self, x: float, y: float, r: float, *, fill: str, kind: str | None = None,
               tip: str | None = None) -> None:
        attrs = f'cx="{num(x)}" cy="{num(y)}" r="{num(r)}" fill="{fill}"'
        if kind:
            attrs = f'class="{kind}" ' + attrs
        if tip:
            self.parts.append(f"<circle {attrs}><title>{escape(tip)}</title></circle>")
        else:
            self.parts.append(f"<circle {attrs}/>")

    def legend(self, x: float, y: float, entries: Sequence[tuple[str, str]], *,
               max_width: float, swatch: str = "rect") -> float:
        """Swatches and names left to right, wrapping at `max_width`; returns the y below."""
        cursor, line_height = x, 16
        for name, colour in entries:
            room = 16 + text_width(name) + 14
            if cursor > x and cursor + room > x + max_width:
                cursor, y = x, y + line_height
            if swatch == "line" or colour.startswith("line:"):
                colour = colour.removeprefix("line:")
                dash = None
                if "|" in colour:
                    colour, dash = colour.split("|", 1)
                self.line(cursor, y - 4, cursor + 12, y - 4, stroke=colour, width=2, dash=dash)
            else:
                self.rect(cursor, y - 10, 12, 10, fill=colour, stroke="#555", kind="swatch")
            self.text(cursor + 16, y, name, kind="legend")
            cursor += room
        return y + line_height

    def render(self) -> str:
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{num(self.width)}" '
                f'height="{num(self.height)}" viewBox="0 0 {num(self.width)} '
                f'{num(self.height)}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" '
                f'font-size="{FONT_SIZE}">\n' + "\n".join(self.parts) + "\n</svg>\n")


# --------------------------------------------------------------------------- axes and ticks

def linear_ticks(top: float, count: int = 5) -> list[float]:
    """Round ticks from 0 to at least `top`, 1, 2 or 5 times a power of ten apart."""
    raw = top / count if top > 0 else 1.0
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    num_steps = math.ceil(top / step - 1e-9) if top > 0 else count
    return [round(i * step, 12) for i in range(num_steps + 1)]


def log_ticks(low: float, high: float) -> tuple[float, float, list[float]]:
    """(axis low, axis high, ticks) of a log axis holding [low, high] (both > 0): the range
    widened by a tenth of its span in log space (at least 15% each way), its ticks whole
    decades where that leaves three or more of them, else 1-2-5 steps, else every integer
    multiple of the decade."""
    low, high = min(low, high), max(low, high)
    pad = max(1.15, (high / low) ** 0.1)
    axis_low, axis_high = low / pad, high * pad
    lo_exp, hi_exp = math.floor(math.log10(axis_low)), math.ceil(math.log10(axis_high))
    inside: list[float] = []
    for steps in ((1,), (1, 2, 5), tuple(range(1, 10))):
        ticks = [float(f"{m * 10.0 ** e:.12g}") for e in range(lo_exp, hi_exp + 1)
                 for m in steps]
        inside = [t for t in ticks if axis_low <= t <= axis_high]
        if len(inside) >= 3:
            break
    return axis_low, axis_high, inside


def thin(positions: Sequence[float], widths: Sequence[float], *, gap: float = 6.0) -> list[int]:
    """Indices of labels to keep so that none overlaps the next (centred at `positions`,
    `widths` wide, at least `gap` apart): the first always, the last in place of the one
    before it when both do not fit, the rest greedily left to right."""
    if not positions:
        return []
    order = sorted(range(len(positions)), key=lambda i: positions[i])
    kept = [order[0]]

    def clear(a: int, b: int) -> bool:
        return (positions[b] - widths[b] / 2) - (positions[a] + widths[a] / 2) >= gap

    for i in order[1:]:
        if clear(kept[-1], i):
            kept.append(i)
    last = order[-1]
    if kept[-1] != last:
        while len(kept) > 1 and not clear(kept[-1], last):
            kept.pop()
        if clear(kept[-1], last):
            kept.append(last)
    return kept


def si(value: float) -> str:
    """'750', '1.5K', '2M', '1.2G': a tick label with a decimal suffix, three significant
    digits at most."""
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


def seconds_label(value: float) -> str:
    """A tick on a time axis: '0', '250 ms', '1.5 s', '2 min'."""
    if value == 0:
        return "0"
    if value >= 120:
        return f"{value / 60:.3g} min"
    if value >= 1:
        return f"{value:.3g} s"
    if value >= 1e-3:
        return f"{value * 1e3:.3g} ms"
    return f"{value * 1e6:.3g} us"


Scale = Callable[[float], float]
