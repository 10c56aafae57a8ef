"""DeepSpeed: a ds_config.json for the plan, and a reader for users' own DeepSpeed configs.

The emitted JSON is a pydantic model whose aliases are DeepSpeed's keys (`extra="forbid"`), so a
typo in a key cannot reach the file. DeepSpeed itself reads its top-level keys with dict.get
and never looks at the rest (deepspeed/runtime/config.py), so a misspelled top-level key is
silently ignored: `zero_optimisation` quietly means ZeRO stage 0. The reader reports that, and
the batch consistency rule DeepSpeed asserts (`_batch_assertion`): train_batch_size =
train_micro_batch_size_per_gpu * gradient_accumulation_steps * data-parallel world size.

DeepSpeed sets tensor parallelism in its `tensor_parallel` section (AutoTP) and the pipeline
in code (`PipelineModule(num_stages=...)`); the `pipeline` section carries the stage count and
the checkpoint interval so that the plan travels with the file.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from cost_models.enums import (AttentionKind, CpComm, Optimizer, PipelinePartition, Precision,
                               Recompute)
from cost_models.pipeline import partition_placements, partitioned_layer_counts
from planner.frameworks.base import LaunchPlan, ParsedConfig, closest, did_you_mean, header_lines
from planner.errors import InputError
from planner.inputs import profiles
from planner.schemas.bounds import MAX_GLOBAL_BATCH
from planner.schemas.framework import FrameworkProfile
from planner.core.rules import Rule, TargetRule, context_parallel_rule, everywhere, fp8_rule
from planner.core.problem import Problem
from planner.inputs.safe_parse import load_json
from planner.schemas.strategy import LaunchTarget

CHECKED_AGAINST = ("deepspeedai/DeepSpeed deepspeed/runtime/config.py @3a890ec5, "
                   "runtime/zero/config.py @cbf3d661, runtime/pipe/engine.py @e787c163, "
                   "docs/_pages/config-json.md @da9b7738")

TOP_LEVEL_KEYS = frozenset({
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
    "steps_per_print", "dump_state", "disable_allgather", "communication_data_type",
    "seq_parallel_communication_data_type", "prescale_gradients", "gradient_predivide_factor",
    "sparse_gradients", "zero_optimization", "activation_checkpointing", "comms_logger",
    "gradient_clipping", "fp16", "bf16", "bfloat16", "amp", "torch_autocast", "optimizer",
    "scheduler", "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer",
    "flops_profiler", "wall_clock_breakdown", "memory_breakdown", "autotuning",
    "quantize_training", "compression_training", "graph_harvesting",
    "use_data_before_expert_parallelism", "hybrid_engine", "sparse_attention", "pipeline",
    "progressive_layer_drop", "curriculum_learning", "data_efficiency", "checkpoint",
    "data_types", "aio", "dataloader_drop_last", "nebula", "weight_quantization", "compile",
    "timers", "tensor_parallel", "vocabulary_size", "elasticity", "tensorboard", "wandb",
    "comet", "csv_monitor", "sequence_parallel_size", "data_parallel_size",
})
"""Top-level keys DeepSpeed reads (config.py, constants.py, __init__.py, the config docs)."""

ZERO_KEYS = frozenset({
    "stage", "contiguous_gradients", "reduce_scatter", "reduce_bucket_size",
    "allgather_bucket_size", "allgather_partitions", "use_multi_rank_bucket_allreduce",
    "overlap_comm", "load_from_fp32_weights", "elastic_checkpoint", "offload_param",
    "offload_optimizer", "sub_group_size", "stage3_prefetch_bucket_size",
    "stage3_param_persistence_threshold", "stage3_model_persistence_threshold",
    "stage3_max_live_parameters", "stage3_max_reuse_distance",
    "stage3_gather_16bit_weights_on_model_save", "stage3_module_granularity_threshold",
    "stage3_use_all_reduce_for_fetch_params", "cpu_offload", "cpu_offload_param",
    "cpu_offload_use_pin_memory", "stage3_gather_fp16_weights_on_model_save",
    "ignore_unused_parameters", "legacy_stage1", "round_robin_gradients",
    "zero_hpz_partition_size", "zero_quantized_weights", "zero_quantized_nontrainable_weights",
    "zero_quantized_gradients", "zeropp_loco_param", "mics_shard_size",
    "mics_hierarchical_params_gather", "memory_efficient_linear", "pipeline_loading_checkpoint",
    "override_module_apply", "log_trace_cache_warnings", "enable_sanity_checks", "zenflow",
    "prefetch_bucket_size", "param_persistence_threshold", "model_persistence_threshold",
    "max_live_parameters", "max_reuse_distance", "gather_16bit_weights_on_model_save",
    "module_granularity_threshold", "use_all_reduce_for_fetch_params",
})
"""zero_optimization keys (DeepSpeedZeroConfig, extra="forbid": DeepSpeed rejects others)."""

SECTION_KEYS = {
    "fp16": frozenset({"enabled", "auto_cast", "loss_scale", "initial_scale_power",
                       "loss_scale_window", "hysteresis", "consecutive_hysteresis",
                       "min_loss_scale", "fp16_master_weights_and_grads"}),
    "bf16": frozenset({"enabled", "immediate_grad_update", "check_overflow",
                       "bf16_master_weights_and_grads", "bf16_optimizer_states"}),
    "activation_checkpointing": frozenset({
        "partition_activations", "cpu_checkpointing", "contiguous_memory_optimization",
        "number_checkpoints", "synchronize_checkpoint_boundary", "profile"}),
    "pipeline": frozenset({"stages", "partition", "seed_layers", "activation_checkpoint_interval",
                           "pipe_partitioned", "grad_partitioned", "use_reentrant"}),
    "tensor_parallel": frozenset({"autotp_size", "tp_overlap_comm", "tp_grain_size",
                                  "tp_size", "mpu", "tp_group", "partition_config"}),
}
"""Sections DeepSpeed reads with dict.get: an unknown key there is silently ignored."""

_JSON = ConfigDict(extra="forbid", populate_by_name=True)


class OffloadSection(BaseModel):
    """DeepSpeedZeroOffloadOptimizerConfig / ...ParamConfig (runtime/zero/offload_config.py)."""

    model_config = _JSON
    device: str = "cpu"
    pin_memory: bool = True
    """Page-locked host memory: DMA copies at the link's rate."""
    ratio: float | None = None
    """The share of the optimizer states offloaded (ZeRO-3 only)."""


