"""What a framework's own rule is made of, and the names of every rule.

A framework module (`planner/frameworks/<name>.py`) lists the rules of that framework as
`RULES: dict[Rule, TargetRule]`; `planner.rules.gate` gathers them, so the search and
`validate` apply the same ones. This module imports nothing of the planner's costing, so the
framework modules can use it without a cycle.
"""

from __future__ import annotations

from enum import Enum
from typing import Callable, NamedTuple

import numpy as np

from cost_models.enums import AttentionKind, CpComm, Fp8Recipe, Precision


class Rule(str, Enum):
    GPU_COUNT = "gpu_count"
    TP_DIVIDES_HEADS = "tp_divides_heads"
    TP_WITHIN_NODE = "tp_within_node"
    PP_DIVIDES_LAYERS = "pp_divides_layers"
    STAGE_LAYOUT = "stage_layout"
    BATCH_DIVISIBLE = "batch_divisible"
    INTERLEAVED_SCHEDULE = "interleaved_schedule"
    PIPELINE_SCHEDULE = "pipeline_schedule"
    PARAMETER_SERVER_ZERO = "parameter_server_zero"
    DP_SHARD = "dp_shard"
    EP_DIVIDES_EXPERTS = "ep_divides_experts"
    EXPERT_FOLDING = "expert_folding"
    MOE_SEQUENCE_PARALLEL = "moe_sequence_parallel"
    CP_SEQUENCE = "cp_sequence"
    ATTENTION_KERNEL = "attention_kernel"
    CP_FUSED_ATTENTION = "cp_fused_attention"
    CP_ALL_TO_ALL = "cp_all_to_all"
    CP_ATTENTION_VARIANT = "cp_attention_variant"
    FP8_HARDWARE = "fp8_hardware"
    FP8_PARAM_GATHER = "fp8_param_gather"
    OFFLOAD_HOST = "offload_host"
    OFFLOAD_FRAMEWORK = "offload_framework"
    PARAM_OFFLOAD_ZERO3 = "param_offload_zero3"
    RANK_ORDER_EXPERTS = "rank_order_experts"
    MOE_FLEX_HARDWARE = "moe_flex_hardware"
    MEMORY_FITS = "memory_fits"
    HOST_MEMORY_FITS = "host_memory_fits"
    # Rules of one launch target: what that framework cannot run or refuses.
    TARGET_PARAMETER_SERVER = "target_parameter_server"
    TARGET_EXPERT_PARALLEL = "target_expert_parallel"
    TARGET_EXPERT_TP = "target_expert_tp"
    TARGET_CONTEXT_PARALLEL = "target_context_parallel"
    TARGET_FP8 = "target_fp8"
    TARGET_INTERLEAVED = "target_interleaved"
    TARGET_RANK_ORDER = "target_rank_order"
    TARGET_PIPELINE_SCHEDULE = "target_pipeline_schedule"
    TARGET_RECOMPUTE_MODULES = "target_recompute_modules"
    TARGET_MOE_DISPATCHER = "target_moe_dispatcher"
    TARGET_BF16_MOMENTS = "target_bf16_moments"
    MEGATRON_RECOMPUTE_MODULES = "megatron_recompute_modules"
    MEGATRON_FP8 = "megatron_fp8"
    DEEPSPEED_FP8 = "deepspeed_fp8"
    TORCHTITAN_FP8 = "torchtitan_fp8"
    MINDSPORE_FP8 = "mindspore_fp8"
    MEGATRON_MOE_BIAS_ETP = "megatron_moe_bias_etp"
    MEGATRON_BF16_MOMENTS = "megatron_bf16_moments"
    MEGATRON_CUDA_GRAPHS = "megatron_cuda_graphs"
    MEGATRON_OFFLOAD = "megatron_offload"
    DEEPSPEED_OFFLOAD = "deepspeed_offload"
    TORCHTITAN_OFFLOAD = "torchtitan_offload"
    DEEPSPEED_PIPELINE_ZERO = "deepspeed_pipeline_zero"
    DEEPSPEED_TP_ZERO3 = "deepspeed_tp_zero3"
    DEEPSPEED_SELECTIVE_RECOMPUTE = "deepspeed_selective_recompute"
    DEEPSPEED_SEQUENCE_PARALLEL = "deepspeed_sequence_parallel"
    DEEPSPEED_UNEVEN_LAYOUT = "deepspeed_uneven_layout"
    DEEPSPEED_HSDP = "deepspeed_hsdp"
    DEEPSPEED_EXPERT_PARALLEL = "deepspeed_expert_parallel"
    TORCHTITAN_ZERO1 = "torchtitan_zero1"
    TORCHTITAN_FP16 = "torchtitan_fp16"
    TORCHTITAN_SEQUENCE_PARALLEL = "torchtitan_sequence_parallel"
    TORCHTITAN_SEQ_LEN = "torchtitan_seq_len"
    TORCHTITAN_MICRO_BATCHES = "torchtitan_micro_batches"
    TORCHTITAN_EXPERT_PARALLEL = "torchtitan_expert_parallel"
    TORCHTITAN_DDP = "torchtitan_ddp"
    MINDSPORE_POWER_OF_TWO = "mindspore_power_of_two"
    MINDSPORE_DEVICE_NUM = "mindspore_device_num"
    MINDSPORE_MICRO_BATCHES = "mindspore_micro_batches"
    MINDSPORE_ZERO = "mindspore_zero"
    MINDSPORE_HSDP = "mindspore_hsdp"
    MINDSPORE_EXPERT_PARALLEL = "mindspore_expert_parallel"
    TORCHTITAN_CONTEXT_PARALLEL = "torchtitan_context_parallel"
    DEEPSPEED_CONTEXT_PARALLEL = "deepspeed_context_parallel"
    MINDSPORE_CONTEXT_PARALLEL = "mindspore_context_parallel"


