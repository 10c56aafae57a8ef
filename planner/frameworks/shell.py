"""Read the flags out of a shell launch script (or an argument file), without running it.

Enough of POSIX shell for launch scripts: comments, backslash continuations, quoting,
`NAME=value` and `export NAME=value` assignments, bash arrays `ARGS=( ... )`, and the
expansions `$NAME`, `${NAME}`, `${NAME:-default}`, `${NAME:=default}` and `${NAME:?message}`.
A variable the script never sets has no value; a flag whose value depends on it has none.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from planner.errors import InputError

_ASSIGNMENT = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_EXPANSION = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([-=?])([^}]*))?\}"
                        r"|\$([A-Za-z_][A-Za-z0-9_]*)")
_UNSET = "\x00"
"""Marks text that came from a variable with no value."""


@dataclass(frozen=True)
class Flag:
    name: str
    """With its leading dashes: '--tensor-model-parallel-size'."""
    value: str | None
    """None for a switch (no value follows) or a value the script leaves unset."""
    has_value: bool


def _tokens(text: str, file: str) -> list[str]:
    joined = re.sub(r"\\\r?\n", " ", text)
    try:
        lexer = shlex.shlex(joined, posix=True, punctuation_chars="();&|")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        return list(lexer)
    except ValueError as e:
        raise InputError(f"{file}: cannot read it as a shell script: {e}") from None


def _is_value(token: str) -> bool:
    """Whether a token after a flag is that flag's value (not a flag, program or array)."""
    if re.fullmatch(r"-\d+(\.\d*)?([eE]-?\d+)?", token):
        return True
    return not (token.startswith("-") or token.endswith(".py") or "[@]" in token
                or token.startswith("$"))


class ShellScript:
    """The tokens of a script, with its variables expanded."""

    def __init__(self, text: str, *, file: str) -> None:
        self.variables: dict[str, str] = {}
        self.tokens: list[str] = []
        for raw in _tokens(text, file):
            if raw == "export":
                continue
            token = self._expand(raw)
            match = _ASSIGNMENT.match(token)
            if match and not token.startswith("-"):
                name, value = match.groups()
                if value and _UNSET not in value:
                    self.variables[name] = value
                continue
            self.tokens.append(token)

    def _expand(self, token: str) -> str:
        def value(match: re.Match) -> str:
            name = match.group(1) or match.group(4)
            operator, default = match.group(2), match.group(3)
            current = self.variables.get(name)
            if current is not None:
                return current
            if operator in ("-", "=") and default is not None:
                expanded = self._expand(default)
                if operator == "=":
                    self.variables[name] = expanded
                return expanded
            return _UNSET

        return _EXPANSION.sub(value, token)

    def flags(self) -> list[Flag]:
        """Every `--flag [value]` in order; `--flag=value` too."""
        found = []
        tokens = [t for t in self.tokens if t not in ("(", ")", ";", "&&", "||", "|", "&")]
        i = 0
        while i < len(tokens):
            token = tokens[i]
            if token.startswith("--") and len(token) > 2:
                if "=" in token:
                    name, value = token.split("=", 1)
                    found.append(Flag(name, None if _UNSET in value else value, True))
                elif i + 1 < len(tokens) and _is_value(tokens[i + 1]):
                    value = tokens[i + 1]
                    found.append(Flag(token, None if _UNSET in value else value, True))
                    i += 1
                else:
                    found.append(Flag(token, None, False))
            i += 1
        return found

    def mentions(self, word: str) -> bool:
        return any(word in t for t in self.tokens)
