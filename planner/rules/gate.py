"""Feasibility rules: each lives here once, used by the search and by `validate`.

The planner's own rules are here; each framework's rules live in its module
(`planner/frameworks/<name>.py`, `RULES`) and are gathered into `TARGET_CHECKS` below.

Every rule has a vectorised check over `Candidates` (True where a strategy breaks it), which
the search turns into CP-SAT constraints, and an explanation for one strategy: a plain
sentence with the numbers and a concrete fix, which `validate` prints
(`planner.rules.explanations`). The memory rule is checked on evaluated costs; the others
on the degrees alone.

This is the one gate: which rules apply (`rules_in_force`: always those of the framework that
prices the job) is decided here for every command, the search's pre-filters call the rules
(`breaks`), and one strategy is judged by `rule_violations`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from planner.core.candidates import (DEFAULT_MODULES_MASK, MOE_DISPATCHER_ORDER,
                                     PIPELINE_SCHEDULE_ORDER, RANK_ORDER, Candidates)
from planner.rules.explanations import EXPLAIN as PLANNER_EXPLAIN
from planner.core.rules import Rule, TargetRule, any_offload, everywhere
from planner.frameworks import deepspeed, megatron, mindspore, torchtitan
from planner.inputs import profiles
from planner.core.problem import Problem
from planner.inputs.loader import fp8_param_gather_allowed
from planner.schemas.report import Violation
from cost_models.enums import (AttentionKind, CpComm, MicroBatchGroups, MoeDispatcher,
                               PipelineSchedule, Precision, RankOrder)
from cost_models.pipeline import schedule_group, schedule_group_allowed
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
                               "groups it can run (of pp; Megatron-LM: of pp or more)",
    Rule.PIPELINE_SCHEDULE: "the pipeline schedule must be one the framework runs: zbv and "
                            "dualpipev with vpp 2, zero_bubble with vpp 2 or more, dualpipev "
                            "with at least 2 * pp micro-batches",
    Rule.PARAMETER_SERVER_ZERO: "a parameter server needs zero_stage 0",
    Rule.DP_SHARD: "dp_shard must divide dp, with zero_stage 1 or more",
    Rule.EP_DIVIDES_EXPERTS: "ep must divide the routed experts (ep 1 for a dense model)",
    Rule.EXPERT_FOLDING: "etp * ep must divide tp * cp * dp (expert layers fold onto the same "
                         "GPUs)",
    Rule.MOE_SEQUENCE_PARALLEL: "an MoE model with tp > 1 needs sequence parallelism",
    Rule.CP_SEQUENCE: "the sequence must split into 2 * cp load-balanced chunks (and each CP "
                      "rank's share over tp with sequence parallelism)",
    Rule.ATTENTION_KERNEL: "the run's attention kernel computes every layer's attention "
                           "(FlashAttention-2 has no attention sinks)",
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
    Rule.RANK_ORDER_EXPERTS: "rank order tp-cp-ep-pp-dp with pp > 1 needs the expert "
                             "data-parallel size equal to dp (etp * ep = tp * cp)",
    Rule.MOE_FLEX_HARDWARE: "the flex MoE dispatcher (DeepEP, HybridEP) needs NVIDIA Hopper or "
                            "later GPUs over NVLink, and RDMA between nodes",
    Rule.MEMORY_FITS: "the peak stage must fit in GPU memory",
    Rule.HOST_MEMORY_FITS: "what a node's GPUs offload must fit in its host memory",
    Rule.TARGET_PARAMETER_SERVER: "no launch target implements a parameter server",
    Rule.TARGET_EXPERT_PARALLEL: "torchrun (plain PyTorch) has no expert parallelism",
    Rule.TARGET_EXPERT_TP: "etp must be 1 or tp on this launch target",
    Rule.TARGET_CONTEXT_PARALLEL: "torchrun (plain PyTorch) has no context parallelism",
    Rule.TARGET_FP8: "torchrun (plain PyTorch) has no FP8 setting",
    Rule.TARGET_INTERLEAVED: "this target's pipeline runs one chunk per stage (no interleaved "
                             "schedule)",
    Rule.TARGET_RANK_ORDER: "rank order tp-cp-ep-pp-dp only on Megatron-LM "
                            "(--use-tp-pp-dp-mapping)",
    Rule.TARGET_PIPELINE_SCHEDULE: "the zero-bubble pipeline schedules only on torchtitan "
                                   "(pipeline_parallel_schedule)",
    Rule.TARGET_RECOMPUTE_MODULES: "recompute_modules other than core_attn only on Megatron-LM "
                                   "(--recompute-modules)",
    Rule.TARGET_MOE_DISPATCHER: "the flex MoE dispatcher (DeepEP, HybridEP) only on Megatron-LM "
                                "(--moe-token-dispatcher-type flex)",
    Rule.TARGET_BF16_MOMENTS: "bf16 optimizer moments only on Megatron-LM "
                              "(--use-precision-aware-optimizer)",
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
    # layout needs one layer per chunk at least, and so does a pipeline that partitions the
    # layers by itself (DeepSpeed's PipelineModule, one chunk per stage).
    layers = problem.model.num_layers
    if options.explicit_layouts:
        return chunks_without_layers(layers, c.pp, c.vpp)
    uneven = layers % (c.pp * c.vpp) != 0
    if problem.framework.pipeline_partitions:
        uneven &= c.vpp > 1
    return uneven | chunks_without_layers(layers, c.pp, c.vpp)


def _batch_divisible(problem: Problem, c: Candidates, options: RuleOptions) -> np.ndarray:
    # Megatron-LM: global batch must be divisible by micro batch * data-parallel size.
    return c.global_batch % (c.dp * c.mb) != 0


def _interleaved_schedule(problem: Problem, c: Candidates, options: RuleOptions) -> np.ndarray:
    # The interleaved 1F1B needs a pipeline and runs micro-batches in groups of pp; Megatron-LM
    # in groups of N >= pp with a last group of 0 or at least pp (schedules.py), the group a
    # strategy pins or, unpinned, the smallest it accepts; PyTorch's in equal rounds of at
    # least pp (`Candidates.schedule_group`). A pinned group must be one the framework runs.
    groups = problem.framework.micro_batch_groups
    group = c.schedule_group(groups)
    m = c.global_batch // np.maximum(c.dp * c.mb, 1)
    runs = schedule_group_allowed(pp=c.pp, num_micro_batches=m, group=group)
    if groups is not MicroBatchGroups.SMALLEST:
        own = schedule_group(pp=c.pp, num_micro_batches=m, groups=groups)
        runs &= group == own
    return (c.vpp > 1) & ((c.pp < 2) | ~runs)


def _pipeline_schedule(problem: Problem, c: Candidates, options: RuleOptions) -> np.ndarray:
    # torch.distributed.pipelining (schedules.py): ZBVZeroBubble and DualPipeV run exactly two
    # stages per rank ("ZBV requires exactly 2 stages per rank"), DualPipeV at least as many
    # micro-batches as stages, and InterleavedZeroBubble, a multi-stage schedule, at least two
    # stages per rank (torchtitan pipeline_parallel.py); only torchtitan runs them (framework
    # profile). With pp 1 a schedule changes nothing (`rules.ineffective`).
    offered = np.isin(c.pipeline_schedule,
                      [PIPELINE_SCHEDULE_ORDER.index(s)
                       for s in problem.framework.pipeline_schedules])
    index = PIPELINE_SCHEDULE_ORDER.index
    v_shaped = np.isin(c.pipeline_schedule,
                       [index(s) for s in PIPELINE_SCHEDULE_ORDER if s.v_shaped])
    dualpipe = c.pipeline_schedule == index(PipelineSchedule.DUALPIPEV)
    zero_bubble = c.pipeline_schedule == index(PipelineSchedule.ZERO_BUBBLE)
    return (c.pp > 1) & (~offered | (v_shaped & (c.vpp != 2)) | (zero_bubble & (c.vpp < 2))
                         | (dualpipe & (c.num_micro_batches < 2 * c.pp)))


def _parameter_server_zero(problem: Problem, c: Candidates, options: RuleOptions) -> np.ndarray:
    from planner.core.candidates import DP_COMM_ORDER

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


def _attention_kernel(problem: Problem, c: Candidates, options: RuleOptions) -> np.ndarray:
    # Transformer Engine disables FlashAttention for a learnable softmax offset (utils.py
    # @252a4742, "Filter: Softmax type"); PyTorch SDPA has no sinks argument: attention sinks
    # (GPT-OSS) run on cuDNN (flash) or unfused, never on FlashAttention-2.
    return everywhere(c, problem.attention is AttentionKind.FLASH2
                      and problem.model.has_attention_sinks)


def _cp_fused_attention(problem: Problem, c: Candidates, options: RuleOptions) -> np.ndarray:
    # megatron/core/transformer/dot_product_attention.py: "Context parallelism is only
    # supported by TEDotProductAttention!" (the run's kernel must be fused); an Evoformer's
    # pair attention has none.
    fused = problem.attention.fused and not problem.model.has_evoformer
    return (c.cp > 1) & (not fused)


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
    "a2a" or "all_gather" (held for chunked attention too: a local mask the ring's causal
    halves do not describe), and a softmax other than the vanilla one (attention sinks, learnable
    offsets) only with "a2a"."""
    order = list(CpComm)
    layers = list(model.attention_layers())
    window = any(layer.sliding_window is not None or layer.attention_chunk is not None
                 for layer in layers)
    sinks = model.has_attention_sinks
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
        not gpu.runs_recipe(t.fp8_recipe)
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


