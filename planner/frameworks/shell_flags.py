"""The flags of the commands a script runs: `--flag [value ...]` and `--flag=value`, with the
options of other programs (a profiler, Slurm, the deepspeed launcher) left out."""

from __future__ import annotations

import re
from dataclasses import dataclass

from planner.frameworks import shell_expand as sx

_SEPARATORS = (";",)
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
    why: str | None = None
    """Why it is unset (`shell_expand.why_unknown`), with `unresolved`."""


def one_line(value: str, limit: int = 60) -> str:
    """A value for a one-line message: blanks and line ends as one space, long ones cut."""
    text = " ".join(value.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _is_value(token: str) -> bool:
    """Whether a token after a flag is that flag's value (not a flag, program or array)."""
    if _NUMBER.match(token):
        return True
    return not (token.startswith("-") or token.endswith(".py") or "[@]" in token
                or token.startswith("$"))


def _flag(name: str, value: str, more: tuple[str, ...] = ()) -> Flag:
    if sx.is_known(value):
        return Flag(name, value, True, more)
    return Flag(name, None, True, more, unresolved=sx.as_written(value),
                why=sx.why_unknown(value))


def read_flags(words: list[str]) -> list[Flag]:
    """Every `--flag [value]` in order among the words of the commands (`;` between two)."""
    found = []
    tokens, other = [], False
    for token in words:
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

