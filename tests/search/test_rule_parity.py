"""One rule gate: `validate` and the search judge strategies alike.

On small worlds (a tiny dense model and a tiny MoE model, 1 to 16 GPUs, five frameworks, bf16
and FP8, context parallelism), every strategy of a box is checked two ways:

* forward: every strategy `validate` accepts is in the space `candidates.generate` builds, and
  passes the search's gate (`pool.passes`, then memory, as the search compares it);
* reverse: every candidate the search's gate passes, as the Strategy the search would return
  (its pipeline layout spelled out), is accepted by `validate`.

Both sides use the options the search uses (`SearchSpace.rule_options`), so a rule restated
in one place only (a pre-filter in candidates.py, a special case in validate.py) shows up as
a strategy on one side only. That every command passes the same options is
tests/cli/test_rule_gate.py's to check.

The box holds the values the search's own policies admit, which are not rules: powers of two
for tp, cp, pp and ep; vpp dividing the layers per stage; etp 1 or tp (and the powers of two
between for experts at least as wide as the model); HSDP only with ZeRO-3
within a node; no offload; dp_comm all_reduce. Three policies fold a strategy onto an
equivalent or better one instead of dropping it, and the forward check follows them (`_twin`):
sequence parallelism at tp 1 shards nothing, etp splits nothing on a dense model, and the ring
(p2p) replaces the all-gather K/V exchange wherever it can run.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

import numpy as np
import pytest

from cost_models.enums import CpComm, Recompute, ZeroStage
from planner.core.candidates import Candidates
from planner.rules.gate import MIB, degree_violations, memory_violations, rule_violations
from planner.rules.validate import validate
from planner.inputs.loader import make_problem, resolve_strategy
from planner.schemas.strategy import LaunchTarget, Strategy
from planner.search.candidates import SearchSpace, generate
from planner.search.pool import evaluate_groups, passes

DENSE = """\
name: tiny-dense
num_layers: 6
hidden: 64
num_heads: 8
num_kv_heads: 4
vocab_size: 512
training:
  seq_len: 256
  global_batch: 16
  precision: bf16
"""

MOE = """\
name: tiny-moe
num_layers: 4
hidden: 64
num_heads: 8
num_kv_heads: 4
ffn_hidden: 128
vocab_size: 512
mlp: swiglu
num_experts: 8
top_k: 2
training:
  seq_len: 256
  global_batch: 16
  precision: bf16
