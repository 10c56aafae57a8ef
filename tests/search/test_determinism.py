"""Same input, same bytes, whatever the machine's load: the search's budgets are counted in
CP-SAT work units, and wall time is only a safety net that says when it fires."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from planner.inputs.loader import make_problem
from planner.search import rebalance as rebalance_module
from planner.search.candidates import SearchSpace
from planner.search.solver import SolverSettings, search

ROOT = Path(__file__).resolve().parents[2]

BIG_CASES = [
    # (model, cluster, extra): the two searches that used to change with machine load.
    ("gpt3-175b", "dgx-a100-80gb", ("--gpus", "1024")),
    ("deepseek-v3", "dgx-h100", ("--gpus", "1024", "--top", "1")),
]


class _SlowClock:
    """perf_counter as a machine 100x busier would see it: every reading 50 ms later."""

    def __init__(self) -> None:
        self.now = time.perf_counter()

    def __call__(self) -> float:
        self.now += 0.05
        return self.now


def _search_json(problem, settings=SolverSettings(top_k=3)) -> str:
    result = search(problem, SearchSpace(), settings)
    stats = result.search.model_copy(update={"seconds": None})
    return "".join(p.model_dump_json() for p in result.plans) + stats.model_dump_json()


def test_a_slow_clock_changes_nothing(monkeypatch):
    # gpt3-175b on 1,024 A100 balances 67 layouts; a 2 s wall budget read on this clock
    # stopped after about a dozen, so the plans and the layout count changed.
    problem = make_problem("gpt3-175b", "dgx-a100-80gb", gpus=1024)
    quiet = _search_json(problem)
    monkeypatch.setattr(rebalance_module.time, "perf_counter", _SlowClock())
    assert _search_json(problem) == quiet


def test_the_wall_clock_safety_net_says_when_it_fires(monkeypatch):
    problem = make_problem("gpt3-175b", "dgx-a100-80gb", gpus=1024)
    monkeypatch.setattr(rebalance_module.time, "perf_counter", _SlowClock())
    result = search(problem, SearchSpace(), SolverSettings(top_k=1, time_limit_s=0.5))
    assert result.search.wall_clock_stopped and not result.search.proven_optimal
    assert "wall-clock safety net (--time-limit) stopped" in result.search.unproven
    assert "may differ from run to run" in result.search.unproven


def test_a_work_budget_that_runs_out_says_so_and_repeats():
    problem = make_problem("gpt3-175b", "dgx-a100-80gb", gpus=1024)
    settings = SolverSettings(top_k=2, layout_work=0.02)
    first = search(problem, SearchSpace(), settings).search
    assert not first.proven_optimal and not first.wall_clock_stopped
    assert "--layout-work 0.02" in first.unproven
    assert _search_json(problem, settings) == _search_json(problem, settings)


def _plan(model: str, cluster: str, extra: tuple[str, ...]) -> bytes:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "100"}
    done = subprocess.run([sys.executable, "-m", "planner", "plan", model, cluster, *extra,
                           "--json"], env=env, capture_output=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout + done.stderr


@pytest.mark.parametrize(("model", "cluster", "extra"), BIG_CASES, ids=[c[0] for c in BIG_CASES])
def test_same_bytes_next_to_cpu_hogs(model, cluster, extra):
    quiet = _plan(model, cluster, extra)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(2 * (os.cpu_count() or 1))]
    try:
        busy = _plan(model, cluster, extra)
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait()
    assert busy == quiet
    assert b'"proven_optimal": true' in quiet
