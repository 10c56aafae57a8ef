"""torchtitan: a recipe module for the current releases and a TOML job config for 0.2.x, and
torchtitan's profile and rules; the reader of both is `torchtitan_reader` (its `parse` is this
module's).

Current torchtitan describes a run as a Python function returning its `Trainer.Config`,
chosen with `--module` and `--config` (torchtitan/config/manager.py; the `--section.option`
flags are frozen); that recipe is written and read in `torchtitan_recipe`. Releases up to
0.2.x read `--job.config_file x.toml`, field names checked against
torchtitan/config/job_config.py @6404b932, and the degree check against
torchtitan/distributed/parallel_dims.py @0119de15.
"""

from __future__ import annotations

import math
import textwrap
from typing import Any

import numpy as np

from cost_models.enums import AttentionKind, Fp8Recipe, Precision, Recompute, ZeroStage
from planner.core.problem import Problem
from planner.core.rules import (Rule, TargetRule, any_offload, context_parallel_rule, everywhere,
                                fp8_rule, largest_divisor_at_most, num_micro_batches)
from planner.errors import InputError
from planner.frameworks import torchtitan_recipe
from planner.frameworks import torchrun
from planner.frameworks.base import LaunchPlan, Trial, header_lines, transformer_shape
from planner.frameworks.torchtitan_reader import FLOAT8, MX, OUTPUT_FQN, SCHEDULE_NAMES, parse
from planner.inputs import profiles
from planner.schemas.framework import FrameworkProfile

__all__ = ["CHECKED_AGAINST", "RULES", "emit", "emit_trial", "parse", "profile"]

CHECKED_AGAINST = (f"{torchtitan_recipe.CHECKED_AGAINST}; torchtitan/config/job_config.py "
                   f"@6404b932 (0.2.x TOML)")

PRECISIONS = {Precision.BF16: "bfloat16", Precision.FP32: "float32", Precision.FP8: "bfloat16"}

def _filter_fqns(plan: LaunchPlan) -> list[str]:
    """The output layer filtered out (bf16) unless the run puts it in FP8; the converters skip a
    linear layer whose dimensions 16 does not divide anyway (module_filter_fn)."""
    if not plan.problem.training.fp8_output_layer:
        return [OUTPUT_FQN]
    output = transformer_shape(plan.problem.model, "torchtitan").output
    if output.vocab_size % 16 or output.hidden % 16:
        raise InputError(f"--emit torchtitan: fp8_output_layer with vocabulary "
                         f"{output.vocab_size} and hidden {output.hidden}: torchao converts only "
                         f"linear layers whose dimensions 16 divides, so the output layer would "
                         f"stay bf16; plan without --fp8-output-layer")
    return []


def _float8_sections(plan: LaunchPlan) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """([model] converters, their sections) of an FP8 plan; nothing otherwise."""
    training, s = plan.problem.training, plan.strategy
    if training.precision is not Precision.FP8:
        return [], {}
    if training.fp8_attention:     # a rule refuses it first; the converters swap nn.Linear only
        raise InputError("--emit torchtitan: fp8_attention: torchtitan has no FP8 attention (its "
                         "float8 and MX converters swap linear layers only)")
    if training.fp8_recipe is Fp8Recipe.MXFP8:
        return [MX], {MX: {"recipe_name": "mxfp8_cublas", "filter_fqns": _filter_fqns(plan)}}
    gather = bool(s.fp8_param_gather) and s.zero_stage >= ZeroStage.OPTIMIZER_STATES
    recipe = training.fp8_recipe.value if training.fp8_recipe else "tensorwise"
    return [FLOAT8], {FLOAT8: {"recipe_name": recipe, "filter_fqns": _filter_fqns(plan),
                               "enable_fsdp_float8_all_gather": gather,
                               "precompute_float8_dynamic_scale_for_fsdp": gather}}


def _async_tp(plan: LaunchPlan) -> bool:
    """Async TP: asked for (or the default), with TP, where it runs (compiled: it needs
    compile; `Problem.tp_overlap_runs`)."""
    return (plan.overlap("tp_comm_overlap") and plan.strategy.tp > 1
            and plan.problem.tp_overlap_runs)


