"""The `planner` command line and its rendering. Only this package imports click and rich."""

from planner.cli import whatif  # noqa: F401  (registers diff, sweep and calibrate)
from planner.cli.commands import main, run

__all__ = ["main", "run"]
