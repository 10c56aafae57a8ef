"""The command structure of a shell script: simple commands, `&&`/`||` lists, pipelines,
`if`/`elif`/`else`, `case`, `for`/`while`/`until` loops, functions and `{ }`/`( )` groups
(bash(1), SHELL GRAMMAR). `shell.ShellScript` walks it the way bash would run it."""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.errors import InputError
from planner.frameworks.shell_lexer import NEWLINE, Token


@dataclass
class Simple:
    words: list[Token]
    line: int


@dataclass
class If:
    branches: list[tuple[list, list]]
    """(condition, body) of the `if` and each `elif`."""
    orelse: list | None
    line: int


@dataclass
class Case:
    word: Token
    arms: list[tuple[list[Token], list]]
    line: int


@dataclass
class Loop:
    kind: str
    """for, while or until."""
    variable: str | None
    items: list[Token] | None
    """The words of `for NAME in ...`; None for a C-style `for ((...))` or a while loop."""
    condition: list
    body: list
    line: int


@dataclass
class Function:
    name: str
    body: list
    line: int


@dataclass
class Group:
    body: list
    line: int


@dataclass
class AndOr:
    first: object
    rest: list[tuple[str, object]] = field(default_factory=list)
    line: int = 0


_SEPARATORS = (NEWLINE, ";", "&")
RESERVED_ENDS = frozenset({"then", "elif", "else", "fi", "do", "done", "esac", "}"})