"""


@dataclass(frozen=True)
class World:
    model: str
    """'dense', 'dense-unfused' (unfused attention: no context parallelism) or 'moe'."""
    gpus: int
    framework: str = "megatron"
    precision: str | None = None
    fp8_recipe: str | None = None
    targets: tuple[LaunchTarget, ...] = ()
    even_layouts: bool = False
    min_free_gib: float = 0.0
    """Memory kept free, so that the memory rule decides in some worlds."""

    def __str__(self) -> str:
        parts = [self.model, str(self.gpus), self.framework, self.fp8_recipe or "",
                 ",".join(t.value for t in self.targets), "even" if self.even_layouts else "",
                 f"free{self.min_free_gib:g}" if self.min_free_gib else ""]
        return "-".join(p for p in parts if p)


# Peaks of the tiny models on an H100 (79.65 GiB) run from 2.0006 to 2.02 GiB, the framework
# reserve dominating: keeping 77.647 GiB free leaves 2.003 GiB, which some fit and some do not
# (the test checks that both happen).
TIGHT = 77.647

WORLDS = [
    *(World("dense", n) for n in (1, 2, 4, 8, 16)),
    World("dense", 16, min_free_gib=TIGHT),
    World("dense", 16, even_layouts=True),
    World("dense", 16, "deepspeed"),
    World("dense", 16, "torchtitan"),
    World("dense", 16, "torchrun"),
    World("dense", 16, "mindspore"),
    World("dense", 8, targets=(LaunchTarget.DEEPSPEED, LaunchTarget.TORCHTITAN)),
    World("dense-unfused", 8),
    World("dense", 8, "megatron", "fp8", "tensorwise"),
    World("dense", 8, "megatron", "fp8", "rowwise"),
    World("dense", 8, "torchtitan", "fp8", "rowwise"),
    World("dense", 8, "deepspeed", "fp8", "tensorwise"),
    World("moe", 16),
    World("moe", 16, min_free_gib=TIGHT),
    World("moe", 16, "deepspeed"),
    World("moe", 16, "torchtitan"),
    World("moe", 8, "mindspore"),
    World("moe", 4, "torchrun"),
]


def _problem(world: World, tmp_path):
    text = MOE if world.model == "moe" else DENSE
    path = tmp_path / f"{world.model}.yaml"
    path.write_text(text)
    return make_problem(str(path), "dgx-h100", gpus=world.gpus, framework=world.framework,
                        precision=world.precision, fp8_recipe=world.fp8_recipe,
                        min_free_gib=world.min_free_gib,
                        attention="unfused" if world.model == "dense-unfused" else None)


BOX_MICRO_BATCH = (1, 2)
BOX_VPP = (1, 2)
BOX_RECOMPUTE = (Recompute.NONE, Recompute.SELECTIVE)
FIELDS = tuple(Candidates.__dataclass_fields__)


def _powers(limit: int) -> list[int]:
    return [1 << k for k in range(limit.bit_length()) if 1 << k <= limit]


def _box(problem) -> list[Strategy]:
    """Every strategy of the search's policy domains on this world (rule-breaking values
    included), resolved as `validate`'s callers resolve a strategy.yaml. Micro-batches 1 and 2
    and vpp up to 2 only, to keep it small."""
    n, layers, moe = problem.num_gpus, problem.model.num_layers, problem.model.is_moe
    node = problem.cluster.nvlink_gpus
    out = []
    for tp, cp, pp in itertools.product(_powers(8), _powers(4), _powers(8)):
        if n % (tp * cp * pp):
            continue
        dp = n // (tp * cp * pp)
        vpps = [v for v in BOX_VPP if pp > layers or (layers // pp) % v == 0]
        eps = _powers(4) if moe else [1, 2]
        wide = problem.model.wide_experts            # also the powers of two between
        etps = sorted({1, tp} | (set(_powers(tp)) if wide else set())) if moe else [tp]
        kinds = list(CpComm) if cp > 1 else [CpComm.P2P]
        for vpp, mb, sp, rc, zero, ep, etp, kind in itertools.product(
                vpps, BOX_MICRO_BATCH, (False, True), BOX_RECOMPUTE, ZeroStage, eps, etps,
                kinds):
            shards = [None]
            if zero == 3 and 1 < node // tp < dp and dp % (node // tp) == 0:
                shards.append(node // tp)           # HSDP inside a node
            out += [resolve_strategy(Strategy(
                dp=dp, tp=tp, pp=pp, vpp=vpp, cp=cp, cp_comm=kind, micro_batch=mb,
                sequence_parallel=sp, recompute=rc, zero_stage=zero, dp_shard=shard, ep=ep,
                etp=etp), problem) for shard in shards]
    return out


def _keys(cands: Candidates) -> list[tuple]:
    """Each candidate as the rules and costs see it: every field, with the all-to-all group
    only where a2a+p2p has one and the server count only with a parameter server (elsewhere
    the search and a strategy.yaml write them differently, to no effect)."""
    cp_a2a = np.where(cands.cp_comm == list(CpComm).index(CpComm.A2A_P2P), cands.cp_a2a, 1)
    num_servers = np.where(cands.dp_comm == 1, cands.num_servers, cands.dp)
    columns = [cp_a2a if name == "cp_a2a" else num_servers if name == "num_servers"
               else getattr(cands, name) for name in FIELDS]
    return [tuple(row) for row in np.stack([np.asarray(c, dtype=float) for c in columns],
                                           1).tolist()]


def _validate_rules(problem, strategies: list[Strategy],
                    options) -> tuple[np.ndarray, list[tuple]]:
    """`validate`'s rule verdict (`rule_violations`: no violation) on strategies without a
    layers_per_stage, vectorised: its own conversion (`Candidates.from_strategy`) and rules
    (`degree_violations`). The test checks it against `rule_violations` on a sample."""
    cands = Candidates.concat([Candidates.from_strategy(s, problem.framework.defaults)
                               for s in strategies])
    ok = np.ones(len(cands), dtype=bool)
    for bad in degree_violations(problem, cands, options).values():
        ok &= ~bad
    return ok, _keys(cands)


def _gate(problem, space: SearchSpace):
    """The search's gate: the keys of every candidate of its space that `passes`, and of those
    that also fit in memory as the search compares it, each with its (batch, row) in the pool,
    whose `Batch.strategy` is the Strategy the search would return."""
    options = space.rule_options(problem)
    pool = evaluate_groups(problem, [(g, passes(problem, g.cands, [], options))
                                     for g in generate(problem, space)])
    fits = ~memory_violations(pool.peak_bytes, problem.usable_bytes, conservative=True)
    passed, fitting = set(), {}
    for index, batch in enumerate(pool.batches):
        rows = np.flatnonzero(pool.batch == index)
        for i, key in zip(rows, _keys(batch.cands.take(pool.row[rows]))):
            passed.add(key)
            if fits[i]:
                fitting[key] = (batch, int(pool.row[i]))
    return passed, fitting


def _twin(problem, strategy: Strategy) -> Strategy | None:
    """The strategy the search holds in place of this one, by a policy of the space (see the
    module docstring), or None."""
    if not problem.model.is_moe and strategy.expert_tp != strategy.tp:
        return strategy.model_copy(update={"etp": strategy.tp})
    if strategy.tp == 1 and strategy.sequence_parallel:
        return strategy.model_copy(update={"sequence_parallel": False})
    if strategy.cp > 1 and strategy.cp_comm is CpComm.ALL_GATHER:
        return strategy.model_copy(update={"cp_comm": CpComm.P2P})
    return None


SAMPLE = 40
"""Strategies per world and direction that go through the whole of `validate` (memory
included, some 4 ms each); the rules are checked on every one."""


def _sample(items: list, seed: str) -> list:
    return random.Random(seed).sample(items, min(SAMPLE, len(items)))


@pytest.mark.parametrize("world", WORLDS, ids=str)
def test_validate_and_the_search_gate_accept_the_same_strategies(world, tmp_path):
    problem = _problem(world, tmp_path)
    space = SearchSpace(targets=world.targets, even_layouts=world.even_layouts,
                        min_cp_tokens=1)
    options = space.rule_options(problem)
    passed, fitting = _gate(problem, space)
    box = _box(problem)
    ok, keys = _validate_rules(problem, box, options)
    for i in _sample(range(len(box)), f"{world}-rules"):
        assert ok[i] == (not rule_violations(problem, box[i], options)), box[i]
    # Forward, rules: what validate's rules accept, the search holds and `passes`.
    for strategy, accepted, key in zip(box, ok, keys):
        held = strategy
        while accepted and key not in passed:
            held = _twin(problem, held)
            assert held is not None, (
                f"{world}: validate accepts {strategy.model_dump(exclude_defaults=True)}, "
                f"which the search does not hold or its gate refuses")
            key = _keys(Candidates.from_strategy(held, problem.framework.defaults))[0]
            assert not rule_violations(problem, held, options), (world, held)
    # Reverse, rules: what `passes` lets through, validate's rules accept (where the box holds
    # it: the search tries more micro-batches, vpp, recomputation, ep and cp).
    refused = [k for k, accepted in zip(keys, ok) if k in passed and not accepted]
    assert not refused, (f"{world}: the search's gate passes {len(refused)} strategies that "
                         f"validate's rules refuse, e.g. {dict(zip(FIELDS, refused[0]))}")
    # Both directions with memory, through the whole of validate, on samples: a strategy
    # validate accepts fits as the search compares it, and a plan of the gate, as returned
    # with its layout, is accepted.
    for i in _sample([i for i in range(len(box)) if ok[i] and keys[i] in passed],
                     f"{world}-forward"):
        check = validate(problem, box[i], options=options)
        if keys[i] in fitting:
            assert check.valid, (world, box[i], [v.rule for v in check.violations])
        elif check.valid:
            # The search compares whole MiB, the peak rounded up and the capacity down, so
            # that what it accepts fits in exact arithmetic too: validate may accept a peak
            # that the search refuses by less than a MiB, never more.
            peak = check.report.memory.peak_bytes
            assert peak > problem.usable_bytes - MIB, (world, box[i], peak)
    for key in _sample(sorted(fitting), f"{world}-reverse"):
        batch, row = fitting[key]
        strategy = batch.strategy(row, problem.model)
        check = validate(problem, strategy, options=options)
        assert check.valid, (f"{world}: the search's gate passes {strategy.degrees_label()}, "
                             f"which validate rejects: {[v.rule for v in check.violations]}")
    if world.min_free_gib:
        assert fitting and len(fitting) < len(passed), "memory must decide in this world"