def _rank_order_experts(problem: Problem, c: Candidates, options: RuleOptions) -> np.ndarray:
    # Megatron-LM megatron/core/parallel_state.py initialize_model_parallel: "When not using
    # pp-last rank ordering, the data parallel size of the attention and moe layers must be
    # the same" (asserted unless pp is 1).
    return (problem.model.is_moe & (c.rank_order == RANK_ORDER.index(RankOrder.TP_CP_EP_PP_DP))
            & (c.pp > 1) & (c.edp != c.dp))


def _flex(c: Candidates) -> np.ndarray:
    """Where a candidate routes its MoE tokens with the flex dispatcher (DeepEP, HybridEP)."""
    return c.dispatcher != MOE_DISPATCHER_ORDER.index(MoeDispatcher.ALLTOALL)


def _moe_flex_hardware(problem: Problem, c: Candidates, options: RuleOptions) -> np.ndarray:
    return problem.model.is_moe & _flex(c) & (not problem.cluster.runs_flex_dispatch)


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
    Rule.PIPELINE_SCHEDULE: _pipeline_schedule,
    Rule.PARAMETER_SERVER_ZERO: _parameter_server_zero,
    Rule.DP_SHARD: _dp_shard,
    Rule.EP_DIVIDES_EXPERTS: _ep_divides_experts,
    Rule.EXPERT_FOLDING: _expert_folding,
    Rule.MOE_SEQUENCE_PARALLEL: _moe_sequence_parallel,
    Rule.CP_SEQUENCE: _cp_sequence,
    Rule.ATTENTION_KERNEL: _attention_kernel,
    Rule.CP_FUSED_ATTENTION: _cp_fused_attention,
    Rule.CP_ALL_TO_ALL: _cp_all_to_all,
    Rule.CP_ATTENTION_VARIANT: _cp_attention_variant,
    Rule.FP8_HARDWARE: _fp8_hardware,
    Rule.FP8_PARAM_GATHER: _fp8_param_gather,
    Rule.OFFLOAD_HOST: _offload_host,
    Rule.OFFLOAD_FRAMEWORK: _offload_framework,
    Rule.PARAM_OFFLOAD_ZERO3: _param_offload_zero3,
    Rule.RANK_ORDER_EXPERTS: _rank_order_experts,
    Rule.MOE_FLEX_HARDWARE: _moe_flex_hardware,
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
    # The targets whose framework profile has no interleaved schedule (interleaved_pipeline):
    # DeepSpeed's pipeline engine, the emitted MindSpore config, a plain torchrun script.
    Rule.TARGET_INTERLEAVED: (
        tuple(t for t in LaunchTarget if not profiles.load(t.framework).interleaved_pipeline),
        lambda p, c: c.vpp > 1),
    Rule.TARGET_FP8: ((LaunchTarget.TORCHRUN,),
                      lambda p, c: np.full(len(c), p.training.precision is Precision.FP8)),
    # The targets whose framework builds its process groups in one order only (rank_orders).
    Rule.TARGET_RANK_ORDER: (
        tuple(t for t in LaunchTarget
              if RankOrder.TP_CP_EP_PP_DP not in profiles.load(t.framework).rank_orders),
        lambda p, c: c.rank_order == RANK_ORDER.index(RankOrder.TP_CP_EP_PP_DP)),
    # The targets whose framework runs 1F1B only (pipeline_schedules): a zero-bubble plan
    # priced for torchtitan has no launch config there.
    Rule.TARGET_PIPELINE_SCHEDULE: (
        tuple(t for t in LaunchTarget
              if len(profiles.load(t.framework).pipeline_schedules) == 1),
        lambda p, c: (c.pp > 1) & (c.pipeline_schedule > 0)),
    # The targets whose framework has no per-module selective recompute (recompute_modules):
    # torchtitan's selective AC is per op or per N layers, MindSpore's select_recompute per
    # operator, DeepSpeed's and plain PyTorch's checkpointing per layer.
    Rule.TARGET_RECOMPUTE_MODULES: (
        tuple(t for t in LaunchTarget if not profiles.load(t.framework).recompute_modules),
        lambda p, c: (c.rc_modules != 0) & (c.rc_modules != DEFAULT_MODULES_MASK)),
    # The targets whose framework profile runs only the all-to-all dispatcher (moe_dispatchers).
    Rule.TARGET_MOE_DISPATCHER: (
        tuple(t for t in LaunchTarget
              if MoeDispatcher.FLEX_DEEPEP not in profiles.load(t.framework).moe_dispatchers),
        lambda p, c: p.model.is_moe & _flex(c)),
    # bf16 Adam moments: Megatron-LM's precision-aware optimizer; the other targets' configs
    # have no such setting.
    Rule.TARGET_BF16_MOMENTS: (
        tuple(t for t in LaunchTarget if t is not LaunchTarget.MEGATRON),
        lambda p, c: np.full(len(c), p.training.bf16_moments)),
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


