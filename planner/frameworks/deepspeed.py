"""DeepSpeed: a ds_config.json for the plan, and a reader for users' own DeepSpeed configs.

The emitted JSON is a pydantic model whose aliases are DeepSpeed's keys (`extra="forbid"`), so a
typo in a key cannot reach the file. DeepSpeed itself reads its top-level keys with dict.get
and never looks at the rest (deepspeed/runtime/config.py), so a misspelled top-level key is
silently ignored: `zero_optimisation` quietly means ZeRO stage 0. The reader reports that, and
the batch consistency rule DeepSpeed asserts (`_batch_assertion`): train_batch_size =
train_micro_batch_size_per_gpu * gradient_accumulation_steps * data-parallel world size.

DeepSpeed sets tensor parallelism in its `tensor_parallel` section (AutoTP), expert parallelism
in its `expert_parallel` section (AutoEP: `enabled`, `autoep_size`) and the pipeline in code
(`PipelineModule(num_stages=...)`); the `pipeline` section carries the stage count and the
checkpoint interval so that the plan travels with the file.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from cost_models.enums import (AttentionKind, CpComm, Optimizer, PipelinePartition, Precision,
                               Recompute)
from cost_models.pipeline import partition_placements, partitioned_layer_counts
from planner.frameworks.base import LaunchPlan, ParsedConfig, closest, did_you_mean, header_lines
from planner.errors import InputError
from planner.inputs import profiles
from planner.schemas.bounds import MAX_GLOBAL_BATCH
from planner.schemas.framework import FrameworkProfile
from planner.core.candidates import Candidates
from planner.core.rules import Rule, TargetRule, context_parallel_rule, everywhere, fp8_rule
from planner.core.problem import Problem
from planner.inputs.safe_parse import load_json
from planner.schemas.strategy import LaunchTarget

CHECKED_AGAINST = ("deepspeedai/DeepSpeed deepspeed/runtime/config.py @80c8e5ba, "
                   "runtime/zero/config.py @cbf3d661, runtime/pipe/engine.py @e787c163, "
                   "module_inject/auto_ep_config.py @df84f6d8, "
                   "docs/_pages/config-json.md @858e91ee")

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
    "comet", "csv_monitor", "sequence_parallel_size", "data_parallel_size", "expert_parallel",
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
    # module_inject/auto_ep_config.py parse_autoep_config (@df84f6d8) reads these with .get.
    "expert_parallel": frozenset({
        "enabled", "autoep_size", "expert_tensor_parallel_size", "validate_folding_routing",
        "preset_model", "moe_layer_pattern", "expert_pattern", "router_pattern",
        "use_grouped_mm", "disable_triton_grouped_mm", "route_norm", "route_scale",
        "score_apply", "combine_impl", "num_expert_groups", "num_limited_groups", "score_func",
        "top_k", "load_balance_coeff", "routed_scaling_factor", "expert_w1", "expert_w2",
        "expert_w3", "num_experts_attr", "top_k_attr", "has_shared_experts",
        "shared_experts_pattern", "shared_experts_gate_pattern"}),
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


class ExpertParallelSection(BaseModel):
    """AutoEP (module_inject/auto_ep_config.py): replaces the Hugging Face model's MoE layers
    (found by its model_type) with expert-parallel ones over autoep_size ranks."""

    model_config = _JSON
    enabled: bool = True
    """Without it DeepSpeed ignores the whole section ("When `false`, all other
    expert_parallel settings are ignored", docs/_pages/config-json.md)."""
    autoep_size: int


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
    expert_parallel: ExpertParallelSection | None = None
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


def _autotp_lines(s) -> list[str]:
    """What the caller must do for AutoTP to run: DeepSpeed builds its own (data_parallel,
    tensor_parallel) mesh of all ranks (utils/groups.py _init_tp_mesh_device), checks at the
    first batch that every rank of a TP group got the same one (runtime/engine.py
    check_dataloader_inputs_same_across_ranks), and the pipeline engine takes its
    data-parallel groups from the PipelineModule's topology, which num_stages alone builds
    without a model axis (runtime/pipe/module.py: PipeDataParallelTopology)."""
    lines = [f"AutoTP (tensor_parallel.autotp_size {s.tp}) runs only if the caller shards the "
             f"data by data-parallel group: each of the {s.dp} data-parallel ranks "
             f"(engine.mpu.get_data_parallel_rank()) reads its own batches and the {s.tp} "
             f"ranks of a tensor-parallel group the same ones; sharded by global rank, DeepSpeed "
             f"stops at the first batch (\"Data inconsistency within the TP group\")."]
    if s.pp > 1:
        lines += [f"With the pipeline, build PipelineModule(topology=PipeModelDataParallel"
                  f"Topology(num_pp={s.pp}, num_mp={s.tp}, num_dp={s.dp})): num_stages alone "
                  f"puts the tensor-parallel ranks into the data-parallel groups."]
    return lines


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
    if plan.problem.model.is_moe and s.ep > 1:
        comment += [f"Experts: AutoEP (expert_parallel.autoep_size {s.ep}) replaces the Hugging "
                    f"Face model's MoE layers, found by its model_type. A model built on "
                    f"deepspeed.moe.layer.MoE takes ep_size={s.ep} in model code instead "
                    f"(Megatron-DeepSpeed: --moe-expert-parallel-size {s.ep}): then drop "
                    f"expert_parallel."]
    if s.tp > 1:
        comment += _autotp_lines(s)
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
        expert_parallel=(ExpertParallelSection(autoep_size=s.ep)
                         if plan.problem.model.is_moe and s.ep > 1 else None),
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
    autos = [key for key in BATCH_KEYS if data.get(key) == "auto"]
    if train is None and micro is None:
        if autos:
            _auto_note(parsed, autos, "the run's global batch (--global-batch) and "
                                      "micro-batch 1")
            return
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
    if autos:
        _auto_note(parsed, autos, f"global batch {train}, micro-batch {micro} and "
                                  f"{accum} accumulation steps, as DeepSpeed derives them")


BATCH_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu",
              "gradient_accumulation_steps")


