"""The search space: every strategy the search may consider, as `Candidates` arrays.

Degrees follow the user's rule: tp and pp are powers of two (a hard requirement of MindSpore,
and what Megatron-LM runs use in practice), dp takes the GPUs that remain, dp = gpus / (tp pp),
so 1,536 GPUs can run dp 24. `any_pp` also admits every pp that divides the layer count, which
Megatron-LM accepts (SC21's 530B run used pp 35). vpp takes the divisors of the layers per
stage, and the micro-batch the divisors of the per-replica batch.

The space is deliberately wider than what is valid: degrees that break a rule (tp that does not
divide the heads, a pp that does not divide the layers, a batch dp does not divide) are kept, so
that the search can name the rule that removes them when nothing is left (`planner.feasibility.rules`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from cost_models.enums import CpComm, Recompute, ZeroStage
from planner.costing.evaluate import CP_COMM_ORDER, DP_COMM_ORDER, RECOMPUTE_ORDER, Candidates
from planner.feasibility.rules import cp_all_to_all_breaks, cp_attention_variant_breaks
from planner.inputs.loader import Problem, fp8_param_gather_allowed
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
    """Launch targets the plans must run on: their rules apply too."""
    even_layouts: bool = False
    """Only Megatron-LM's even split (pp * vpp dividing the layers), no balanced layouts."""
    dp_shard: int | None = None
    """Pin the ZeRO shard group (HSDP); None: all of dp, or one node's data-parallel ranks."""
    overlap_grad_reduce: bool | None = None
    overlap_param_gather: bool | None = None
    tp_comm_overlap: bool | None = None
    offload: tuple[str, ...] = ()
    """What the search may keep in host memory: 'optimizer', 'params', 'activations'. Each
    strategy is tried with and without each (`offload_variants`)."""
    fp8_param_gather: bool | None = None
    """Overlap pins (None: the framework's default), e.g. what an older framework version did."""

    def overlaps(self, problem: Problem) -> OverlapDefaults:
        """The overlaps every candidate uses: the pins, else the framework's defaults."""
        defaults = problem.framework.defaults
        return OverlapDefaults(**{name: getattr(defaults, name) if getattr(self, name) is None
                                  else getattr(self, name)
                                  for name in OverlapDefaults.model_fields})

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


def _pp_values(problem: Problem, space: SearchSpace, tp: int) -> list[int]:
    rest = problem.num_gpus // tp if problem.num_gpus % tp == 0 else 0
    num_layers = problem.model.num_layers
    values = set(powers_of_two(min(rest, num_layers))) if rest else set()
    if space.any_pp:
        values |= {d for d in divisors(num_layers) if d <= rest}
    if space.wide_pp and rest:
        values |= {d for d in divisors(rest) if d <= num_layers}
    return _with_pin(values, space.pp)


