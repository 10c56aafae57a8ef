"""Bounded reading of input files: size, text encoding, nesting, number length, YAML aliases.

Planner inputs are small hand-written files (a model.yaml, a DeepSpeed JSON, a torchtitan TOML;
a few KB). Anything far outside that shape is refused with one line naming the file (and the
field, where one can be named) before a parser can run out of memory or recursion:

* a file over MAX_FILE_BYTES (read at most that much, so a FIFO or /dev/zero is refused too);
* bytes that are not UTF-8;
* YAML aliases (`*name`, and so `<<: *base` merges): a "billion laughs" anchor bomb expands a
  1 KB file into gigabytes; no planner input needs them;
* nesting deeper than MAX_DEPTH (YAML composes recursively; deep JSON/TOML hit the recursion
  limit);
* integers longer than MAX_NUMBER_DIGITS (Python refuses int() of more than 4,300 digits,
  sys.get_int_max_str_digits(); every count the planner reads has at most a few).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable

import yaml

from planner.errors import InputError, shown

MAX_FILE_BYTES = 1 << 20
"""1 MiB: the largest Hugging Face config.json we know (DeepSeek-V3, 1.7 KB) or Megatron-LM
script is a few KB."""

MAX_DEPTH = 32
"""Levels of mappings and lists; a model.yaml nests 4 deep, a DeepSpeed config 3."""

MAX_NUMBER_DIGITS = 64
"""Digits in one integer literal; the bounds in planner.schemas.bounds are 8 digits or fewer."""


def is_file(path: Path) -> bool:
    """Path.is_file(), and False where the system cannot even look (a name too long for it)."""
    try:
        return path.is_file()
    except OSError:
        return False


def is_dir(path: Path) -> bool:
    """Path.is_dir(), and False where the system cannot even look."""
    try:
        return path.is_dir()
    except OSError:
        return False


def read_text(path: Path) -> str:
    """The file as text: at most MAX_FILE_BYTES of UTF-8."""
    name = shown(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise InputError(f"{name}: file not found") from None
    except IsADirectoryError:
        raise InputError(f"{name}: is a directory, not a file") from None
    except OSError as e:
        raise InputError(f"{name}: cannot read: {e.strerror or e}") from None
    if len(data) > MAX_FILE_BYTES:
        raise InputError(f"{name}: larger than {MAX_FILE_BYTES // 2**20} MiB; planner inputs "
                         f"are a few KB (is this the right file?)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise InputError(f"{name}: line {line}: not UTF-8 text (byte 0x{data[e.start]:02x} "
                         f"at offset {e.start})") from None


class _TooLong:
    """Stands for an integer literal of more than MAX_NUMBER_DIGITS digits until `check_tree`
    names its field."""

    def __init__(self, digits: int) -> None:
        self.digits = digits


def _int_or_too_long(text: str):
    digits = len(text.lstrip("+-").replace("_", ""))
    return _TooLong(digits) if digits > MAX_NUMBER_DIGITS else int(text)


class _Refused(Exception):
    def __init__(self, mark, message: str) -> None:
        super().__init__(message)
        self.mark = mark


class _InputLoader(yaml.SafeLoader):
    """PyYAML's safe loader without aliases, with a depth limit and long integers marked."""

    depth = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise _Refused(event.start_mark, f"alias *{event.anchor} is not allowed in planner "
                           f"inputs; write the value out")
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise _Refused(self.peek_event().start_mark,
                               f"nested more than {MAX_DEPTH} levels deep")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_mapping(self, node, deep=False):
        # YAML 1.2 requires unique keys; PyYAML keeps the last silently, so a repeated `dp:`
        # would change the plan without a word.
        seen = set()
        for key_node, _ in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if key is not None and key in seen:
                raise _Refused(key_node.start_mark, f"{key}: given twice in one mapping")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node):
        digits = sum(c.isdigit() for c in node.value)
        if digits > MAX_NUMBER_DIGITS:
            return _TooLong(digits)
        return super().construct_yaml_int(node)


_InputLoader.add_constructor("tag:yaml.org,2002:int", _InputLoader.construct_yaml_int)


def load_yaml(text: str, file: str) -> Any:
    """Parse planner YAML (see the module docstring for what is refused)."""
    try:
        loader = _InputLoader(text)
    except yaml.reader.ReaderError as e:     # a control character or NUL outside an escape
        line = text.count("\n", 0, e.position) + 1
        column = e.position - (text.rfind("\n", 0, e.position) + 1) + 1
        raise InputError(f"{file}: line {line}, column {column}: control character "
                         f"U+{e.character:04X} is not allowed in YAML (write it as an escape "
                         f"in a double-quoted string, or remove it)") from None
    try:
        data = loader.get_single_data()
    except _Refused as e:
        raise InputError(f"{file}: line {e.mark.line + 1}, column {e.mark.column + 1}: "
                         f"{e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise InputError(f"{file}: {where}YAML syntax error: {problem}") from None
    finally:
        loader.dispose()
    check_tree(data, file)
    return data


def load_json(text: str, file: str, *,
              object_pairs_hook: Callable[[list], Any] | None = None) -> Any:
    """Parse JSON with long integers marked, then `check_tree`."""
    try:
        data = json.loads(text, parse_int=_int_or_too_long, object_pairs_hook=object_pairs_hook)
    except json.JSONDecodeError as e:
        raise InputError(f"{file}: line {e.lineno}, column {e.colno}: JSON syntax error: "
                         f"{e.msg}") from None
    except RecursionError:
        raise InputError(f"{file}: nested more than {MAX_DEPTH} levels deep") from None
    check_tree(data, file)
    return data


_LONG_NUMBER = re.compile(r"\d[\d_]{%d,}" % MAX_NUMBER_DIGITS)


def load_toml(text: str, file: str) -> dict[str, Any]:
    """Parse TOML (Python 3.11's tomllib), refusing long integers and deep nesting by line."""
    import tomllib

    for number, line in enumerate(text.splitlines(), 1):
        if _LONG_NUMBER.search(line):
            key = re.match(r"\s*([\w.\"'-]+)\s*=", line)
            field = f"{key.group(1)}: " if key else ""
            raise InputError(f"{file}: line {number}: {field}a number of more than "
                             f"{MAX_NUMBER_DIGITS} digits")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"{file}: TOML syntax error: {e}") from None
    except RecursionError:
        raise InputError(f"{file}: nested more than {MAX_DEPTH} levels deep") from None
    check_tree(data, file)
    return data


def check_tree(data: Any, file: str) -> None:
    """Refuse nesting deeper than MAX_DEPTH and integer literals longer than
    MAX_NUMBER_DIGITS, naming the field."""
    stack: list[tuple[Any, tuple, int]] = [(data, (), 0)]
    while stack:
        value, path, depth = stack.pop()
        if isinstance(value, _TooLong):
            raise InputError(f"{file}: {field_path(path) or 'value'}: a number of "
                             f"{value.digits:,} digits is out of range")
        if isinstance(value, (dict, list)):
            if depth >= MAX_DEPTH:
                raise InputError(f"{file}: {field_path(path)}: nested more than {MAX_DEPTH} "
                                 f"levels deep")
            items = value.items() if isinstance(value, dict) else enumerate(value)
            stack += [(v, (*path, k), depth + 1) for k, v in reversed(list(items))]


def field_path(path: tuple) -> str:
    """('layers', 3, 'hidden') -> 'layers[3].hidden'."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text
