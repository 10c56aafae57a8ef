"""The `planner` command line and its rendering. Only this package imports click and rich."""

try:
    from planner.cli import whatif  # noqa: F401  (registers diff, sweep and calibrate)
    from planner.cli.commands import main, run
except KeyboardInterrupt:   # Ctrl-C while the command line loads ends as it does later: 130
    import sys

    sys.stderr.write("Error: interrupted\n")
    raise SystemExit(130) from None

__all__ = ["main", "run"]
