"""`planner plan --emit a,b,c`: each launch target's files from its own best plan.

One plan that every target can run pays for the strictest target's rules and is priced by one
framework's profile; a target run on its own may do much better (llama3-70b on 64 H100: the
plan all of Megatron-LM, torchtitan and DeepSpeed run takes 73.6 s per step, where each alone
gets 60.9, 65.0 and 87.6 s). So each target is searched as `planner plan --emit TARGET`
alone would search it: under its own framework's rules, priced by its own framework's profile
(or by --framework where given), and its files are written from its own ranked plan.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from cost_models.units import GiB
from planner.cli import render
from planner.core.problem import Problem
from planner.costing.evaluate import evaluate_strategy
from planner.frameworks import LaunchPlan, emit_files, write_files
from planner.inputs.loader import load_framework
from planner.review.config import strategy_of
from planner.errors import InfeasibleError, InputError
from planner.schemas.output import TargetOut
from planner.schemas.report import PlanReport
from planner.schemas.strategy import LaunchTarget


@dataclass(frozen=True)
class TargetPlan:
    """The plan one launch target's files are written from."""

    target: LaunchTarget
    problem: Problem
    """Priced by the framework that runs the target (or by --framework)."""
    plan: PlanReport
    """Its own ranked plan at --plan's rank."""
    files: tuple[Path, ...] = ()


def plans_per_target(targets: tuple[LaunchTarget, ...], first: tuple[Problem, list],
                     load: Callable[[LaunchTarget], Problem],
                     search_one: Callable[[Problem, LaunchTarget], list],
                     rank: int) -> list[TargetPlan]:
    """Each target's plan at `rank` of its own ranking: `first` is the first target's problem
    and ranking (already searched); `load` gives another target's problem and `search_one`
    its ranking."""
    out = []
    for i, target in enumerate(targets):
        problem, plans = first if i == 0 else (load(target), None)
        if plans is None:
            try:
                plans = search_one(problem, target)
            except InfeasibleError as e:
                raise InfeasibleError(f"--emit {target.value}: {e}", details=e.details) from None
        if rank > len(plans):
            which = f" for {target.value}" if len(targets) > 1 else ""
            raise InputError(f"--plan {rank}: the search ranked {len(plans)} plan(s){which}")
        out.append(TargetPlan(target, problem, plans[rank - 1]))
    return out


def write_targets(chosen: list[TargetPlan], out_dir, *, force: bool,
                  num_tokens: float | None) -> list[TargetPlan]:
    """Write each target's launch configs from its own plan, all or none, each file's
    prediction priced by its own framework's profile; `chosen` with the paths written."""
    files, names = {}, []
    for c in chosen:
        strategy = strategy_of(c.plan)
        priced, own = c.problem, c.plan
        if c.target.framework != priced.framework.name:      # --framework priced the search
            priced = replace(priced, framework=load_framework(c.target.framework))
            own = evaluate_strategy(priced, strategy, num_tokens=num_tokens)
        written = emit_files([c.target], LaunchPlan(priced, strategy, own,
                                                     num_tokens=num_tokens))
        files |= written               # no two targets write a file of the same name
        names.append(list(written))
    by_name = {p.name: p for p in write_files(files, out_dir, force=force)}
    return [replace(c, files=tuple(by_name[n] for n in own)) for c, own in zip(chosen, names)]


def target_out(chosen: TargetPlan, rank: int) -> TargetOut:
    """One entry of `planner plan --json`'s "targets": which plan a target's files hold."""
    return TargetOut(target=chosen.target.value, framework=chosen.problem.framework.name,
                     rank=rank, plan=chosen.plan, files=[str(p) for p in chosen.files])


def wrote_line(path: Path, chosen: TargetPlan) -> str:
    """'wrote ds_config.json (deepspeed: dp 16, tp 4, ..., 87.61 s per step)'."""
    return (f"wrote {path} ({chosen.target.value}: {render.strategy_label(chosen.plan)}, "
            f"{render.seconds(chosen.plan.time.step_s)} per step)")


def targets_view(chosen: list[TargetPlan], rank: int) -> Group:
    """A row per target: the plan its files hold (the `wrote` lines name the files)."""
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), pad_edge=False)
    for name in ("target", "priced by", "strategy", "options", "peak", "step", "tok/s"):
        table.add_column(name, justify="right" if name in ("peak", "step", "tok/s")
                         else "left", no_wrap=True)
    for c in chosen:
        degrees, options = render.compact_strategy(c.plan)
        table.add_row(c.target.value, c.problem.framework.name, degrees, options,
                      f"{c.plan.memory.peak_bytes / GiB:.1f}",
                      render.seconds(c.plan.time.step_s),
                      render.rate(c.plan.throughput.tokens_per_s))
    which = "best plan" if rank == 1 else f"plan {rank}"
    return Group(Text(""), Text(f"--emit: each target's files from its own {which}, under "
                                f"its framework's rules", style="bold"), table)