def _auto_note(parsed: ParsedConfig, keys: list[str], priced: str) -> None:
    """"auto" is the Hugging Face Trainer's placeholder: it writes its own values into the
    config before deepspeed.initialize reads it (transformers integrations/deepspeed.py
    HfTrainerDeepSpeedConfig.trainer_config_process); DeepSpeed itself never sees "auto"."""
    them = "it" if len(keys) == 1 else "them"
    parsed.notes.append(f"{', '.join(keys)} \"auto\": taken from the launcher (the Hugging "
                        f"Face Trainer fills {them} from its own arguments); priced with "
                        f"{priced}")


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
    _precision(parsed, data)
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
    _expert_parallel(parsed, section("expert_parallel"), problem, file)
    _unpriced_blocks(parsed, data)
    return parsed


def _expert_parallel(parsed: ParsedConfig, block: dict, problem: Problem, file: str) -> None:
    """AutoEP: expert_parallel.autoep_size ranks hold each expert, whole
    (expert_tensor_parallel_size must be 1), when expert_parallel.enabled is true
    (module_inject/auto_ep_config.py parse_autoep_config; runtime/engine.py
    _configure_expert_parallel)."""
    size = _int(block, "autoep_size", file) or 1
    if block.get("enabled") is not True:
        if block and problem.model.is_moe:
            parsed.notes.append(f"expert_parallel.enabled is not true: DeepSpeed ignores the "
                                f"section (autoep_size {size}); priced with ep 1")
        elif problem.model.is_moe:
            parsed.notes.append("no expert_parallel section (AutoEP): ep_size may be set in "
                                "model code (deepspeed.moe.layer.MoE), which this file does "
                                "not show: priced with ep 1")
        return
    if not problem.model.is_moe:
        parsed.notes.append("expert_parallel: the model has no MoE layers, so AutoEP finds "
                            "nothing to replace; no effect")
        return
    etp = _int(block, "expert_tensor_parallel_size", file) or 1
    parsed.strategy.update(ep=size, etp=etp)