def compile_components(problem: Problem) -> list[str]:
    """What the run compiles, as the plan is priced: the model (fused norms, rotary embedding
    and activation) unless training.compile is false, the loss unless it runs eager."""
    return [name for name, compiled in (("model", not problem.eager_elementwise),
                                        ("loss", not problem.eager_loss)) if compiled]


def _compile(plan: LaunchPlan) -> dict[str, Any]:
    """[compile]: on with the components the plan is priced with (`compile_components`), off
    where it compiles nothing."""
    components = compile_components(plan.problem)
    if not components:
        return {"enable": False}
    return {"enable": True, "components": components}


def _parallelism(plan: LaunchPlan, *, recipe: bool) -> dict[str, Any]:
    """[parallelism] of the 0.2.x TOML, or the recipe's ParallelismConfig (`recipe`: the
    pipeline's micro-batches counted by num_pp_microbatches, async TP under compile, the output
    layer named lm_head)."""
    s, layers = plan.strategy, plan.problem.model.num_layers
    sharded = s.zero_stage >= ZeroStage.GRADIENTS
    fields: dict[str, Any] = {
        # FSDP2 (ZeRO 2/3) shards over data_parallel_shard_degree; plain DDP replicates.
        # HSDP: shard over dp_shard ranks, replicate over the rest (parallel_dims.py).
        "data_parallel_replicate_degree": s.dp // (s.dp_shard or s.dp) if sharded else s.dp,
        "data_parallel_shard_degree": (s.dp_shard or s.dp) if sharded else 1,
        "fsdp_reshard_after_forward": "always" if s.zero_stage is ZeroStage.PARAMETERS
        else "never" if sharded else "default",
        "tensor_parallel_degree": s.tp,
        "pipeline_parallel_degree": s.pp,
        "context_parallel_degree": s.cp,
    }
    if plan.problem.model.is_moe:
        # Experts over ep ranks borrowed from FSDP and TP (parallel_dims.py); without EP they
        # are split like the dense MLP.
        fields["expert_parallel_degree"] = s.ep
    if _async_tp(plan) and not recipe:
        fields["enable_async_tensor_parallel"] = True      # micro-pipelined TP (async TP)
    if s.pp > 1:
        fields["pipeline_parallel_schedule"] = (
            SCHEDULE_NAMES[s.pipeline_schedule] if s.pipeline_schedule in SCHEDULE_NAMES
            else "Interleaved1F1B" if s.vpp > 1 else "1F1B")
        if recipe:       # micro-batches per data-parallel rank and step (configs.py)
            fields["num_pp_microbatches"] = plan.num_micro_batches
        else:
            fields["pipeline_parallel_microbatch_size"] = s.micro_batch
        # pipeline_llm (pipeline_parallel.py _get_pipeline_metadata @b5bcd76c, inline in
        # 0.2.x) makes ceil(layers / layers_per_stage) stages and stops unless pp divides
        # them: an uneven split (61 layers on 8 stages) is spelled out module by module, in the
        # counts the plan was priced with.
        counts = s.layers_per_stage
        if counts is None and layers % (s.pp * s.vpp):
            counts = tuple(plan.report.strategy.layers_per_stage)
        if counts is None:
            fields.update(
                pipeline_parallel_layers_per_stage=layers // (s.pp * s.vpp),
                # The embedding and the output layer are not counted as layers of their stages.
                pipeline_parallel_first_stage_less_layers=0,
                pipeline_parallel_last_stage_less_layers=0)
        else:
            fields["module_fqns_per_model_part"] = module_fqns(
                counts, output="lm_head" if recipe else "output")
    return fields


def module_fqns(counts, *, output: str = "output") -> list[list[str]]:
    """torchtitan's module names per pipeline part (model chunk) of a decoder: tok_embeddings
    first, layers.<i> in order, norm and the output layer last (pipeline_parallel.py,
    generate_llm_fqn_per_model_part: `output` in 0.2.x, `lm_head` since)."""
    parts, layer = [], 0
    for k, count in enumerate(counts):
        part = ["tok_embeddings"] if k == 0 else []
        part += [f"layers.{i}" for i in range(layer, layer + count)]
        layer += count
        if k == len(counts) - 1:
            part += ["norm", output]
        parts.append(part)
    return parts


