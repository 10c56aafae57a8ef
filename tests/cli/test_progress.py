"""`plan` and `validate` show a spinner on stderr while they search, only where stderr is a
terminal and without --json, and it never changes stdout (issue 27 point 6)."""

from __future__ import annotations

import sys

import pytest

STRATEGY = "tp: 2\npp: 2\nmicro_batch: 1\n"


@pytest.fixture
def terminal(monkeypatch):
    """terminal(True): stderr claims to be a terminal (as the user's is)."""
    def _set(is_tty: bool):
        monkeypatch.setattr(sys.stderr, "isatty", lambda: is_tty, raising=False)
    return _set


def _commands(tiny_model, small_cluster, strategy):
    return [("plan", tiny_model, small_cluster, "--top", "2"),
            ("validate", tiny_model, small_cluster, strategy)]


def test_the_spinner_shows_on_a_terminal_and_leaves_stdout_alone(cli, terminal, write,
                                                                   tiny_model, small_cluster):
    strategy = write("strategy.yaml", STRATEGY)
    for args in _commands(tiny_model, small_cluster, strategy):
        terminal(False)
        code, plain_out, plain_err = cli(*args)
        assert code == 0 and "searching" not in plain_err and "\x1b" not in plain_err
        terminal(True)
        code, out, err = cli(*args)
        assert (code, out) == (0, plain_out)
        assert "searching" in err                    # shown, then erased (rich Live, transient)
        assert err.rstrip().endswith(plain_err.rstrip())


def test_no_spinner_with_json(cli, terminal, tiny_model, small_cluster):
    terminal(True)
    code, out, err = cli("plan", tiny_model, small_cluster, "--json")
    assert code == 0 and out.startswith("{")
    assert "searching" not in err and "\x1b" not in err