class Parser:
    def __init__(self, tokens: list[Token], file: str) -> None:
        self.tokens, self.file, self.pos = tokens, file, 0

    def parse(self) -> list:
        nodes = self.list_until(frozenset())
        if self.pos < len(self.tokens):
            raise self.error(f"unexpected '{self.peek().text}'")
        return nodes

    def peek(self) -> Token | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def is_word(self, *texts: str) -> bool:
        t = self.peek()
        return t is not None and t.is_word and t.text in texts

    def is_op(self, *texts: str) -> bool:
        t = self.peek()
        return t is not None and not t.is_word and t.text in texts

    def error(self, what: str) -> InputError:
        t = self.peek() or (self.tokens[-1] if self.tokens else None)
        line = t.line if t else 1
        return InputError(f"{self.file}: line {line}: cannot read it as a shell script: {what}")

    def expect_word(self, text: str) -> None:
        self.skip_separators()
        if not self.is_word(text):
            got = self.peek().text.strip() or "end of line" if self.peek() else "end of file"
            raise self.error(f"expected '{text}', found '{got}'")
        self.pos += 1

    def skip_separators(self) -> None:
        while self.is_op(*_SEPARATORS):
            self.pos += 1

    def list_until(self, stops: frozenset[str]) -> list:
        nodes = []
        while True:
            self.skip_separators()
            t = self.peek()
            if t is None or (t.is_word and t.text in stops) or self.is_op(")", ";;"):
                return nodes
            nodes.append(self.and_or())

    def and_or(self):
        line = self.peek().line
        node = AndOr(self.pipeline(), line=line)
        while self.is_op("&&", "||"):
            op = self.peek().text
            self.pos += 1
            while self.is_op(NEWLINE):
                self.pos += 1
            node.rest.append((op, self.pipeline()))
        return node if node.rest else node.first

    def pipeline(self):
        line = self.peek().line
        commands = [self.command()]
        while self.is_op("|", "|&"):
            self.pos += 1
            while self.is_op(NEWLINE):
                self.pos += 1
            commands.append(self.command())
        return commands[0] if len(commands) == 1 else Group(commands, line)

    def command(self):
        t = self.peek()
        if t is None:
            raise self.error("a command is missing")
        if not t.is_word:
            if t.text == "(":
                self.pos += 1
                body = self.list_until(frozenset())
                if not self.is_op(")"):
                    raise self.error("expected ')'")
                self.pos += 1
                return Group(body, t.line)
            raise self.error(f"unexpected '{t.text.strip() or 'end of line'}'")
        if t.text in RESERVED_ENDS:
            raise self.error(f"unexpected '{t.text}'")
        if t.text == "if":
            return self.if_clause()
        if t.text == "case":
            return self.case_clause()
        if t.text in ("for", "while", "until"):
            return self.loop()
        if t.text == "{":
            self.pos += 1
            body = self.list_until(frozenset({"}"}))
            self.expect_word("}")
            return Group(body, t.line)
        if t.text == "function" or (self._at(self.pos + 1, "(") and self._at(self.pos + 2, ")")):
            return self.function()
        return self.simple()

    def _at(self, index: int, op: str) -> bool:
        return index < len(self.tokens) and not self.tokens[index].is_word \
            and self.tokens[index].text == op

    def simple(self) -> Simple:
        words, line = [], self.peek().line
        double_test = self.is_word("[[")
        while (t := self.peek()) is not None:
            if t.is_word:
                words.append(t)
                self.pos += 1
                if double_test and t.text == "]]":
                    double_test = False
            elif double_test and t.text in ("&&", "||", "(", ")"):
                words.append(Token(t.text, t.line, True))   # [[ a && b ]]: the test's own
                self.pos += 1
            else:
                break
        return Simple(words, line)

    def if_clause(self) -> If:
        line = self.peek().line
        self.pos += 1
        branches, orelse = [], None
        while True:
            condition = self.list_until(frozenset({"then"}))
            self.expect_word("then")
            body = self.list_until(frozenset({"elif", "else", "fi"}))
            branches.append((condition, body))
            if self.is_word("elif"):
                self.pos += 1
                continue
            if self.is_word("else"):
                self.pos += 1
                orelse = self.list_until(frozenset({"fi"}))
            self.expect_word("fi")
            return If(branches, orelse, line)

    def case_clause(self) -> Case:
        line = self.peek().line
        self.pos += 1
        word = self.peek()
        if word is None or not word.is_word:
            raise self.error("expected a word after 'case'")
        self.pos += 1
        self.expect_word("in")
        arms = []
        while True:
            self.skip_separators()
            if self.is_word("esac"):
                self.pos += 1
                return Case(word, arms, line)
            if self.is_op("("):
                self.pos += 1
            patterns = []
            while self.peek() is not None and self.peek().is_word:
                patterns.append(self.peek())
                self.pos += 1
                if self.is_op("|"):
                    self.pos += 1
            if not self.is_op(")") or not patterns:
                raise self.error("expected 'pattern)' in a case")
            self.pos += 1
            body = self.list_until(frozenset({"esac"}))
            arms.append((patterns, body))
            if self.is_op(";;"):
                self.pos += 1
                if self.is_op("&"):
                    self.pos += 1                       # ;;& (bash): read as ;;

    def loop(self) -> Loop:
        t = self.peek()
        self.pos += 1
        variable, items, condition = None, None, []
        if t.text == "for":
            if self.is_op("("):
                while self.peek() is not None and not self.is_word("do"):
                    self.pos += 1                       # for ((...)): a C-style loop
            else:
                if self.peek() is None or not self.peek().is_word:
                    raise self.error("expected a name after 'for'")
                variable = self.peek().text
                self.pos += 1
                while self.is_op(NEWLINE):
                    self.pos += 1
                if self.is_word("in"):
                    self.pos += 1
                    items = []
                    while self.peek() is not None and self.peek().is_word:
                        items.append(self.peek())
                        self.pos += 1
        else:
            condition = self.list_until(frozenset({"do"}))
        self.expect_word("do")
        body = self.list_until(frozenset({"done"}))
        self.expect_word("done")
        return Loop(t.text, variable, items, condition, body, t.line)

    def function(self) -> Function:
        line = self.peek().line
        if self.is_word("function"):
            self.pos += 1
        if self.peek() is None or not self.peek().is_word:
            raise self.error("expected a function name")
        name = self.peek().text
        self.pos += 1
        if self.is_op("("):
            self.pos += 2
        while self.is_op(NEWLINE):
            self.pos += 1
        if self.peek() is None:
            raise self.error(f"function {name} has no body")
        return Function(name, [self.command()], line)
