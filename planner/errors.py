"""Exceptions the library raises; `planner.cli` turns them into exit codes."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    NOT_FEASIBLE = 1
    """The search found nothing that fits, or `validate` found violations."""
    BAD_INPUT = 2
    """Unreadable or invalid input (click's usage errors are 2 as well)."""


class InputError(Exception):
    """Bad user input (a file, a field, a value). str(self) is the whole one-line message."""


class InfeasibleError(Exception):
    """Nothing fits. str(self) says why and what would make it fit."""

    def __init__(self, message: str, *, details: list[str] | None = None) -> None:
        super().__init__(message)
        self.details = details or []
