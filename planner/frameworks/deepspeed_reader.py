"""DeepSpeed: reading a ds_config.json, the planner's or the user's own, into a strategy and
what DeepSpeed would refuse or silently get wrong with it.

DeepSpeed reads its top-level keys with dict.get and never looks at the rest
(deepspeed/runtime/config.py), so a misspelled top-level key is silently ignored:
`zero_optimisation` quietly means ZeRO stage 0. The reader reports that, and the batch
consistency rule DeepSpeed asserts (`_batch_assertion`): train_batch_size =
train_micro_batch_size_per_gpu * gradient_accumulation_steps * data-parallel world size.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from cost_models.enums import CpComm, Optimizer, PipelinePartition, Precision, Recompute
from cost_models.pipeline import partitioned_layer_counts
from planner.core.problem import Problem
from planner.errors import InputError
from planner.frameworks.base import ParsedConfig, closest, did_you_mean
from planner.inputs import profiles
from planner.inputs.safe_parse import load_json
from planner.schemas.bounds import MAX_GLOBAL_BATCH
from planner.schemas.strategy import LaunchTarget

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

def load_config(text: str, file: str) -> dict[str, Any]:
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


def check_keys(parsed: ParsedConfig, data: dict) -> None:
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
    data = load_config(text, file)
    parsed = ParsedConfig(strategy={}, target=LaunchTarget.DEEPSPEED)
    check_keys(parsed, data)
    def section(name: str) -> dict:
        value = data.get(name)
        return value if isinstance(value, dict) else {}

    tp_section, pipe = section("tensor_parallel"), section("pipeline")
    tp = _int(tp_section, "autotp_size", file) or 1
    stages = pipe.get("stages", "auto")
    pp = stages if isinstance(stages, int) and not isinstance(stages, bool) and stages > 0 else 1
    zero = data.get("zero_optimization")
    stage = zero_stage(data, file)
    _precision(parsed, data)
    stage = engine_zero_stage(parsed, stage, pipeline_engine=pp > 1)
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
    if pp > 1 and partition in {m.value for m in
                                 profiles.load("deepspeed").pipeline_partitions}:
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
        # DeepSpeed 0.19.7 rejects the key (runtime/config.py _REMOVED_ZERO_CONFIG_KEYS,
        # issue 8489); 0.19.6 and the commits the planner checks against read it.
        parsed.notes.append(f"mics_shard_size {mics}: DeepSpeed 0.19.7 and later stop on it "
                            f"(MiCS removed, deepspeedai/DeepSpeed issue 8489); priced as "
                            f"DeepSpeed 0.19.6 runs it, ZeRO-3 within groups of {mics} ranks")
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


def zero_stage(data: dict, file: str) -> int:
    """zero_optimization.stage of a DeepSpeed config (0 when absent)."""
    zero = data.get("zero_optimization")
    if isinstance(zero, bool):          # legacy form: true means stage 1
        return int(zero)
    if isinstance(zero, dict):
        stage = zero.get("stage", 0)
        if stage not in (0, 1, 2, 3):
            raise InputError(f"{file}: zero_optimization.stage: must be 0, 1, 2 or 3 "
                             f"(got {stage!r})")
        return stage
    return 0


def engine_zero_stage(parsed: ParsedConfig, stage: int, *, pipeline_engine: bool) -> int:
    """The ZeRO stage DeepSpeed runs: with bf16 and stage 0, its pipeline engine wraps the
    optimizer in BF16_Optimizer, which shards the fp32 master weights and optimizer states over
    the data-parallel ranks as ZeRO-1 does (runtime/engine.py _do_optimizer_sanity_check:
    bf16 with gradient accumulation in bf16 and pipeline parallelism returns BFLOAT16;
    runtime/bf16_optimizer.py). BLOOM's script says it: "bf16 must use z0! it implements its
    own zero stage 1 equivalent" (bigscience train/tr11-176B-ml/tr11-176B-ml.slurm)."""
    if stage == 0 and pipeline_engine and parsed.training.get("precision") is Precision.BF16:
        parsed.notes.append("bf16 with ZeRO stage 0 in DeepSpeed's pipeline engine: its "
                            "BF16_Optimizer shards the fp32 master weights and optimizer "
                            "states over the data-parallel ranks; priced as ZeRO stage 1")
        return 1
    return stage


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
