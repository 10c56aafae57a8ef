"""The notes of `planner.rules.ineffective` on the search's pins: `plan` and `sweep` judge each
pin (--etp, --cp-comm, --sp, --tp-comm-overlap, --pipeline-schedule) on every plan they
show."""

from __future__ import annotations

from typing import Sequence

from planner.core.problem import Problem
from planner.rules.ineffective import ineffective_settings
from planner.schemas.report import PlanReport
from planner.schemas.strategy import Strategy
from planner.search.candidates import SearchSpace


def pinned_settings(problem: Problem, space: SearchSpace, plans: Sequence[PlanReport],
                    labels: Sequence[str] | None = None) -> list[str]:
    """The notes of `ineffective_settings` on the search's pins (--etp, --cp-comm, --sp,
    --tp-comm-overlap), each judged on each plan with the pins in place of what the plan runs;
    a note that holds for some of the plans only names them by `labels` ('plan 1', ... by
    default)."""
    labels = labels or [f"plan {rank}" for rank in range(1, len(plans) + 1)]
    by_note: dict[str, list[str]] = {}
    for label, plan in zip(labels, plans):
        for note in dict.fromkeys(n for variant in _pinned(plan, space)
                                  for n in ineffective_settings(problem, variant)):
            by_note.setdefault(note, []).append(label)
    return [note if len(which) == len(plans) else f"{note} ({', '.join(which)})"
            for note, which in by_note.items()]


def _pinned(plan: PlanReport, space: SearchSpace) -> list[Strategy]:
    """The plan's strategy with the pins as the user gave them: one per pinned K/V exchange
    where the plan has no context parallelism (with cp > 1 it runs one of them)."""
    fields = plan.strategy.model_dump(exclude={"num_micro_batches", "layers_per_stage"})
    if space.etp is not None:
        fields["etp"] = space.etp
    if space.tp_comm_overlap is not None:
        fields["tp_comm_overlap"] = space.tp_comm_overlap
    if tuple(space.sequence_parallel) == (True,):
        fields["sequence_parallel"] = True
    if space.pipeline_schedule is not None:
        fields["pipeline_schedule"] = space.pipeline_schedule
    base = Strategy(**fields)
    if plan.strategy.cp > 1 or not space.cp_comm:
        return [base]
    return [base.model_copy(update={"cp_comm": kind, "cp_a2a": None}) for kind in space.cp_comm]