def _training(plan: LaunchPlan, trial: Trial | None = None) -> dict[str, Any]:
    """[training] of the 0.2.x TOML, in samples."""
    s, training = plan.strategy, plan.problem.training
    # With a pipeline a step feeds local_batch_size samples in micro-batches; without one,
    # local_batch_size is the micro-batch and torchtitan accumulates gradients up to the
    # global batch.
    local = s.global_batch // s.dp if s.pp > 1 else s.micro_batch
    out = {"local_batch_size": local, "global_batch_size": s.global_batch,
           "seq_len": training.seq_len, **_precision_fields(plan, trial)}
    if s.optimizer_offload or s.param_offload:   # FSDP2 CPUOffloadPolicy: all of it, together
        out["enable_cpu_offload"] = True
    return out


def _precision_fields(plan: LaunchPlan, trial: Trial | None = None) -> dict[str, Any]:
    steps = trial.train_iters if trial else plan.train_iters or 10000
    return {"mixed_precision_param": PRECISIONS.get(plan.problem.training.precision, "bfloat16"),
            "mixed_precision_reduce": "float32", "steps": steps}


def _recipe_training(plan: LaunchPlan, trial: Trial | None = None) -> dict[str, Any]:
    """The recipe's TrainingConfig, in tokens (configs.py @b5bcd76c): a micro-batch of whole
    sequences per data-parallel rank, the global batch per step; with a pipeline the step's
    micro-batches are num_pp_microbatches (one accumulation step), without one torchtitan
    accumulates up to the global batch. CUDA graphs, on by default, refuse pipelines and the
    default expert-parallel dispatchers (trainer.py _validate_cuda_graphs)."""
    s, seq = plan.strategy, plan.problem.training.seq_len
    out = {"num_tokens_per_microbatch_per_dp_rank": s.micro_batch * seq,
           "num_tokens_per_train_step": s.global_batch * seq, "max_context_length": seq,
           **_precision_fields(plan, trial)}
    if s.optimizer_offload or s.param_offload:
        out["enable_cpu_offload"] = True
    if s.pp > 1 or (plan.problem.model.is_moe and s.ep > 1):
        out["disable_cuda_graphs"] = True
    return out


def _checkpoint_mode(recompute: Recompute) -> str:
    return {Recompute.NONE: "none", Recompute.SELECTIVE: "selective",
            Recompute.FULL: "full"}[recompute]


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return str(value)


UNFUSED_NOTE = ("Planned with unfused attention (--attention unfused), which torchtitan "
                "cannot run: its models call SDPA or FlexAttention, fused kernels that keep "
                "less memory than planned.")
"""Written into the files when the run's kernel is unfused: torchtitan has no setting for it
(torchtitan/models/attention.py)."""

FLASH2_NOTE = ("Planned with FlashAttention-2 (--attention flash2): SDPA's flash backend, "
               "which torchtitan put first on Hopper until 2025-10 (pytorch/torchtitan#1776); "
               "since then it tries cuDNN attention first, about 1.7x faster on Hopper "
               "(--attention flash).")
"""Written into the files when the run's kernel is FlashAttention-2: no TOML key picks SDPA's
backend (ScaledDotProductAttentionWrapper.sdpa_backends)."""


def _header(plan: LaunchPlan, target: str, trial: Trial | None = None) -> list[str]:
    lines = header_lines(plan, target, CHECKED_AGAINST)
    if plan.problem.attention is AttentionKind.UNFUSED:
        lines += textwrap.wrap(UNFUSED_NOTE, width=94)
    elif plan.problem.attention is AttentionKind.FLASH2:
        lines += textwrap.wrap(FLASH2_NOTE, width=94)
    if trial is not None:
        lines.append(f"A trial run: {trial.train_iters} steps, metrics logged every "
                     f"{trial.log_interval}, no checkpoint, no validation.")
    return [f"# {line}" for line in lines]


