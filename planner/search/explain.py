"""Why nothing fits, and what would make it fit.

When the search finds no plan, every candidate of the search space is evaluated and checked
against every rule and every user pin. A CP-SAT model whose rules and pins are assumption
literals is then infeasible, and `sufficient_assumptions_for_infeasibility` names a set of
them that conflict; a deletion pass makes that set minimal (CP-SAT does not promise it). The
message gives the conflict, the closest miss (the smallest peak memory among strategies that
break only the memory rule) and concrete ways out: dropping a pin, more GPUs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from ortools.sat.python import cp_model

from cost_models.units import GiB
from planner.search.candidates import CandidateGroup, SearchSpace, divisors, generate, powers_of_two
from planner.search.cpsat import SolverSettings, make_solver
from planner.errors import InfeasibleError, InputError
from planner.schemas.bounds import MAX_GLOBAL_BATCH, MAX_GPUS
from planner.core.problem import Problem
from planner.search.pool import Pool, evaluate_groups, passes
from planner.schemas.strategy import strategy_label
from planner.rules.gate import (EXPLAIN, SUMMARY, TARGET_CHECKS, Rule, RuleOptions,
                                chunks_without_layers, degree_violations, memory_violations,
                                rule_targets)
from planner.search.pool import strategy_at

MAX_GPU_FACTOR = 64
"""How far beyond the requested GPU count the "more GPUs" suggestion looks."""
MAX_GPU_COUNTS_TRIED = 16
"""How many GPU counts it evaluates (each is a search of its own), smallest first."""


@dataclass
class _Conflicts:
    """Every candidate and, per rule or pin (by name), where it is broken."""

    pool: Pool
    broken: dict[str, np.ndarray]

    def satisfying(self, names) -> np.ndarray:
        ok = np.ones(len(self.pool), dtype=bool)
        for name in names:
            ok &= ~self.broken[name]
        return ok


def _conflicts(problem: Problem, space: SearchSpace, groups: list[CandidateGroup],
               options: RuleOptions) -> _Conflicts:
    layers = problem.model.num_layers
    pool = evaluate_groups(problem, [(g, np.full(len(g.cands),
                                                 not chunks_without_layers(layers, g.pp, g.vpp)))
                                     for g in groups])
    broken: dict[str, list[np.ndarray]] = {}
    for b in pool.batches:
        for rule, bad in degree_violations(problem, b.cands, options).items():
            broken.setdefault(rule.value, []).append(bad)
        for pin in space.pins():
            broken.setdefault(pin.flag, []).append(~pin.allows(b.cands))
    merged = {name: np.concatenate(parts) for name, parts in broken.items()}
    merged[Rule.MEMORY_FITS.value] = memory_violations(
        pool.peak_bytes, problem.usable_bytes, conservative=True)
    return _Conflicts(pool, merged)


def _core(conflicts: _Conflicts) -> list[str]:
    """A minimal set of rules and pins that no candidate satisfies together."""
    model = cp_model.CpModel()
    # Candidates that break the same rules and pins are interchangeable here: one choice per
    # distinct pattern keeps the model small (DeepSeek-V3 on 64 GPUs: 10^5 candidates, a few
    # hundred patterns).
    names = list(conflicts.broken)
    patterns = np.unique(np.stack([conflicts.broken[n] for n in names], axis=1), axis=0)
    choice = [model.new_bool_var(f"choice[{i}]") for i in range(len(patterns))]
    # Exactly one strategy is chosen.
    model.add_exactly_one(choice)
    # One literal per rule or pin: when enforced, no candidate that breaks it may be chosen.
    literals = {}
    for name, bad in zip(names, patterns.T):
        literal = model.new_bool_var(f"enforce[{name}]")
        culprits = [~choice[i] for i in np.flatnonzero(bad)]
        if culprits:
            model.add_bool_and(culprits).only_enforce_if(literal)
        literals[literal.index] = name
    model.add_assumptions([model.get_bool_var_from_proto_index(i) for i in literals])

    # Cores need a single worker (CP-SAT refuses assumptions with more).
    solver = make_solver(SolverSettings(num_workers=1))
    status = solver.solve(model)
    if status != cp_model.INFEASIBLE:
        raise AssertionError(f"the explanation model is {solver.status_name(status)}, but the "
                             f"search found nothing")
    core = [literals[i] for i in solver.sufficient_assumptions_for_infeasibility()]
    # Deletion pass: drop each member whose removal keeps the rest infeasible.
    for name in list(core):
        rest = [n for n in core if n != name]
        if not conflicts.satisfying(rest).any():
            core = rest
    return core


def _best(conflicts: _Conflicts, names) -> int | None:
    idx = np.flatnonzero(conflicts.satisfying(names))
    if not len(idx):
        return None
    return int(idx[np.argmin(conflicts.pool.step_s[idx])])


def _describe(conflicts: _Conflicts, i: int) -> str:
    pool = conflicts.pool
    return strategy_label(strategy_at(pool.batches[pool.batch[i]].cands, int(pool.row[i])))


def _gpu_counts(problem: Problem, space: SearchSpace) -> list[int]:
    """GPU counts above the request that the search space can use (tp * pp * dp with dp
    dividing the global batch), in whole nodes, smallest first, starting at the count whose
    memory could hold the model states fully sharded (the fewest GPUs anything could fit on)."""
    layers, node = problem.model.num_layers, problem.cluster.gpus_per_node
    pps = set(powers_of_two(layers)) | (set(divisors(layers)) if space.any_pp else set())
    tps = powers_of_two(problem.cluster.nvlink_gpus if not space.cross_node_tp
                        else max(problem.model.tp_head_counts))
    states = problem.model.num_params * problem.training.state_bytes.total
    least = max(problem.num_gpus + 1, int(states // problem.cluster.capacity_bytes))
    counts = {t * p * d for t in tps for p in pps for d in divisors(problem.training.global_batch)}
    return sorted(c for c in counts
                  if least <= c <= MAX_GPU_FACTOR * problem.num_gpus and c % node == 0)


def _more_gpus(problem: Problem, space: SearchSpace, options: RuleOptions) -> str | None:
    """The smallest GPU count above the request on which some strategy fits."""
    for num_gpus in _gpu_counts(problem, space)[:MAX_GPU_COUNTS_TRIED]:
        bigger = replace(problem, num_gpus=num_gpus)
        try:
            fastest = _fastest_strategy(bigger, space, options)
        except InputError:          # more to evaluate than a search does: stop suggesting
            return None
        if fastest is not None:
            label = fastest.degrees_label()
            note = ""
            if num_gpus > bigger.cluster.num_gpus:
                note = f"; {problem.cluster.name} has {bigger.cluster.num_gpus}"
            return f"{num_gpus} GPUs ({label} fits{note})"
    return None


NEAREST_TRIED = 4
"""GPU counts tried on each side of the request for a batch no strategy divides."""

NEAREST_SCANNED = 4096
"""Node counts looked at on each side of the request (a huge cluster would else be walked node
by node)."""


def _fastest_strategy(problem: Problem, space: SearchSpace, options: RuleOptions):
    """The fastest strategy of the space that passes every rule and pin and fits, or None."""
    pins = space.pins()
    pool = evaluate_groups(problem, [(g, passes(problem, g.cands, pins, options))
                                     for g in generate(problem, space)])
    fits = ~memory_violations(pool.peak_bytes, problem.usable_bytes, conservative=True)
    if not fits.any():
        return None
    idx = np.flatnonzero(fits)
    i = int(idx[np.argmin(pool.step_s[idx])])
    return strategy_at(pool.batches[pool.batch[i]].cands, int(pool.row[i]))


def _fastest_fit(problem: Problem, space: SearchSpace, options: RuleOptions) -> str | None:
    """The degrees of the fastest strategy that passes every rule and fits, or None."""
    fastest = _fastest_strategy(problem, space, options)
    return None if fastest is None else fastest.degrees_label()


NEAREST_BATCHES_TRIED = 3
"""Global batches tried on each side of the request, nearest first."""


def _nearest_batches(problem: Problem, space: SearchSpace, options: RuleOptions,
                     dps: list[int]) -> list[str]:
    """The global batches nearest the request, below and above, that the dp of a strategy
    passing every other rule divides and that then fit, as the flag to pass."""
    gb = problem.training.global_batch
    out = []
    for side in (-1, 1):
        near = {(gb // d) * d if side < 0 else -(-gb // d) * d for d in dps if d != gb}
        near = sorted((b for b in near if 0 < b <= MAX_GLOBAL_BATCH and b != gb),
                      key=lambda b: abs(b - gb))
        for batch in near[:NEAREST_BATCHES_TRIED]:
            other = replace(problem, training=problem.training.model_copy(
                update={"global_batch": batch}))
            label = _fastest_fit(other, space, options)
            if label:
                out.append(f"--global-batch {batch}: {label} fits")
                break
    return out


def _nearest_gpu_counts(problem: Problem, space: SearchSpace,
                        options: RuleOptions) -> list[str]:
    """The GPU counts in whole nodes nearest the request, below and above, where some
    strategy divides the batch and fits, as the flag to pass."""
    from planner.search.candidates import degree_tuples

    node, gb = problem.cluster.gpus_per_node, problem.training.global_batch
    # What the search would try on that count: pp widened when the user left it free.
    space = replace(space, wide_pp=space.wide_pp or space.pp is None)
    start = problem.num_gpus // node * node
    # dp = count / (tp * cp * pp) must divide the batch: no count above the batch times the
    # largest model-parallel group can (tp within the heads, cp the sequence, pp the layers).
    model = problem.model
    largest_group = (max(space.tp or 1, *model.tp_head_counts)
                     * max(space.cp or 1, problem.training.seq_len // space.min_cp_tokens, 1)
                     * max(space.pp or 1, model.num_layers))
    highest = min(MAX_GPU_FACTOR * problem.num_gpus, MAX_GPUS, gb * largest_group)
    out = []
    for side in (-1, 1):
        tried = scanned = 0
        count = start if side < 0 and start != problem.num_gpus else start + side * node
        if side < 0:
            count = min(count, highest // node * node)
        while 0 < count <= highest and tried < NEAREST_TRIED and scanned < NEAREST_SCANNED:
            scanned += 1
            # The smallest model-parallel group that leaves dp dividing the batch is count /
            # gcd(count, batch); a count whose smallest exceeds the largest cannot divide it.
            if count // math.gcd(count, gb) > largest_group:
                count += side * node
                continue
            other = replace(problem, num_gpus=count, cluster=problem.cluster.model_copy(
                update={"num_nodes": max(problem.cluster.num_nodes, -(-count // node))}))
            if any(gb % d[3] == 0 for d in degree_tuples(other, space)):
                tried += 1
                label = _fastest_fit(other, space, options)
                if label:
                    out.append(f"--gpus {count}: {label} fits")
                    break
            count += side * node
    return out


def _with_offload(problem: Problem, space: SearchSpace, options: RuleOptions) -> str | None:
    """The flags that let the search offload what the framework can, and the fastest plan that
    then fits (None: none does, or nothing more can be offloaded)."""
    o = problem.framework.offload
    if o is None or problem.cluster.host is None:
        return None
    kinds = [k for k, able in (("optimizer", o.optimizer), ("params", o.params),
                               ("activations", o.activations is not None)) if able]
    if set(kinds) <= set(space.offload):
        return None
    s = _fastest_strategy(problem, replace(space, offload=tuple(kinds)), options)
    if s is None:
        return None
    used = [k for k, on in (("optimizer", s.optimizer_offload > 0), ("params", s.param_offload),
                            ("activations", s.activation_offload_layers > 0)) if on]
    flags = " ".join(f"--offload {k}" for k in used)
    return f"CPU offload, {flags}: {strategy_label(s)} fits"


def explain_infeasible(problem: Problem, space: SearchSpace, groups: list[CandidateGroup],
                       options: RuleOptions) -> InfeasibleError:
    conflicts = _conflicts(problem, space, groups, options)
    core = _core(conflicts)
    headline = f"no strategy for {problem.job} satisfies {' and '.join(core)}"
    details = []
    for name in core:
        if name in {r.value for r in Rule} and len(conflicts.pool) and conflicts.broken[name].all() \
                and Rule(name) in EXPLAIN:
            # Broken by every strategy (the precision, the GPU): say why and what to do.
            pool = conflicts.pool
            message, fix = EXPLAIN[Rule(name)](
                problem, strategy_at(pool.batches[pool.batch[0]].cands, int(pool.row[0])))
            details.append(f"{name}: {message}; {fix}")
        elif name in {r.value for r in Rule}:
            details.append(f"{name}: {SUMMARY[Rule(name)]}")
        elif not conflicts.satisfying([name]).any():
            details.append(f"{name}: no strategy in the search space has it (tp * cp * pp "
                           f"must divide the {problem.num_gpus} GPUs, and pp * vpp stay within "
                           f"the {problem.model.num_layers} layers)")
        else:
            details.append(f"{name}: your pin")
    memory = Rule.MEMORY_FITS.value
    if memory in core:
        others = [n for n in conflicts.broken if n != memory]
        idx = np.flatnonzero(conflicts.satisfying(others))
        if len(idx):
            i = int(idx[np.argmin(conflicts.pool.peak_bytes[idx])])
            peak = float(conflicts.pool.peak_bytes[i])
            over = peak - problem.usable_bytes
            details.append(f"closest miss: peak {peak / GiB:.1f} GiB, {over / GiB:.1f} GiB over, "
                           f"with {_describe(conflicts, i)}")
    ways = []
    for name in core:
        if name == memory:
            continue
        relaxed = [n for n in conflicts.broken if n != name]
        i = _best(conflicts, relaxed)
        if i is None:
            continue
        if name == Rule.TP_WITHIN_NODE.value:
            ways.append(f"allow --cross-node-tp: {_describe(conflicts, i)} fits")
        elif name not in {r.value for r in Rule}:
            ways.append(f"drop {name}: {_describe(conflicts, i)} fits")
    target_rules = {rule.value: targets for rule, (targets, _) in TARGET_CHECKS.items()}
    # Targets of one framework (mindspore, mindformers) share its rules: blame frameworks.
    blamed = sorted({t.framework for name in core for t in target_rules.get(name, ())
                     if t in rule_targets(problem, options)})
    if len(blamed) > 1:
        for target in blamed:
            relaxed = [n for n in conflicts.broken
                       if target not in {t.framework for t in target_rules.get(n, ())}]
            i = _best(conflicts, relaxed)
            if i is not None:
                ways.append(f"without {target}'s rules (emit it separately): "
                            f"{_describe(conflicts, i)} fits")
    if Rule.BATCH_DIVISIBLE.value in core:
        # dp of the strategies that only the batch (and memory) rule out.
        others = [n for n in conflicts.broken if n not in (Rule.BATCH_DIVISIBLE.value, memory)]
        ok = conflicts.satisfying(others)
        dps = sorted({int(d) for d in conflicts.pool.cands.dp[ok]})
        ways += _nearest_batches(problem, space, options, dps)
        ways += _nearest_gpu_counts(problem, space, options)
    if memory in core:
        more = _more_gpus(problem, space, options)
        if more:
            ways.append(f"more GPUs: {more}")
        offload = _with_offload(problem, space, options)
        if offload:
            ways.append(offload)
    if ways:
        details += ["would fit:"] + [f"  - {way}" for way in ways]
    elif memory in core:
        details.append(f"would fit: no GPU count tried up to {MAX_GPU_FACTOR}x this one; use "
                       "GPUs with more memory, a shorter sequence, or --any-pp")
    return InfeasibleError(headline, details=details)
