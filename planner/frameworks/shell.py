"""Read the commands a shell launch script (or an argument file) runs, without running it.

The script is walked as bash would run it (`shell_lexer` splits it, `shell_parse` gives its
commands, `shell_expand` expands each word): assignments, `export`/`declare`, bash arrays,
`$((...))` arithmetic, quoting and word splitting (`ARGS="\\n --tp 8"` then `$ARGS` gives
`--tp 8`), `source`/`.` of files next to the script, `sbatch FILE`, `bash FILE ARGS...` (its
$1, $2, ... are ARGS), `sh -c "..."`, `eval`,
functions, and the branch of each `if` and `case` that the script's own variables select.
Where bash's path depends on something the script does not hold (a variable it never sets, a
file test, a command's result), the first branch that does not `exit` is read and a note says
so. A command other than a test is taken to succeed (`cd dir && torchrun ...` runs torchrun).
`$(pwd)` is the script's directory, as are `$(dirname "$0")` and `$(cd "$(dirname ...)" &&
pwd)`; no other command substitution is known. Assignments before a command
(`X=1 torchrun ...`) are kept as the script's variables.

A variable the script never sets has no value; a flag whose value depends on it has none, and
`Flag.unresolved` names the variable. The script runs without arguments: `$1` is unknown and
`${1:-x}` is `x`.

Array elements written as one quoted word with a flag and its value (`"--fp8-format hybrid"`,
NVIDIA's examples/llama/train_llama3_8b_h100_fp8.sh) are split into the flag and the value, as
the unquoted expansion `${ARGS[@]}` those scripts use splits them.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass
from pathlib import Path

from planner.errors import InputError
from planner.frameworks import shell_expand as sx
from planner.frameworks import slurm
from planner.frameworks.shell_flags import Flag, read_flags
from planner.frameworks.shell_lexer import lex
from planner.frameworks.shell_parse import AndOr, Case, Function, Group, If, Loop, Parser, Simple

_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?)=(.*)$", re.S)
_DECLARE = ("export", "declare", "local", "readonly", "typeset")
_MAX_DEPTH = 20
"""Nested sources, functions and `sh -c` strings read before giving up (a cycle)."""
_MAX_ITERATIONS = 1000


@dataclass(frozen=True)
class Command:
    words: tuple[str, ...]
    """After expansion: what bash would run."""
    file: str
    line: int


class _Exit(Exception):
    def __init__(self, code: str, file: str, line: int) -> None:
        self.code, self.file, self.line = code, file, line


class _Return(Exception):
    pass


def _tokens(fields) -> list[str]:
    """A command's words as flag tokens: an array element holding "--flag value" gives two."""
    out: list[str] = []
    for token in fields:
        if token.startswith("--") and re.search(r"\s", token):
            out.extend(token.split())
        else:
            out.append(token)
    return out


def _exits(body: list) -> bool:
    """Whether a branch ends the script (`exit` among its own commands)."""
    return any(isinstance(node, Simple) and node.words and node.words[0].text == "exit"
               for node in body)


