"""Feasibility rules: each lives here once, used by the search and by `validate`.

The planner's own rules are here; each framework's rules live in its module
(`planner/frameworks/<name>.py`, `RULES`) and are gathered into `TARGET_CHECKS` below.

Every rule has a vectorised check over `Candidates` (True where a strategy breaks it), which
the search turns into CP-SAT constraints, and an explanation for one strategy: a plain
sentence with the numbers and a concrete fix, which `validate` prints. The memory rule is
checked on evaluated costs; the others on the degrees alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from planner.costing.evaluate import Candidates
from planner.feasibility.target_rule import Rule, TargetRule, any_offload, largest_divisor_at_most
from planner.frameworks import deepspeed, megatron, mindspore, profiles, torchtitan
from planner.inputs.loader import Problem, fp8_param_gather_allowed
from planner.schemas.report import Violation
from cost_models.enums import CpComm, Precision, ZeroStage
from planner.schemas.strategy import DpComm, LaunchTarget, Strategy


FRAMEWORK_RULES: dict[LaunchTarget, dict[Rule, TargetRule]] = {
    LaunchTarget.MEGATRON: megatron.RULES,
    LaunchTarget.DEEPSPEED: deepspeed.RULES,
    LaunchTarget.TORCHTITAN: torchtitan.RULES,
    LaunchTarget.MINDSPORE: mindspore.RULES,
}
"""Each framework's own rules, kept in its module (planner/frameworks/<name>.py)."""

SUMMARY: dict[Rule, str] = {
    Rule.GPU_COUNT: "dp * tp * cp * pp must equal the number of GPUs",
    Rule.TP_DIVIDES_HEADS: "tp must divide every head count it splits",
    Rule.TP_WITHIN_NODE: "tp must stay inside a node",
    Rule.PP_DIVIDES_LAYERS: "pp * vpp must divide num_layers",
    Rule.STAGE_LAYOUT: "layers_per_stage must give every pipeline chunk its layers",
    Rule.BATCH_DIVISIBLE: "dp * micro_batch must divide global_batch",
    Rule.INTERLEAVED_SCHEDULE: "the interleaved schedule needs pp > 1 and micro-batches in "
                               "groups of pp",
    Rule.PARAMETER_SERVER_ZERO: "a parameter server needs zero_stage 0",
    Rule.DP_SHARD: "dp_shard must divide dp, with zero_stage 1 or more",
    Rule.EP_DIVIDES_EXPERTS: "ep must divide the routed experts (ep 1 for a dense model)",
    Rule.EXPERT_FOLDING: "etp * ep must divide tp * cp * dp (expert layers fold onto the same "
                         "GPUs)",
    Rule.MOE_SEQUENCE_PARALLEL: "an MoE model with tp > 1 needs sequence parallelism",
    Rule.CP_SEQUENCE: "the sequence must split into 2 * cp load-balanced chunks (and each CP "
                      "rank's share over tp with sequence parallelism)",
    Rule.CP_FUSED_ATTENTION: "context parallelism needs fused (flash) attention in every layer",
    Rule.CP_ALL_TO_ALL: "all-to-all context parallelism must divide the heads each TP rank holds",
    Rule.CP_ATTENTION_VARIANT: "sliding windows need cp_comm all_gather or a2a, attention sinks "
                               "a2a",
    Rule.FP8_HARDWARE: "precision fp8 needs a GPU that runs the FP8 recipe",
    Rule.FP8_PARAM_GATHER: "FP8 parameters need sharded states (distributed optimizer, ZeRO, "
                           "FSDP) and a recipe the framework gathers in FP8",
    Rule.OFFLOAD_HOST: "CPU offload needs the cluster's host block (host link and memory)",
    Rule.OFFLOAD_FRAMEWORK: "offload only what the framework keeps in host memory",
    Rule.PARAM_OFFLOAD_ZERO3: "param_offload needs zero_stage 3",
    Rule.MEMORY_FITS: "the peak stage must fit in GPU memory",
    Rule.HOST_MEMORY_FITS: "what a node's GPUs offload must fit in its host memory",
    Rule.TARGET_PARAMETER_SERVER: "no launch target implements a parameter server",
    Rule.TARGET_EXPERT_PARALLEL: "torchrun (plain PyTorch) has no expert parallelism",
    Rule.TARGET_EXPERT_TP: "etp must be 1 or tp on this launch target",
    Rule.TARGET_CONTEXT_PARALLEL: "torchrun (plain PyTorch) has no context parallelism",
    Rule.TARGET_FP8: "torchrun (plain PyTorch) has no FP8 setting",
}
SUMMARY.update({rule: r.summary for rules in FRAMEWORK_RULES.values() for rule, r in rules.items()})
"""One line per rule, for messages that name rules without a particular strategy."""


@dataclass(frozen=True)
class RuleOptions:
    """Rules the user may relax."""

    cross_node_tp: bool = False
    """Allow tensor-parallel groups that span nodes (priced on the inter-node link)."""
    targets: tuple[LaunchTarget, ...] = ()
    """Launch targets whose own rules apply too (a plan to emit, a config to validate), besides
    the framework that prices the job, whose rules always apply (`rule_targets`)."""
    explicit_layouts: bool = False
    """The strategies carry their layer counts per chunk (a searched plan, a layers_per_stage):
    pp * vpp need not divide the layers."""


# --------------------------------------------------------------------------- vectorised checks

def _gpu_count(problem: Problem, c: Candidates, options: RuleOptions) -> np.ndarray:
    return c.num_gpus != problem.num_gpus