def _vpp_values(problem: Problem, space: SearchSpace, pp: int) -> list[int]:
    """Chunks per stage: the divisors of the layers a stage holds (rounded down when pp does
    not divide them: the layout then gives some chunks one layer more)."""
    num_layers = problem.model.num_layers
    if pp == 1:
        return _with_pin([1], space.vpp)
    return _with_pin(divisors(max(1, num_layers // pp)), space.vpp)


def _shard_values(problem: Problem, space: SearchSpace, tp: int, dp: int, zero: int) -> list[int]:
    """ZeRO shard groups: all of dp, and with ZeRO-3 HSDP inside a node (the gpus_per_node / tp
    data-parallel ranks of one node), where that is a proper divisor of dp."""
    node = problem.cluster.nvlink_gpus // tp
    values = [dp] if zero != 3 or node <= 1 or node >= dp or dp % node else [dp, node]
    return _with_pin(values, space.dp_shard)     # the pin masks the rest (Pin.allows)


def _micro_batch_values(space: SearchSpace, global_batch: int, dp: int) -> list[int]:
    if global_batch % dp:
        return _with_pin([1], space.micro_batch)   # every one breaks batch_divisible; keep one
    return _with_pin(divisors(global_batch // dp), space.micro_batch)


def _expert_values(problem: Problem, space: SearchSpace, tp: int,
                   dp: int) -> list[tuple[int, int]]:
    """(ep, etp) pairs: for a dense model (1, tp); for an MoE model ep the powers of two that
    divide the experts and tp * dp, etp 1 or tp (Megatron-LM's default) where the framework
    splits experts on their own, and the pins."""
    if not problem.model.is_moe:
        return [(space.ep or 1, space.etp or tp)]
    etps = {1, tp} if problem.framework.expert_tensor_parallel else {tp}
    if space.etp is not None:
        etps.add(space.etp)
    eps = set(powers_of_two(math.gcd(problem.model.num_experts, tp * dp)))
    if not problem.framework.expert_parallel:
        eps = {1}
    if space.ep is not None:
        eps.add(space.ep)
    return [(e, t) for e in sorted(eps) for t in sorted(etps)
            if (tp * dp) % (e * t) == 0 or e == space.ep or t == space.etp]


def _cp_values(problem: Problem, space: SearchSpace, tp: int) -> list[int]:
    """Context-parallel degrees: powers of two that split the sequence into 2 cp chunks of at
    least `min_cp_tokens` / 2 tokens and divide the GPUs left by tp, where the framework has
    context parallelism and every layer runs fused attention; and the pin."""
    values = [1]
    if problem.framework.context_parallel and problem.model.fused_attention_only:
        seq, rest = problem.training.seq_len, problem.num_gpus // tp
        values = [c for c in powers_of_two(rest) if rest % c == 0 and seq % (2 * c) == 0
                  and seq // c >= space.min_cp_tokens] or [1]
    if space.max_cp is not None:
        values = [c for c in values if c <= space.max_cp] or [1]
    return _with_pin(values, space.cp)


def _cp_kinds(problem: Problem, space: SearchSpace, tp: int, cp: int) -> list[tuple[int, int]]:
    """(cp_comm index, all-to-all group) pairs for a cp degree: the framework's K/V exchanges
    (or the pinned ones) that can run this model at this tp and cp; p2p alone for cp 1."""
    if cp == 1:
        return [(0, 1)]
    kinds = space.cp_comm or problem.framework.context_parallel or (CpComm.P2P,)
    window = any(layer.sliding_window is not None for layer in problem.model.attention_layers())
    if space.cp_comm is None and CpComm.P2P in kinds and not window:
        # The all-gather moves the ring's bytes with nothing to hide behind and holds the same
        # K/V: where the ring can run, it is never faster (kept if the ring cannot: windows).
        kinds = tuple(k for k in kinds if k is not CpComm.ALL_GATHER)
    node = problem.cluster.nvlink_gpus
    index = np.array([CP_COMM_ORDER.index(k) for k in kinds])
    a2a = np.array([{CpComm.A2A: cp, CpComm.A2A_P2P: default_cp_a2a(cp, tp, node)}.get(k, 1)
                    for k in kinds])
    # The CP rules themselves, so that the search does not carry kinds that cannot run; pinned
    # kinds stay, for the rules to name if they fail.
    bad = (cp_all_to_all_breaks(problem.model, tp=tp, cp=cp, cp_comm=index, cp_a2a=a2a)
           | cp_attention_variant_breaks(problem.model, cp=cp, cp_comm=index))
    keep = ~bad | (space.cp_comm is not None)
    out = [(int(i), int(a)) for i, a, ok in zip(index, a2a, keep) if ok]
    return out or [(int(index[0]), 1)]


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


def degree_tuples(problem: Problem,
                  space: SearchSpace) -> list[tuple[int, int, int, int, int, int]]:
    """Every (tp, cp, pp, dp, vpp, micro_batch) the search considers."""
    gb = problem.training.global_batch
    out = []
    for tp in _tp_values(problem, space):
        for cp in _cp_values(problem, space, tp):
            for pp in _pp_values(problem, space, tp * cp):
                if problem.num_gpus % (tp * cp * pp):
                    continue
                dp = problem.num_gpus // (tp * cp * pp)
                for vpp in _vpp_values(problem, space, pp):
                    out += [(tp, cp, pp, dp, vpp, mb)
                            for mb in _micro_batch_values(space, gb, dp)]
    return out


def generate(problem: Problem, space: SearchSpace) -> list[CandidateGroup]:
    """The search space, grouped by (pp, vpp), before any rule or pin is applied (pinned
    values are added to the domains; `Pin.allows` then masks the rest)."""
    overlap = space.overlaps(problem)
    options = []
    for sp, rc, zero, dp_comm in itertools.product(
            (False, True), RECOMPUTE_ORDER, ZeroStage, space.dp_comm):
        if dp_comm is DpComm.PARAMETER_SERVER and zero is not ZeroStage.NONE:
            continue                   # a parameter server holds whole gradients: no ZeRO
        options.append((sp, RECOMPUTE_ORDER.index(rc), int(zero), DP_COMM_ORDER.index(dp_comm)))
    # The search keeps rule-breaking strategies so it can name the rule that removes them, but
    # not an MoE model without sequence parallelism under TP unless asked (--no-sp): that rule
    # is never the one that decides, and it would double the space.
    moe_needs_sp = problem.model.is_moe and space.sequence_parallel != (False,)
    option_table = np.array(options, dtype=np.int64).reshape(-1, 4)
    # Degrees sharing (tp, pp, dp) share their options, shards and expert pairs: build each
    # such family's cross product in one go.
    families: dict[tuple[int, int, int, int], list[tuple[int, int]]] = {}
    for tp, cp, pp, dp, vpp, mb in degree_tuples(problem, space):
        families.setdefault((tp, cp, pp, dp), []).append((vpp, mb))
    rows: dict[tuple[int, int], list] = {}
    for (tp, cp, pp, dp), chunks in families.items():
        pairs = np.array(_expert_values(problem, space, tp, cp * dp), dtype=np.int64)
        kinds = np.array(_cp_kinds(problem, space, tp, cp), dtype=np.int64)
        chunk_mb = np.array(chunks, dtype=np.int64)
        opts = option_table
        if tp == 1:
            opts = opts[opts[:, 0] == 0]       # sequence parallelism needs tensor parallelism
        elif moe_needs_sp:
            opts = opts[opts[:, 0] == 1]
        blocks = []
        for zero in np.unique(opts[:, 2]):
            zopts = opts[opts[:, 2] == zero]
            shards = np.array(_shard_values(problem, space, tp, dp, int(zero)), dtype=np.int64)
            # Every (vpp and micro-batch, option, shard, expert pair, CP kind) combination.
            d, i, j, k, q = (x.ravel() for x in np.meshgrid(
                np.arange(len(chunk_mb)), np.arange(len(zopts)), np.arange(len(shards)),
                np.arange(len(pairs)), np.arange(len(kinds)), indexing="ij"))
            block = np.empty((len(i), 15), dtype=np.int64)
            block[:, 0], block[:, 1], block[:, 3] = tp, pp, dp
            block[:, 2], block[:, 4] = chunk_mb[d, 0], chunk_mb[d, 1]
            block[:, 5:9] = zopts[i]
            block[:, 9] = shards[j]
            block[:, 10:12] = pairs[k]
            block[:, 12] = cp
            block[:, 13:15] = kinds[q]
            blocks.append(block)
        family = np.concatenate(blocks)
        for vpp in np.unique(family[:, 2]):
            rows.setdefault((pp, int(vpp)), []).append(family[family[:, 2] == vpp])
    groups = []
    for (pp, vpp), blocks in sorted(rows.items()):
        a = np.concatenate(blocks)
        variants = offload_variants(problem, space, pp)
        if len(variants) > 1:   # every row with each variant
            a = np.repeat(a, len(variants), axis=0)
        offload = np.tile(np.array(variants, dtype=float), (len(a) // len(variants), 1))
        cands = Candidates(
            tp=a[:, 0], pp=a[:, 1], vpp=a[:, 2], dp=a[:, 3], mb=a[:, 4], sp=a[:, 5].astype(bool),
            recompute=a[:, 6], zero=a[:, 7], shard=a[:, 9], overlap=np.full(len(a), overlap.overlap_grad_reduce),
            param_gather=np.full(len(a), overlap.overlap_param_gather),
            tp_overlap=np.full(len(a), overlap.tp_comm_overlap),
            fp8_gather=overlap.fp8_param_gather & fp8_param_gather_allowed(problem, a[:, 7]),
            dp_comm=a[:, 8], num_servers=a[:, 3].copy(),
            global_batch=np.full(len(a), problem.training.global_batch), ep=a[:, 10],
            etp=a[:, 11], cp=a[:, 12], cp_comm=a[:, 13], cp_a2a=a[:, 14],
            opt_offload=offload[:, 0], param_offload=offload[:, 1].astype(bool),
            act_offload=offload[:, 2].astype(int))
        groups.append(CandidateGroup(pp=pp, vpp=vpp, cands=cands))
    return groups