class ZeroSection(BaseModel):
    model_config = _JSON
    stage: int
    overlap_comm: bool
    mics_shard_size: int | None = None
    """MiCS (ZeRO-3 sharded within groups of this many ranks, replicated across): HSDP."""
    contiguous_gradients: bool = True
    reduce_scatter: bool = True
    offload_optimizer: OffloadSection | None = None
    offload_param: OffloadSection | None = None


class Fp16Section(BaseModel):
    """Dynamic loss scaling: loss_scale 0 (DeepSpeed config docs, "fp16")."""

    model_config = _JSON
    enabled: bool = True
    loss_scale: float = 0
    initial_scale_power: int = 16
    loss_scale_window: int = 1000
    hysteresis: int = 2
    min_loss_scale: float = 1


class Bf16Section(BaseModel):
    model_config = _JSON
    enabled: bool = True


class CheckpointingSection(BaseModel):
    model_config = _JSON
    partition_activations: bool = False
    contiguous_memory_optimization: bool = False
    cpu_checkpointing: bool = False


class PipelineSection(BaseModel):
    model_config = _JSON
    stages: int
    partition: str = "uniform"
    activation_checkpoint_interval: int


class TensorParallelSection(BaseModel):
    model_config = _JSON
    autotp_size: int


class OptimizerSection(BaseModel):
    model_config = _JSON
    type: str
    params: dict[str, Any]


class DeepSpeedConfig(BaseModel):
    model_config = _JSON
    comment: list[str] = Field(alias="_comment")
    """DeepSpeed ignores this key; it carries the planner's header."""
    train_batch_size: int
    train_micro_batch_size_per_gpu: int
    gradient_accumulation_steps: int
    gradient_clipping: float = 1.0
    steps_per_print: int = 10
    zero_optimization: ZeroSection
    fp16: Fp16Section | None = None
    bf16: Bf16Section | None = None
    activation_checkpointing: CheckpointingSection | None = None
    tensor_parallel: TensorParallelSection | None = None
    pipeline: PipelineSection | None = None
    optimizer: OptimizerSection
    sequence_parallel_size: int | None = None
    """DeepSpeed-Ulysses degree; with data_parallel_size it builds the (data_parallel,
    sequence_parallel) mesh (deepspeed/__init__.py initialize)."""
    data_parallel_size: int | None = None
    wall_clock_breakdown: bool = False


