"""Split a shell script into words and operators, as bash's tokenizer does, without running it.

Words keep their quotes and expansions as written (`"$A"`, `${B:-8}`, `$((C*2))`, a backtick
substitution); `shell_expand` expands them later, because quoting decides whether the value
of an expansion splits into several words. Operators are `;`, `;;`, `&`, `&&`, `|`, `||`,
`|&`, `(`, `)` and the end of a line. Redirections (`> log`, `2>&1`, `<<EOF` with its
here-document) are dropped with their target: they never carry a flag; a here-document is kept
aside (`Lexed.documents`) with the output its command writes, as a script writes a config
file (`cat <<EOT > $config_json`). An array assignment
`ARGS=( ... )` is one token holding its element words.

`#SBATCH` lines before the first command are kept: sbatch reads its options from them
(https://slurm.schedmd.com/sbatch.html, "batch script ... #SBATCH", which stop at the first
command).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from planner.errors import InputError

OPERATORS = (";;", "&&", "||", "|&", ";", "&", "|", "(", ")")
NEWLINE = "\n"
_REDIRECT = re.compile(r"&>>|&>|>>|>&|>\||<<<|<<-|<<|<&|<>|>|<")
_ARRAY_START = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\+?=$")


@dataclass(frozen=True)
class Token:
    text: str
    """A word as written (quotes kept), an operator, or NEWLINE."""
    line: int
    is_word: bool
    elements: tuple[str, ...] | None = None
    """The element words of an array assignment `NAME=( ... )` (text is then `NAME=`)."""


@dataclass
class HereDocument:
    """A here-document a command reads (`cat <<EOT > $FILE`): the body and where the same
    command redirects its output, as written."""

    line: int
    body: str
    expands: bool
    """The delimiter was not quoted: bash expands $VAR, ${...}, $(...) in the body."""
    target: str | None = None
    """The `>` or `>>` target of the same command, unexpanded; None without one."""


@dataclass
class Lexed:
    tokens: list[Token]
    directives: list[tuple[int, str]]
    """(line, options) of each `#SBATCH options` line before the first command."""
    documents: list[HereDocument] = field(default_factory=list)
    """The here-documents, each with the line of the command that reads it."""


class QuoteReader:
    def __init__(self, text: str, file: str) -> None:
        self.text, self.file, self.i, self.line = text, file, 0, 1

    def error(self, what: str) -> InputError:
        return InputError(f"{self.file}: line {self.line}: cannot read it as a shell script: "
                          f"{what}")

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.text[j] if j < len(self.text) else ""

    def take(self) -> str:
        c = self.text[self.i]
        self.i += 1
        if c == "\n":
            self.line += 1
        return c

    def closing(self, start: str) -> str:
        """The rest of a quoted or bracketed part opened by `start`, up to and including its
        close, quotes and nesting respected."""
        out = []
        if start == "'":
            while self.peek() and self.peek() != "'":
                out.append(self.take())
            if not self.peek():
                raise self.error("no closing quotation (')")
            return "".join(out) + self.take()
        if start in ('"', "`"):
            while self.peek() and self.peek() != start:
                c = self.take()
                out.append(c)
                if c == "\\" and self.peek():
                    out.append(self.take())
                elif c == "$" and self.peek() in "({" and start == '"':
                    opened = self.take()
                    out.append(opened + self.closing(opened))
            if not self.peek():
                raise self.error(f"no closing quotation ({start})")
            return "".join(out) + self.take()
        close = ")" if start == "(" else "}"
        while self.peek() and self.peek() != close:
            c = self.take()
            out.append(c)
            if c == "\\" and self.peek():
                out.append(self.take())
            elif c in "'\"`":
                out.append(self.closing(c))
            elif c in "({":
                out.append(self.closing(c))
        if not self.peek():
            raise self.error(f"no closing '{close}'")
        return "".join(out) + self.take()


def lex(text: str, *, file: str) -> Lexed:
    """The tokens of `text`, or an InputError naming the line of an unclosed quote."""
    r = QuoteReader(text, file)
    tokens: list[Token] = []
    directives: list[tuple[int, str]] = []
    heredocs: list[tuple[str, bool]] = []
    documents: list[HereDocument] = []
    pending: list[HereDocument] = []        # here-documents of the current line
    word: list[str] = []
    word_line = 1

    def end_word() -> None:
        if word:
            tokens.append(Token("".join(word), word_line, True))
            word.clear()

    def skip_heredocs() -> None:
        for document in pending:
            delimiter, tabs = heredocs.pop(0)
            body = []
            while r.peek():
                end = r.text.find("\n", r.i)
                end = len(r.text) if end < 0 else end
                line = r.text[r.i:end]
                for _ in range(end - r.i + (end < len(r.text))):
                    r.take()
                if (line.lstrip("\t") if tabs else line) == delimiter:
                    break
                body.append(line.lstrip("\t") if tabs else line)
            document.body = "\n".join(body) + ("\n" if body else "")
            documents.append(document)
        pending.clear()

    while r.peek():
        c = r.peek()
        if c == "\\" and r.peek(1) == "\n":
            r.take(), r.take()
        elif c in " \t\r":
            end_word()
            r.take()
        elif c == "\n":
            end_word()
            tokens.append(Token(NEWLINE, r.line, False))
            r.take()
            skip_heredocs()
        elif c == "#" and not word:
            start = r.i
            while r.peek() and r.peek() != "\n":
                r.take()
            comment = r.text[start:r.i]
            if comment.startswith("#SBATCH") and not any(t.is_word for t in tokens):
                directives.append((r.line, comment[len("#SBATCH"):].strip()))
        elif c in "<>" or (c == "&" and r.peek(1) == ">"):
            if word and "".join(word).isdigit():
                word.clear()                                   # the 2 of 2>&1
            end_word()
            op = _REDIRECT.match(r.text, r.i).group(0)
            for _ in op:
                r.take()
            while r.peek() in (" ", "\t"):
                r.take()
            target = []
            while r.peek() and r.peek() not in " \t\r\n;&|()<>":
                ch = r.take()
                target.append(ch + r.closing(ch) if ch in "'\"" else ch)
            if op in ("<<", "<<-"):
                written = "".join(target)
                heredocs.append((written.replace("'", "").replace('"', ""), op == "<<-"))
                pending.append(HereDocument(r.line, "",
                                            expands=not any(q in written for q in "'\"\\")))
            elif op in (">", ">>", ">|") and pending:
                pending[-1].target = "".join(target)
        elif c == "(" and word and _ARRAY_START.match("".join(word)):
            name_line = word_line
            r.take()
            elements = _array_elements(r)
            tokens.append(Token("".join(word), name_line, True, tuple(elements)))
            word.clear()
        elif c in ";&|()":
            end_word()
            op = next(o for o in OPERATORS if r.text.startswith(o, r.i))
            for _ in op:
                r.take()
            tokens.append(Token(op, r.line, False))
        else:
            if not word:
                word_line = r.line
            _take_word_part(r, word)
    end_word()
    return Lexed(tokens, directives, documents)


def _take_word_part(r: QuoteReader, word: list[str]) -> None:
    """Append the next piece of a word to `word`: an escaped character, a quoted string, a
    `$(...)` or `${...}` whole, an unknown value's marker whole (`shell_expand.unknown`), or
    one plain character."""
    ch = r.take()
    if ch == "\x00":       # a value the reader does not know (text it re-reads: eval, sh -c)
        depth, part = 1, [ch]
        while depth and r.peek():
            part.append(r.take())
            depth += {"\x00": 1, "\x01": -1}.get(part[-1], 0)
        word.append("".join(part))
    elif ch == "\\" and r.peek():
        word.append(ch + r.take())
    elif ch in "'\"`":
        word.append(ch + r.closing(ch))
    elif ch == "$" and r.peek() in "({":
        opened = r.take()
        word.append(ch + opened + r.closing(opened))
    else:
        word.append(ch)


def _array_elements(r: QuoteReader) -> list[str]:
    """The words of `( ... )` after `NAME=`, comments and line ends skipped."""
    elements, word = [], []
    while True:
        c = r.peek()
        if not c:
            raise r.error("no closing ')' for an array")
        if c == "\\" and r.peek(1) == "\n":
            r.take(), r.take()
        elif c in " \t\r\n" or c == ")":
            if word:
                elements.append("".join(word))
                word.clear()
            r.take()
            if c == ")":
                return elements
        elif c == "#" and not word:
            while r.peek() and r.peek() != "\n":
                r.take()
        else:
            _take_word_part(r, word)
