"""Check one strategy against every rule, in float arithmetic, and evaluate it.

`planner validate` prints this; the search runs it on every plan it returns, so the search and
a hand-written strategy are judged by the same rules (`planner.rules.gate`) and the same costs.
"""

from __future__ import annotations

from dataclasses import dataclass

from cost_models.enums import Recompute, ZeroStage
from cost_models.units import GiB
from planner.costing.evaluate import evaluate_strategy
from planner.errors import InputError
from planner.core.problem import Problem, default_min_free_bytes
from planner.rules.gate import (Rule, RuleOptions, chunks_without_layers,
                                host_memory_violations, laid_out, memory_violations,
                                rule_violations, stage_layout_violation)
from planner.schemas.report import PlanReport, Violation
from planner.schemas.strategy import Strategy


@dataclass(frozen=True)
class Validation:
    strategy: Strategy
    violations: list[Violation]
    report: PlanReport | None
    """None when the strategy cannot be laid out on the model (its layout is invalid)."""

    @property
    def valid(self) -> bool:
        return not self.violations


def validate(problem: Problem, strategy: Strategy, *, options: RuleOptions = RuleOptions(),
             num_tokens: float | None = None) -> Validation:
    """Every rule `strategy` breaks, and its memory, time and throughput when it can be laid
    out. `strategy` must be resolved (dp and global_batch set)."""
    found = rule_violations(problem, strategy, options)
    if not laid_out(problem, strategy):
        return Validation(strategy, found, None)
    report = evaluate_strategy(problem, strategy, num_tokens=num_tokens)
    if bool(memory_violations(report.memory.peak_bytes, problem.usable_bytes)):
        found.append(memory_violation(problem, strategy, report))
    if bool(host_memory_violations(report.memory.host_bytes, problem)):
        found.append(host_memory_violation(problem, report))
    return Validation(strategy, found, report)


def margin_note(problem: Problem, report: PlanReport, *, what: str = "it") -> str | None:
    """A note where `report` fits its GPU but leaves less free than the default margin
    (`core.problem.default_min_free_bytes`): a warning, not a broken rule."""
    memory = report.memory
    margin = default_min_free_bytes(memory.capacity_bytes)
    if not memory.fits or memory.headroom_bytes >= margin:
        return None
    why = (f"--min-free {problem.min_free_bytes / GiB:g} set it lower"
           if problem.min_free_bytes is not None else "--min-free 0 accepts that")
    return (f"{what} fits, but under the default margin: {_gib(memory.headroom_bytes)} free "
            f"per GPU of the {_gib(margin)} kept for allocator spikes and buffers the model "
            f"leaves out; it may run out of memory ({why})")


def uneven_chunks_note(strategy: Strategy) -> str | None:
    """A note where a given layout interleaves chunks of one stage more than a layer apart:
    the step's closed form (`pipeline.pipeline_time_s`) assumes near-equal chunks, and the
    schedule waits on the largest one (`costing.schedule.simulate`: 22-38% longer than the
    closed form where one chunk holds most of a stage). The search builds no such layout."""
    s = strategy
    if s.vpp <= 1 or s.layers_per_stage is None or len(s.layers_per_stage) != s.pp * s.vpp:
        return None                   # a count per chunk or none: stage_layout says which
    spans = [(max(s.layers_per_stage[r::s.pp]) - min(s.layers_per_stage[r::s.pp]), r)
             for r in range(s.pp)]
    spread, stage = max(spans)
    if spread <= 1:
        return None
    held = s.layers_per_stage[stage::s.pp]
    return (f"layers_per_stage gives stage {stage}'s {s.vpp} chunks {min(held)} to {max(held)} "
            f"layers: the interleaved schedule waits on a stage's largest chunk, and the step "
            f"is priced as for chunks within a layer of each other (as the search lays them "
            f"out), so it may run slower than predicted (20-40% where one chunk holds most of "
            f"a stage)")


