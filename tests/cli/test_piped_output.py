"""Output into a pipe or a file keeps every table column whole and every row on one line;
a terminal, or COLUMNS, still decides the width (issue 27 point 2)."""

from __future__ import annotations

import sys

import pytest
from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from planner.cli.render import natural_width, print_renderable

COLUMNS = ["#", "strategy", "options", "peak", "free", "step", "tok/s", "MFU", "bound by"]
ROW = ["1", "32x1x2 vpp16 ep8 mb1", "sel:nx z2 oo", "65.9", "13.7", "≈15.32 s", "274K",
       "34.5%", "compute"]


def _view() -> Group:
    table = Table(box=box.SIMPLE_HEAD)
    for name in COLUMNS:
        table.add_column(name, no_wrap=name in ("bound by", "strategy"))
    table.add_row(*ROW)
    return Group(Text("a heading " * 12), table)


@pytest.fixture
def no_columns(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)


def test_a_pipe_gets_the_tables_natural_width(capsys, no_columns):
    view = _view()
    assert natural_width(view) > 80             # the table does not fit 80 columns
    print_renderable(view)
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if "bound by" in line)
    assert header.split() == " ".join(COLUMNS).split()
    assert [line.split() for line in lines if line.lstrip().startswith("1 ")] == \
        [" ".join(ROW).split()]                                  # the row on one line, whole
    assert "…" not in "".join(lines)
    # Text still wraps: at the table's width, not on one endless line.
    assert max(len(line) for line in lines) == natural_width(view)


def test_a_narrow_table_in_a_pipe_keeps_80_columns_for_text(capsys, no_columns):
    table = Table()
    table.add_column("x")
    table.add_row("1")
    print_renderable(Group(Text("word " * 40), table))
    assert max(len(line) for line in capsys.readouterr().out.splitlines()) <= 80


def test_columns_and_a_terminal_still_decide(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    print_renderable(_view())
    assert max(len(line) for line in capsys.readouterr().out.splitlines()) <= 80
    monkeypatch.delenv("COLUMNS")
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    monkeypatch.setattr("os.get_terminal_size", lambda *_: __import__("os").terminal_size((60, 24)))
    print_renderable(_view())
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines() if "\x1b" not in line) <= 60


def test_plan_into_a_pipe_keeps_every_column(cli, no_columns):
    code, out, _ = cli("plan", "mixtral-8x7b", "dgx-h100", "--gpus", "64", "--top", "2")
    assert code == 0
    lines = out.splitlines()
    header = next(line for line in lines if line.lstrip().startswith("#"))
    assert header.split()[-2:] == ["bound", "by"]
    rule = next(i for i, line in enumerate(lines) if line.strip().startswith("─"))
    rows = lines[rule + 1:rule + 3]
    assert [row.split()[0] for row in rows] == ["1", "2"]       # no continuation lines
    assert all(row.split()[-1] == "compute" for row in rows)
    assert not lines[rule + 3].strip()
