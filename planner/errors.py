"""Exceptions the library raises; `planner.cli` turns them into exit codes."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    NOT_FEASIBLE = 1
    """The search found nothing that fits, or `validate` found violations."""
    BAD_INPUT = 2
    """Unreadable or invalid input (click's usage errors are 2 as well)."""
    INTERRUPTED = 130
    """Ctrl-C: 128 + SIGINT, as a shell reports a process that SIGINT ended."""


class InputError(Exception):
    """Bad user input (a file, a field, a value). str(self) is the whole one-line message."""


class InfeasibleError(Exception):
    """Nothing fits. str(self) says why and what would make it fit."""

    def __init__(self, message: str, *, details: list[str] | None = None) -> None:
        super().__init__(message)
        self.details = details or []


def shown(path) -> str:
    """A file name as messages show it: as given, or quoted with escapes when it holds a
    newline or another control character, so that the message stays one line; cut in the
    middle past MAX_SHOWN characters."""
    text = clipped(str(path))
    if text.isprintable():
        return text
    return "'" + one_line(text.replace("\\", "\\\\").replace("'", "\\'")) + "'"


MAX_SHOWN = 160
"""Characters of a name (a file, a model, a preset) that an error message repeats."""


def clipped(text: str, limit: int = MAX_SHOWN) -> str:
    """`text`, or its start and end around '...' and its length when it is longer than
    `limit` (a 10,000-character argument stays a readable line)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit * 2 // 3]}...{text[-(limit // 4):]} ({len(text):,} characters)"


def one_line(text: str) -> str:
    """`text` with its control characters written as escapes (\\n, \\t, \\x1b)."""
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
    return "".join(c if c.isprintable() or c == " " else
                   named.get(c, f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}")
                   for c in text)