UNPRICED_BLOCKS = {
    # op_builder/sparse_attn.py @1c03d1b1: the block-sparse kernels load only with torch
    # 1.5-1.x and triton 1.0.0; DeepSpeed 0.19 requires torch>=2.0 (requirements.txt).
    "sparse_attention": (
        "deepspeed_sparse_attention",
        "sparse_attention: DeepSpeed's block-sparse attention kernels load only with torch 1.x "
        "and triton 1.0.0 (op_builder/sparse_attn.py), and DeepSpeed 0.19 needs torch >= 2.0, "
        "so the model's SparseSelfAttention cannot run; the planner prices dense attention",
        "remove sparse_attention and run fused (flash) attention"),
    # runtime/engine.py forward @9a297cfa: with progressive_layer_drop.enabled the engine
    # adds progressive_layer_drop=True and pld_theta to the model's forward arguments.
    "progressive_layer_drop": (
        "deepspeed_layer_drop",
        "progressive_layer_drop: the engine passes progressive_layer_drop and pld_theta to the "
        "model's forward, which only a model written for it accepts (any other stops with a "
        "TypeError); and the layers it skips are priced as run",
        "remove progressive_layer_drop"),
    # deepspeed/compression (init_compression in the training script, engine.py
    # quantize_training): quantized or pruned weights, heads, rows and layers.
    "compression_training": (
        "deepspeed_compression",
        "compression_training: the quantization and pruning it enables change the model the "
        "planner prices (whole, unquantized weights)",
        "remove compression_training to price the run"),
}
"""ds_config blocks that DeepSpeed 0.19 reads but the planner cannot price (or that cannot
run there): a finding each where the block is enabled."""


def _enabled(block) -> bool:
    """Whether a ds_config block switches anything on: an `enabled: true` at any depth
    (compression_training nests it under each method's shared_parameters); a sparse_attention
    block has no switch, its presence is the request."""
    if isinstance(block, dict):
        return any(v is True if k == "enabled" else _enabled(v) for k, v in block.items())
    return False


def _unpriced_blocks(parsed: ParsedConfig, data: dict) -> None:
    for key, (rule, message, fix) in UNPRICED_BLOCKS.items():
        block = data.get(key)
        if block is None or (key != "sparse_attention" and not _enabled(block)):
            continue
        parsed.finding(rule, message, fix)


def _precision(parsed: ParsedConfig, data: dict) -> None:
    """fp16 / bf16 (bfloat16) `enabled`; both on is DeepSpeed's assertion in config.py
    ("bfloat16 and fp16 modes cannot be simultaneously enabled"). "auto" is the Hugging Face
    Trainer's, which sets it from its --fp16 / --bf16 arguments: the run's precision then."""
    def enabled(name: str):
        block = data.get(name, data.get("bfloat16")) if name == "bf16" else data.get(name)
        return block.get("enabled") if isinstance(block, dict) else None

    fp16, bf16 = enabled("fp16") is True, enabled("bf16") is True
    if fp16 and bf16:
        parsed.finding("deepspeed_precision", "DeepSpeed stops: bfloat16 and fp16 modes cannot "
                       "be simultaneously enabled", "enable one of fp16 and bf16")
    autos = [f"{name}.enabled" for name in ("fp16", "bf16") if enabled(name) == "auto"]
    if autos and not (fp16 or bf16):
        parsed.notes.append(f"{' and '.join(autos)} \"auto\": taken from the launcher (the "
                            f"Hugging Face Trainer sets it from --fp16 / --bf16); priced in the "
                            f"run's precision (--precision)")
        return
    parsed.training["precision"] = (Precision.BF16 if bf16 else Precision.FP16 if fp16
                                    else Precision.FP32)


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


