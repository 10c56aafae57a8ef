"""--timeline and --memory-chart: pictures of one plan (`plan`'s ranked plan, `validate`'s
config), written as dependency-free SVG."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from planner.errors import InputError

if TYPE_CHECKING:
    from planner.schemas.report import PlanReport


def picture_options(function):
    """--timeline FILE.svg and --memory-chart FILE.svg."""
    options = [
        click.option("--timeline", type=click.Path(dir_okay=False), metavar="FILE.svg",
                     help="Draw one step of the plan as a pipeline timeline (SVG): each "
                          "stage's forward and backward passes by micro-batch, exposed "
                          "communication, bubble and step end."),
        click.option("--memory-chart", "memory_chart", type=click.Path(dir_okay=False),
                     metavar="FILE.svg",
                     help="Draw the plan's memory per GPU as one stacked bar per pipeline "
                          "stage (SVG), with the GPU's capacity and the margin kept free."),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def check_paths(timeline: str | None, memory_chart: str | None) -> None:
    """Refuse an empty path before any work is done."""
    for flag, path in (("--timeline", timeline), ("--memory-chart", memory_chart)):
        if path is not None and not path.strip():
            raise InputError(f"{flag}: empty path")


def write_pictures(plan: PlanReport, heading: str, *, timeline: str | None,
                   memory_chart: str | None) -> list[Path]:
    """Write the pictures asked for, each whole or not at all (replacing the file); the paths
    written."""
    from planner.cli.memory_chart import memory_chart_svg
    from planner.cli.timeline import timeline_svg
    from planner.frameworks import write_files

    check_paths(timeline, memory_chart)
    written = []
    for path, draw in ((timeline, timeline_svg), (memory_chart, memory_chart_svg)):
        if path is not None:
            target = Path(path)
            written += write_files({target.name: draw(plan, heading=heading)}, target.parent,
                                   force=True)
    return written
