"""Ctrl-C ends every command with exit 130 and one line, wherever it lands, and CP-SAT never
takes the signal for itself (issue 27 point 5)."""

from __future__ import annotations

import pytest

from planner.errors import ExitCode


def _interrupt(*_, **__):
    raise KeyboardInterrupt


@pytest.mark.parametrize("where", [
    "planner.search.solver.search",               # in the search
    "planner.api.make_problem",                   # while the inputs load
    "planner.cli.render.print_renderable",        # while the result prints
])
def test_ctrl_c_inside_a_command_is_130(cli, monkeypatch, where):
    monkeypatch.setattr(where, _interrupt)
    code, out, err = cli("plan", "llama2-7b", "dgx-h100", "--gpus", "8")
    assert (code, out, err) == (ExitCode.INTERRUPTED, "", "Error: interrupted\n")
    assert ExitCode.INTERRUPTED == 130


def test_ctrl_c_while_options_are_parsed_is_130(cli, monkeypatch):
    from planner.cli.commands import _Count

    monkeypatch.setattr(_Count, "convert", _interrupt)
    code, out, err = cli("plan", "llama2-7b", "dgx-h100", "--tokens", "1T")
    assert (code, out) == (130, "")
    assert err.splitlines()[-1] == "Error: interrupted"     # after click's own newline


def test_ctrl_c_while_emitting_writes_nothing(cli, monkeypatch, tmp_path, write, tiny_model,
                                              small_cluster):
    import os

    strategy = write("strategy.yaml", "tp: 2\npp: 2\nmicro_batch: 1\n")
    out_dir = tmp_path / "out"
    real = os.replace

    def replace(source, target):     # Ctrl-C as the first file is renamed into place
        if str(target).startswith(str(out_dir)):
            _interrupt()
        real(source, target)

    monkeypatch.setattr(os, "replace", replace)
    code, _, err = cli("emit", tiny_model, small_cluster, strategy, "--target",
                       "megatron,deepspeed", "--out", str(out_dir))
    assert (code, err) == (130, "Error: interrupted\n")
    assert list(out_dir.iterdir()) == []        # nor a temporary file left


def test_cp_sat_leaves_ctrl_c_to_python():
    # CP-SAT's own handler stops the search as at a time limit (a plan printed with exit 0)
    # and restores SIGINT to its default afterwards (the next Ctrl-C kills the process).
    from planner.search.layout_solve import layout_solver
    from planner.search.solver import SolverSettings, make_solver

    assert not make_solver(SolverSettings()).parameters.catch_sigint_signal
    assert not layout_solver(1.0, None).parameters.catch_sigint_signal