def _gib(num_bytes: float) -> str:
    return f"{num_bytes / GiB:.1f} GiB"


def memory_violation(problem: Problem, strategy: Strategy, report: PlanReport) -> Violation:
    """The memory rule for one strategy, with the smallest change that makes it fit."""
    memory = report.memory
    kept = (f" less the {_gib(problem.min_free_bytes)} kept free (--min-free)"
            if problem.min_free_bytes else "")
    message = (f"peak memory {_gib(memory.peak_bytes)} on stage {memory.peak_stage} exceeds the "
               f"{_gib(memory.capacity_bytes)} of a {problem.cluster.gpu.name}{kept}")
    for change, variant in _memory_variants(problem, strategy):
        peak = evaluate_strategy(problem, variant).memory.peak_bytes
        if peak <= problem.usable_bytes:
            return Violation(rule=Rule.MEMORY_FITS.value, message=message,
                             fix=f"use {change} (peak {_gib(peak)})")
    return Violation(rule=Rule.MEMORY_FITS.value, message=message,
                     fix="no single change fits: use more GPUs, or run `planner plan` to search")


def host_memory_violation(problem: Problem, report: PlanReport) -> Violation:
    """The host-memory rule: a node's GPUs offload more than its host memory holds."""
    node = problem.cluster.gpus_per_node
    message = (f"CPU offload puts {_gib(report.memory.host_bytes)} per GPU in host memory, "
               f"{_gib(report.memory.host_bytes * node)} per node of {node} GPUs, over the "
               f"{_gib(problem.cluster.host.memory_gib * GiB)} a node has")
    return Violation(rule=Rule.HOST_MEMORY_FITS.value, message=message,
                     fix="offload a smaller share (optimizer_offload), fewer layers, or shard "
                         "more (zero_stage, dp)")


def _memory_variants(problem: Problem, s: Strategy):
    """Single changes that lower memory, least disruptive first."""
    order = (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL)
    for rc in order[order.index(s.recompute) + 1:]:
        yield f"recompute {rc.value}", s.model_copy(update={"recompute": rc})
    if s.tp > 1 and not s.sequence_parallel:
        yield "sequence_parallel true", s.model_copy(update={"sequence_parallel": True})
    if s.dp > 1:
        for zero in ZeroStage:
            if zero > s.zero_stage:
                yield f"zero_stage {int(zero)}", s.model_copy(update={"zero_stage": zero})
    mb = s.micro_batch // 2
    while mb >= 1:
        if s.micro_batch % mb == 0:
            yield f"micro_batch {mb}", s.model_copy(update={"micro_batch": mb})
        mb //= 2
    if s.dp % 2 == 0 and problem.model.num_layers % (2 * s.pp * s.vpp) == 0 \
            and s.layers_per_stage is None:
        yield (f"pp {2 * s.pp} (dp {s.dp // 2})",
               s.model_copy(update={"pp": 2 * s.pp, "dp": s.dp // 2}))


def check_layout(strategy: Strategy, problem: Problem, *, file: str) -> None:
    """Refuse a strategy that cannot be laid out on the model (`planner memory` prices any
    other, fitting or not): pp * vpp chunks need a layer each, and a layers_per_stage lists one
    count per chunk (pp * vpp of them, in pipeline order) summing to the model's layers."""
    chunks, layers = strategy.pp * strategy.vpp, problem.model.num_layers
    if strategy.layers_per_stage is None and chunks_without_layers(layers, strategy.pp,
                                                                   strategy.vpp):
        what = (f"pp * vpp = {chunks} pipeline chunks" if strategy.vpp > 1 else
                f"{chunks} pipeline stages")
        raise InputError(f"{file}: pp: {what} exceed the {layers} layers of "
                         f"{problem.model.name}: every chunk needs a layer")
    violation = stage_layout_violation(problem, strategy)
    if violation is not None:
        raise InputError(f"{file}: {violation.message}; {violation.fix}")