class ShellScript:
    """The commands a script runs, with its variables expanded."""

    def __init__(self, text: str, *, file: str) -> None:
        self.file = file
        self.directory = str(Path(file).resolve().parent)
        """Where the script runs from: `$(pwd)`, and the place of the files it sources."""
        self.variables: dict[str, str | list[str]] = {}
        self.tokens: list[str] = []
        self.commands: list[Command] = []
        self.notes: list[str] = []
        self.slurm: dict[str, str] = {}
        """Size options of the batch job (#SBATCH lines, then `sbatch` options)."""
        self.functions: dict[str, list] = {}
        self._files = [file]
        self._arguments: list[list[str] | None] = [None]
        self._depth = 0
        self._ambiguous = 0
        self.written: dict[str, str] = {}
        """Files the script writes from a here-document (`cat <<EOT > $F`): the path as
        written once expanded (`$NAME` where a variable is unset), and the text."""
        self._documents: dict[str, dict[int, list]] = {}
        lexed = lex(text, file=file)
        self._keep_documents(lexed, file)
        self._batch_options(slurm.read_directives([d for _, d in lexed.directives]))
        try:
            self._run(Parser(lexed.tokens, file).parse())
        except _Exit as e:
            self._exit(e)
        except _Return:
            pass

    # ---------------------------------------------------------------- scope (shell_expand)

    def get(self, name: str) -> sx.Value:
        arguments = self._arguments[-1]
        if name == "0":
            return str(Path(self.file).resolve())
        if name == "BASH_SOURCE":
            return [str(Path(self._files[-1]).resolve())]
        if name.isdigit():
            if arguments is None:
                return None
            return arguments[int(name) - 1] if int(name) <= len(arguments) else ""
        if name in "@*#":
            if arguments is None:
                return None
            return str(len(arguments)) if name == "#" else list(arguments)
        return self.variables.get(name)

    def set(self, name: str, value: str | list[str]) -> None:
        self.variables[name] = value

    def command_output(self, command: str) -> str | None:
        """What a command substitution prints, for the few that name the script's place."""
        text = command.strip()
        if re.fullmatch(r"pwd(\s+-[PL])?", text):
            return self.directory
        match = re.fullmatch(r"cd\s+(?:--\s+)?(\S+)\s*(?:&&|;)\s*pwd(\s+-[PL])?", text)
        if match:
            target = sx.expand_text(match.group(1), self)
            return os.path.normpath(os.path.join(self.directory, target)) \
                if sx.is_known(target) else None
        match = re.fullmatch(r"(dirname|realpath|readlink\s+-f|basename)\s+(\S+)", text)
        if match:
            path = sx.expand_text(match.group(2), self)
            if not sx.is_known(path):
                return None
            program = match.group(1)
            if program == "dirname":
                return os.path.dirname(path) or "."
            if program == "basename":
                return os.path.basename(path)
            return os.path.normpath(os.path.join(self.directory, path))
        return None

    # ---------------------------------------------------------------- running

    def _run(self, nodes: list) -> None:
        for node in nodes:
            self._node(node)

    def _node(self, node) -> None:
        if isinstance(node, Simple):
            self._simple(node)
        elif isinstance(node, AndOr):
            self._status(node)
        elif isinstance(node, Group):
            self._run(node.body)
        elif isinstance(node, If):
            self._if(node)
        elif isinstance(node, Case):
            self._case(node)
        elif isinstance(node, Loop):
            self._loop(node)
        elif isinstance(node, Function):
            self.functions[node.name] = node.body

    def _status(self, node, *, conditional: bool = False) -> tuple[bool | None, list[str]]:
        """(whether the command succeeds, None when the script cannot say; why not). Tests
        are evaluated; other commands run, and are taken to succeed unless `conditional` (the
        condition of an `if`, whose branches then both stay possible)."""
        if isinstance(node, AndOr):
            value, why = self._status(node.first, conditional=conditional)
            for op, right in node.rest:
                if (op == "&&" and value is False) or (op == "||" and value is True):
                    continue
                if value is None:
                    self._note_ambiguous(node.line, why, "the command after it")
                result, more = self._status(right, conditional=conditional)
                value, why = (result if value is not None else None), why + more
            return value, why
        if isinstance(node, Simple) and node.words:
            negate = node.words[0].text == "!"
            words = node.words[1:] if negate else node.words
            if words and words[0].text in ("[", "[[", "test", "true", "false", ":"):
                value, why = self._test(words)
                return (None if value is None else value != negate), why
        self._node(node)
        if conditional:
            return None, ["the result of a command"]
        return True, []

    def _test(self, words) -> tuple[bool | None, list[str]]:
        first = words[0].text
        if first in ("true", ":"):
            return True, []
        if first == "false":
            return False, []
        double = first == "[["
        if double:
            values = [sx.expand_text(w.text, self) for w in words[1:-1]]
        else:
            values = [v for w in words[1:] for v in sx.expand(w.text, self)]
            values = values[:-1] if first == "[" else values
        value = sx.test(values, double=double)
        names = [n for v in values for n in sx.unknown_names(v)]
        why = [f"${n}" if not n.startswith("$(") else n for n in names]
        if value is None and not why:
            why = ["a file or a test this reader does not evaluate"]
        return value, why

    def _note_ambiguous(self, line: int, why: list[str], read: str) -> None:
        reason = ", ".join(dict.fromkeys(why)) or "the result of a command"
        unset = " (not set in the script)" if any(w.startswith("$") and not w.startswith("$(")
                                                 for w in why) else ""
        self.notes.append(f"{self._files[-1]} line {line}: the branch bash takes depends on "
                          f"{reason}{unset}; read {read}")

    def _choose(self, line: int, options: list[tuple[bool | None, list[str], list, str]]
                ) -> None:
        """Run the body of the first option that holds; when that depends on what the script
        does not hold, the first possible one that does not exit, with a note."""
        possible, why = [], []
        for value, reasons, body, label in options:
            if value is True and not possible:
                self._run(body)
                return
            if value is False:
                continue
            possible.append((body, label))
            why += reasons
            if value is True:
                break
        if not possible:
            return
        if len(possible) == 1 and not why:
            self._run(possible[0][0])
            return
        body, label = next(((b, l) for b, l in possible if not _exits(b)), possible[0])
        self._note_ambiguous(line, why, label)
        self._ambiguous += 1
        try:
            self._run(body)
        finally:
            self._ambiguous -= 1

    def _if(self, node: If) -> None:
        options = []
        for condition, body in node.branches:
            self._run(condition[:-1])
            value, why = self._status(condition[-1], conditional=True) if condition \
                else (True, [])
            where = body[0].line if body else node.line
            options.append((value, why, body, f"the branch at line {where}"))
        if node.orelse is not None:
            where = node.orelse[0].line if node.orelse else node.line
            options.append((True, [], node.orelse, f"the else branch at line {where}"))
        else:
            options.append((True, [], [], "no branch"))
        self._choose(node.line, options)

    def _case(self, node: Case) -> None:
        word = sx.expand_text(node.word.text, self)
        options = []
        for patterns, body in node.arms:
            texts = [sx.expand_text(p.text, self) for p in patterns]
            label = f"the arm {'|'.join(p.text for p in patterns)}) (line {patterns[0].line})"
            if sx.is_known(word) and all(sx.is_known(t) for t in texts):
                value = any(fnmatch.fnmatchcase(word, t) for t in texts)
                options.append((value, [], body, label))
            else:
                names = sx.unknown_names(word) + [n for t in texts for n in sx.unknown_names(t)]
                options.append((None, [f"${n}" for n in names], body, label))
        options.append((True, [], [], "no arm"))
        self._choose(node.line, options)

    def _loop(self, node: Loop) -> None:
        if node.kind == "for" and node.items is not None:
            items = [v for t in node.items for v in sx.expand(t.text, self)]
            for item in items[:_MAX_ITERATIONS]:
                self.set(node.variable, item)
                self._run(node.body)
            return
        if node.kind == "for" and node.variable is not None:     # for NAME; do: over "$@"
            return
        self._run(node.condition)
        self.notes.append(f"{self._files[-1]} line {node.line}: read the body of this "
                          f"{node.kind} loop once (how often bash runs it is not known)")
        self._run(node.body)

    def _assign(self, text: str, elements: tuple[str, ...] | None) -> bool:
        match = _ASSIGNMENT.match(text)
        if match is None:
            return False
        name, append, value = match.groups()
        if elements is not None:
            new: str | list[str] = [v for e in elements for v in sx.expand(e, self)]
        else:
            new = sx.expand_text(value, self)
        old = self.variables.get(name)
        if append and old is not None:
            new = (old if isinstance(old, list) else [old]) + new if isinstance(new, list) \
                else (old + new if isinstance(old, str) else old + [new])
        self.set(name, new)
        return True

    def _simple(self, node: Simple) -> None:
        words = node.words
        i = 0
        while i < len(words) and self._assign(words[i].text, words[i].elements):
            i += 1
        words = words[i:]
        if not words:
            return
        if words[0].text in _DECLARE:
            for w in words[1:]:
                if not w.text.startswith("-"):
                    self._assign(w.text, w.elements)
            return
        fields = [v for w in words for v in sx.expand(w.text, self)]
        if not fields:
            return
        program, arguments = fields[0], fields[1:]
        for document in self._documents.get(self._files[-1], {}).get(node.line, ()):
            if document.target and os.path.basename(program) in ("cat", "tee"):
                self._write_document(document)
        if program in ("source", ".") and arguments:
            self._source(arguments[0], node.line)
        elif program == "exit":
            raise _Exit(arguments[0] if arguments else "0", self._files[-1], node.line)
        elif program == "return":
            raise _Return()
        elif program == "unset":
            for name in arguments:
                self.variables.pop(name, None)
        elif program == "eval":
            self._nested(" ".join(arguments), self._files[-1])
        elif program in self.functions:
            self._call(program, arguments)
        elif program == "sbatch":
            self._record(fields, node.line)
            self._sbatch(arguments, node.line)
        elif os.path.basename(program) in ("bash", "sh") and arguments \
                and arguments[0].endswith(".sh"):
            self._record(fields, node.line)
            self._child(arguments[0], arguments[1:], node.line)
        else:
            self._record(fields, node.line)
            for k, word in enumerate(fields[:-2]):
                if os.path.basename(word) in ("sh", "bash") and fields[k + 1] == "-c":
                    self._nested(fields[k + 2], self._files[-1])
                    break

    def _keep_documents(self, lexed, file: str) -> None:
        by_line: dict[int, list] = {}
        for document in lexed.documents:
            by_line.setdefault(document.line, []).append(document)
        self._documents[file] = by_line

    def _write_document(self, document) -> None:
        """What `cat <<EOT > TARGET` writes: the body, with $NAME, ${...} and $((...))
        expanded where the delimiter is unquoted (bash's here-document rules: no quote
        removal, no word splitting)."""
        try:
            target = sx.as_written(sx.expand_text(document.target, self))
            body = document.body
            if document.expands:
                body = re.sub(r"\$(\{[^}]*\}|\(\([^)]*\)\)|[A-Za-z_][A-Za-z0-9_]*|[0-9])",
                              lambda m: sx.expand_text(m.group(0), self), body)
        except (InputError, ValueError):        # text this reader cannot expand: not kept
            self.notes.append(f"{self._files[-1]} line {document.line}: cannot read what "
                              f"this here-document writes; not read")
            return
        self.written[target] = body

    def _record(self, fields: list[str], line: int) -> None:
        self.commands.append(Command(tuple(fields), self._files[-1], line))
        self.tokens.extend(_tokens(fields))
        self.tokens.append(";")

    def _deeper(self) -> bool:
        if self._depth >= _MAX_DEPTH:
            self.notes.append(f"{self._files[-1]}: stopped reading after {_MAX_DEPTH} nested "
                              f"sources, calls or sh -c strings")
            return False
        return True

    def _nested(self, text: str, file: str) -> None:
        if not self._deeper():
            return
        self._depth += 1
        try:
            self._run(Parser(lex(text, file=file).tokens, file).parse())
        finally:
            self._depth -= 1

    def _call(self, name: str, arguments: list[str]) -> None:
        if not self._deeper():
            return
        self._depth += 1
        self._arguments.append(arguments)
        try:
            self._run(self.functions[name])
        except _Return:
            pass
        finally:
            self._arguments.pop()
            self._depth -= 1

    def _find(self, written: str, line: int, what: str) -> Path | None:
        """The file a `source` or `sbatch` names, next to the script; None with a note when
        it cannot be told or is not there."""
        if not sx.is_known(written):
            names = ", ".join(f"${n}" for n in sx.unknown_names(written))
            self.notes.append(f"{self._files[-1]} line {line}: cannot tell which file `{what} "
                              f"{sx.as_written(written)}` reads ({names} not set in the "
                              f"script); the settings it holds are not read")
            return None
        path = Path(os.path.normpath(Path(self.directory) / written))
        if not path.is_file():
            self.notes.append(f"{self._files[-1]} line {line}: `{what} {self._shown(path)}`: "
                              f"not found; the settings it holds are not read")
            return None
        return path

    def _shown(self, path: Path) -> str:
        """A path as the user named the script: relative to where the script was given."""
        try:
            inside = path.relative_to(self.directory)
        except ValueError:
            return str(path)
        return os.path.normpath(Path(self.file).parent / inside)

    def _read_file(self, path: Path, line: int, what: str):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            self.notes.append(f"{self._files[-1]} line {line}: `{what} {self._shown(path)}`: cannot read "
                              f"it ({e}); the settings it holds are not read")
            return None
        lexed = lex(text, file=self._shown(path))
        self._keep_documents(lexed, self._shown(path))
        return lexed

    def _source(self, written: str, line: int) -> None:
        path = self._find(written, line, "source")
        if path is None or self._shown(path) in self._files or not self._deeper():
            return
        lexed = self._read_file(path, line, "source")
        if lexed is not None:
            self._run_file(path, lexed)

    def _child(self, written: str, arguments: list[str], line: int) -> None:
        """`bash FILE ARGS...`: FILE runs with ARGS as its $1, $2, ... (a wrapper that passes a
        config's sizes to the training script). Read in the script's own scope: a child bash
        sees only exported variables, which this reader does not tell apart."""
        path = self._find(written, line, os.path.basename(written))
        if path is None or self._shown(path) in self._files or not self._deeper():
            return
        lexed = self._read_file(path, line, "bash")
        if lexed is not None:
            self._run_file(path, lexed, arguments=arguments)

    def _sbatch(self, arguments: list[str], line: int) -> None:
        """`sbatch [options] FILE`: FILE runs as the batch script, its #SBATCH lines under the
        command line's options (sbatch.html: command-line options win)."""
        options, at = slurm.read_options(arguments)
        if at >= len(arguments):
            self._batch_options(options)
            return
        path = self._find(arguments[at], line, "sbatch")
        if path is None or self._shown(path) in self._files or not self._deeper():
            self._batch_options(options)
            return
        lexed = self._read_file(path, line, "sbatch")
        if lexed is None:
            return
        self._batch_options({**slurm.read_directives([d for _, d in lexed.directives]),
                             **options})
        self._run_file(path, lexed)

    def _run_file(self, path: Path, lexed, *, arguments: list[str] | None = None) -> None:
        """Run another file's commands as part of this script: sourced (its `exit` ends the
        script), the batch script sbatch starts, or a child bash given `arguments` as its $1,
        $2, ... (its `exit` ends only the child)."""
        shown = self._shown(path)
        self._files.append(shown)
        if arguments is not None:
            self._arguments.append(arguments)
        self._depth += 1
        try:
            self._run(Parser(lexed.tokens, shown).parse())
        except _Return:
            pass
        except _Exit as e:
            if arguments is None:
                raise
            if e.code != "0":
                self.notes.append(f"{e.file} line {e.line}: the script exits here (exit "
                                  f"{e.code}); nothing after it is read")
        finally:
            self._files.pop()
            if arguments is not None:
                self._arguments.pop()
            self._depth -= 1

    def _batch_options(self, options: dict[str, str]) -> None:
        self.slurm.update(options)
        for name, value in slurm.environment(self.slurm).items():
            self.variables.setdefault(name, value)

    def _exit(self, e: _Exit) -> None:
        launched = any(w.endswith(".py") or w in ("torchrun", "srun", "sbatch")
                       for c in self.commands for w in c.words)
        if e.code != "0" and not launched and not self._ambiguous:
            raise InputError(f"{e.file}: line {e.line}: the script stops here (exit {e.code}) "
                             f"before it launches a trainer, as bash would run it")
        if e.code != "0":
            self.notes.append(f"{e.file} line {e.line}: the script exits here (exit {e.code}); "
                              f"nothing after it is read")

    # ---------------------------------------------------------------- reading

    def flags(self) -> list[Flag]:
        """Every `--flag [value]` in order; `--flag=value` too."""
        return read_flags(self.tokens)

    def entry_flags(self, entry: re.Pattern) -> list[Flag] | None:
        """The flags the script passes to its training program: the words after a word
        `entry` matches (`pretrain_gpt.py`), in every command that runs one (its launcher's
        options and helper commands such as `python tools/preprocess_data.py` left out);
        None when no command names one (an argument file)."""
        tokens: list[str] = []
        for command in self.commands:
            start = next((k for k, word in enumerate(command.words) if entry.search(word)), None)
            if start is not None:
                tokens.extend(_tokens(command.words[start + 1:]))
                tokens.append(";")
        return read_flags(tokens) if tokens else None

    def mentions(self, word: str) -> bool:
        return any(word in t for t in self.tokens)