def _toml(plan: LaunchPlan, trial: Trial | None = None) -> str:
    name = plan.problem.model.name
    registered = torchtitan_recipe.REGISTERED.get(name)
    run = (f"# Run: bash {TRIAL_SCRIPT} (checkpoint.enable and validation.enable are off by "
           f"default)" if trial else
           "# Run: torchrun ... -m torchtitan.train --job.config_file torchtitan.toml")
    lines = [*_header(plan, "torchtitan 0.2.x", trial), run, "",
             "[job]", f'description = "planner plan for {name}"', "", "[model]"]
    if registered:
        lines += [f'name = "{registered.module}"', f'flavor = "{registered.flavor}"']
    else:
        lines += [f"# torchtitan ships no {name}: register it as a model and name it here",
                  f'name = "{name}"']
    converters, quantize = _float8_sections(plan)
    if converters:
        lines.append(f"converters = {_toml_value(converters)}")
    sections = {"training": _training(plan, trial),
                "parallelism": _parallelism(plan, recipe=False),
                "activation_checkpoint": {"mode": _checkpoint_mode(plan.strategy.recompute)},
                "compile": _compile(plan), **quantize}
    if trial is not None:
        sections["metrics"] = _trial_metrics(trial)
    if plan.strategy.recompute is Recompute.SELECTIVE:
        sections["activation_checkpoint"]["selective_ac_option"] = "op"
    for section, fields in sections.items():
        lines += ["", f"[{section}]", *(f"{k} = {_toml_value(v)}" for k, v in fields.items())]
    return "\n".join(lines) + "\n"


def _recipe(plan: LaunchPlan, trial: Trial | None = None) -> str:
    s, model = plan.strategy, plan.problem.model
    registered = torchtitan_recipe.REGISTERED.get(model.name)
    # Only DeepSeek-V3's registry takes num_mtp_layers (models/deepseek_v3/__init__.py).
    mtp = (transformer_shape(model, "torchtitan").mtp_layers
           if registered and registered.module == "deepseek_v3" else 0)
    return torchtitan_recipe.render(torchtitan_recipe.RecipeParts(
        name=model.name, label=s.degrees_label(), header=_header(plan, "torchtitan", trial),
        training=_recipe_training(plan, trial),
        parallelism={**_parallelism(plan, recipe=True),
                     "enable_sequence_parallel": s.sequence_parallel},
        recompute=_checkpoint_mode(s.recompute),
        async_tp=_async_tp(plan) if s.tp > 1 else None, mtp_layers=mtp,
        compile_components=tuple(compile_components(plan.problem)),
        **({} if trial is None else {
            "replaced": {"metrics": _trial_metrics(trial), "checkpoint": {"enable": False},
                         "validator": {"enable": False}},
            "run_line": f"# Run: bash {TRIAL_SCRIPT}"})))


def emit(plan: LaunchPlan) -> dict[str, str]:
    """The recipe module and the 0.2.x TOML; FP8 plans get the TOML alone: current torchtitan
    sets float8 on its model registry, not in the trainer config a recipe returns, and dropped
    the tensorwise recipe and FP8 all-gather (6348d93, 2026-04) that 0.2.x runs."""
    if plan.problem.training.precision is Precision.FP8:
        return {"torchtitan.toml": _toml(plan)}
    return {"torchtitan_recipe.py": _recipe(plan), "torchtitan.toml": _toml(plan)}


TRIAL_SCRIPT = "run_torchtitan.sh"


def _trial_metrics(trial: Trial) -> dict[str, Any]:
    """metrics settings of a trial (MetricsProcessor.Config @b5bcd76c, [metrics] in 0.2.x):
    a line every log_interval steps (and at step 1), without colour codes."""
    return {"log_freq": trial.log_interval, "disable_color_printing": True}


