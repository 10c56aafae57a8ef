"""The search space: every strategy the search may consider, as `Candidates` arrays.

Degrees follow the user's rule: tp and pp are powers of two (a hard requirement of MindSpore,
and what Megatron-LM runs use in practice), dp takes the GPUs that remain, dp = gpus / (tp pp),
so 1,536 GPUs can run dp 24. `any_pp` also admits every pp that divides the layer count, which
Megatron-LM accepts (SC21's 530B run used pp 35). vpp takes the divisors of the layers per
stage, and the micro-batch the divisors of the per-replica batch.

The space is deliberately wider than what is valid: degrees that break a rule (tp that does not
divide the heads, a pp that does not divide the layers, a batch dp does not divide) are kept, so
that the search can name the rule that removes them when nothing is left (`planner.rules.gate`).
Where a dimension is cut for speed (micro-batches, vpp, expert pairs, context parallelism, the
option table), the cut calls the rules themselves (`rules.breaks`), never a copy of them, so
that a changed rule changes the space; tests/search/test_rule_parity.py holds the search's gate
and `validate` to the same verdicts.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace

import numpy as np

from cost_models.enums import (DEFAULT_RECOMPUTE_MODULES, CpComm, MoeDispatcher,
                               PipelineSchedule, RankOrder, Recompute, RecomputeModule,
                               ZeroStage)
from cost_models.expert_parallel import DEEPEP_NVL_PEERS_MAX
from planner.core.candidates import (CP_COMM_ORDER, DP_COMM_ORDER, MOE_DISPATCHER_ORDER,
                                     PIPELINE_SCHEDULE_ORDER, RANK_ORDER, RECOMPUTE_ORDER,
                                     Candidates, modules_mask)
from planner.errors import InfeasibleError
from planner.rules.gate import (SUMMARY, Rule, RuleOptions, balanced_layouts_allowed, breaks,
                                chunks_without_layers)
from planner.core.problem import Problem
from planner.inputs.loader import fp8_param_gather_allowed
from planner.schemas.framework import OverlapDefaults
from planner.schemas.strategy import DpComm, LaunchTarget, default_cp_a2a


@dataclass(frozen=True)
class SearchSpace:
    """What the user pinned or bounded; None leaves a dimension free."""

    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    vpp: int | None = None
    micro_batch: int | None = None
    max_tp: int | None = None
    max_pp: int | None = None
    max_micro_batch: int | None = None
    ep: int | None = None
    etp: int | None = None
    max_ep: int | None = None
    cp: int | None = None
    max_cp: int | None = None
    cp_comm: tuple[CpComm, ...] | None = None
    """K/V exchanges to try with cp > 1; None: every one the framework implements."""
    min_cp_tokens: int = 4096
    """Fewest tokens per sequence a CP rank gets in the searched space (cp 2 from 8K tokens,
    where NVIDIA's recipes start to use it: Llama 3.1 405B CP2 at 8192, Megatron-Bridge
    performance tables): shorter shares leave a rank's attention too short to hide a ring step
    and its GEMMs thin, and keep the space of short-sequence models as it was; --cp evaluates
    any degree."""
    zero_stages: tuple[ZeroStage, ...] = tuple(ZeroStage)
    recompute: tuple[Recompute, ...] = RECOMPUTE_ORDER
    recompute_modules: tuple[frozenset[RecomputeModule], ...] | None = None
    """The module sets selective recompute tries; None: `recompute_module_sets`."""
    sequence_parallel: tuple[bool, ...] = (False, True)
    dp_comm: tuple[DpComm, ...] = (DpComm.ALL_REDUCE,)
    any_pp: bool = False
    """Also try every pp that divides the layer count, not only powers of two."""
    wide_pp: bool = False
    """Also try every pp that divides the GPUs left by tp and cp (up to the layer count), with
    balanced uneven layouts where pp does not divide the layers: the pp that carries the odd
    factor of 384 or 2,240 GPUs (BLOOM ran pp 12 on 384 GPUs, Megatron-Turing NLG 530B pp 35
    on 2,240). The search turns it on by itself when the power-of-two space is empty."""
    cross_node_tp: bool = False
    """Allow tensor-parallel groups larger than a node (over the inter-node network)."""
    targets: tuple[LaunchTarget, ...] = ()
    """Launch targets the plans must run on: their rules apply too (the pricing framework's
    always do: `rules.rule_targets`)."""
    even_layouts: bool = False
    """Only Megatron-LM's even split (pp * vpp dividing the layers), no balanced layouts."""
    dp_shard: int | None = None
    """Pin the ZeRO shard group (HSDP); None: all of dp, or one node's data-parallel ranks."""
    overlap_grad_reduce: bool | None = None
    overlap_param_gather: bool | None = None
    tp_comm_overlap: bool | None = None
    moe_a2a_overlap: bool | None = None
    moe_dispatcher: MoeDispatcher | None = None
    offload: tuple[str, ...] = ()
    """What the search may keep in host memory: 'optimizer', 'params', 'activations'. Each
    strategy is tried with and without each (`offload_variants`)."""
    fp8_param_gather: bool | None = None
    """Overlap pins (None: the framework's default), e.g. what an older framework version did."""
    rank_order: RankOrder | None = None
    """The rank order every candidate uses; None: the framework's (trying both would double
    the space for a choice only Megatron-LM offers)."""
    nvls: bool = True
    """NCCL may use NVLS (False: NCCL_NVLS_ENABLE=0)."""
    pipeline_schedule: PipelineSchedule | None = None
    """The pipeline schedule of every candidate with pp > 1; None: 1F1B (interleaved with
    vpp > 1). The search tries one schedule, as asked (the zero-bubble ones are torchtitan's,
    and torch refuses them on a stage module compiled whole: schedules.py)."""

    def overlaps(self, problem: Problem) -> OverlapDefaults:
        """The overlaps every candidate uses: the pins, else the framework's defaults."""
        defaults = problem.framework.defaults
        return OverlapDefaults(**{name: getattr(defaults, name) if getattr(self, name) is None
                                  else getattr(self, name)
                                  for name in OverlapDefaults.model_fields})

    def rule_options(self, problem: Problem) -> RuleOptions:
        """The rules the search applies: those of its targets and of the pricing framework
        (`rules.rule_targets`); plans carry their own layouts, balanced, so pp * vpp need not
        divide the layers, unless `even_layouts` or a rule in force refuses uneven ones."""
        options = RuleOptions(cross_node_tp=self.cross_node_tp, targets=self.targets)
        balanced = not self.even_layouts and balanced_layouts_allowed(problem, options)
        return replace(options, explicit_layouts=balanced)

    def pins(self) -> list[Pin]:
        """The user's pins and bounds, one per flag, for messages and infeasibility cores."""
        found = []
        for name in ("tp", "pp", "dp", "vpp", "micro_batch", "dp_shard", "ep", "etp", "cp"):
            value = getattr(self, name)
            if value is not None:
                found.append(Pin(f"--{name.replace('_', '-')} {value}", name, value, exact=True))
        for name in ("tp", "pp", "micro_batch", "ep", "cp"):
            value = getattr(self, f"max_{name}")
            if value is not None:
                found.append(Pin(f"--max-{name.replace('_', '-')} {value}", name, value,
                                 exact=False))
        if set(self.zero_stages) != set(ZeroStage):
            found.append(Pin("--zero " + ",".join(str(int(z)) for z in self.zero_stages),
                             "zero", tuple(int(z) for z in self.zero_stages)))
        if set(self.recompute) != set(RECOMPUTE_ORDER):
            text = ("--no-recompute" if self.recompute == (Recompute.NONE,) else
                    "--recompute " + ",".join(r.value for r in self.recompute))
            found.append(Pin(text, "recompute",
                             tuple(RECOMPUTE_ORDER.index(r) for r in self.recompute)))
        if self.cp_comm is not None:
            found.append(Pin("--cp-comm " + ",".join(k.value for k in self.cp_comm), "cp_comm",
                             tuple(CP_COMM_ORDER.index(k) for k in self.cp_comm)))
        if set(self.sequence_parallel) != {False, True}:
            found.append(Pin("--sp" if self.sequence_parallel == (True,) else "--no-sp", "sp",
                             self.sequence_parallel))
        return found


