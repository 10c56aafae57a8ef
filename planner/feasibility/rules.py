"""Feasibility rules: each lives here once, used by the search and by `validate`.

Every rule has a vectorised check over `Candidates` (True where a strategy breaks it), which
the search turns into CP-SAT constraints, and an explanation for one strategy: a plain
sentence with the numbers and a concrete fix, which `validate` prints. The memory rule is
checked on evaluated costs; the others on the degrees alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Callable

import numpy as np

from planner.costing.evaluate import Candidates
from planner.inputs.loader import Problem
from planner.schemas.report import Violation
from planner.schemas.strategy import DpComm, LaunchTarget, Strategy


class Rule(str, Enum):
    GPU_COUNT = "gpu_count"
    TP_DIVIDES_HEADS = "tp_divides_heads"
    TP_WITHIN_NODE = "tp_within_node"
    PP_DIVIDES_LAYERS = "pp_divides_layers"
    STAGE_LAYOUT = "stage_layout"
    BATCH_DIVISIBLE = "batch_divisible"
    INTERLEAVED_SCHEDULE = "interleaved_schedule"
    PARAMETER_SERVER_ZERO = "parameter_server_zero"
    DP_SHARD = "dp_shard"
    MEMORY_FITS = "memory_fits"
    # Rules of one launch target: what that framework cannot run or refuses.
    TARGET_PARAMETER_SERVER = "target_parameter_server"
    DEEPSPEED_PIPELINE_ZERO = "deepspeed_pipeline_zero"
    DEEPSPEED_TP_ZERO3 = "deepspeed_tp_zero3"
    DEEPSPEED_INTERLEAVED = "deepspeed_interleaved"
    DEEPSPEED_SELECTIVE_RECOMPUTE = "deepspeed_selective_recompute"
    DEEPSPEED_SEQUENCE_PARALLEL = "deepspeed_sequence_parallel"
    DEEPSPEED_UNEVEN_LAYOUT = "deepspeed_uneven_layout"
    DEEPSPEED_HSDP = "deepspeed_hsdp"
    TORCHTITAN_ZERO1 = "torchtitan_zero1"
    TORCHTITAN_FP16 = "torchtitan_fp16"
    TORCHTITAN_SEQUENCE_PARALLEL = "torchtitan_sequence_parallel"
    TORCHTITAN_SEQ_LEN = "torchtitan_seq_len"
    TORCHTITAN_MICRO_BATCHES = "torchtitan_micro_batches"
    MINDSPORE_POWER_OF_TWO = "mindspore_power_of_two"
    MINDSPORE_DEVICE_NUM = "mindspore_device_num"
    MINDSPORE_MICRO_BATCHES = "mindspore_micro_batches"
    MINDSPORE_INTERLEAVED = "mindspore_interleaved"
    MINDSPORE_ZERO = "mindspore_zero"
    MINDSPORE_HSDP = "mindspore_hsdp"


SUMMARY: dict[Rule, str] = {
    Rule.GPU_COUNT: "dp * tp * pp must equal the number of GPUs",
    Rule.TP_DIVIDES_HEADS: "tp must divide every head count it splits",
    Rule.TP_WITHIN_NODE: "tp must stay inside a node",
    Rule.PP_DIVIDES_LAYERS: "pp * vpp must divide num_layers",
    Rule.STAGE_LAYOUT: "layers_per_stage must give every pipeline chunk its layers",
    Rule.BATCH_DIVISIBLE: "dp * micro_batch must divide global_batch",
    Rule.INTERLEAVED_SCHEDULE: "the interleaved schedule needs pp > 1 and micro-batches in "
                               "groups of pp",
    Rule.PARAMETER_SERVER_ZERO: "a parameter server needs zero_stage 0",
    Rule.DP_SHARD: "dp_shard must divide dp, with zero_stage 1 or more",
    Rule.MEMORY_FITS: "the peak stage must fit in GPU memory",
    Rule.TARGET_PARAMETER_SERVER: "no launch target implements a parameter server",
    Rule.DEEPSPEED_PIPELINE_ZERO: "DeepSpeed's pipeline engine allows ZeRO stage 0 or 1 only",
    Rule.DEEPSPEED_TP_ZERO3: "DeepSpeed AutoTP does not support ZeRO stage 3",
    Rule.DEEPSPEED_INTERLEAVED: "DeepSpeed's pipeline engine has no interleaved schedule",
    Rule.DEEPSPEED_SELECTIVE_RECOMPUTE: "DeepSpeed checkpoints whole layers, not selectively",
    Rule.DEEPSPEED_SEQUENCE_PARALLEL: "DeepSpeed AutoTP has no Megatron sequence parallelism",
    Rule.DEEPSPEED_UNEVEN_LAYOUT: "DeepSpeed's config cannot place layers unevenly",
    Rule.DEEPSPEED_HSDP: "DeepSpeed shards within groups (MiCS) only with ZeRO stage 3",
    Rule.TORCHTITAN_ZERO1: "torchtitan shards with FSDP2: ZeRO stage 0, 2 or 3, not 1",
    Rule.TORCHTITAN_FP16: "torchtitan trains in bf16 or fp32, not fp16 (use --precision bf16)",
    Rule.TORCHTITAN_SEQUENCE_PARALLEL: "torchtitan applies sequence parallelism with tp > 1",
    Rule.TORCHTITAN_SEQ_LEN: "torchtitan's sequence parallelism needs seq_len divisible by tp",
    Rule.TORCHTITAN_MICRO_BATCHES: "PyTorch's pipeline schedules need as many micro-batches as "
                                   "stages",
    Rule.MINDSPORE_POWER_OF_TWO: "MindSpore needs tp and pp to be powers of two",
    Rule.MINDSPORE_DEVICE_NUM: "MindSpore's device_num must be 1, 2, 4 or a multiple of 8",
    Rule.MINDSPORE_MICRO_BATCHES: "MindSpore needs at least as many micro-batches as stages",
    Rule.MINDSPORE_INTERLEAVED: "the emitted MindSpore config has no interleaved pipeline",
    Rule.MINDSPORE_ZERO: "MindSpore's parallel optimizer is ZeRO stage 1",
    Rule.MINDSPORE_HSDP: "the emitted MindSpore config shards over all data-parallel ranks",
}
"""One line per rule, for messages that name rules without a particular strategy."""


@dataclass(frozen=True)
class RuleOptions:
    """Rules the user may relax."""

    cross_node_tp: bool = False
    """Allow tensor-parallel groups that span nodes (priced on the inter-node link)."""
    targets: tuple[LaunchTarget, ...] = ()
    """Launch targets whose own rules apply too (a plan to emit, a config to validate)."""
    explicit_layouts: bool = False
    """The strategies carry their layer counts per chunk (a searched plan, a layers_per_stage):
    pp * vpp need not divide the layers."""


# --------------------------------------------------------------------------- vectorised checks

def _gpu_count(problem: Problem, c: Candidates, options: RuleOptions) -> np.ndarray:
    return c.dp * c.tp * c.pp != problem.num_gpus


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
    return c.tp > problem.cluster.gpus_per_node


def _pp_divides_layers(problem: Problem, c: Candidates, options: RuleOptions) -> np.ndarray:
    # An even split (Megatron-LM's default) needs num_layers divisible by pp * vpp; an explicit
    # layout needs one layer per chunk at least.
    if options.explicit_layouts:
        return problem.model.num_layers < c.pp * c.vpp
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


DEGREE_CHECKS: dict[Rule, Callable[[Problem, Candidates, RuleOptions], np.ndarray]] = {
    Rule.GPU_COUNT: _gpu_count,
    Rule.TP_DIVIDES_HEADS: _tp_divides_heads,
    Rule.TP_WITHIN_NODE: _tp_within_node,
    Rule.PP_DIVIDES_LAYERS: _pp_divides_layers,
    Rule.BATCH_DIVISIBLE: _batch_divisible,
    Rule.INTERLEAVED_SCHEDULE: _interleaved_schedule,
    Rule.PARAMETER_SERVER_ZERO: _parameter_server_zero,
    Rule.DP_SHARD: _dp_shard,
}
"""Rules decided by the degrees alone, in the order `validate` reports them."""


def _num_micro_batches(c: Candidates) -> np.ndarray:
    return c.global_batch // np.maximum(c.dp * c.mb, 1)


def _is_power_of_two(values) -> np.ndarray:
    values = np.asarray(values)
    return (values & (values - 1)) == 0


def _everywhere(problem: Problem, c: Candidates, flag: bool) -> np.ndarray:
    return np.full(len(c), flag)


_T = LaunchTarget
_ALL_TARGETS = tuple(LaunchTarget)
TARGET_CHECKS: dict[Rule, tuple[tuple[LaunchTarget, ...], Callable[[Problem, Candidates],
                                                                    np.ndarray]]] = {
    Rule.TARGET_PARAMETER_SERVER: (
        tuple(t for t in _ALL_TARGETS if t is not _T.TORCHRUN),
        lambda p, c: c.dp_comm == 1),
    # deepspeed/runtime/pipe/engine.py: "ZeRO-2 and ZeRO-3 are incompatible with pipeline
    # parallelism".
    Rule.DEEPSPEED_PIPELINE_ZERO: ((_T.DEEPSPEED,), lambda p, c: (c.pp > 1) & (c.zero >= 2)),
    # DeepSpeed docs, config-json "tensor_parallel": AutoTP supports ZeRO stages 0, 1 and 2.
    Rule.DEEPSPEED_TP_ZERO3: ((_T.DEEPSPEED,), lambda p, c: (c.tp > 1) & (c.zero == 3)),
    Rule.DEEPSPEED_INTERLEAVED: ((_T.DEEPSPEED,), lambda p, c: c.vpp > 1),
    Rule.DEEPSPEED_SELECTIVE_RECOMPUTE: ((_T.DEEPSPEED,), lambda p, c: c.recompute == 1),
    Rule.DEEPSPEED_SEQUENCE_PARALLEL: ((_T.DEEPSPEED,), lambda p, c: c.sp),
    # PipelineModule(partition_method="uniform") is all the emitted JSON can ask for.
    Rule.DEEPSPEED_UNEVEN_LAYOUT: ((_T.DEEPSPEED,),
                                   lambda p, c: p.model.num_layers % (c.pp * c.vpp) != 0),
    # DeepSpeed MiCS (mics_shard_size) is a ZeRO-3 feature (runtime/zero/mics.py).
    Rule.DEEPSPEED_HSDP: ((_T.DEEPSPEED,), lambda p, c: (c.shard != c.dp) & (c.zero != 3)),
    Rule.TORCHTITAN_ZERO1: ((_T.TORCHTITAN,), lambda p, c: c.zero == 1),
    Rule.TORCHTITAN_FP16: ((_T.TORCHTITAN,), lambda p, c: _everywhere(
        p, c, p.training.precision.value == "fp16")),
    Rule.TORCHTITAN_SEQUENCE_PARALLEL: ((_T.TORCHTITAN,), lambda p, c: (c.tp > 1) & ~c.sp),
    Rule.TORCHTITAN_SEQ_LEN: ((_T.TORCHTITAN,), lambda p, c: p.training.seq_len % c.tp != 0),
    # torch.distributed.pipelining PipelineScheduleSingle: "Number of microbatches (m) must be
    # greater than or equal to the number of stages (p)".
    Rule.TORCHTITAN_MICRO_BATCHES: ((_T.TORCHTITAN,),
                                    lambda p, c: (c.pp > 1) & (_num_micro_batches(c) < c.pp)),
    # MindSpore operator_info.cc: shard strategy values must be powers of two ("Invalid
    # Strategy value it is not the power of 2"; newer releases check only on power-of-two
    # device counts). The planner's own rule for tp and pp, as the user asked.
    Rule.MINDSPORE_POWER_OF_TWO: ((_T.MINDSPORE,), lambda p, c: ~(_is_power_of_two(c.tp)
                                                                 & _is_power_of_two(c.pp))),
    # MindSpore device_manager.cc: device_num must be divisible by 8, or equal to 1, 2 or 4.
    Rule.MINDSPORE_DEVICE_NUM: ((_T.MINDSPORE,), lambda p, c: _everywhere(
        p, c, p.num_gpus % 8 != 0 and p.num_gpus not in (1, 2, 4))),
    # MindFormers TransformerOpParallelConfig: micro_batch_num >= pipeline_stage.
    Rule.MINDSPORE_MICRO_BATCHES: ((_T.MINDSPORE,),
                                   lambda p, c: (c.pp > 1) & (_num_micro_batches(c) < c.pp)),
    Rule.MINDSPORE_INTERLEAVED: ((_T.MINDSPORE,), lambda p, c: c.vpp > 1),
    Rule.MINDSPORE_ZERO: ((_T.MINDSPORE,), lambda p, c: c.zero >= 2),
    Rule.MINDSPORE_HSDP: ((_T.MINDSPORE,), lambda p, c: c.shard != c.dp),
}
"""Rules of launch targets: (targets, where candidates break it)."""


def degree_violations(problem: Problem, cands: Candidates,
                      options: RuleOptions) -> dict[Rule, np.ndarray]:
    """For each degree rule, and each rule of the requested targets, where `cands` break it."""
    found = {rule: check(problem, cands, options) for rule, check in DEGREE_CHECKS.items()}
    for rule, (targets, check) in TARGET_CHECKS.items():
        if set(targets) & set(options.targets):
            found[rule] = np.asarray(check(problem, cands), dtype=bool)
    return found


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

def _largest_divisor_at_most(n: int, limit: int) -> int:
    return max(d for d in range(1, min(n, limit) + 1) if n % d == 0)


def _explain_gpu_count(problem: Problem, s: Strategy) -> tuple[str, str]:
    n = problem.num_gpus
    product = s.dp * s.tp * s.pp
    message = (f"dp * tp * pp ({s.dp} * {s.tp} * {s.pp} = {product}) must equal the number of "
               f"GPUs ({n})")
    if n % (s.tp * s.pp) == 0:
        fix = f"use dp {n // (s.tp * s.pp)}"
    else:
        fix = f"choose tp * pp that divides {n}, then dp = {n} / (tp * pp)"
    return message, fix


def _explain_tp_divides_heads(problem: Problem, s: Strategy) -> tuple[str, str]:
    counts = problem.model.tp_head_counts
    bad = [c for c in counts if c % s.tp]
    names = _head_count_names(problem)
    which = ", ".join(f"{names.get(c, 'a head count')} ({c})" for c in bad)
    message = f"tp ({s.tp}) must divide {which}: tensor parallelism splits attention by heads"
    tp = _largest_divisor_at_most(math.gcd(*counts), s.tp)
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
    node = problem.cluster.gpus_per_node
    message = (f"tp ({s.tp}) exceeds gpus_per_node ({node}): tensor parallelism must stay "
               f"inside a node")
    if s.tp % node == 0:
        fix = f"use tp {node} and pp {s.pp * s.tp // node}"
    else:
        fix = f"use tp {_largest_divisor_at_most(s.tp, node)}"
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
        mb = _largest_divisor_at_most(s.global_batch // s.dp, s.micro_batch)
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
                f"shard groups", f"use dp_shard {_largest_divisor_at_most(s.dp, s.dp_shard)}")
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


def _explain_target(rule: Rule):
    """Explanations of the target rules: (message, fix) from the strategy."""
    def explain(problem: Problem, s: Strategy) -> tuple[str, str]:
        z = int(s.zero_stage)
        m = s.global_batch // (s.dp * s.micro_batch)
        n = problem.num_gpus
        texts = {
            Rule.TARGET_PARAMETER_SERVER: (
                "dp_comm parameter_server has no launch target: every framework here "
                "exchanges gradients with collectives", "use dp_comm all_reduce"),
            Rule.DEEPSPEED_PIPELINE_ZERO: (
                f"zero_stage {z} with pp {s.pp}: DeepSpeed refuses it (\"ZeRO-2 and ZeRO-3 are "
                "incompatible with pipeline parallelism\")",
                "use zero_stage 1, or pp 1 with more data parallelism"),
            Rule.DEEPSPEED_TP_ZERO3: (
                f"zero_stage 3 with tp {s.tp}: DeepSpeed AutoTP supports ZeRO stages 0, 1 and 2",
                "use zero_stage 2, or tp 1"),
            Rule.DEEPSPEED_INTERLEAVED: (
                f"vpp {s.vpp}: DeepSpeed's pipeline engine runs one chunk per stage",
                "use vpp 1"),
            Rule.DEEPSPEED_SELECTIVE_RECOMPUTE: (
                "recompute selective: DeepSpeed activation checkpointing recomputes whole "
                "layers", "use recompute full, or none"),
            Rule.DEEPSPEED_SEQUENCE_PARALLEL: (
                "sequence_parallel: DeepSpeed AutoTP keeps activations whole on every tensor-"
                "parallel rank", "use sequence_parallel false"),
            Rule.DEEPSPEED_UNEVEN_LAYOUT: (
                f"pp {s.pp} does not split {problem.model.num_layers} layers evenly: DeepSpeed's "
                "pipeline partitions layers in code (partition_method), which its config "
                "cannot set", "use a pp that divides the layers"),
            Rule.DEEPSPEED_HSDP: (
                f"dp_shard {s.dp_shard} with zero_stage {z}: DeepSpeed shards within groups "
                "(MiCS, mics_shard_size) only with ZeRO stage 3",
                "use zero_stage 3, or leave dp_shard out"),
            Rule.TORCHTITAN_ZERO1: (
                "zero_stage 1: torchtitan shards with FSDP2, which shards gradients too",
                "use zero_stage 2 (fsdp_reshard_after_forward never) or 3"),
            Rule.TORCHTITAN_FP16: (
                "precision fp16: torchtitan's mixed_precision_param is bfloat16 or float32",
                "use precision bf16"),
            Rule.TORCHTITAN_SEQUENCE_PARALLEL: (
                f"sequence_parallel false with tp {s.tp}: torchtitan always shards activations "
                "along the sequence with tensor parallelism", "use sequence_parallel true"),
            Rule.TORCHTITAN_SEQ_LEN: (
                f"seq_len ({problem.training.seq_len}) must be divisible by tp ({s.tp}) for "
                "torchtitan's sequence parallelism",
                f"use tp {_largest_divisor_at_most(problem.training.seq_len, s.tp)}"),
            Rule.TORCHTITAN_MICRO_BATCHES: (
                f"{m} micro-batches per step are fewer than the {s.pp} pipeline stages: "
                "PyTorch's pipeline schedule refuses it",
                f"use micro_batch {max(1, s.global_batch // (s.dp * s.pp))} or fewer stages"),
            Rule.MINDSPORE_POWER_OF_TWO: (
                f"tp ({s.tp}) and pp ({s.pp}) must be powers of two for MindSpore: it refuses "
                "other shard strategies (\"the value of strategy must be the power of 2\")",
                "use powers of two for tp and pp"),
            Rule.MINDSPORE_DEVICE_NUM: (
                f"device_num ({n}) must be 1, 2, 4 or a multiple of 8 for MindSpore",
                f"use {max(8, n // 8 * 8)} devices"),
            Rule.MINDSPORE_MICRO_BATCHES: (
                f"micro_batch_num ({m}) must be at least pipeline_stage ({s.pp}) for MindSpore",
                f"use micro_batch {max(1, s.global_batch // (s.dp * s.pp))} or fewer stages"),
            Rule.MINDSPORE_INTERLEAVED: (
                f"vpp {s.vpp}: the emitted MindSpore config runs one chunk per stage",
                "use vpp 1"),
            Rule.MINDSPORE_HSDP: (
                f"dp_shard {s.dp_shard}: the emitted MindSpore config shards the optimizer over "
                "every data-parallel rank", "leave dp_shard out"),
            Rule.MINDSPORE_ZERO: (
                f"zero_stage {z}: MindSpore's parallel optimizer (enable_parallel_optimizer) "
                "shards optimizer states, ZeRO stage 1", "use zero_stage 1"),
        }
        return texts[rule]
    return explain


def violation(rule: Rule, problem: Problem, strategy: Strategy) -> Violation:
    explain = EXPLAIN.get(rule) or _explain_target(rule)
    message, fix = explain(problem, strategy)
    return Violation(rule=rule.value, message=message, fix=fix)


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