def emit_trial(plan: LaunchPlan, trial: Trial) -> dict[str, str]:
    """{file name: text}: the config `emit` writes, cut to a short benchmark run, and a script
    that launches it with its output appended to `trial.log_file`. The recipe is what current
    torchtitan runs (`--module torchtitan_recipe --config planner_plan`, the module found on
    PYTHONPATH: config/manager.py imports a module that is not one of torchtitan's by its
    name); FP8 plans get the 0.2.x TOML (`--job.config_file`), as `emit` writes them."""
    recipe = plan.problem.training.precision is not Precision.FP8
    config = "torchtitan_recipe.py" if recipe else "torchtitan.toml"
    text = _recipe(plan, trial) if recipe else _toml(plan, trial)
    train = ("--module torchtitan_recipe --config planner_plan" if recipe
             else '--job.config_file "$HERE/torchtitan.toml"')
    lines = [
        "#!/usr/bin/env bash",
        *_header(plan, "torchtitan", trial),
        f"# Run on every node: MASTER_ADDR=<first node> bash {TRIAL_SCRIPT}; it runs "
        f"{config} from the",
        "# torchtitan checkout (TORCHTITAN_PATH: its recipes read ./assets), every rank's "
        f"output appended to {trial.log_file}.",
        "set -euo pipefail", "",
        'HERE=$(cd "$(dirname "$0")" && pwd)',
        f'LOG_FILE=${{LOG_FILE:-"$HERE/{trial.log_file}"}}',
        "TORCHTITAN_PATH=${TORCHTITAN_PATH:-/workspace/torchtitan}",
        *torchrun.launcher(plan), "",
        *torchrun.environment(plan.problem.cluster, tp=plan.strategy.tp,
                              nvls=plan.strategy.nvls),
        'export PYTHONPATH="$HERE${PYTHONPATH:+:$PYTHONPATH}"    # the recipe module',
        'export PYTORCH_ALLOC_CONF="expandable_segments:True"    # as torchtitan\'s run_train.sh',
        "", 'cd "$TORCHTITAN_PATH"',
        f'{torchrun.TORCHRUN} \\\n  -m torchtitan.train {train} \\\n'
        '  2>&1 | tee -a "$LOG_FILE"', ""]
    return {config: text, TRIAL_SCRIPT: "\n".join(lines)}


# --------------------------------------------------------------------------- profile

def profile() -> FrameworkProfile:
    """Features, overlaps and constants of torchtitan (profiles/torchtitan.yaml, with sources)."""
    return profiles.load("torchtitan")


# --------------------------------------------------------------------------- rules

def _explain_micro_batches(p, s):
    m = s.global_batch // (s.dp * s.micro_batch)
    return (f"{m} micro-batches per step are fewer than the {s.pp} pipeline stages: PyTorch's "
            "pipeline schedule refuses it",
            f"use micro_batch {max(1, s.global_batch // (s.dp * s.pp))} or fewer stages")


def _explain_expert_parallel(problem, s) -> tuple[str, str]:
    shard = s.dp_shard or s.dp
    if (shard * s.tp) % s.ep:
        return (f"ep ({s.ep}) must divide dp_shard * tp ({shard} * {s.tp}): torchtitan builds "
                f"expert parallelism from FSDP and TP ranks",
                f"use ep {largest_divisor_at_most(math.gcd(shard * s.tp, problem.model.num_experts), s.ep)}")
    if s.ep > 1:
        return (f"etp {s.expert_tp} with ep {s.ep}: torchtitan has no expert tensor parallelism "
                f"(experts are whole on each EP rank)", "use etp 1")
    return (f"etp {s.expert_tp} without ep: torchtitan splits experts like the dense MLP",
            f"use etp {s.tp}")


def _explain_seq_len(p: Problem, s) -> tuple[str, str]:
    seq = p.training.seq_len
    if s.cp > 1:
        step = s.tp * 2 * s.cp
        return (f"seq_len ({seq}) must be divisible by tp * 2 * cp ({s.tp} * 2 * {s.cp} = "
                f"{step}) for torchtitan's context parallelism",
                f"use a seq_len that is a multiple of {step}, or a smaller cp")
    return (f"seq_len ({seq}) must be divisible by tp ({s.tp}) for torchtitan's sequence "
            f"parallelism", f"use tp {largest_divisor_at_most(seq, s.tp)}")


def _explain_ddp(p: Problem, s) -> tuple[str, str]:
    if s.cp > 1:
        return (f"zero_stage 0 with cp {s.cp}: torchtitan shards the model states over the "
                f"dp_shard x cp ranks whenever cp > 1 (FSDP), so it cannot run unsharded",
                "use zero_stage 2 or 3")
    return (f"zero_stage 0 with dp {s.dp}, tp {s.tp} and pp {s.pp}: torchtitan's DDP runs data "
            f"parallelism alone (\"DDP has not supported > 1D parallelism\")",
            "use zero_stage 2 or 3 (FSDP), or tp 1 and pp 1")


