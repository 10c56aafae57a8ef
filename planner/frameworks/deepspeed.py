"""DeepSpeed: a ds_config.json for the plan, DeepSpeed's profile and rules; the reader for
users' own DeepSpeed configs is `deepspeed_reader` (its `parse` is this module's).

The emitted JSON is a pydantic model whose aliases are DeepSpeed's keys (`extra="forbid"`), so a
typo in a key cannot reach the file (DeepSpeed itself would silently ignore it).

DeepSpeed sets tensor parallelism in its `tensor_parallel` section (AutoTP), expert parallelism
in its `expert_parallel` section (AutoEP: `enabled`, `autoep_size`) and the pipeline in code
(`PipelineModule(num_stages=...)`); the `pipeline` section carries the stage count and the
checkpoint interval so that the plan travels with the file.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from cost_models.enums import AttentionKind, Optimizer, PipelinePartition, Precision, Recompute
from cost_models.pipeline import partition_placements, partitioned_layer_counts
from planner.core.candidates import Candidates
from planner.core.problem import Problem
from planner.core.rules import Rule, TargetRule, context_parallel_rule, everywhere, fp8_rule
from planner.frameworks.base import LaunchPlan, header_lines
from planner.frameworks.deepspeed_reader import parse
from planner.inputs import profiles
from planner.schemas.framework import FrameworkProfile

__all__ = ["CHECKED_AGAINST", "RULES", "emit", "parse", "profile"]

CHECKED_AGAINST = ("deepspeedai/DeepSpeed deepspeed/runtime/config.py @80c8e5ba, "
                   "runtime/zero/config.py @cbf3d661, runtime/pipe/engine.py @e787c163, "
                   "module_inject/auto_ep_config.py @df84f6d8, "
                   "docs/_pages/config-json.md @858e91ee")

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


MICS_REMOVED = ("MiCS (zero_optimization.mics_shard_size): DeepSpeed 0.19.7 removed it and "
                "stops on the key (deepspeedai/DeepSpeed issue 8489):")
"""DeepSpeed 0.19.7 runtime/config.py _REMOVED_ZERO_CONFIG_KEYS rejects the key; 0.19.6 and the
commits the keys were checked against read it (bench/framework_parsers.py runs both)."""


def emit(plan: LaunchPlan) -> dict[str, str]:
    s, training = plan.strategy, plan.problem.training
    full = s.recompute is Recompute.FULL
    comment = header_lines(plan, "DeepSpeed", CHECKED_AGAINST)
    if s.cp > 1:
        comment += [f"Sequence parallelism (Ulysses, cp {s.cp}): wrap the attention in "
                    f"deepspeed.sequence.layer.DistributedAttention over the sequence-parallel "
                    f"group; each rank feeds seq_len / {s.cp} tokens."]
    # The attention kernel is the model code's choice; ds_config has no key for it.
    if plan.problem.attention is AttentionKind.FLASH2:
        comment += ["Attention: priced as FlashAttention-2 (Megatron-DeepSpeed: "
                    "--use-flash-attn-v2; Hugging Face: attn_implementation sdpa or "
                    "flash_attention_2). ds_config has no key for it."]
    elif plan.problem.attention is AttentionKind.FLASH:
        comment += ["Attention: priced as the GPU's fastest fused kernel (cuDNN attention or "
                    "FlashAttention-3 on Hopper: Hugging Face attn_implementation "
                    "flash_attention_3, or sdpa under sdpa_kernel(CUDNN_ATTENTION)). ds_config "
                    "has no key for it."]
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
    if s.dp_shard not in (None, s.dp):
        comment += [MICS_REMOVED + f" this file needs DeepSpeed 0.19.6 or earlier; on a later "
                    f"one drop mics_shard_size, and ZeRO-3 shards over all {s.dp} data-parallel "
                    f"ranks instead of {s.dp_shard} (not the plan priced)."]
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