def _optimizer(optimizer: Optimizer) -> OptimizerSection:
    if optimizer is Optimizer.ADAM:
        return OptimizerSection(type="AdamW", params={"lr": 3e-4, "betas": [0.9, 0.95],
                                                      "eps": 1e-8, "weight_decay": 0.1})
    momentum = 0.9 if optimizer is Optimizer.SGD_MOMENTUM else 0.0
    return OptimizerSection(type="SGD", params={"lr": 1e-2, "momentum": momentum})


def emit(plan: LaunchPlan) -> dict[str, str]:
    s, training = plan.strategy, plan.problem.training
    full = s.recompute is Recompute.FULL
    comment = header_lines(plan, "DeepSpeed", CHECKED_AGAINST)
    if s.cp > 1:
        comment += [f"Sequence parallelism (Ulysses, cp {s.cp}): wrap the attention in "
                    f"deepspeed.sequence.layer.DistributedAttention over the sequence-parallel "
                    f"group; each rank feeds seq_len / {s.cp} tokens."]
    # The attention kernel is the model code's choice; ds_config has no key for it.
    if plan.problem.attention is AttentionKind.FLASH:
        comment += ["Attention: priced as fused flash attention; run the model with it "
                    "(Megatron-DeepSpeed: --use-flash-attn-v2; Hugging Face: attn_implementation "
                    "sdpa or flash_attention_2). ds_config has no key for it."]
    else:
        comment += ["Attention: priced as unfused attention (the s x s scores kept for the "
                    "backward pass); a fused kernel needs less memory. ds_config has no key "
                    "for it."]
    if plan.problem.model.is_moe:
        # DeepSpeed MoE takes its expert-parallel size in model code (deepspeed/moe/layer.py).
        comment += [f"Experts: pass ep_size={s.ep} to deepspeed.moe.layer.MoE in the model "
                    f"(Megatron-DeepSpeed: --moe-expert-parallel-size {s.ep}); ds_config has "
                    f"no key for it."]
    method = _partition_method(plan.problem.model.num_layers, s) if s.pp > 1 else None
    if method is not None:
        counts = partitioned_layer_counts(plan.problem.model.num_layers, s.pp, method)
        comment += [f"Pipeline: layers per stage {counts}, as the model code's",
                    f"  PipelineModule(partition_method='{method.value}') places them",
                    f"  (BigScience Megatron-DeepSpeed: --pp-partition-method '{method.value}');",
                    "  DeepSpeed does not read pipeline.partition, which records it."]
    config = DeepSpeedConfig(
        comment=comment,
        train_batch_size=s.global_batch, train_micro_batch_size_per_gpu=s.micro_batch,
        gradient_accumulation_steps=plan.num_micro_batches,
        zero_optimization=ZeroSection(
            stage=int(s.zero_stage), overlap_comm=s.overlap_grad_reduce,
            mics_shard_size=s.dp_shard if s.dp_shard not in (None, s.dp) else None,
            offload_optimizer=OffloadSection(ratio=None if s.optimizer_offload == 1
                                             else s.optimizer_offload)
            if s.optimizer_offload else None,
            offload_param=OffloadSection() if s.param_offload else None),
        fp16=Fp16Section() if training.precision is Precision.FP16 else None,
        bf16=Bf16Section() if training.precision is Precision.BF16 else None,
        activation_checkpointing=CheckpointingSection(
            cpu_checkpointing=s.activation_offload_layers > 0) if full else None,
        tensor_parallel=TensorParallelSection(autotp_size=s.tp) if s.tp > 1 else None,
        pipeline=(PipelineSection(stages=s.pp, activation_checkpoint_interval=int(full),
                                  partition=method.value if method else "uniform")
                  if s.pp > 1 else None),
        optimizer=_optimizer(training.optimizer),
        sequence_parallel_size=s.cp if s.cp > 1 else None,
        data_parallel_size=s.dp if s.cp > 1 else None)
    text = json.dumps(config.model_dump(by_alias=True, exclude_none=True), indent=2) + "\n"
    return {"ds_config.json": text}


# --------------------------------------------------------------------------- reading