@dataclass(frozen=True)
class Pin:
    """One user constraint on one dimension: an exact value, an upper bound or a set."""

    flag: str
    """How the user wrote it, e.g. '--max-pp 4'."""
    dimension: str
    """A `Candidates` field: tp, pp, dp, vpp, micro_batch, zero, recompute, sp."""
    value: object
    exact: bool = True

    def allows(self, cands: Candidates) -> np.ndarray:
        values = getattr(cands, {"micro_batch": "mb", "dp_shard": "shard"}.get(
            self.dimension, self.dimension))
        if isinstance(self.value, tuple):
            return np.isin(values, self.value)
        return values == self.value if self.exact else values <= self.value


@dataclass
class CandidateGroup:
    """Candidates that share pp and vpp, hence one uniform pipeline layout."""

    pp: int
    vpp: int
    cands: Candidates = field(repr=False)


def powers_of_two(limit: int) -> list[int]:
    return [1 << k for k in range(limit.bit_length()) if 1 << k <= limit]


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _with_pin(values, pinned: int | None) -> list[int]:
    """A domain plus the user's pinned value, which may lie outside it (tp 6 is evaluated,
    never refused for not being a power of two)."""
    return sorted(set(values) | ({pinned} if pinned is not None else set()))


def _tp_values(problem: Problem, space: SearchSpace) -> list[int]:
    largest_heads = max(problem.model.tp_head_counts)
    powers = [t for t in powers_of_two(min(problem.num_gpus, largest_heads))
              if problem.num_gpus % t == 0]
    return _with_pin(powers, space.tp)


