"""Read the flags out of a shell launch script (or an argument file), without running it.

Enough of POSIX shell for launch scripts: comments, backslash continuations, quoting,
`NAME=value` and `export NAME=value` assignments, bash arrays `ARGS=( ... )`, and the
expansions `$NAME`, `${NAME}`, `${NAME:-default}`, `${NAME:=default}` and `${NAME:?message}`,
of positional parameters too (`${3:-MOCK}`: the script runs without arguments, so every
positional parameter is unset and takes its default). A variable the script never sets has no
value; a flag whose value depends on it has none, and `Flag.unresolved` names the variable.

Array elements written as one quoted word with a flag and its value (`"--fp8-format hybrid"`,
NVIDIA's examples/llama/train_llama3_8b_h100_fp8.sh) are split into the flag and the value, as
the unquoted expansion `${ARGS[@]}` those scripts use splits them.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from planner.errors import InputError

_ASSIGNMENT = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_EXPANSION = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*|[0-9]+)(?::([-=?])([^}]*))?\}"
                        r"|\$([A-Za-z_][A-Za-z0-9_]*|[0-9])")
_UNSET = "\x00"
"""Marks text that came from a variable with no value; the variable's name follows it, up to
the next `_UNSET_END`."""
_UNSET_END = "\x01"
_UNSET_NAME = re.compile("\x00([^\x01]*)\x01")
_SEPARATORS = ("(", ")", ";", "&&", "||", "|", "&")
OTHER_PROGRAMS = frozenset({"nsys", "ncu", "srun", "sbatch", "salloc", "mpirun", "docker",
                            "numactl", "mkdir", "echo", "rm", "cp", "ls", "pip", "deepspeed"})
"""Commands whose options a launch script may hold next to the trainer's (a profiler, Slurm,
the deepspeed launcher):
their options are skipped up to the next command, array end or python program."""
_NUMBER = re.compile(r"-(\d|\.\d|inf|nan)", re.I)
"""A negative number (or -inf, -nan) after a flag is its value, as argparse takes it."""


@dataclass(frozen=True)
class Flag:
    name: str
    """With its leading dashes: '--tensor-model-parallel-size'."""
    value: str | None
    """None for a switch (no value follows) or a value the script leaves unset."""
    has_value: bool
    more: tuple[str, ...] = ()
    """Further words up to the next flag, for an argparse nargs='+' flag
    (--recompute-modules core_attn mlp)."""
    unresolved: str | None = None
    """The value as written, with `$NAME` for each variable the script never sets, when that
    left the value unset."""


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
    if _NUMBER.match(token):
        return True
    return not (token.startswith("-") or token.endswith(".py") or "[@]" in token
                or token.startswith("$"))


def _flag(name: str, value: str, more: tuple[str, ...] = ()) -> Flag:
    if _UNSET not in value:
        return Flag(name, value, True, more)
    return Flag(name, None, True, more, unresolved=_UNSET_NAME.sub(r"$\1", value))


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
            if token.startswith("--") and re.search(r"\s", token):
                self.tokens.extend(token.split())       # "--flag value" as one array element
            else:
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
            return f"{_UNSET}{name}{_UNSET_END}"

        return _EXPANSION.sub(value, token)

    def flags(self) -> list[Flag]:
        """Every `--flag [value]` in order; `--flag=value` too."""
        found = []
        tokens, other = [], False
        for token in self.tokens:
            if token in _SEPARATORS:
                other = False
            elif token in OTHER_PROGRAMS:
                other = True        # its options are not the trainer's, up to the next command
            elif token.endswith(".py") or token in ("torchrun", "python", "python3"):
                other = False
            if not other and token not in _SEPARATORS:
                tokens.append(token)
        i = 0
        while i < len(tokens):
            token = tokens[i]
            if token.startswith("--") and len(token) > 2:
                if "=" in token:
                    name, value = token.split("=", 1)
                    found.append(_flag(name, value))
                elif i + 1 < len(tokens) and _is_value(tokens[i + 1]):
                    more = []
                    while i + 2 + len(more) < len(tokens) \
                            and _is_value(tokens[i + 2 + len(more)]):
                        more.append(tokens[i + 2 + len(more)])
                    found.append(_flag(token, tokens[i + 1], tuple(more)))
                    i += 1 + len(more)
                else:
                    found.append(Flag(token, None, False))
            i += 1
        return found

    def mentions(self, word: str) -> bool:
        return any(word in t for t in self.tokens)