def _load(text: str, file: str) -> dict[str, Any]:
    def no_duplicates(pairs):
        counts = Counter(k for k, _ in pairs)
        dup = sorted(k for k, n in counts.items() if n > 1)
        if dup:   # DeepSpeed: ValueError("Duplicate keys in DeepSpeed config: ...")
            raise InputError(f"{file}: duplicate keys {dup}: DeepSpeed refuses such a config")
        return dict(pairs)

    data = load_json(text, file, object_pairs_hook=no_duplicates)
    if not isinstance(data, dict):
        raise InputError(f"{file}: a DeepSpeed config is a JSON object at the top level")
    return data


def _int(data: dict, key: str, file: str) -> int | None:
    value = data.get(key)
    if value is None or value == "auto":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{file}: {key}: must be a positive integer (got {value!r})")
    if value > MAX_GLOBAL_BATCH:
        raise InputError(f"{file}: {key}: {value:.3g} exceeds the largest accepted, "
                         f"{MAX_GLOBAL_BATCH:,} (far above any real run)")
    return value


def _check_keys(parsed: ParsedConfig, data: dict) -> None:
    for key in data:
        if key in TOP_LEVEL_KEYS or key.startswith("_"):
            continue
        meant = closest(key, TOP_LEVEL_KEYS)
        effect = ""
        if meant == "zero_optimization" and "zero_optimization" not in data:
            effect = ", so ZeRO stays at stage 0"
        parsed.finding("deepspeed_unknown_key",
                       f"DeepSpeed silently ignores the unknown top-level key '{key}'"
                       f"{did_you_mean(key, TOP_LEVEL_KEYS)}{effect}",
                       f"rename '{key}' to '{meant}'" if meant else f"remove '{key}'")
    zero = data.get("zero_optimization")
    if isinstance(zero, dict):
        for key in zero:
            if key not in ZERO_KEYS:
                parsed.finding("deepspeed_zero_key",
                               f"DeepSpeed refuses zero_optimization.{key}: extra fields are "
                               f"not permitted{did_you_mean(key, ZERO_KEYS)}",
                               f"fix or remove zero_optimization.{key}")
    for section, known in SECTION_KEYS.items():
        block = data.get(section)
        if isinstance(block, dict):
            for key in block:
                if key not in known:
                    parsed.finding("deepspeed_unknown_key",
                                   f"DeepSpeed silently ignores {section}.{key}"
                                   f"{did_you_mean(key, known)}",
                                   f"fix or remove {section}.{key}")


def _batch(parsed: ParsedConfig, data: dict, file: str, dp_world: int | None) -> None:
    """DeepSpeed's _set_batch_related_parameters and _batch_assertion, on the plan's dp."""
    train = _int(data, "train_batch_size", file)
    micro = _int(data, "train_micro_batch_size_per_gpu", file)
    accum = _int(data, "gradient_accumulation_steps", file)
    if train is None and micro is None:
        parsed.finding("deepspeed_batch", "DeepSpeed stops: either train_batch_size or "
                       "train_micro_batch_size_per_gpu needs to be provided",
                       "set train_batch_size and train_micro_batch_size_per_gpu")
        return
    if dp_world is None:
        parsed.strategy.update({k: v for k, v in (("global_batch", train), ("micro_batch", micro))
                                if v is not None})
        return
    # Derive the missing values as DeepSpeed does (floor division), then assert.
    if train is not None and micro is not None and accum is None:
        accum = train // micro // dp_world
    elif train is not None and accum is not None and micro is None:
        micro = train // dp_world // accum
    elif micro is not None and train is None:
        accum = accum or 1
        train = micro * accum * dp_world
    elif train is not None and micro is None:
        accum, micro = 1, train // dp_world
    micro = micro or 1
    if not accum or train != micro * accum * dp_world:
        per_step = micro * dp_world
        fix = (f"use gradient_accumulation_steps {train // per_step}" if train % per_step == 0
               else f"use train_batch_size {max(1, accum or 1) * per_step}")
        parsed.finding(
            "deepspeed_batch",
            f"DeepSpeed stops: train_batch_size ({train}) is not equal to "
            f"train_micro_batch_size_per_gpu ({micro}) * gradient_accumulation_steps "
            f"({accum}) * data-parallel world size ({dp_world})", fix)
    parsed.strategy.update(global_batch=train, micro_batch=micro)


