"""Expand a shell word as bash does, with the values a script gives its own variables.

Quoting: single quotes keep their text; double quotes expand `$` but never split; the value
of an unquoted expansion splits at blanks and line ends, so `ARGS="\\n --tp 8"` then `$ARGS`
gives the two words `--tp` and `8`, and `"${ARR[@]}"` gives one word per element.
Expansions: `$NAME`, `${NAME}`, `${NAME:-w}` (and `-`, `:=`, `=`, `:?`, `?`, `:+`, `+`),
`${#NAME}`, `${NAME%w}` `%%` `#` `##` (suffix and prefix removal), `${NAME/a/b}` `//`,
`${NAME,,}` `^^`, arrays `${A[@]}` `${A[*]}` `${A[i]}`, `$((...))` integer arithmetic, and
command substitution through the caller (which knows `$(dirname "$0")`, nothing else).

A value the script never sets is unknown: it expands to a marker (`unknown(name)`) that
travels inside the text, so a flag whose value holds one can name the variable it waits on.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from typing import Protocol

from planner.errors import InputError
from planner.frameworks.shell_lexer import QuoteReader

_UNSET = "\x00"
_UNSET_END = "\x01"
_PARAMETER = re.compile(r"^(#?)([A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!])(?:\[([^\]]*)\])?(.*)$",
                        re.S)
_OPERATOR = re.compile(r"^(:-|:=|:\?|:\+|-|=|\?|\+|%%|%|##|#|//|/|,,|\^\^)(.*)$", re.S)
_BLANKS = " \t\n"
Value = str | list[str] | None


def unknown(name: str) -> str:
    """The marker for a value the script never sets."""
    return f"{_UNSET}{name}{_UNSET_END}"


def _markers(text: str) -> list[tuple[int, int]]:
    """(start, end) of each outermost unknown marker in `text` (markers may nest)."""
    spans, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == _UNSET:
            start = i if depth == 0 else start
            depth += 1
        elif ch == _UNSET_END and depth:
            depth -= 1
            if depth == 0:
                spans.append((start, i + 1))
    return spans


def unknown_names(text: str) -> list[str]:
    """What each outermost unknown marker stands for: a name, an argument's number, `$(...)` or
    `((...))`, inner markers written back as `$NAME`."""
    return [as_written(text[a + 1:b - 1]) for a, b in _markers(text)]


def why_unknown(text: str) -> str:
    """Why `text` (holding unknown markers) has no value, for a message: the first unknown
    part, as a variable the script never sets, an argument of the script, a command's output
    or arithmetic over such values."""
    name = " ".join(unknown_names(text)[0].split())
    if len(name) > 60:
        name = name[:57] + "..."
    if name.isdigit() or name in ("@", "*", "#"):
        return (f"${name} is an argument of the script, which the planner reads as run "
                f"without arguments")
    if name.startswith("$("):
        return f"{name} is the output of a command, which the planner does not run"
    if name.startswith("(("):
        return f"${name} is arithmetic over a value the script does not hold"
    return f"the script never sets {name}"


def is_known(text: str) -> bool:
    return _UNSET not in text


def as_written(text: str) -> str:
    """`text` with each unknown marker written back as `$NAME` (`$(...)`, `$((...))`)."""
    out, last = [], 0
    for a, b in _markers(text):
        inner = as_written(text[a + 1:b - 1])
        out += [text[last:a], inner if inner.startswith("$(") else f"${inner}"]
        last = b
    return "".join(out + [text[last:]])


class Scope(Protocol):
    def get(self, name: str) -> Value: ...
    def set(self, name: str, value: str) -> None: ...
    def command_output(self, command: str) -> str | None: ...


class _Fields:
    """Words under construction: quoted text joins the current word, unquoted expansion
    values split it at blanks."""

    def __init__(self) -> None:
        self.words: list[str] = []
        self.current: list[str] = []
        self.started = False

    def text(self, piece: str) -> None:
        self.current.append(piece)
        self.started = True

    def split(self, piece: str) -> None:
        """Split at blanks, but not inside a value the reader does not know (the text of a
        command substitution stands for one word of output, not for its own words)."""
        parts, current, depth, blank = [], [], 0, False
        for ch in piece:
            depth += {_UNSET: 1, _UNSET_END: -1}.get(ch, 0)
            if depth == 0 and ch in _BLANKS:
                if not blank:
                    parts.append("".join(current))
                    current = []
                blank = True
                continue
            blank = False
            current.append(ch)
        parts.append("".join(current))
        for i, part in enumerate(parts):
            if i:
                self.end()
            if part:
                self.text(part)

    def end(self) -> None:
        if self.started:
            self.words.append("".join(self.current))
        self.current, self.started = [], False


def expand(raw: str, scope: Scope, *, split: bool = True) -> list[str]:
    """The words `raw` becomes; with `split` False (assignments, case words), one string."""
    fields = _Fields()
    _expand_into(fields, raw, scope, quoted=False, split=split)
    fields.end()
    if not split:
        return [" ".join(fields.words)] if fields.words else [""]
    return fields.words


def expand_text(raw: str, scope: Scope) -> str:
    return expand(raw, scope, split=False)[0]


def _expand_into(fields: _Fields, raw: str, scope: Scope, *, quoted: bool,
                 split: bool = True) -> None:
    """Add the expansion of `raw` to `fields`: `quoted` inside double quotes, `split` where
    unquoted values split into words (not in an assignment)."""
    split = split and not quoted
    i = 0
    while i < len(raw):
        c = raw[i]
        if c == "'" and not quoted:
            end = raw.index("'", i + 1)
            fields.text(raw[i + 1:end])
            i = end + 1
        elif c == '"' and not quoted:
            inner, i = _closing(raw, i + 1, '"')
            fields.text("")
            _expand_into(fields, inner, scope, quoted=True, split=False)
        elif c == "\\" and i + 1 < len(raw):
            nxt = raw[i + 1]
            if nxt == "\n":
                pass                                     # a line continuation
            elif quoted and nxt not in '$`"\\':
                fields.text(c + nxt)
            else:
                fields.text(nxt)
            i += 2
        elif c == "`":
            body, i = _closing(raw, i + 1, "`")
            _add(fields, scope.command_output(body) or unknown(f"$({body})"), split)
        elif c == "$" and i + 1 < len(raw):
            value, i = _dollar(raw, i, scope)
            if isinstance(value, list):
                for k, element in enumerate(value):
                    if k:
                        fields.end()
                    _add(fields, element, split)
            else:
                _add(fields, value, split)
        else:
            fields.text(c)
            i += 1


def _add(fields: _Fields, value: str, split: bool) -> None:
    if split:
        fields.split(value)
    else:
        fields.text(value)


def _closing(raw: str, start: int, opener: str) -> tuple[str, int]:
    """(the text inside, the index after the close) of a part opened just before `start`."""
    reader = QuoteReader(raw, "")
    reader.i = start
    try:
        body = reader.closing(opener)
    except InputError:          # the lexer took it as closed (a quote inside `...`): the rest
        return raw[start:], len(raw)
    return body[:-1], reader.i


def _dollar(raw: str, i: int, scope: Scope) -> tuple[Value, int]:
    nxt = raw[i + 1]
    if nxt == "(":
        body, end = _closing(raw, i + 2, "(")
        if body.startswith("(") and body.endswith(")"):
            return arithmetic(body[1:-1], scope), end
        return scope.command_output(body) or unknown(f"$({body})"), end
    if nxt == "{":
        body, end = _closing(raw, i + 2, "{")
        return _parameter(body, scope), end
    match = re.match(r"[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-]", raw[i + 1:])
    if match is None:
        return "$", i + 1
    name = match.group(0)
    value = scope.get(name)
    if isinstance(value, list):
        value = value if name in "@*" else (value[0] if value else "")
    return (unknown(name) if value is None else value), i + 1 + len(name)


def _parameter(body: str, scope: Scope) -> Value:
    """The value of `${body}`."""
    match = _PARAMETER.match(body)
    if match is None:
        return unknown(body)
    length, name, index, rest = match.groups()
    value = scope.get(name)
    if isinstance(value, list) and index is None and name not in "@*":
        value = value[0] if value else ""
    elif isinstance(value, list) and index not in (None, "@", "*"):
        position = arithmetic(index, scope)
        value = value[int(position)] if position.lstrip("-").isdigit() \
            and -len(value) <= int(position) < len(value) else ""
    elif isinstance(value, str) and index not in (None, "@", "*", "0"):
        value = ""
    if length:
        if value is None:
            return unknown(name)
        return str(len(value))
    if not rest:
        return unknown(name) if value is None else value
    op = _OPERATOR.match(rest)
    if op is None:
        return unknown(name) if value is None else value
    operator, word = op.groups()
    empty = value is None or value == "" or value == []
    if operator in (":-", "-", ":=", "="):
        use = empty if operator.startswith(":") else value is None
        if not use:
            return value
        default = expand_text(word, scope)
        if "=" in operator:
            scope.set(name, default)
        return default
    if value is None:
        return unknown(name)
    if operator in (":?", "?"):
        return value
    if operator in (":+", "+"):
        present = not empty if operator == ":+" else True
        return expand_text(word, scope) if present else ""
    if isinstance(value, list):
        return [_transform(v, operator, word, scope) for v in value]
    return _transform(value, operator, word, scope)


def _transform(value: str, operator: str, word: str, scope: Scope) -> str:
    if operator in (",,", "^^"):
        return value.lower() if operator == ",," else value.upper()
    if operator in ("/", "//"):
        pattern, _, replacement = word.partition("/")
        pattern, replacement = expand_text(pattern, scope), expand_text(replacement, scope)
        return value.replace(pattern, replacement, -1 if operator == "//" else 1)
    pattern = expand_text(word, scope)
    cuts = range(len(value) + 1)
    if operator in ("#", "##"):
        ends = [k for k in cuts if fnmatch.fnmatchcase(value[:k], pattern)]
        if ends:
            return value[(max(ends) if operator == "##" else min(ends)):]
        return value
    starts = [k for k in cuts if fnmatch.fnmatchcase(value[k:], pattern)]
    if starts:
        return value[:(min(starts) if operator == "%%" else max(starts))]
    return value


# --------------------------------------------------------------------------- arithmetic

_ARITH_TOKEN = re.compile(r"\s*(0[xX][0-9a-fA-F]+|\d+|[A-Za-z_][A-Za-z0-9_]*|\*\*|<=|>=|==|!="
                          r"|&&|\|\||<<|>>|[-+*/%()<>!~&|^])")


def arithmetic(text: str, scope: Scope) -> str:
    """The value of `$((text))` as a decimal string, or an unknown marker when it reads a
    variable the script never sets, or uses what this reader does not evaluate (`?:`,
    assignments, `++`)."""
    expanded = expand_text(text, scope)
    if not is_known(expanded):
        return unknown(f"(({text}))")
    python, pos = [], 0
    while pos < len(expanded.rstrip()):
        match = _ARITH_TOKEN.match(expanded, pos)
        if match is None:
            return unknown(f"(({text}))")
        token, pos = match.group(1), match.end()
        if re.match(r"[A-Za-z_]", token):
            value = scope.get(token)
            if not isinstance(value, str) or not value.strip():
                return unknown(token if value is None else f"(({text}))")
            if not is_known(value):
                return value            # the variable's own unknown value, not one around it
            inner = arithmetic(value, scope)
            if not is_known(inner):
                return inner
            token = inner
        elif token.startswith("0") and len(token) > 1 and token.isdigit():
            token = str(int(token, 8))                   # bash: a leading 0 is octal
        python.append({"&&": " and ", "||": " or ", "!": " not "}.get(token, token))
    try:
        return str(_evaluate(ast.parse("".join(python), mode="eval").body))
    except (SyntaxError, ValueError, KeyError, ZeroDivisionError, TypeError, RecursionError):
        return unknown(f"(({text}))")


def _evaluate(node: ast.AST) -> int:
    """An integer expression with C semantics (division truncates toward zero)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.UnaryOp):
        value = _evaluate(node.operand)
        ops = {ast.USub: lambda v: -v, ast.UAdd: lambda v: v, ast.Not: lambda v: int(not v),
               ast.Invert: lambda v: ~v}
        return ops[type(node.op)](value)
    if isinstance(node, ast.BoolOp):
        values = [_evaluate(v) for v in node.values]
        return int(all(values) if isinstance(node.op, ast.And) else any(values))
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        a, b = _evaluate(node.left), _evaluate(node.comparators[0])
        ops = {ast.Lt: a < b, ast.LtE: a <= b, ast.Gt: a > b, ast.GtE: a >= b,
               ast.Eq: a == b, ast.NotEq: a != b}
        return int(ops[type(node.ops[0])])
    if isinstance(node, ast.BinOp):
        a, b = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, (ast.Div, ast.Mod)):
            quotient = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)
            return quotient if isinstance(node.op, ast.Div) else a - b * quotient
        if isinstance(node.op, ast.Pow) and (b < 0 or b > 64):
            raise ValueError("exponent out of range")
        if isinstance(node.op, (ast.LShift, ast.RShift)) and not 0 <= b < 64:
            raise ValueError("shift out of range")
        ops = {ast.Add: int.__add__, ast.Sub: int.__sub__, ast.Mult: int.__mul__,
               ast.Pow: int.__pow__, ast.LShift: int.__lshift__, ast.RShift: int.__rshift__,
               ast.BitAnd: int.__and__, ast.BitOr: int.__or__, ast.BitXor: int.__xor__}
        return ops[type(node.op)](a, b)
    raise ValueError("not an integer expression")