FIXED_LAYOUT_RULES: dict[Rule, Callable] = {
    rule: r.layouts for rules in FRAMEWORK_RULES.values() for rule, r in rules.items()
    if r.layouts is not None}
"""Rules of frameworks whose pipeline places layers by itself, with the layer counts it runs."""


def degree_violations(problem: Problem, cands: Candidates, options: RuleOptions, *,
                      layers_per_chunk=None) -> dict[Rule, np.ndarray]:
    """For each rule in force (`rules_in_force`), where `cands` break it. `layers_per_chunk`:
    the layer counts every candidate is laid out with, when given (else the framework's own
    split, `costing.layout.framework_layer_counts`)."""
    found = {rule: _check(rule, problem, cands, options)
             for rule in rules_in_force(problem, options)}
    if layers_per_chunk is not None:
        counts = [int(n) for n in layers_per_chunk]
        for rule in FIXED_LAYOUT_RULES.keys() & found.keys():
            runs = FIXED_LAYOUT_RULES[rule]
            found[rule] = np.array([counts not in runs(problem.model.num_layers, int(pp), int(v))
                                    for pp, v in zip(cands.pp, cands.vpp)], dtype=bool)
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
    return not FIXED_LAYOUT_RULES.keys() & set(rules_in_force(problem, options))


MIB = 2**20


def memory_violations(peak_bytes, capacity_bytes: float, *, conservative: bool = False):
    """Where the peak stage (model states, activations and the reserve) exceeds the GPU.

    The search is `conservative`: it compares whole MiB, the peak rounded up and the capacity
    rounded down, so anything it accepts also fits in exact arithmetic.
    """
    if conservative:
        return np.ceil(np.asarray(peak_bytes) / MIB) > math.floor(capacity_bytes / MIB)
    return np.asarray(peak_bytes) > capacity_bytes


EXPLAIN: dict[Rule, Callable[[Problem, Strategy], tuple[str, str]]] = {
    **PLANNER_EXPLAIN,
    **{rule: r.explain for rules in FRAMEWORK_RULES.values() for rule, r in rules.items()}}
"""For each rule, (problem, strategy) -> (message, fix): `validate`'s sentence."""


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