def _tp_divides_heads(problem: Problem, c: Candidates, options: RuleOptions) -> np.ndarray:
    # Megatron-LM shards attention by heads (and GQA by key/value groups): every head count of
    # every block tensor parallelism splits must be divisible by tp.
    bad = np.zeros(len(c), dtype=bool)
    for heads in problem.model.tp_head_counts:
        bad |= heads % c.tp != 0
    return bad


def _tp_within_node(problem: Problem, c: Candidates, options: RuleOptions) -> np.ndarray:
    if options.cross_node_tp:
        return np.zeros(len(c), dtype=bool)
    return c.tp > problem.cluster.nvlink_gpus


def chunks_without_layers(num_layers, pp, vpp=1):
    """Where pp * vpp pipeline chunks outnumber the layers, so that some chunk would hold none:
    every chunk needs a layer, whatever the layout. Integers or arrays."""
    return num_layers < pp * vpp


def _pp_divides_layers(problem: Problem, c: Candidates, options: RuleOptions) -> np.ndarray:
    # An even split (Megatron-LM's default) needs num_layers divisible by pp * vpp; an explicit
    # layout needs one layer per chunk at least.
    if options.explicit_layouts:
        return chunks_without_layers(problem.model.num_layers, c.pp, c.vpp)
    return problem.model.num_layers % (c.pp * c.vpp) != 0


def _batch_divisible(problem: Problem, c: Candidates, options: RuleOptions) -> np.ndarray:
    # Megatron-LM: global batch must be divisible by micro batch * data-parallel size.
    return c.global_batch % (c.dp * c.mb) != 0


def _interleaved_schedule(problem: Problem, c: Candidates, options: RuleOptions) -> np.ndarray:
    # Megatron-LM's interleaved 1F1B needs a pipeline and runs micro-batches in groups of pp.
    m = c.global_batch // np.maximum(c.dp * c.mb, 1)
    return (c.vpp > 1) & ((c.pp < 2) | (m % c.pp != 0))


def _parameter_server_zero(problem: Problem, c: Candidates, options: RuleOptions) -> np.ndarray:
    from planner.costing.evaluate import DP_COMM_ORDER

    server = DP_COMM_ORDER.index(DpComm.PARAMETER_SERVER)
    return (c.dp_comm == server) & (c.zero != 0)


def _dp_shard(problem: Problem, c: Candidates, options: RuleOptions) -> np.ndarray:
    # HSDP shards over dp_shard ranks and replicates over dp / dp_shard: it must divide dp, and
    # means nothing without ZeRO (torchtitan parallel_dims.py: dp_replicate * dp_shard = dp).
    hybrid = c.shard != c.dp
    return (c.dp % c.shard != 0) | (hybrid & (c.zero == 0))


def _ep_divides_experts(problem: Problem, c: Candidates, options: RuleOptions) -> np.ndarray:
    # Megatron-LM arguments.py: "num_experts must be divisible by expert_model_parallel_size";
    # expert parallelism needs --num-experts.
    return problem.model.num_experts % c.ep != 0


def _expert_folding(problem: Problem, c: Candidates, options: RuleOptions) -> np.ndarray:
    # Megatron-Core parallel_state.initialize_model_parallel: the world size must be divisible by
    # expert_tensor_parallel_size * expert_model_parallel_size * pipeline_model_parallel_size,
    # i.e. etp * ep divides tp * dp (Liu et al. 2025, arXiv:2504.14960, Sec. 3.2).
    return (c.tp * c.cp * c.dp) % (c.ep * c.etp) != 0


def _moe_sequence_parallel(problem: Problem, c: Candidates, options: RuleOptions) -> np.ndarray:
    # Megatron-Core moe_layer.py: "During training, performance may degrade if MoE and tensor
    # parallelism are enabled without also enabling sequence parallelism" is raised as an error
    # at the first forward; the token dispatcher routes each TP rank's sequence shard.
    return problem.model.is_moe & (c.tp > 1) & ~c.sp


def _cp_sequence(problem: Problem, c: Candidates, options: RuleOptions) -> np.ndarray:
    # Megatron-LM arguments.py: "seq-length should be a multiple of 2 * context-parallel-size"
    # (the load-balanced causal chunks); with sequence parallelism each CP rank's s / cp tokens
    # are split again over tp (megatron/core/utils.py get_batch_on_this_cp_rank, then the SP
    # scatter).
    s = problem.training.seq_len
    local = s // np.maximum(c.cp, 1)
    return (c.cp > 1) & ((s % (2 * c.cp) != 0) | (c.sp & (local % c.tp != 0)))


def _cp_fused_attention(problem: Problem, c: Candidates, options: RuleOptions) -> np.ndarray:
    # megatron/core/transformer/dot_product_attention.py: "Context parallelism is only
    # supported by TEDotProductAttention!"; an Evoformer's pair attention has none.
    return (c.cp > 1) & (not problem.model.fused_attention_only)