RULES: dict[Rule, TargetRule] = {
    # Without FSDP torchtitan applies DDP, which it refuses beside any other axis (v0.2.2
    # models/*/infra/parallelize.py: "DDP has not supported > 1D parallelism"); with cp > 1 it
    # always applies FSDP, over dp_shard x cp (parallel_dims.py fsdp_enabled @b5bcd76c).
    Rule.TORCHTITAN_DDP: TargetRule(
        "torchtitan runs ZeRO-0 (DDP) only as pure data parallelism, and never with cp > 1",
        lambda p, c: (c.zero == 0) & (((c.dp > 1) & ((c.tp > 1) | (c.pp > 1))) | (c.cp > 1)),
        _explain_ddp),
    Rule.TORCHTITAN_FP8: fp8_rule("torchtitan", profile().fp8),
    # training.enable_cpu_offload (config/configs.py @b5bcd76c): FSDP2's CPUOffloadPolicy puts
    # "parameters, gradients, and optimizer states" on the host together.
    Rule.TORCHTITAN_OFFLOAD: TargetRule(
        "torchtitan offloads with FSDP only, parameters and optimizer together "
        "(training.enable_cpu_offload)",
        lambda p, c: any_offload(c) & ~((c.opt_offload == 1) & c.param_offload & (c.zero == 3)),
        lambda p, s: ("CPU offload in torchtitan is training.enable_cpu_offload: FSDP keeps the "
                      "parameters, gradients and optimizer states on the host, all of them",
                      "use zero_stage 3 with optimizer_offload 1 and param_offload true, or "
                      "offload nothing")),
    Rule.TORCHTITAN_ZERO1: TargetRule(
        "torchtitan shards with FSDP2: ZeRO stage 0, 2 or 3, not 1",
        lambda p, c: c.zero == 1,
        lambda p, s: ("zero_stage 1: torchtitan shards with FSDP2, which shards gradients too",
                      "use zero_stage 2 (fsdp_reshard_after_forward never) or 3")),
    Rule.TORCHTITAN_FP16: TargetRule(
        "torchtitan trains in bf16 or fp32, not fp16 (use --precision bf16)",
        lambda p, c: everywhere(c, p.training.precision.value == "fp16"),
        lambda p, s: ("precision fp16: torchtitan's mixed_precision_param is bfloat16 or "
                      "float32", "use precision bf16")),
    Rule.TORCHTITAN_SEQUENCE_PARALLEL: TargetRule(
        "torchtitan applies sequence parallelism with tp > 1",
        lambda p, c: (c.tp > 1) & ~c.sp,
        lambda p, s: (f"sequence_parallel false with tp {s.tp}: torchtitan always shards "
                      "activations along the sequence with tensor parallelism",
                      "use sequence_parallel true")),
    # torchtitan/distributed/parallel_dims.py (@b5bcd76c) seq_len_divisor: tp * (cp * 2) with
    # context parallelism (head-tail load balancing), tp for sequence parallelism alone.
    Rule.TORCHTITAN_SEQ_LEN: TargetRule(
        "torchtitan needs seq_len divisible by tp (by tp * 2 * cp with context parallelism)",
        lambda p, c: p.training.seq_len % (c.tp * np.where(c.cp > 1, 2 * c.cp, 1)) != 0,
        _explain_seq_len),
    Rule.TORCHTITAN_CONTEXT_PARALLEL: context_parallel_rule("torchtitan",
                                                            profile().context_parallel),
    # torch.distributed.pipelining PipelineScheduleSingle: "Number of microbatches (m) must be
    # greater than or equal to the number of stages (p)".
    Rule.TORCHTITAN_MICRO_BATCHES: TargetRule(
        "PyTorch's pipeline schedules need as many micro-batches as stages",
        lambda p, c: (c.pp > 1) & (num_micro_batches(c) < c.pp), _explain_micro_batches),
    # torchtitan/distributed/parallel_dims.py (@b5bcd76c): (dp_shard * cp * tp) % ep == 0, EP
    # borrowing FSDP and TP ranks; no expert TP since c4b409af2: experts are whole with ep > 1
    # and split like the dense MLP (etp = tp) without EP.
    Rule.TORCHTITAN_EXPERT_PARALLEL: TargetRule(
        "torchtitan's ep must divide dp_shard * tp, with etp 1 (or etp = tp when ep is 1)",
        lambda p, c: p.model.is_moe & (((c.shard * c.tp) % c.ep != 0)
                                       | ((c.ep > 1) & (c.etp != 1))
                                       | ((c.ep == 1) & (c.etp != c.tp))),
        _explain_expert_parallel),
}