# The pre-filters below cut the space for speed only, and only by calling rules
# (`rules.breaks` on probe candidates): a value is dropped where it breaks one of the rules
# named, whatever the dimensions the probe leaves neutral; pinned values always stay, for the
# rules to name. Every other rule is left to the search's gate (`pool.passes`).

def _probe(problem: Problem, **fields) -> Candidates:
    """Candidates that set `fields` (broadcast together) and leave the rest neutral: one
    stage, one micro-batch, data parallelism 1, no sequence parallelism, recomputation or
    ZeRO. For the pre-filters to ask rules that read only the fields given."""
    arrays = dict(zip(fields, np.broadcast_arrays(*(np.atleast_1d(v) for v in fields.values()))))
    n = len(next(iter(arrays.values())))
    one, off = np.ones(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    base = dict(tp=one, pp=one, vpp=one, dp=one, mb=one, sp=off.astype(bool), recompute=off,
                zero=off, dp_comm=off, overlap=off.astype(bool), param_gather=off.astype(bool),
                tp_overlap=off.astype(bool),
                global_batch=np.full(n, problem.training.global_batch))
    base.update(arrays)
    base.setdefault("shard", base["dp"])
    base.setdefault("num_servers", base["dp"])
    return Candidates(**base)


def _pp_values(problem: Problem, space: SearchSpace, tp: int) -> list[int]:
    rest = problem.num_gpus // tp if problem.num_gpus % tp == 0 else 0
    num_layers = problem.model.num_layers
    values = set(powers_of_two(rest)) if rest else set()
    if space.any_pp:
        values |= {d for d in divisors(num_layers) if d <= rest}
    if space.wide_pp and rest:
        values |= set(divisors(rest))
    values = {p for p in values if not chunks_without_layers(num_layers, p)}
    return _with_pin(values, space.pp)


def _vpp_values(problem: Problem, space: SearchSpace, options: RuleOptions,
                pp: int) -> list[int]:
    """Chunks per stage: the divisors of the layers a stage holds (rounded down when pp does
    not divide them: the layout then gives some chunks one layer more) that the interleaved
    schedule runs with pp stages, at the micro-batch count that suits it best (pp of them)."""
    vpps = np.array(divisors(max(1, problem.model.num_layers // pp)))
    probe = _probe(problem, pp=pp, vpp=vpps, global_batch=pp)
    ok = ~breaks(problem, probe, options, (Rule.INTERLEAVED_SCHEDULE,))
    return _with_pin(vpps[ok].tolist(), space.vpp)


def _shard_values(problem: Problem, space: SearchSpace, tp: int, dp: int, zero: int) -> list[int]:
    """ZeRO shard groups: all of dp, and with ZeRO-3 HSDP inside a node (the gpus_per_node / tp
    data-parallel ranks of one node), where that is a proper divisor of dp."""
    node = problem.cluster.nvlink_gpus // tp
    values = [dp] if zero != 3 or node <= 1 or node >= dp or dp % node else [dp, node]
    return _with_pin(values, space.dp_shard)     # the pin masks the rest (Pin.allows)


def _micro_batch_values(problem: Problem, space: SearchSpace, options: RuleOptions,
                        dp: int) -> list[int]:
    """Micro-batches that divide the batch of a data-parallel rank (the batch rule); when dp
    does not divide the global batch every one breaks it, and 1 stays to name the rule."""
    mbs = np.arange(1, max(problem.training.global_batch // dp, 1) + 1)
    ok = ~breaks(problem, _probe(problem, dp=dp, mb=mbs), options, (Rule.BATCH_DIVISIBLE,))
    return _with_pin(mbs[ok].tolist() or [1], space.micro_batch)


EXPERT_RULES = (Rule.EP_DIVIDES_EXPERTS, Rule.EXPERT_FOLDING, Rule.TARGET_EXPERT_PARALLEL)
"""Rules on tp, cp, dp, ep and etp alone that cut the expert pairs."""
DISPATCHER_RULES = (Rule.MOE_FLEX_HARDWARE, Rule.TARGET_MOE_DISPATCHER)
"""Rules on the MoE token dispatcher alone."""


FLEX_FOR_NVLINK_DOMAIN = {False: MoeDispatcher.FLEX_DEEPEP, True: MoeDispatcher.FLEX_HYBRIDEP}
"""The flex backend the search tries, by whether the NVLink domain spans more GPUs than DeepEP
forwards to (`expert_parallel.DEEPEP_NVL_PEERS_MAX`): Megatron-Core's MoE README
(megatron/core/transformer/moe/README.md @d98e8a64, "Token Dispatching"): DeepEP for
cross-node EP, HybridEP for GB200 NVL72 and multi-node NVLink. The other is priced when pinned
(--moe-dispatcher)."""


def _dispatcher_values(problem: Problem, space: SearchSpace, options: RuleOptions) -> list[int]:
    """The MoE token dispatchers (MOE_DISPATCHER_ORDER indices) an expert-parallel candidate
    tries: the pin, else the framework's default and, where its profile's `moe_dispatchers`
    has it and no DISPATCHER_RULES refuse it, the flex backend for this NVLink domain
    (`FLEX_FOR_NVLINK_DOMAIN`)."""
    if space.moe_dispatcher is not None:
        pinned = MOE_DISPATCHER_ORDER.index(space.moe_dispatcher)
        probe = _probe(problem, dispatcher=pinned)
        broken = [rule for rule in DISPATCHER_RULES if breaks(problem, probe, options, (rule,))[0]]
        if broken:
            # Every candidate would break it: say so now, not after evaluating them all.
            raise InfeasibleError(
                f"no strategy for {problem.job} satisfies {broken[0].value} and "
                f"--moe-dispatcher {space.moe_dispatcher.value}",
                details=[f"{broken[0].value}: {SUMMARY[broken[0]]}",
                         f"--moe-dispatcher {space.moe_dispatcher.value}: your pin",
                         "fix: use --moe-dispatcher alltoall (or leave the dispatcher to "
                         "the search)"])
        return [pinned]
    default = space.overlaps(problem).moe_dispatcher
    flex = FLEX_FOR_NVLINK_DOMAIN[problem.cluster.nvlink_gpus > DEEPEP_NVL_PEERS_MAX]
    tried = [default] + [flex] * (flex in problem.framework.moe_dispatchers and flex != default)
    index = np.array([MOE_DISPATCHER_ORDER.index(d) for d in tried], dtype=np.int64)
    ok = ~breaks(problem, _probe(problem, dispatcher=index), options, DISPATCHER_RULES)
    return [int(i) for i in index[ok | (index == index[0])]]


def _expert_values(problem: Problem, space: SearchSpace, options: RuleOptions, tp: int,
                   cp: int, dp: int, dispatchers: list[int]) -> list[tuple[int, int, int]]:
    """(ep, etp, dispatcher) triples: ep the powers of two up to tp * cp * dp, etp 1 or tp
    (Megatron-LM's default) for an MoE model and tp for a dense one (where etp splits
    nothing), the pins added; pairs that break EXPERT_RULES go unless pinned. Experts at least
    as wide as the model (`wide_experts`: Mixtral) also try the powers of two between, which
    split their GEMMs less than tp and their weights more than 1 (Megatron-Core's MoE
    parallel folding takes any etp); fine-grained experts keep 1 and tp, where their
    published recipes all run etp 1 and a narrower split only shrinks GEMMs already narrow. A
    pair with etp 1 whose EP group spans NVLink domains takes every one of `dispatchers`
    (`_dispatcher_values`), the others the first: a flex backend's gain is in cross-domain
    traffic (Megatron-Core's MoE README, "Token Dispatching": DeepEP for cross-node EP), inside
    one domain it dispatches over the same NVLink; with etp > 1 it routes to tp x ep ranks
    (token_dispatcher.py MoEFlexTokenDispatcher: router_topk = tp x topk), which the published
    flex recipes (etp 1 all) do not run and the dispatch cost does not model."""
    eps = _with_pin(powers_of_two(tp * cp * dp), space.ep)
    etps = {1, tp} if problem.model.is_moe else {tp}
    if problem.model.wide_experts:
        etps |= {t for t in powers_of_two(tp) if tp % t == 0}
    etps = _with_pin(etps, space.etp)
    ep, etp = (a.ravel() for a in np.meshgrid(eps, etps, indexing="ij"))
    ok = ~breaks(problem, _probe(problem, tp=tp, cp=cp, dp=dp, ep=ep, etp=etp), options,
                 EXPERT_RULES)
    ok |= (ep == space.ep) | (etp == space.etp)
    domain = problem.cluster.nvlink_gpus
    return [(int(e), int(t), d) for e, t in zip(ep[ok], etp[ok])
            for d in (dispatchers if t == 1 and e > domain else dispatchers[:1])]


CONTEXT_PARALLEL_RULES = (
    Rule.CP_SEQUENCE, Rule.CP_FUSED_ATTENTION, Rule.CP_ALL_TO_ALL, Rule.CP_ATTENTION_VARIANT,
    Rule.TARGET_CONTEXT_PARALLEL, Rule.DEEPSPEED_CONTEXT_PARALLEL,
    Rule.TORCHTITAN_CONTEXT_PARALLEL, Rule.MINDSPORE_CONTEXT_PARALLEL)
"""Rules on tp, cp, cp_comm and cp_a2a alone (cp_sequence probed without sequence
parallelism, where it is loosest) that cut the context-parallel degrees and exchanges."""


def _cp_exchanges(problem: Problem, options: RuleOptions, tp: int,
                  cp: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every K/V exchange (CP_COMM_ORDER index), its all-to-all group, and the number of
    CONTEXT_PARALLEL_RULES it breaks at this tp and cp."""
    node = problem.cluster.nvlink_gpus
    index = np.arange(len(CP_COMM_ORDER))
    a2a = np.array([{CpComm.A2A: cp, CpComm.A2A_P2P: default_cp_a2a(cp, tp, node)}.get(k, 1)
                    for k in CP_COMM_ORDER])
    probe = _probe(problem, tp=tp, cp=cp, cp_comm=index, cp_a2a=a2a)
    broken = sum(breaks(problem, probe, options, (rule,)).astype(int)
                 for rule in CONTEXT_PARALLEL_RULES)
    return index, a2a, broken


def _cp_values(problem: Problem, space: SearchSpace, options: RuleOptions,
               tp: int) -> list[int]:
    """Context-parallel degrees: 1, and the powers of two that divide the GPUs left by tp,
    leave each rank at least `min_cp_tokens` tokens and have a K/V exchange that passes the
    context-parallel rules; and the pin."""
    seq, rest = problem.training.seq_len, problem.num_gpus // tp
    values = [1] + [c for c in powers_of_two(rest) if c > 1 and rest % c == 0
                    and seq // c >= space.min_cp_tokens
                    and (_cp_exchanges(problem, options, tp, c)[2] == 0).any()]
    if space.max_cp is not None:
        values = [c for c in values if c <= space.max_cp]
    return _with_pin(values, space.cp)


def _cp_kinds(problem: Problem, space: SearchSpace, options: RuleOptions, tp: int,
              cp: int) -> list[tuple[int, int]]:
    """(cp_comm index, all-to-all group) pairs for a cp degree: the pinned K/V exchanges (all
    of them, for the rules to name), else those that pass the context-parallel rules at this
    tp and cp, or the one that breaks the fewest if none does; p2p alone for cp 1."""
    if cp == 1:
        return [(0, 1)]
    index, a2a, broken = _cp_exchanges(problem, options, tp, cp)
    if space.cp_comm is not None:
        keep = np.isin(index, [CP_COMM_ORDER.index(k) for k in space.cp_comm])
    elif (broken == 0).any():
        keep = broken == 0
        # The all-gather moves the ring's bytes with nothing to hide behind and holds the same
        # K/V: where the ring can run, it is never faster (kept if the ring cannot: windows).
        if keep[CP_COMM_ORDER.index(CpComm.P2P)]:
            keep[CP_COMM_ORDER.index(CpComm.ALL_GATHER)] = False
    else:
        keep = index == int(np.argmin(broken))
    return [(int(i), int(a)) for i, a in zip(index[keep], a2a[keep])]


def offload_variants(problem: Problem, space: SearchSpace,
                     pp: int) -> list[tuple[float, bool, int]]:
    """(optimizer share, param offload, offloaded layers per stage) combinations to try: every
    subset of `space.offload`, none first. Activations offload all of a stage's layers but one
    where the framework picks a count, all of them where it offloads every checkpoint (its
    profile's `offload.activations`); all or none of the optimizer states."""
    o = problem.framework.offload
    layers = problem.model.num_layers
    act = 0
    if "activations" in space.offload and o is not None and o.activations is not None:
        act = -(-layers // pp) if o.activations == "all" else max(layers // pp - 1, 0)
    shares = (0.0, 1.0) if "optimizer" in space.offload else (0.0,)
    params = (False, True) if "params" in space.offload else (False,)
    acts = (0, act) if act else (0,)
    return list(itertools.product(shares, params, acts))


def recompute_module_sets(problem: Problem) -> tuple[frozenset[RecomputeModule], ...]:
    """The module sets selective recompute is tried with: core_attn (the paper's selective
    recompute, Megatron-Core's default) always; where the framework takes --recompute-modules,
    for an MoE model one more, the cheapest to re-run of the sets NVIDIA's recipes run
    (Megatron-Bridge perf_recipes @067f987df) that keeps the least: layernorm + moe_act
    (gpt_oss h100/b200/gb200) or, with MLA, layernorm + mla_up_proj + moe_act
    (deepseek/common.py). One set, not every subset: each is another copy of the selective
    rows, and two kept DeepSeek-V3's search 30% slower (`bench/bench_search.py`). The recipes'
    other sets (moe_act alone; mla_up_proj + mlp, deepseek/h100/deepseek_v3.py, which keeps
    more than the MLA set and re-runs as much) are searched with --recompute-modules. Under
    FP8 with delayed scaling Megatron-Core refuses these sets (a rule), leaving core_attn."""
    M = RecomputeModule
    if not (problem.framework.recompute_modules and problem.model.is_moe):
        return (DEFAULT_RECOMPUTE_MODULES,)
    if any(layer.mla is not None for layer in problem.model.attention_layers()):
        return DEFAULT_RECOMPUTE_MODULES, frozenset({M.LAYERNORM, M.MLA_UP_PROJ, M.MOE_ACT})
    return DEFAULT_RECOMPUTE_MODULES, frozenset({M.LAYERNORM, M.MOE_ACT})


def recompute_options(problem: Problem, space: SearchSpace) -> list[tuple[int, int]]:
    """(recompute index, module mask) pairs the search tries: one per module set under
    selective recompute, mask 0 under none and full."""
    sets = space.recompute_modules or recompute_module_sets(problem)
    out = []
    for rc in RECOMPUTE_ORDER:
        masks = [modules_mask(m) for m in sets] if rc is Recompute.SELECTIVE else [0]
        out += [(RECOMPUTE_ORDER.index(rc), mask) for mask in masks]
    return out


def degree_tuples(problem: Problem,
                  space: SearchSpace) -> list[tuple[int, int, int, int, int, int]]:
    """Every (tp, cp, pp, dp, vpp, micro_batch) the search considers."""
    options = space.rule_options(problem)
    micro_batches: dict[int, list[int]] = {}
    chunks: dict[int, list[int]] = {}       # vpp values by pp (the same for every tp and cp)
    out = []
    for tp in _tp_values(problem, space):
        for cp in _cp_values(problem, space, options, tp):
            for pp in _pp_values(problem, space, tp * cp):
                if problem.num_gpus % (tp * cp * pp):
                    continue
                dp = problem.num_gpus // (tp * cp * pp)
                if dp not in micro_batches:
                    micro_batches[dp] = _micro_batch_values(problem, space, options, dp)
                if pp not in chunks:
                    chunks[pp] = _vpp_values(problem, space, options, pp)
                for vpp in chunks[pp]:
                    out += [(tp, cp, pp, dp, vpp, mb) for mb in micro_batches[dp]]
    return out


def generate(problem: Problem, space: SearchSpace) -> list[CandidateGroup]:
    """The search space, grouped by (pp, vpp), before any rule or pin is applied (pinned
    values are added to the domains; `Pin.allows` then masks the rest)."""
    overlap = space.overlaps(problem)
    options = space.rule_options(problem)
    # Every (sequence parallelism, recompute and its modules, ZeRO, DP exchange), as named
    # columns.
    table = list(itertools.product((False, True), recompute_options(problem, space), ZeroStage,
                                   space.dp_comm))
    option = {"sp": np.array([t[0] for t in table], dtype=bool),
              "recompute": np.array([t[1][0] for t in table], dtype=np.int64),
              "rc_modules": np.array([t[1][1] for t in table], dtype=np.int64),
              "zero": np.array([int(t[2]) for t in table], dtype=np.int64),
              "dp_comm": np.array([DP_COMM_ORDER.index(t[3]) for t in table], dtype=np.int64)}
    # A parameter server holds whole gradients: no ZeRO (its rule, on zero and dp_comm).
    option = _where(option, ~breaks(
        problem, _probe(problem, zero=option["zero"], dp_comm=option["dp_comm"]), options,
        (Rule.PARAMETER_SERVER_ZERO,)))
    # Degrees sharing (tp, cp, pp, dp) share their options, shards and expert pairs: build
    # each such family's cross product in one go.
    families: dict[tuple[int, int, int, int], list[tuple[int, int]]] = {}
    for tp, cp, pp, dp, vpp, mb in degree_tuples(problem, space):
        families.setdefault((tp, cp, pp, dp), []).append((vpp, mb))
    rows: dict[tuple[int, int], list[dict[str, np.ndarray]]] = {}
    dispatchers = _dispatcher_values(problem, space, options)
    for (tp, cp, pp, dp), chunks in families.items():
        pairs = np.array(_expert_values(problem, space, options, tp, cp, dp, dispatchers),
                         dtype=np.int64).reshape(-1, 3)
        kinds = np.array(_cp_kinds(problem, space, options, tp, cp), dtype=np.int64).reshape(-1, 2)
        vpps = np.array([c[0] for c in chunks], dtype=np.int64)
        mbs = np.array([c[1] for c in chunks], dtype=np.int64)
        opts = option
        if tp == 1:
            # Not a rule: sequence parallelism at tp 1 shards nothing (Megatron-LM turns it
            # off), the same strategy as without it.
            opts = _where(opts, ~opts["sp"])
        elif space.sequence_parallel != (False,):
            # The search keeps rule-breaking strategies so it can name the rule that removes
            # them, but not an MoE model without sequence parallelism under TP unless asked
            # (--no-sp): that rule is never the one that decides, and it would double the
            # space.
            opts = _where(opts, ~breaks(problem, _probe(problem, tp=tp, sp=opts["sp"]),
                                        options, (Rule.MOE_SEQUENCE_PARALLEL,)))
        for zero in np.unique(opts["zero"]):
            zopts = _where(opts, opts["zero"] == zero)
            shards = np.array(_shard_values(problem, space, tp, dp, int(zero)), dtype=np.int64)
            # Every (vpp and micro-batch, option, shard, expert pair, CP kind) combination.
            d, i, j, k, q = (x.ravel() for x in np.meshgrid(
                np.arange(len(chunks)), np.arange(len(zopts["zero"])), np.arange(len(shards)),
                np.arange(len(pairs)), np.arange(len(kinds)), indexing="ij"))
            n = len(i)
            block = {"tp": np.full(n, tp), "pp": np.full(n, pp), "dp": np.full(n, dp),
                     "cp": np.full(n, cp), "vpp": vpps[d], "mb": mbs[d],
                     **{name: values[i] for name, values in zopts.items()},
                     "shard": shards[j], "ep": pairs[k, 0], "etp": pairs[k, 1],
                     "dispatcher": pairs[k, 2],
                     "cp_comm": kinds[q, 0], "cp_a2a": kinds[q, 1]}
            for vpp in np.unique(block["vpp"]):
                rows.setdefault((pp, int(vpp)), []).append(_where(block, block["vpp"] == vpp))
    groups = []
    for (pp, vpp), blocks in sorted(rows.items()):
        a = {name: np.concatenate([b[name] for b in blocks]) for name in blocks[0]}
        variants = offload_variants(problem, space, pp)
        if len(variants) > 1:   # every row with each variant
            a = {name: np.repeat(values, len(variants)) for name, values in a.items()}
        n = len(a["tp"])
        shares, params, layers = (np.tile(np.array(column), n // len(variants))
                                  for column in zip(*variants))
        cands = Candidates(
            **a, overlap=np.full(n, overlap.overlap_grad_reduce),
            param_gather=np.full(n, overlap.overlap_param_gather),
            tp_overlap=np.full(n, overlap.tp_comm_overlap),
            fp8_gather=overlap.fp8_param_gather & fp8_param_gather_allowed(problem, a["zero"]),
            num_servers=a["dp"].copy(), global_batch=np.full(n, problem.training.global_batch),
            opt_offload=shares.astype(float), param_offload=params.astype(bool),
            act_offload=layers.astype(int), nvls=np.full(n, space.nvls),
            rank_order=np.full(n, RANK_ORDER.index(overlap.rank_order)),
            moe_overlap=np.full(n, overlap.moe_a2a_overlap),
            pipeline_schedule=np.full(n, PIPELINE_SCHEDULE_ORDER.index(
                space.pipeline_schedule or PipelineSchedule.ONE_F_ONE_B) if pp > 1 else 0))
        groups.append(CandidateGroup(pp=pp, vpp=vpp, cands=cands))
    return groups


def _where(columns: dict[str, np.ndarray], keep: np.ndarray) -> dict[str, np.ndarray]:
    """The rows of named columns where `keep` is true."""
    return {name: values[keep] for name, values in columns.items()}
