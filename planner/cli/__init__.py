"""The `planner` command line and its rendering. Only this package imports click and rich."""

from planner.cli.commands import main, run

__all__ = ["main", "run"]