# --------------------------------------------------------------------------- tests

_INTEGER_TESTS = {"-eq": lambda a, b: a == b, "-ne": lambda a, b: a != b,
                  "-lt": lambda a, b: a < b, "-le": lambda a, b: a <= b,
                  "-gt": lambda a, b: a > b, "-ge": lambda a, b: a >= b}


def test(words: list[str], *, double: bool) -> bool | None:
    """Whether `[ words ]` (`[[ words ]]` when `double`) holds; None when it reads a value
    the script never sets, or a file (`-f`, `-d`: the cluster's file system is not here)."""
    try:
        value, rest = _or(words, double)
    except (IndexError, ValueError):
        return None
    return value if not rest else None


def _or(words, double):
    value, words = _and(words, double)
    while words and words[0] in ("-o", "||"):
        right, words = _and(words[1:], double)
        value = True if value is True or right is True else \
            (None if value is None or right is None else False)
    return value, words


def _and(words, double):
    value, words = _not(words, double)
    while words and words[0] in ("-a", "&&"):
        right, words = _not(words[1:], double)
        value = False if value is False or right is False else \
            (None if value is None or right is None else True)
    return value, words


def _not(words, double):
    if words[0] == "!":
        value, rest = _not(words[1:], double)
        return (None if value is None else not value), rest
    if words[0] == "(":
        value, rest = _or(words[1:], double)
        return value, rest[1:]
    return _primary(words, double)


def _primary(words, double):
    if len(words) >= 3 and (words[1] in _INTEGER_TESTS
                            or words[1] in ("=", "==", "!=", "=~", "<", ">")):
        left, op, right = words[:3]
        if not (is_known(left) and is_known(right)):
            return None, words[3:]
        if op in _INTEGER_TESTS:
            try:
                return _INTEGER_TESTS[op](int(left), int(right)), words[3:]
            except ValueError:
                return False, words[3:]                # bash: "integer expression expected"
        if op == "=~":
            return re.search(right, left) is not None, words[3:]
        if op in ("<", ">"):
            return (left < right if op == "<" else left > right), words[3:]
        same = fnmatch.fnmatchcase(left, right) if double else left == right
        return (same if op != "!=" else not same), words[3:]
    if len(words) >= 2 and re.fullmatch(r"-[a-zA-Z]", words[0]):
        op, operand = words[0], words[1]
        if op in ("-z", "-n") and is_known(operand):
            return (operand == "") == (op == "-z"), words[2:]
        return None, words[2:]
    return (None if not is_known(words[0]) else words[0] != ""), words[1:]