def _autoep_breaks(c) -> dict[str, np.ndarray]:
    """Where DeepSpeed's AutoEP (ep > 1) refuses a candidate, by the reason it gives
    (module_inject/auto_ep_folding.py validate_folding_global @104193b4; runtime/engine.py
    @9a297cfa, the ZeRO-3 checks of AutoEP)."""
    autoep, folded = c.ep > 1, (c.ep > 1) & (c.tp > 1)
    offload = (c.opt_offload > 0) | c.param_offload
    return {
        "etp": autoep & (c.etp != 1),
        "folded_pp": folded & (c.pp > 1),
        "folded_cp": folded & (c.cp > 1),
        "folded_zero3": folded & (c.zero == 3),
        "folded_offload": folded & offload,
        "zero3_cp": autoep & (c.zero == 3) & (c.cp > 1),
        "zero3_mics": autoep & (c.zero == 3) & (c.shard != c.dp),
    }


_AUTOEP_EXPLAIN = {
    "etp": (lambda s: f"etp {s.expert_tp} with ep {s.ep}: DeepSpeed AutoEP keeps experts whole "
                      f"(expert_parallel.expert_tensor_parallel_size is reserved: only 1)",
            lambda s: "use etp 1"),
    "folded_pp": (lambda s: f"ep {s.ep} with tp {s.tp} and pp {s.pp}: DeepSpeed's AutoEP+AutoTP "
                            f"folding supports pp_size=1 only",
                  lambda s: "use pp 1, or tp 1"),
    "folded_cp": (lambda s: f"ep {s.ep} with tp {s.tp} and cp {s.cp}: autotp_size and Ulysses "
                            f"sequence parallelism are mutually exclusive for AutoEP folding",
                  lambda s: "use cp 1, or tp 1"),
    "folded_zero3": (lambda s: f"ep {s.ep} with tp {s.tp} and zero_stage 3: DeepSpeed's "
                               f"AutoEP+AutoTP runs ZeRO stage 0, 1 or 2",
                     lambda s: "use zero_stage 2"),
    "folded_offload": (lambda s: f"ep {s.ep} with tp {s.tp} and optimizer or parameter "
                                 f"offload: DeepSpeed refuses offload with AutoEP+AutoTP folding",
                       lambda s: "offload nothing, or use tp 1"),
    "zero3_cp": (lambda s: f"ep {s.ep} with zero_stage 3 and cp {s.cp}: AutoEP with ZeRO Stage 3 "
                           f"does not support sequence parallelism",
                 lambda s: "use zero_stage 2, or cp 1"),
    "zero3_mics": (lambda s: f"ep {s.ep} with zero_stage 3 and dp_shard {s.dp_shard}: AutoEP "
                             f"with ZeRO Stage 3 does not support MiCS",
                   lambda s: "leave dp_shard out, or use zero_stage 2"),
}


def _explain_autoep(problem: Problem, s) -> tuple[str, str]:
    breaks = _autoep_breaks(Candidates.from_strategy(s, problem.framework.defaults))
    reason = next(k for k, where in breaks.items() if where[0])
    message, fix = _AUTOEP_EXPLAIN[reason]
    return message(s), fix(s)


RULES: dict[Rule, TargetRule] = {
    # AutoEP, ds_config expert_parallel (module_inject/auto_ep_folding.py, runtime/engine.py).
    Rule.DEEPSPEED_EXPERT_PARALLEL: TargetRule(
        "DeepSpeed AutoEP keeps experts whole (etp 1); with AutoTP it needs pp 1, cp 1, ZeRO "
        "0-2 and no offload, and with ZeRO-3 no cp and no MiCS",
        lambda p, c: p.model.is_moe & np.logical_or.reduce(list(_autoep_breaks(c).values())),
        _explain_autoep),
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