class TargetRule(NamedTuple):
    """One rule of one framework: a line naming it, where candidates break it (vectorised over
    `Candidates`), and the sentence and fix `validate` prints for one strategy."""

    summary: str
    check: Callable
    """(problem, candidates) -> bool array, True where the framework refuses the strategy."""
    explain: Callable
    """(problem, strategy) -> (message, fix)."""
    layouts: Callable | None = None
    """(num_layers, pp, vpp) -> the only layer counts per chunk the framework runs, where its
    pipeline places layers by itself: a strategy that gives other counts breaks the rule
    (`planner.rules.gate.degree_violations`), and the search balances no layouts of its own."""


def num_micro_batches(c) -> np.ndarray:
    return c.global_batch // np.maximum(c.dp * c.mb, 1)


def is_power_of_two(values) -> np.ndarray:
    values = np.asarray(values)
    return (values & (values - 1)) == 0


def everywhere(c, flag: bool) -> np.ndarray:
    return np.full(len(c), flag)


def largest_divisor_at_most(n: int, limit: int) -> int:
    return max(d for d in range(1, max(1, min(n, limit)) + 1) if n % d == 0)


def context_parallel_rule(name: str, supported: tuple[CpComm, ...]) -> TargetRule:
    """A framework's rule that cp > 1 uses one of the K/V exchanges it implements (its
    profile's `context_parallel`)."""
    allowed = [list(CpComm).index(k) for k in supported]
    ways = " or ".join(k.value for k in supported)

    def explain(problem, s):
        if not supported:
            return (f"cp {s.cp}: {name} has no context parallelism", "use cp 1")
        return (f"cp_comm {s.cp_comm.value}: {name} runs context parallelism only as {ways}",
                f"use cp_comm {supported[0].value}")

    return TargetRule(f"{name} runs context parallelism only as {ways}",
                      lambda p, c: (c.cp > 1) & ~np.isin(c.cp_comm, allowed), explain)


def _fp8_extra_breaks(problem, name: str, fp8) -> tuple[str, str] | None:
    """Why the framework cannot run what the run puts in FP8 beyond the linear layers, or
    keeps out of it (training.fp8_attention, fp8_output_layer, bf16_first/last_layers), with
    its recipe: (message, fix), or None. `name`, `fp8`: the framework and its profile."""
    t = problem.training
    if t.precision is not Precision.FP8:
        return None
    recipe = t.fp8_recipe
    if t.fp8_attention:
        allowed = fp8.attention_recipes if fp8 is not None else ()
        if not allowed:
            return (f"fp8_attention: {name} has no FP8 attention (its FP8 covers linear "
                    f"layers only)", "use fp8_attention false")
        if recipe not in allowed:
            return (f"fp8_attention with fp8_recipe {recipe.value}: {name} runs FP8 attention "
                    f"only with {', '.join(r.value for r in allowed)}",
                    f"use fp8_recipe {allowed[0].value}, or fp8_attention false")
        if problem.attention is not AttentionKind.FLASH:
            return (f"fp8_attention with attention {problem.attention.value}: FP8 attention is "
                    f"a fused kernel (Transformer Engine's cuDNN attention)",
                    "use attention flash, or fp8_attention false")
    if t.fp8_output_layer:
        allowed = fp8.output_layer_recipes if fp8 is not None else ()
        if recipe not in allowed:
            only = (f"only with {', '.join(r.value for r in allowed)}" if allowed
                    else "never (it stays bf16)")
            return (f"fp8_output_layer with fp8_recipe {recipe.value}: {name} runs the output "
                    f"layer in FP8 {only}",
                    f"use fp8_recipe {allowed[0].value}, or fp8_output_layer false" if allowed
                    else "use fp8_output_layer false")
    if t.bf16_first_layers or t.bf16_last_layers:
        allowed = fp8.bf16_layers_recipes if fp8 is not None else ()
        if recipe not in allowed:
            only = (f"only with {', '.join(r.value for r in allowed)}" if allowed
                    else "not at all")
            return (f"bf16_first_layers / bf16_last_layers with fp8_recipe {recipe.value}: "
                    f"{name} keeps layers out of FP8 {only}",
                    f"use fp8_recipe {allowed[0].value}, or no bf16 layers" if allowed
                    else "use bf16_first_layers 0 and bf16_last_layers 0")
    return None