def cp_all_to_all_breaks(model, *, tp, cp, cp_comm, cp_a2a) -> np.ndarray:
    """Where the all-to-all of a2a / a2a+p2p context parallelism cannot split the heads.

    Transformer Engine context_parallel.py (AttnFuncWithCPAndQKVOA2A): "The number of attention
    heads needs to be divisible by CP size!", for the query and the key/value heads of each TP
    rank; the hierarchical form's inner group likewise, and it must split cp into two real
    levels (Megatron-LM: cp == prod(--hierarchical-context-parallel-sizes)). Arrays over
    candidates; `cp_comm` indexes CP_COMM_ORDER (tuple(CpComm))."""
    order = list(CpComm)
    a2a_only = cp_comm == order.index(CpComm.A2A)
    hierarchical = cp_comm == order.index(CpComm.A2A_P2P)
    a2a = np.where(a2a_only, cp, np.where(hierarchical, cp_a2a, 1))
    bad = np.zeros(np.shape(cp_comm), dtype=bool)
    for heads in model.context_parallel_heads:     # tp itself: tp_divides_heads
        bad |= (heads // np.maximum(tp, 1)) % a2a != 0
    bad |= hierarchical & ((cp_a2a < 2) | (cp_a2a >= cp) | (cp % np.maximum(cp_a2a, 1) != 0))
    return (cp > 1) & bad


def cp_attention_variant_breaks(model, *, cp, cp_comm) -> np.ndarray:
    """Where the K/V exchange cannot run the model's attention: Transformer Engine
    context_parallel.py (attn_forward_func_with_cp) runs sliding-window attention only with
    "a2a" or "all_gather", and a softmax other than the vanilla one (attention sinks, learnable
    offsets) only with "a2a"."""
    order = list(CpComm)
    layers = list(model.attention_layers())
    window = any(layer.sliding_window is not None for layer in layers)
    sinks = any(layer.attention_sinks for layer in layers)
    ring = (cp_comm == order.index(CpComm.P2P)) | (cp_comm == order.index(CpComm.A2A_P2P))
    return (cp > 1) & ((window & ring) | (sinks & (cp_comm != order.index(CpComm.A2A))))


def _cp_all_to_all(problem: Problem, c: Candidates, options: RuleOptions) -> np.ndarray:
    return cp_all_to_all_breaks(problem.model, tp=c.tp, cp=c.cp, cp_comm=c.cp_comm,
                                cp_a2a=c.cp_a2a)


def _cp_attention_variant(problem: Problem, c: Candidates,
                          options: RuleOptions) -> np.ndarray:
    return cp_attention_variant_breaks(problem.model, cp=c.cp, cp_comm=c.cp_comm)


def fp8_hardware_breaks(problem: Problem) -> bool:
    """Precision fp8 with a recipe this GPU has no kernels for (its preset's
    efficiency.fp8_gemm_efficiency lists the recipes it runs; none without FP8 tensor cores)."""
    t, gpu = problem.training, problem.cluster.gpu
    return t.precision is Precision.FP8 and (
        gpu.peak_tflops.fp8 is None
        or t.fp8_recipe not in problem.cluster.efficiency.fp8_gemm_efficiency)


def _fp8_hardware(problem: Problem, c: Candidates, options: RuleOptions) -> np.ndarray:
    return np.full(len(c), fp8_hardware_breaks(problem))


def _fp8_param_gather(problem: Problem, c: Candidates, options: RuleOptions) -> np.ndarray:
    fp8 = problem.training.precision is Precision.FP8
    return fp8 & c.fp8_gather & ~fp8_param_gather_allowed(problem, c.zero)


def _offload_host(problem: Problem, c: Candidates, options: RuleOptions) -> np.ndarray:
    return any_offload(c) & (problem.cluster.host is None)


def _stage_layers(problem: Problem, c: Candidates) -> tuple[np.ndarray, np.ndarray]:
    """(fewest, most) repeated layers a pipeline stage holds in an even split."""
    layers = problem.model.num_layers
    return layers // c.pp, -(-layers // c.pp)


def _offload_framework(problem: Problem, c: Candidates, options: RuleOptions) -> np.ndarray:
    # What the framework profile's `offload` block says it can keep on the host.
    o = problem.framework.offload
    if o is None:
        return any_offload(c)
    optimizer = c.opt_offload > 0
    bad = optimizer & ((not o.optimizer) | (c.zero < o.optimizer_min_zero))
    bad |= optimizer & (c.opt_offload < 1) & (not o.optimizer_fraction)
    bad |= c.param_offload & (not o.params)
    fewest, most = _stage_layers(problem, c)
    act = c.act_offload > 0
    if o.activations is None:
        bad |= act
    elif o.activations == "partial":     # at least one layer stays (Megatron-LM: N < num_layers)
        bad |= act & (c.act_offload >= fewest)
    else:                                # every checkpoint, so full recompute
        bad |= act & ((c.act_offload < most) | (c.recompute != 2))
    return bad


def _param_offload_zero3(problem: Problem, c: Candidates, options: RuleOptions) -> np.ndarray:
    return c.param_offload & (c.zero != 3)


def host_memory_violations(host_bytes, problem: Problem) -> np.ndarray:
    """Where the GPUs of a node offload more than its host memory (each GPU's fullest stage;
    `Evaluation.host_bytes`, against an equal share of the node's host memory)."""
    capacity = problem.cluster.host_bytes_per_gpu
    if capacity is None:
        return np.zeros(np.shape(host_bytes), dtype=bool)
    return np.asarray(host_bytes) > capacity


DEGREE_CHECKS: dict[Rule, Callable[[Problem, Candidates, RuleOptions], np.ndarray]] = {
    Rule.GPU_COUNT: _gpu_count,
    Rule.TP_DIVIDES_HEADS: _tp_divides_heads,
    Rule.TP_WITHIN_NODE: _tp_within_node,
    Rule.PP_DIVIDES_LAYERS: _pp_divides_layers,
    Rule.BATCH_DIVISIBLE: _batch_divisible,
    Rule.INTERLEAVED_SCHEDULE: _interleaved_schedule,
    Rule.PARAMETER_SERVER_ZERO: _parameter_server_zero,
    Rule.DP_SHARD: _dp_shard,
    Rule.EP_DIVIDES_EXPERTS: _ep_divides_experts,
    Rule.EXPERT_FOLDING: _expert_folding,
    Rule.MOE_SEQUENCE_PARALLEL: _moe_sequence_parallel,
    Rule.CP_SEQUENCE: _cp_sequence,
    Rule.CP_FUSED_ATTENTION: _cp_fused_attention,
    Rule.CP_ALL_TO_ALL: _cp_all_to_all,
    Rule.CP_ATTENTION_VARIANT: _cp_attention_variant,
    Rule.FP8_HARDWARE: _fp8_hardware,
    Rule.FP8_PARAM_GATHER: _fp8_param_gather,
    Rule.OFFLOAD_HOST: _offload_host,
    Rule.OFFLOAD_FRAMEWORK: _offload_framework,
    Rule.PARAM_OFFLOAD_ZERO3: _param_offload_zero3,
}
"""Rules decided by the degrees alone, in the order `validate` reports them."""


TARGET_CHECKS: dict[Rule, tuple[tuple[LaunchTarget, ...], Callable[[Problem, Candidates],
                                                                    np.ndarray]]] = {
    Rule.TARGET_PARAMETER_SERVER: (
        tuple(t for t in LaunchTarget if t is not LaunchTarget.TORCHRUN),
        lambda p, c: c.dp_comm == 1),
    # The targets whose framework profile has no expert parallelism (expert_parallel).
    Rule.TARGET_EXPERT_PARALLEL: (
        tuple(t for t in LaunchTarget if not profiles.load(t.framework).expert_parallel),
        lambda p, c: c.ep > 1),
    Rule.TARGET_CONTEXT_PARALLEL: ((LaunchTarget.TORCHRUN,), lambda p, c: c.cp > 1),
    Rule.TARGET_FP8: ((LaunchTarget.TORCHRUN,),
                      lambda p, c: np.full(len(c), p.training.precision is Precision.FP8)),
    # DeepSpeed MoE experts are whole unless enable_expert_tensor_parallelism shards them like
    # the model's TP (deepspeed/moe/layer.py); MindSpore's experts follow model_parallel.
    Rule.TARGET_EXPERT_TP: ((LaunchTarget.DEEPSPEED, LaunchTarget.MINDSPORE,
                             LaunchTarget.MINDFORMERS),
                            lambda p, c: p.model.is_moe & (c.etp != 1) & (c.etp != c.tp)),
    # A framework's rules bind every target it runs (MindSpore runs MindFormers' YAML too).
    **{rule: (tuple(t for t in LaunchTarget if t.framework == target.value), r.check)
       for target, rules in FRAMEWORK_RULES.items() for rule, r in rules.items()},
}
"""Rules of launch targets: (targets, where candidates break it)."""


def rule_targets(problem: Problem, options: RuleOptions) -> tuple[LaunchTarget, ...]:
    """The launch targets whose rules a strategy must keep: those asked for and, always, the
    framework that prices the job (a plan its own framework cannot run is no plan). Every
    command judges a strategy through this, so `plan`, `validate` and the rest agree."""
    return tuple(dict.fromkeys(options.targets + (LaunchTarget(problem.framework.name),)))


def rules_in_force(problem: Problem, options: RuleOptions) -> tuple[Rule, ...]:
    """Every rule that applies: the degree rules and the rules of `rule_targets`, in the order
    `validate` reports them."""
    targets = set(rule_targets(problem, options))
    return tuple(DEGREE_CHECKS) + tuple(rule for rule, (bound, _) in TARGET_CHECKS.items()
                                        if targets & set(bound))


def _check(rule: Rule, problem: Problem, cands: Candidates, options: RuleOptions) -> np.ndarray:
    if rule in DEGREE_CHECKS:
        return DEGREE_CHECKS[rule](problem, cands, options)
    return np.asarray(TARGET_CHECKS[rule][1](problem, cands), dtype=bool)


EVEN_LAYOUT_RULES = frozenset(rule for rules in FRAMEWORK_RULES.values()
                              for rule, r in rules.items() if r.even_layout)
"""Rules that refuse pipeline chunks holding different numbers of layers."""


def degree_violations(problem: Problem, cands: Candidates, options: RuleOptions, *,
                      layers_per_chunk=None) -> dict[Rule, np.ndarray]:
    """For each rule in force (`rules_in_force`), where `cands` break it. `layers_per_chunk`:
    the layer counts every candidate is laid out with, when given (else the even split)."""
    found = {rule: _check(rule, problem, cands, options)
             for rule in rules_in_force(problem, options)}
    if layers_per_chunk is not None:
        uneven = len(set(layers_per_chunk)) > 1
        for rule in EVEN_LAYOUT_RULES & set(found):
            found[rule] = np.full(len(cands), uneven)
    return found


def breaks(problem: Problem, cands: Candidates, options: RuleOptions, rules) -> np.ndarray:
    """Where `cands` break any of `rules` that is in force: the search's pre-filters call the
    rules through this, never a copy of them."""
    bad = np.zeros(len(cands), dtype=bool)
    for rule in set(rules) & set(rules_in_force(problem, options)):
        bad |= _check(rule, problem, cands, options)
    return bad


def balanced_layouts_allowed(problem: Problem, options: RuleOptions) -> bool:
    """Whether plans may place different numbers of layers on their pipeline chunks (the search
    then balances them): no rule in force refuses it."""
    return not EVEN_LAYOUT_RULES & set(rules_in_force(problem, options))


MIB = 2**20


def memory_violations(peak_bytes, capacity_bytes: float, *, conservative: bool = False):
    """Where the peak stage (model states, activations and the reserve) exceeds the GPU.

    The search is `conservative`: it compares whole MiB, the peak rounded up and the capacity
    rounded down, so anything it accepts also fits in exact arithmetic.
    """
    if conservative:
        return np.ceil(np.asarray(peak_bytes) / MIB) > math.floor(capacity_bytes / MIB)
    return np.asarray(peak_bytes) > capacity_bytes


# --------------------------------------------------------------------------- explanations


def _with_cp(s: Strategy, outer: str) -> tuple[str, str, int]:
    """('tp * cp * pp', '8 * 4 * 2', 64) for tp, cp and an `outer` degree; cp left out at 1."""
    names = ("tp", "cp", outer) if s.cp > 1 else ("tp", outer)
    values = [getattr(s, n) for n in names]
    return " * ".join(names), " * ".join(str(v) for v in values), math.prod(values)


def _explain_gpu_count(problem: Problem, s: Strategy) -> tuple[str, str]:
    n = problem.num_gpus
    names, values, model_parallel = _with_cp(s, "pp")
    message = (f"dp * {names} ({s.dp} * {values} = {s.dp * model_parallel}) must equal the "
               f"number of GPUs ({n})")
    if n % model_parallel == 0:
        fix = f"use dp {n // model_parallel}"
    else:
        fix = f"choose {names} that divides {n}, then dp = {n} / ({names})"
    return message, fix


def _explain_tp_divides_heads(problem: Problem, s: Strategy) -> tuple[str, str]:
    counts = problem.model.tp_head_counts
    bad = [c for c in counts if c % s.tp]
    names = _head_count_names(problem)
    which = ", ".join(f"{names.get(c, 'a head count')} ({c})" for c in bad)
    message = f"tp ({s.tp}) must divide {which}: tensor parallelism splits attention by heads"
    tp = largest_divisor_at_most(math.gcd(*counts), s.tp)
    fix = f"use tp {tp}"
    if problem.num_gpus % (tp * s.pp) == 0:
        fix += f" (dp {problem.num_gpus // (tp * s.pp)})"
    return message, fix


def _head_count_names(problem: Problem) -> dict[int, str]:
    names: dict[int, str] = {}
    for b in problem.model.blocks:
        if b.kind == "transformer":
            names.setdefault(b.num_heads, "num_heads")
            names.setdefault(b.kv_heads, "num_kv_heads")
        elif b.kind == "evoformer":
            names.setdefault(b.num_pair_heads, "num_pair_heads")
            names.setdefault(b.num_msa_heads, "num_msa_heads")
    return names


def _explain_tp_within_node(problem: Problem, s: Strategy) -> tuple[str, str]:
    node = problem.cluster.nvlink_gpus
    domain = problem.cluster.nvlink_domain is not None
    message = (f"tp ({s.tp}) exceeds {'nvlink_domain' if domain else 'gpus_per_node'} "
               f"({node}): tensor parallelism must stay inside "
               f"{'its NVLink domain' if domain else 'a node'}")
    heads = math.gcd(s.tp, *problem.model.tp_head_counts)    # a tp the heads allow too
    if s.tp % node == 0 and heads % node == 0:
        fix = f"use tp {node} and pp {s.pp * s.tp // node}"
    else:
        fix = f"use tp {largest_divisor_at_most(heads, node)}"
    return message, fix + " (or allow it with --cross-node-tp)"


def _explain_pp_divides_layers(problem: Problem, s: Strategy) -> tuple[str, str]:
    layers = problem.model.num_layers
    chunks = s.pp * s.vpp
    what = f"pp * vpp ({s.pp} * {s.vpp} = {chunks})" if s.vpp > 1 else f"pp ({s.pp})"
    if chunks > layers:
        message = f"{what} exceeds num_layers ({layers}): every pipeline chunk needs a layer"
    else:
        message = f"num_layers ({layers}) must be divisible by {what} for an even split"

    def nearest(vpp: int) -> int | None:
        # The nearest pp that splits the layers evenly and, with the same tp, divides the GPUs.
        options = [p for p in range(1, layers + 1) if layers % (p * vpp) == 0
                   and problem.num_gpus % (s.tp * p) == 0 and (vpp == 1 or p > 1)]
        return min(options, key=lambda p: (abs(p - s.pp), p)) if options else None

    pp = nearest(s.vpp)
    if pp is not None and pp != s.pp:
        fix = f"use pp {pp} (dp {problem.num_gpus // (s.tp * pp)})"
    else:
        pp = nearest(1) or 1
        fix = "use vpp 1" + (f" and pp {pp} (dp {problem.num_gpus // (s.tp * pp)})"
                             if pp != s.pp else "")
    if chunks <= layers:
        fix += ", or give layers_per_stage"
    return message, fix


def _explain_batch_divisible(problem: Problem, s: Strategy) -> tuple[str, str]:
    per = s.dp * s.micro_batch
    message = (f"global_batch ({s.global_batch}) must be divisible by dp * micro_batch "
               f"({s.dp} * {s.micro_batch} = {per})")
    if s.global_batch % s.dp == 0:
        mb = largest_divisor_at_most(s.global_batch // s.dp, s.micro_batch)
        fix = f"use micro_batch {mb}"
    else:
        lower = s.global_batch // per * per
        fix = f"use global_batch {lower + per}" + (f" or {lower}" if lower else "")
    return message, fix


def _explain_interleaved_schedule(problem: Problem, s: Strategy) -> tuple[str, str]:
    if s.pp < 2:
        return (f"the interleaved schedule (vpp {s.vpp}) needs a pipeline, but pp is {s.pp}",
                "use vpp 1")
    m = s.global_batch // (s.dp * s.micro_batch)
    return (f"with the interleaved schedule (vpp {s.vpp}) the number of micro-batches ({m}) "
            f"must be divisible by pp ({s.pp})",
            "use vpp 1, or a micro_batch or global_batch that makes global_batch / (dp * "
            f"micro_batch) a multiple of {s.pp}")


def _explain_parameter_server_zero(problem: Problem, s: Strategy) -> tuple[str, str]:
    return (f"dp_comm parameter_server keeps whole gradients on the servers and cannot be "
            f"combined with zero_stage {int(s.zero_stage)}",
            "use zero_stage 0, or dp_comm all_reduce")


def _explain_dp_shard(problem: Problem, s: Strategy) -> tuple[str, str]:
    if s.dp_shard is not None and s.dp % s.dp_shard:
        return (f"dp_shard ({s.dp_shard}) must divide dp ({s.dp}): HSDP replicates dp / dp_shard "
                f"shard groups", f"use dp_shard {largest_divisor_at_most(s.dp, s.dp_shard)}")
    return (f"dp_shard {s.dp_shard} with zero_stage 0: there is nothing to shard",
            "use zero_stage 1 or more, or leave dp_shard out")


EXPLAIN: dict[Rule, Callable[[Problem, Strategy], tuple[str, str]]] = {
    Rule.GPU_COUNT: _explain_gpu_count,
    Rule.TP_DIVIDES_HEADS: _explain_tp_divides_heads,
    Rule.TP_WITHIN_NODE: _explain_tp_within_node,
    Rule.PP_DIVIDES_LAYERS: _explain_pp_divides_layers,
    Rule.BATCH_DIVISIBLE: _explain_batch_divisible,
    Rule.INTERLEAVED_SCHEDULE: _explain_interleaved_schedule,
    Rule.PARAMETER_SERVER_ZERO: _explain_parameter_server_zero,
    Rule.DP_SHARD: _explain_dp_shard,
}


def _explain_target_parameter_server(problem: Problem, s: Strategy) -> tuple[str, str]:
    return ("dp_comm parameter_server has no launch target: every framework here exchanges "
            "gradients with collectives", "use dp_comm all_reduce")


EXPLAIN[Rule.TARGET_PARAMETER_SERVER] = _explain_target_parameter_server


def _explain_ep_divides_experts(problem: Problem, s: Strategy) -> tuple[str, str]:
    experts = problem.model.num_experts
    if experts == 1:
        return (f"ep {s.ep} on a dense model: expert parallelism splits the routed experts of "
                f"MoE layers, and this model has none", "use ep 1")
    return (f"ep ({s.ep}) must divide the routed experts ({experts}): each expert-parallel rank "
            f"holds experts / ep of them", f"use ep {largest_divisor_at_most(experts, s.ep)}")


def _explain_expert_folding(problem: Problem, s: Strategy) -> tuple[str, str]:
    etp = s.expert_tp
    names, values, folded = _with_cp(s, "dp")
    message = (f"etp * ep ({etp} * {s.ep} = {etp * s.ep}) must divide {names} ({values} "
               f"= {folded}): the expert layers use etp x ep x edp of the same GPUs")
    if folded % etp:
        return message, f"use etp {math.gcd(folded, etp)}"
    room = math.gcd(folded // etp, problem.model.num_experts)
    return message, f"use ep {largest_divisor_at_most(room, s.ep)}"


def _explain_moe_sequence_parallel(problem: Problem, s: Strategy) -> tuple[str, str]:
    return (f"sequence_parallel false with tp {s.tp} on an MoE model: Megatron-Core's token "
            f"dispatcher routes each TP rank's sequence shard and refuses to train without "
            f"sequence parallelism", "use sequence_parallel true")


def _explain_cp_sequence(problem: Problem, s: Strategy) -> tuple[str, str]:
    seq = problem.training.seq_len
    if seq % (2 * s.cp):
        message = (f"seq_len ({seq}) must be divisible by 2 * cp ({2 * s.cp}): causal context "
                   f"parallelism deals each rank two of 2 * cp equal chunks")
    else:
        message = (f"each CP rank's {seq // s.cp} tokens must split over tp ({s.tp}) with "
                   f"sequence parallelism")
    good = [c for c in range(s.cp, 0, -1)
            if seq % (2 * c) == 0 and (not s.sequence_parallel or (seq // c) % s.tp == 0)]
    fix = f"use cp {good[0]}" if good and good[0] > 1 else "use cp 1"
    step = math.lcm(2 * s.cp, s.cp * s.tp if s.sequence_parallel else 1)
    return message, fix + f", or a seq_len that is a multiple of {step}"


def _explain_cp_fused_attention(problem: Problem, s: Strategy) -> tuple[str, str]:
    if any(b.kind == "evoformer" for b in problem.model.blocks):
        return (f"cp {s.cp} on a model with Evoformer blocks: their pair attention has no "
                f"context parallelism", "use cp 1")
    return (f"cp {s.cp} with unfused attention: context parallelism runs inside fused "
            f"attention kernels (Megatron-LM: TEDotProductAttention only)",
            "set attention: flash on the model's layers, or use cp 1")


def _explain_cp_all_to_all(problem: Problem, s: Strategy) -> tuple[str, str]:
    if s.cp_comm is CpComm.A2A_P2P and not (1 < s.context_a2a < s.cp
                                            and s.cp % s.context_a2a == 0):
        return (f"cp_a2a ({s.context_a2a}) must divide cp ({s.cp}) and lie strictly between 1 "
                f"and cp: a2a+p2p runs an all-to-all inside groups of cp_a2a and a ring across "
                f"them", "use cp_comm p2p or a2a" if s.cp < 4 else f"use cp_a2a {s.cp // 2}")
    a2a = s.cp if s.cp_comm is CpComm.A2A else s.context_a2a
    heads = problem.model.context_parallel_heads
    per_rank = [h // s.tp for h in heads]
    bad = [h for h in per_rank if h % a2a]
    message = (f"the all-to-all over {a2a} CP ranks splits each TP rank's attention heads "
               f"({', '.join(str(h) for h in per_rank)} with tp {s.tp}), and {bad[0]} is not "
               f"divisible by {a2a}")
    return message, "use cp_comm p2p (ring attention has no head bound), or a smaller cp"


def _explain_cp_attention_variant(problem: Problem, s: Strategy) -> tuple[str, str]:
    layers = list(problem.model.attention_layers())
    if any(layer.attention_sinks for layer in layers) and s.cp_comm is not CpComm.A2A:
        return (f"cp_comm {s.cp_comm.value} with attention sinks: Transformer Engine's context "
                f"parallelism supports a softmax with sinks only with a2a", "use cp_comm a2a")
    return (f"cp_comm {s.cp_comm.value} with sliding-window layers: Transformer Engine's ring "
            f"attention has no sliding window", "use cp_comm all_gather or a2a")


def _explain_target_context_parallel(problem: Problem, s: Strategy) -> tuple[str, str]:
    return (f"cp {s.cp}: a torchrun script (plain PyTorch DDP/FSDP) has no context parallelism",
            "use cp 1, or emit for megatron, torchtitan or deepspeed")


def _explain_fp8_hardware(problem: Problem, s: Strategy) -> tuple[str, str]:
    gpu, t = problem.cluster.gpu, problem.training
    runs = tuple(problem.cluster.efficiency.fp8_gemm_efficiency)
    if gpu.peak_tflops.fp8 is None or not runs:
        return (f"precision fp8: {gpu.name} has no FP8 tensor cores", "use precision bf16")
    return (f"fp8_recipe {t.fp8_recipe.value}: {gpu.name} does not run it (it runs "
            f"{', '.join(r.value for r in runs)})", f"use fp8_recipe {runs[0].value}")


def _explain_fp8_param_gather(problem: Problem, s: Strategy) -> tuple[str, str]:
    fp8 = problem.framework.fp8
    recipes = fp8.param_gather_recipes if fp8 is not None else ()
    if s.zero_stage < ZeroStage.OPTIMIZER_STATES:
        return ("fp8_param_gather with zero_stage 0: FP8 parameters are gathered from sharded "
                "states (Megatron-LM: --fp8-param-gather needs --use-distributed-optimizer)",
                "use zero_stage 1 or more, or fp8_param_gather false")
    recipe = problem.training.fp8_recipe
    return (f"fp8_param_gather with fp8_recipe {recipe.value}: {problem.framework.name} gathers "
            f"FP8 parameters only with {', '.join(r.value for r in recipes) or 'no recipe'}",
            "use fp8_param_gather false")


def _explain_target_fp8(problem: Problem, s: Strategy) -> tuple[str, str]:
    return ("precision fp8: a torchrun script (plain PyTorch) has no FP8 setting",
            "use precision bf16, or emit for megatron or torchtitan")


def _explain_target_expert_parallel(problem: Problem, s: Strategy) -> tuple[str, str]:
    return (f"ep {s.ep}: a torchrun script (plain PyTorch DDP/FSDP) has no expert parallelism",
            "use ep 1, or emit for megatron or torchtitan")


def _explain_target_expert_tp(problem: Problem, s: Strategy) -> tuple[str, str]:
    return (f"etp {s.expert_tp} with tp {s.tp}: DeepSpeed and MindSpore shard experts either "
            f"not at all or like the dense layers", f"use etp 1 or etp {s.tp}")


def _explain_offload_host(problem: Problem, s: Strategy) -> tuple[str, str]:
    return (f"CPU offload on {problem.cluster.name}: its cluster file has no host block (host "
            f"link and memory), so host copies cannot be priced",
            "add host: {link, link_gb_per_s, link_fraction, memory_gib, memory_gb_per_s, "
            "memory_fraction} to the cluster file (see `planner clusters`), or offload nothing")


def _explain_offload_framework(problem: Problem, s: Strategy) -> tuple[str, str]:
    fw = problem.framework
    o = fw.offload
    if o is None:
        return (f"CPU offload: {fw.description} keeps everything on the GPU",
                "offload nothing, or use a framework that offloads (megatron, deepspeed, "
                "torchtitan)")
    if s.optimizer_offload and not o.optimizer:
        return (f"optimizer_offload: {fw.description} has no optimizer offload",
                "use optimizer_offload 0")
    if s.optimizer_offload and s.zero_stage < o.optimizer_min_zero:
        return (f"optimizer_offload with zero_stage {int(s.zero_stage)}: {fw.description} "
                f"offloads the optimizer from ZeRO stage {o.optimizer_min_zero} up",
                f"use zero_stage {o.optimizer_min_zero} or more")
    if 0 < s.optimizer_offload < 1 and not o.optimizer_fraction:
        return (f"optimizer_offload {s.optimizer_offload:g}: {fw.description} offloads all of "
                f"the optimizer states or none", "use optimizer_offload 1")
    if s.param_offload and not o.params:
        return (f"param_offload: {fw.description} keeps the parameters on the GPU",
                "use param_offload false")
    layers = problem.model.num_layers
    n = s.activation_offload_layers
    if o.activations is None:
        return (f"activation_offload_layers {n}: {fw.description} has no activation offload",
                "use activation_offload_layers 0")
    if o.activations == "partial":
        keep = layers // s.pp - 1
        return (f"activation_offload_layers {n}: {fw.description} keeps at least one of a "
                f"stage's {layers // s.pp} layers on the GPU",
                f"use activation_offload_layers {keep}" if keep > 0 else
                "use activation_offload_layers 0")
    return (f"activation_offload_layers {n}: {fw.description} offloads the checkpoint of "
            f"every layer, with recompute full", f"use recompute full and "
            f"activation_offload_layers {-(-layers // s.pp)}")


def _explain_param_offload_zero3(problem: Problem, s: Strategy) -> tuple[str, str]:
    return (f"param_offload with zero_stage {int(s.zero_stage)}: only ZeRO-3 / FSDP shards the "
            f"parameters it would keep in host memory", "use zero_stage 3")


EXPLAIN.update({
    Rule.OFFLOAD_HOST: _explain_offload_host,
    Rule.OFFLOAD_FRAMEWORK: _explain_offload_framework,
    Rule.PARAM_OFFLOAD_ZERO3: _explain_param_offload_zero3,
    Rule.EP_DIVIDES_EXPERTS: _explain_ep_divides_experts,
    Rule.EXPERT_FOLDING: _explain_expert_folding,
    Rule.MOE_SEQUENCE_PARALLEL: _explain_moe_sequence_parallel,
    Rule.CP_SEQUENCE: _explain_cp_sequence,
    Rule.CP_FUSED_ATTENTION: _explain_cp_fused_attention,
    Rule.CP_ALL_TO_ALL: _explain_cp_all_to_all,
    Rule.TARGET_CONTEXT_PARALLEL: _explain_target_context_parallel,
    Rule.CP_ATTENTION_VARIANT: _explain_cp_attention_variant,
    Rule.TARGET_EXPERT_PARALLEL: _explain_target_expert_parallel,
    Rule.TARGET_EXPERT_TP: _explain_target_expert_tp,
    Rule.FP8_HARDWARE: _explain_fp8_hardware,
    Rule.FP8_PARAM_GATHER: _explain_fp8_param_gather,
    Rule.TARGET_FP8: _explain_target_fp8,
})
EXPLAIN.update({rule: r.explain for rules in FRAMEWORK_RULES.values()
                for rule, r in rules.items()})


def violation(rule: Rule, problem: Problem, strategy: Strategy) -> Violation:
    message, fix = EXPLAIN[rule](problem, strategy)
    return Violation(rule=rule.value, message=message, fix=fix)


def rule_violations(problem: Problem, strategy: Strategy,
                    options: RuleOptions = RuleOptions()) -> list[Violation]:
    """Every rule in force that one strategy breaks, memory aside (`validate` adds it): the
    degree rules and those of `rule_targets` on its degrees, and its own layer counts when it
    gives them (a layers_per_stage: then pp * vpp need not divide the layers)."""
    counts = strategy.layers_per_stage
    if counts is not None:
        options = replace(options, explicit_layouts=True)
    cands = Candidates.from_strategy(strategy, problem.framework.defaults)
    broken = degree_violations(problem, cands, options, layers_per_chunk=counts)
    found = [violation(rule, problem, strategy) for rule, bad in broken.items() if bool(bad[0])]
    layout = stage_layout_violation(problem, strategy)
    return found + ([layout] if layout is not None else [])


def laid_out(problem: Problem, strategy: Strategy) -> bool:
    """Whether the strategy can be laid out on the model, to be evaluated: every chunk gets a
    layer, and its layers_per_stage (if any) matches the model."""
    return (not chunks_without_layers(problem.model.num_layers, strategy.pp, strategy.vpp)
            and stage_layout_violation(problem, strategy) is None)


def stage_layout_violation(problem: Problem, s: Strategy) -> Violation | None:
    """A hand-written layers_per_stage must list pp * vpp positive counts summing to the
    model's layers."""
    counts = s.layers_per_stage
    if counts is None:
        return None
    layers, chunks = problem.model.num_layers, s.pp * s.vpp
    if len(counts) != chunks:
        message = (f"layers_per_stage has {len(counts)} entries but pp * vpp is {chunks}: "
                   f"one count per pipeline chunk")
    elif sum(counts) != layers:
        message = (f"layers_per_stage sums to {sum(counts)} but the model has {layers} layers")
    else:
        return None
    from planner.costing.layout import even_layer_counts

    return Violation(rule=Rule.STAGE_LAYOUT.value, message=message,
                     fix=f"use layers_per_stage {even_layer_counts(layers, chunks)}")
