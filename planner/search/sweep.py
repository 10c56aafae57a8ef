"""The best plan per GPU count: how a job scales, and what it costs (`planner sweep`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from planner.errors import InfeasibleError
from planner.core.problem import Problem
from planner.schemas.report import PlanReport
from planner.search.candidates import SearchSpace
from planner.search.solver import SolverSettings, search


@dataclass(frozen=True)
class SweepRow:
    gpus: int
    plan: PlanReport | None
    """The fastest plan on this many GPUs (None: nothing fits, see `error`)."""
    error: str | None = None
    """Why no plan: the search's first line."""
    scaling_efficiency: float | None = None
    """Tokens per second per GPU over that of the smallest count with a plan: 1.0 is linear
    scaling (strong scaling, the global batch fixed)."""
    note: str | None = None
    """The search's note on this count (pp widened, or what the power-of-two rule costs)."""


def sweep(load: Callable[[int], Problem], counts: Iterable[int], space: SearchSpace,
          settings: SolverSettings, *, num_tokens: float | None = None,
          gpu_hour_price: float | None = None,
          step: Callable[[int], None] | None = None) -> list[SweepRow]:
    """Search each GPU count (`load(n)` gives its problem) for its fastest plan; `step` is
    called after each, for a progress bar."""
    rows = []
    for n in counts:
        problem = load(n)
        try:
            result = search(problem, space, settings, num_tokens=num_tokens)
            rows.append(SweepRow(n, result.plans[0].priced(gpu_hour_price),
                                 note=result.search.note))
        except InfeasibleError as e:
            rows.append(SweepRow(n, None, str(e)))
        if step is not None:
            step(n)
    base = next((r for r in rows if r.plan is not None), None)
    if base is None:
        return rows
    per_gpu = base.plan.throughput.tokens_per_s / base.gpus
    return [r if r.plan is None else
            SweepRow(r.gpus, r.plan, None, r.plan.throughput.tokens_per_s / r.gpus / per_gpu,
                     r.note)
            for r in rows]