def bf16_layers_over_stage(problem, pp) -> np.ndarray:
    """Where more first or last bf16 layers are asked for than a pipeline stage holds
    (Megatron-Core, FP8 recipes: "num_layers_at_start_in_bf16 must be between 0 and number of
    layers per pipeline stage", num_layers // pp, transformer_config.py @d98e8a64; the FP4
    path does not check)."""
    t = problem.training
    if t.precision is not Precision.FP8 or t.fp8_recipe is Fp8Recipe.NVFP4:
        return np.zeros(np.shape(pp), dtype=bool)
    per_stage = problem.model.num_layers // np.asarray(pp)
    return (t.bf16_first_layers > per_stage) | (t.bf16_last_layers > per_stage)


def fp8_rule(name: str, fp8, why: str = "", *, bf16_layers_per_stage: bool = False
             ) -> TargetRule:
    """A framework's rule that FP8 training uses a scaling recipe it configures (its profile's
    `fp8`; None: no FP8 setting at all, `why` says so), and that what the run puts in FP8
    beyond the linear layers, or keeps out of it, is something it runs with that recipe
    (`_fp8_extra_breaks`). `bf16_layers_per_stage`: it also refuses more bf16 first or last
    layers than a pipeline stage holds (`bf16_layers_over_stage`, Megatron-Core)."""
    recipes = fp8.recipes if fp8 is not None else ()

    def breaks(problem) -> bool:
        t = problem.training
        return t.precision is Precision.FP8 and (
            t.fp8_recipe not in recipes or _fp8_extra_breaks(problem, name, fp8) is not None)

    def check(problem, c):
        broken = everywhere(c, breaks(problem))
        if bf16_layers_per_stage:
            broken = broken | bf16_layers_over_stage(problem, c.pp)
        return broken

    def explain(problem, s):
        label = problem.training.precision_label       # 'nvfp4' reads as its own precision
        if not recipes:
            return (f"precision {label}: {name} has no FP8 setting{why}", "use precision bf16")
        if problem.training.fp8_recipe is Fp8Recipe.NVFP4 and Fp8Recipe.NVFP4 not in recipes:
            return (f"precision nvfp4: {name} configures only "
                    f"{', '.join(r.value for r in recipes)} (FP8)",
                    f"use precision fp8 (fp8_recipe {recipes[0].value}), or emit for megatron")
        if problem.training.fp8_recipe not in recipes:
            return (f"fp8_recipe {problem.training.fp8_recipe.value}: {name} configures only "
                    f"{', '.join(r.value for r in recipes)}", f"use fp8_recipe {recipes[0].value}")
        extra = _fp8_extra_breaks(problem, name, fp8)
        if extra is not None:
            return extra
        t = problem.training
        per_stage = problem.model.num_layers // s.pp
        return (f"bf16_first_layers {t.bf16_first_layers}, bf16_last_layers "
                f"{t.bf16_last_layers} with pp {s.pp}: {name} keeps at most the {per_stage} "
                f"layers of one pipeline stage in bf16 at either end",
                f"use at most {per_stage} bf16 layers at each end, or a shorter pipeline")

    summary = (f"{name} trains in FP8 with {', '.join(r.value for r in recipes)} scaling"
               if recipes else f"{name} has no FP8 setting")
    return TargetRule(summary, check, explain)


def any_offload(c) -> np.ndarray:
    """Where a candidate keeps anything in host memory."""
    return (c.opt_offload > 0) | c.param_offload | (c.act_offload > 0)