def parse(text: str, *, file: str, problem: Problem, num_gpus: int | None) -> ParsedConfig:
    """A DeepSpeed config -> the strategy it describes and what DeepSpeed would get wrong."""
    data = _load(text, file)
    parsed = ParsedConfig(strategy={}, target=LaunchTarget.DEEPSPEED)
    _check_keys(parsed, data)
    def section(name: str) -> dict:
        value = data.get(name)
        return value if isinstance(value, dict) else {}

    tp_section, pipe = section("tensor_parallel"), section("pipeline")
    tp = _int(tp_section, "autotp_size", file) or 1
    stages = pipe.get("stages", "auto")
    pp = stages if isinstance(stages, int) and not isinstance(stages, bool) and stages > 0 else 1
    zero = data.get("zero_optimization")
    if isinstance(zero, bool):          # legacy form: true means stage 1
        stage = int(zero)
    elif isinstance(zero, dict):
        stage = zero.get("stage", 0)
        if stage not in (0, 1, 2, 3):
            raise InputError(f"{file}: zero_optimization.stage: must be 0, 1, 2 or 3 "
                             f"(got {stage!r})")
    else:
        stage = 0
    fp16 = isinstance(data.get("fp16"), dict) and data["fp16"].get("enabled") is True
    bf16_block = data.get("bf16", data.get("bfloat16"))
    bf16 = isinstance(bf16_block, dict) and bf16_block.get("enabled") is True
    if fp16 and bf16:
        parsed.finding("deepspeed_precision", "DeepSpeed stops: bfloat16 and fp16 modes cannot "
                       "be simultaneously enabled", "enable one of fp16 and bf16")
    parsed.training["precision"] = (Precision.BF16 if bf16 else Precision.FP16 if fp16
                                    else Precision.FP32)
    optimizer = data.get("optimizer")
    if isinstance(optimizer, dict) and isinstance(optimizer.get("type"), str):
        kind = optimizer["type"].lower()
        params = optimizer.get("params") or {}
        if not isinstance(params, dict):
            raise InputError(f"{file}: optimizer.params: must be an object of arguments "
                             f"(got {params!r})")
        momentum = params.get("momentum", 0)
        if kind == "sgd":
            parsed.training["optimizer"] = (Optimizer.SGD_MOMENTUM if momentum
                                            else Optimizer.SGD)
        else:
            parsed.training["optimizer"] = Optimizer.ADAM
    interval = pipe.get("activation_checkpoint_interval", 0)
    if isinstance(interval, bool) or not isinstance(interval, int) or interval < 0:
        raise InputError(f"{file}: pipeline.activation_checkpoint_interval: must be a "
                         f"non-negative integer (got {interval!r})")
    full = (interval > 0) if pp > 1 else isinstance(data.get("activation_checkpointing"), dict)
    partition = pipe.get("partition")
    if pp > 1 and partition in {m.value for m in profile().pipeline_partitions}:
        # What the emitter records; DeepSpeed itself takes partition_method in model code.
        counts = partitioned_layer_counts(problem.model.num_layers, pp,
                                          PipelinePartition(partition))
        if len(set(counts)) > 1 and min(counts) >= 1:
            parsed.strategy["layers_per_stage"] = tuple(counts)
    parsed.strategy.update(tp=tp, pp=pp, zero_stage=stage,
                           recompute=Recompute.FULL if full else Recompute.NONE,
                           overlap_grad_reduce=bool(isinstance(zero, dict)
                                                    and zero.get("overlap_comm", stage == 3)))
    _offload(parsed, zero if isinstance(zero, dict) else {}, section("activation_checkpointing"),
             file, layers_per_stage=-(-problem.model.num_layers // pp))
    mics = zero.get("mics_shard_size", -1) if isinstance(zero, dict) else -1
    if isinstance(mics, int) and not isinstance(mics, bool) and mics > 0:
        parsed.strategy["dp_shard"] = mics     # MiCS: ZeRO-3 within groups of mics_shard_size
    # DeepSpeed-Ulysses (deepspeed/sequence/layer.py): sequence_parallel_size ranks share each
    # sequence and exchange heads by all-to-all.
    cp = _int(data, "sequence_parallel_size", file) or 1
    if cp > 1:
        parsed.strategy.update(cp=cp, cp_comm=CpComm.A2A)
    model_parallel = tp * pp * cp
    if num_gpus is None:
        # No GPU count given: the three batch keys imply DeepSpeed's data-parallel world size.
        train = _int(data, "train_batch_size", file)
        micro = _int(data, "train_micro_batch_size_per_gpu", file)
        accum = _int(data, "gradient_accumulation_steps", file)
        if train and micro and accum and train % (micro * accum) == 0:
            num_gpus = train // (micro * accum) * model_parallel
    if num_gpus is not None:
        parsed.world_size = num_gpus
    dp_world = num_gpus // model_parallel if num_gpus and num_gpus % model_parallel == 0 \
        else None
    _batch(parsed, data, file, dp_world)
    if problem.model.is_moe:
        parsed.notes.append("ep_size is set in model code (deepspeed.moe.layer.MoE), not in "
                            "this file: priced with ep 1")
    return parsed


def _offload(parsed: ParsedConfig, zero: dict, checkpointing: dict, file: str, *,
             layers_per_stage: int) -> None:
    """zero_optimization.offload_optimizer / offload_param ({device: cpu|nvme|none}, ratio) and
    the legacy cpu_offload / cpu_offload_param flags (zero/config.py), and
    activation_checkpointing.cpu_checkpointing (every checkpointed layer's input on the host)."""
    def device(key: str, legacy: str) -> str | None:
        block = zero.get(key)
        if isinstance(block, dict):
            value = block.get("device", "none")
            if value not in ("none", "cpu", "nvme"):
                raise InputError(f"{file}: zero_optimization.{key}.device: must be none, cpu or "
                                 f"nvme (got {value!r})")
            return None if value == "none" else value
        return "cpu" if zero.get(legacy) is True else None

    optimizer, param = device("offload_optimizer", "cpu_offload"), \
        device("offload_param", "cpu_offload_param")
    if optimizer:
        block = zero.get("offload_optimizer")
        ratio = block.get("ratio", 1.0) if isinstance(block, dict) else 1.0
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 <= ratio <= 1:
            raise InputError(f"{file}: zero_optimization.offload_optimizer.ratio: must be a "
                             f"number from 0 to 1 (got {ratio!r})")
        parsed.strategy["optimizer_offload"] = float(ratio)
    if param:
        parsed.strategy["param_offload"] = True
    if "nvme" in (optimizer, param):
        parsed.finding("deepspeed_offload", "offload to NVMe (ZeRO-Infinity): priced as host "
                       "memory, so faster than the drives allow", "use device cpu to compare")
    if checkpointing.get("cpu_checkpointing") is True:
        parsed.strategy["activation_offload_layers"] = layers_per_stage


# --------------------------------------------------------------------------- profile

def profile() -> FrameworkProfile:
    """Features, overlaps and constants of DeepSpeed (profiles/deepspeed.yaml, with sources)."""
    return profiles.load("deepspeed")


# --------------------------------------------------------------------------- rules

def _explain_pipeline_zero(problem, s):
    return (f"zero_stage {int(s.zero_stage)} with pp {s.pp}: DeepSpeed refuses it (\"ZeRO-2 and "
            "ZeRO-3 are incompatible with pipeline parallelism\")",
            "use zero_stage 1, or pp 1 with more data parallelism")


def _explain_offload(problem, s):
    return (f"optimizer_offload {s.optimizer_offload:g} with zero_stage {int(s.zero_stage)}: "
            "DeepSpeed's offload_optimizer ratio is \"Only valid with ZeRO Stage 3\"",
            "use optimizer_offload 1, or zero_stage 3")


def partition_layer_counts(num_layers: int, pp: int, vpp: int = 1) -> list[list[int]]:
    """The layer counts DeepSpeed's pipeline runs with pp stages: its PipelineModule's
    partitions (the profile's `pipeline_partitions`); one chunk per stage (no vpp)."""
    return partition_placements(num_layers, pp, profile().pipeline_partitions) if vpp == 1 else []


def _partition_method(num_layers: int, s) -> PipelinePartition | None:
    """The partition_method that places the strategy's layers (its layers_per_stage, else
    DeepSpeed's default placement, the first of the profile's)."""
    for method in profile().pipeline_partitions:
        counts = partitioned_layer_counts(num_layers, s.pp, method)
        if s.layers_per_stage is None or list(s.layers_per_stage) == counts:
            return method
    return None


def _explain_uneven_layout(problem: Problem, s) -> tuple[str, str]:
    runs = partition_layer_counts(problem.model.num_layers, s.pp, s.vpp)
    methods = " or ".join(f"'{m.value}'" for m in profile().pipeline_partitions)
    return (f"layers_per_stage {list(s.layers_per_stage or ())} is not a placement DeepSpeed's "
            f"pipeline makes: PipelineModule partitions the layers itself (partition_method "
            f"{methods})", "use layers_per_stage " + " or ".join(str(c) for c in runs)
            + ", or leave it out")


RULES: dict[Rule, TargetRule] = {
    # runtime/zero/config.py @38327e07: "Partial offloading only supported for ZeRO Stage 3"
    # (offload_optimizer.ratio; ZeRO 1-3 at all: the profile's optimizer_min_zero).
    Rule.DEEPSPEED_OFFLOAD: TargetRule(
        "DeepSpeed offloads a share of the optimizer states only with ZeRO-3",
        lambda p, c: (c.opt_offload > 0) & (c.opt_offload < 1) & (c.zero != 3),
        _explain_offload),
    # ds_config has no fp8 key (docs/_pages/config-json.md); FP8 is TE modules in model code.
    Rule.DEEPSPEED_FP8: fp8_rule("DeepSpeed", profile().fp8, " in ds_config (FP8 comes from "
                                 "Transformer Engine layers in the model code)"),
    Rule.DEEPSPEED_CONTEXT_PARALLEL: context_parallel_rule("DeepSpeed",
        profile().context_parallel),
    # deepspeed/runtime/pipe/engine.py: "ZeRO-2 and ZeRO-3 are incompatible with pipeline
    # parallelism".
    Rule.DEEPSPEED_PIPELINE_ZERO: TargetRule(
        "DeepSpeed's pipeline engine allows ZeRO stage 0 or 1 only",
        lambda p, c: (c.pp > 1) & (c.zero >= 2), _explain_pipeline_zero),
    # DeepSpeed docs, config-json "tensor_parallel": AutoTP supports ZeRO stages 0, 1 and 2.
    Rule.DEEPSPEED_TP_ZERO3: TargetRule(
        "DeepSpeed AutoTP does not support ZeRO stage 3",
        lambda p, c: (c.tp > 1) & (c.zero == 3),
        lambda p, s: (f"zero_stage 3 with tp {s.tp}: DeepSpeed AutoTP supports ZeRO stages 0, 1 "
                      "and 2", "use zero_stage 2, or tp 1")),
    Rule.DEEPSPEED_INTERLEAVED: TargetRule(
        "DeepSpeed's pipeline engine has no interleaved schedule",
        lambda p, c: c.vpp > 1,
        lambda p, s: (f"vpp {s.vpp}: DeepSpeed's pipeline engine runs one chunk per stage",
                      "use vpp 1")),
    Rule.DEEPSPEED_SELECTIVE_RECOMPUTE: TargetRule(
        "DeepSpeed checkpoints whole layers, not selectively",
        lambda p, c: c.recompute == 1,
        lambda p, s: ("recompute selective: DeepSpeed activation checkpointing recomputes whole "
                      "layers", "use recompute full, or none")),
    Rule.DEEPSPEED_SEQUENCE_PARALLEL: TargetRule(
        "DeepSpeed AutoTP has no Megatron sequence parallelism",
        lambda p, c: c.sp & (c.tp > 1),       # at tp 1 it changes nothing: a note says so
        lambda p, s: ("sequence_parallel: DeepSpeed AutoTP keeps activations whole on every "
                      "tensor-parallel rank", "use sequence_parallel false")),
    # runtime/pipe/module.py _partition_layers: the model code's PipelineModule places the
    # layers (partition_method), for any pp; no config key moves them.
    Rule.DEEPSPEED_UNEVEN_LAYOUT: TargetRule(
        "DeepSpeed's pipeline places the layers itself (PipelineModule partition_method)",
        lambda p, c: everywhere(c, False), _explain_uneven_layout,
        layouts=partition_layer_counts),
    # DeepSpeed MiCS (mics_shard_size) is a ZeRO-3 feature (runtime/zero/mics.py).
    Rule.DEEPSPEED_HSDP: TargetRule(
        "DeepSpeed shards within groups (MiCS) only with ZeRO stage 3",
        lambda p, c: (c.shard != c.dp) & (c.zero != 3),
        lambda p, s: (f"dp_shard {s.dp_shard} with zero_stage {int(s.zero_stage)}: DeepSpeed "
                      "shards within groups (MiCS, mics_shard_size) only with ZeRO stage 3",
                      "use zero_stage 3, or leave dp_shard out")),
}
