"""torchtitan: a recipe module for the current releases and a TOML job config for 0.2.x, and a
reader for both.

Current torchtitan describes a run as a Python function returning its `Trainer.Config`,
chosen with `--module` and `--config` (torchtitan/config/manager.py; the `--section.option`
flags are frozen); that recipe is written and read in `torchtitan_recipe`. Releases up to
0.2.x read `--job.config_file x.toml`, field names checked against
torchtitan/config/job_config.py @6404b932, and the degree check against
torchtitan/distributed/parallel_dims.py @0119de15. The reader parses a recipe with `ast` and
never runs it.
"""

from __future__ import annotations

import math
import textwrap
from typing import Any

import numpy as np

from cost_models.enums import AttentionKind, CpComm, Fp8Recipe, Precision, Recompute, ZeroStage
from planner.frameworks import torchtitan_recipe
from planner.frameworks.base import (LaunchPlan, ParsedConfig, closest, did_you_mean,
                                     header_lines, transformer_shape)
from planner.errors import InputError
from planner.inputs import profiles
from planner.schemas.framework import FrameworkProfile
from planner.schemas.model import OutputBlock
from planner.core.rules import (Rule, TargetRule, any_offload, context_parallel_rule, everywhere,
                                fp8_rule, largest_divisor_at_most, num_micro_batches)
from planner.core.problem import Problem
from planner.inputs.safe_parse import load_toml
from planner.schemas.strategy import LaunchTarget

CHECKED_AGAINST = (f"{torchtitan_recipe.CHECKED_AGAINST}; torchtitan/config/job_config.py "
                   f"@6404b932 (0.2.x TOML)")

PARALLELISM_KEYS = frozenset({
    "data_parallel_replicate_degree", "enable_compiled_autograd", "data_parallel_shard_degree",
    "fsdp_reshard_after_forward", "enable_fsdp_symm_mem", "tensor_parallel_degree",
    "disable_loss_parallel", "enable_async_tensor_parallel", "enable_sequence_parallel",
    "full_dtensor", "pipeline_parallel_degree", "pipeline_parallel_split_points",
    "module_fqns_per_model_part", "pipeline_parallel_first_stage_less_layers",
    "pipeline_parallel_last_stage_less_layers", "pipeline_parallel_layers_per_stage",
    "pipeline_parallel_schedule", "pipeline_parallel_schedule_csv",
    "pipeline_parallel_microbatch_size", "context_parallel_degree",
    "context_parallel_load_balancer", "context_parallel_rotate_method", "expert_parallel_degree",
    "expert_tensor_parallel_degree",
    # config/configs.py @b5bcd76c (the recipe's ParallelismConfig)
    "spmd_backend", "num_pp_microbatches", "context_parallel_ptrr_mask_key",
})
TRAINING_KEYS = frozenset({
    "dataset", "dataset_path", "local_batch_size", "batch_size", "global_batch_size", "seq_len",
    "max_norm", "steps", "enable_cpu_offload", "dtype", "mixed_precision_param",
    "mixed_precision_reduce", "compile", "gc_freq", "gc_debug", "seed", "deterministic",
    # config/configs.py @b5bcd76c (the recipe's TrainingConfig counts tokens)
    "num_tokens_per_microbatch_per_dp_rank", "num_tokens_per_train_step",
    "max_context_length", "disable_cuda_graphs",
})
CHECKPOINT_KEYS = frozenset({"mode", "selective_ac_option",
                             "per_op_sac_force_recompute_mm_shapes_by_fqns", "early_stop",
                             "memory_budget", "visualize_memory_budget_pareto",
                             "preserve_rng_state", "determinism_check", "debug",
                             "force_recompute_mm_shapes_by_fqns"})
COMPILE_KEYS = frozenset({"enable", "enable_async_tensor_parallel", "components", "backend"})
SECTION_KEYS = {"parallelism": PARALLELISM_KEYS, "training": TRAINING_KEYS,
                "activation_checkpoint": CHECKPOINT_KEYS, "compile": COMPILE_KEYS}
"""Fields of the config sections the planner reads; torchtitan refuses any other field."""

CHECKPOINT_MODES = ("selective", "full", "memory_budget", "none")
"""activation_checkpoint.mode (job_config.py @6404b932: Literal[...]); the recipe's policies
FullAC / SelectiveAC / MemoryBudgetAC / None read as the same names."""

PRECISIONS = {Precision.BF16: "bfloat16", Precision.FP32: "float32", Precision.FP8: "bfloat16"}

FLOAT8 = "quantize.linear.float8"
MX = "quantize.linear.mx"
"""torchtitan 0.2.x model converters (config/job_config.py @238fa995: [model] converters; the
older names were "float8" and "mx"): torchao Float8Linear (recipe_name tensorwise, rowwise) and
MXLinear, leaving the output layer in bf16 (filter_fqns) unless the run puts it in FP8."""

FILTER_DEFAULTS = {FLOAT8: [], MX: ["output"]}
"""filter_fqns where a section leaves it out (config/job_config.py @238fa995): the float8
converter swaps the output layer too, the MX one skips it."""
OUTPUT_FQN = "output"
"""The output layer's module name in torchtitan's models (nn.Linear `output`)."""


def output_layer_filtered(filter_fqns) -> bool:
    """Whether a converter with these filter_fqns leaves the output layer alone: an entry that
    is part of its name skips it (components/quantization/utils.py module_filter_fn:
    `any(filter_fqn in fqn ...)`); "auto_filter_small_kn" is a switch, not a name."""
    return any(str(e) in OUTPUT_FQN for e in filter_fqns if e != "auto_filter_small_kn")


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
    if plan.overlap("tp_comm_overlap") and s.tp > 1 and not recipe:
        fields["enable_async_tensor_parallel"] = True      # micro-pipelined TP (async TP)
    if s.pp > 1:
        fields["pipeline_parallel_schedule"] = "Interleaved1F1B" if s.vpp > 1 else "1F1B"
        if recipe:       # micro-batches per data-parallel rank and step (configs.py)
            fields["num_pp_microbatches"] = plan.num_micro_batches
        else:
            fields["pipeline_parallel_microbatch_size"] = s.micro_batch
        if s.layers_per_stage is None:
            fields.update(
                pipeline_parallel_layers_per_stage=layers // (s.pp * s.vpp),
                # The embedding and the output layer are not counted as layers of their stages.
                pipeline_parallel_first_stage_less_layers=0,
                pipeline_parallel_last_stage_less_layers=0)
        else:
            fields["module_fqns_per_model_part"] = module_fqns(
                s.layers_per_stage, output="lm_head" if recipe else "output")
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


def _training(plan: LaunchPlan) -> dict[str, Any]:
    """[training] of the 0.2.x TOML, in samples."""
    s, training = plan.strategy, plan.problem.training
    # With a pipeline a step feeds local_batch_size samples in micro-batches; without one,
    # local_batch_size is the micro-batch and torchtitan accumulates gradients up to the
    # global batch.
    local = s.global_batch // s.dp if s.pp > 1 else s.micro_batch
    out = {"local_batch_size": local, "global_batch_size": s.global_batch,
           "seq_len": training.seq_len, **_precision_fields(plan)}
    if s.optimizer_offload or s.param_offload:   # FSDP2 CPUOffloadPolicy: all of it, together
        out["enable_cpu_offload"] = True
    return out


def _precision_fields(plan: LaunchPlan) -> dict[str, Any]:
    return {"mixed_precision_param": PRECISIONS.get(plan.problem.training.precision, "bfloat16"),
            "mixed_precision_reduce": "float32", "steps": plan.train_iters or 10000}


def _recipe_training(plan: LaunchPlan) -> dict[str, Any]:
    """The recipe's TrainingConfig, in tokens (configs.py @b5bcd76c): a micro-batch of whole
    sequences per data-parallel rank, the global batch per step; with a pipeline the step's
    micro-batches are num_pp_microbatches (one accumulation step), without one torchtitan
    accumulates up to the global batch. CUDA graphs, on by default, refuse pipelines and the
    default expert-parallel dispatchers (trainer.py _validate_cuda_graphs)."""
    s, seq = plan.strategy, plan.problem.training.seq_len
    out = {"num_tokens_per_microbatch_per_dp_rank": s.micro_batch * seq,
           "num_tokens_per_train_step": s.global_batch * seq, "max_context_length": seq,
           **_precision_fields(plan)}
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


def _header(plan: LaunchPlan, target: str) -> list[str]:
    lines = header_lines(plan, target, CHECKED_AGAINST)
    if plan.problem.attention is not AttentionKind.FLASH:
        lines += textwrap.wrap(UNFUSED_NOTE, width=94)
    return [f"# {line}" for line in lines]


def _toml(plan: LaunchPlan) -> str:
    name = plan.problem.model.name
    registered = torchtitan_recipe.REGISTERED.get(name)
    lines = [*_header(plan, "torchtitan 0.2.x"),
             "# Run: torchrun ... -m torchtitan.train --job.config_file torchtitan.toml", "",
             "[job]", f'description = "planner plan for {name}"', "", "[model]"]
    if registered:
        lines += [f'name = "{registered.module}"', f'flavor = "{registered.flavor}"']
    else:
        lines += [f"# torchtitan ships no {name}: register it as a model and name it here",
                  f'name = "{name}"']
    converters, quantize = _float8_sections(plan)
    if converters:
        lines.append(f"converters = {_toml_value(converters)}")
    sections = {"training": _training(plan), "parallelism": _parallelism(plan, recipe=False),
                "activation_checkpoint": {"mode": _checkpoint_mode(plan.strategy.recompute)},
                **quantize}
    if plan.strategy.recompute is Recompute.SELECTIVE:
        sections["activation_checkpoint"]["selective_ac_option"] = "op"
    for section, fields in sections.items():
        lines += ["", f"[{section}]", *(f"{k} = {_toml_value(v)}" for k, v in fields.items())]
    return "\n".join(lines) + "\n"


def _recipe(plan: LaunchPlan) -> str:
    s, model = plan.strategy, plan.problem.model
    registered = torchtitan_recipe.REGISTERED.get(model.name)
    # Only DeepSeek-V3's registry takes num_mtp_layers (models/deepseek_v3/__init__.py).
    mtp = (transformer_shape(model, "torchtitan").mtp_layers
           if registered and registered.module == "deepseek_v3" else 0)
    return torchtitan_recipe.render(torchtitan_recipe.RecipeParts(
        name=model.name, label=s.degrees_label(), header=_header(plan, "torchtitan"),
        training=_recipe_training(plan),
        parallelism={**_parallelism(plan, recipe=True),
                     "enable_sequence_parallel": s.sequence_parallel},
        recompute=_checkpoint_mode(s.recompute),
        async_tp=plan.overlap("tp_comm_overlap") if s.tp > 1 else None, mtp_layers=mtp))


def emit(plan: LaunchPlan) -> dict[str, str]:
    """The recipe module and the 0.2.x TOML; FP8 plans get the TOML alone: current torchtitan
    sets float8 on its model registry, not in the trainer config a recipe returns, and dropped
    the tensorwise recipe and FP8 all-gather (6348d93, 2026-04) that 0.2.x runs."""
    if plan.problem.training.precision is Precision.FP8:
        return {"torchtitan.toml": _toml(plan)}
    return {"torchtitan_recipe.py": _recipe(plan), "torchtitan.toml": _toml(plan)}


# --------------------------------------------------------------------------- reading

def _read_toml(text: str, file: str) -> dict[str, Any]:
    try:
        return load_toml(text, file)
    except ModuleNotFoundError:                   # Python 3.10: no tomllib
        raise InputError(f"{file}: reading TOML needs Python 3.11 or newer") from None


def _int(fields: dict, key: str, default: int, file: str) -> int:
    value = fields.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{file}: {key}: expected an integer (got {value!r})")
    return value



def _fqn_counts(parts: Any, file: str) -> tuple[int, ...]:
    """Decoder layers in each part of module_fqns_per_model_part (a list of lists of names)."""
    if not isinstance(parts, list) or not all(
            isinstance(part, list) and all(isinstance(n, str) for n in part) for part in parts):
        raise InputError(f"{file}: module_fqns_per_model_part: expected a list of lists of "
                         f"module names, one list per model part")
    counts = tuple(sum(1 for name in part if name.startswith("layers.")) for part in parts)
    if min(counts, default=0) < 1:
        empty = counts.index(0) if counts else 0
        raise InputError(f"{file}: module_fqns_per_model_part: part {empty} holds no layers.N; "
                         f"the planner needs a decoder layer in every part")
    return counts


SINGLE_STAGE_SCHEDULES = ("1f1b", "gpipe")
"""torch.distributed.pipelining schedules that run one stage per rank."""


def _default_split(parsed: ParsedConfig, par: dict, layers: int, pp: int, file: str) -> int:
    """The layout torchtitan builds without module names: num_virtual_stages =
    ceil((layers + first_less + last_less) / layers_per_stage) (one per rank for single-stage
    schedules, two for the others without layers_per_stage); the layers plus the
    first_less/last_less weights of the embedding and the output spread evenly over the
    stages, the first and last stages giving up those weights (pipeline_parallel.py,
    generate_llm_fqn_per_model_part). Returns vpp; records the layout when uneven."""
    schedule = str(par.get("pipeline_parallel_schedule", "1F1B")).lower()
    first = _int(par, "pipeline_parallel_first_stage_less_layers", 1, file)
    last = _int(par, "pipeline_parallel_last_stage_less_layers", 1, file)
    per_stage = par.get("pipeline_parallel_layers_per_stage")
    single = schedule in SINGLE_STAGE_SCHEDULES
    if isinstance(per_stage, int) and per_stage > 0:
        stages = -(-(layers + first + last) // per_stage)
        if stages % pp:
            parsed.finding("torchtitan_pipeline", f"torchtitan stops: number of virtual stages "
                           f"({stages}) must be divisible by pipeline parallel size ({pp})",
                           "choose pipeline_parallel_layers_per_stage so that it is")
            return 1
        if single and stages != pp:
            parsed.finding("torchtitan_pipeline", f"torchtitan stops: single stage schedule "
                           f"{par.get('pipeline_parallel_schedule', '1F1B')} requires exactly 1 "
                           f"stage per rank, and this layout has {stages // pp}",
                           "use Interleaved1F1B, or a layers_per_stage giving one stage a rank")
        elif not single and stages // pp < 2:
            parsed.finding("torchtitan_pipeline", "torchtitan stops: a multi-stage schedule "
                           "requires at least 2 stages per rank",
                           "use 1F1B, or fewer layers per stage")
    else:
        stages = pp if single else 2 * pp
    effective = layers + first + last
    if stages > effective:
        parsed.finding("torchtitan_pipeline", f"torchtitan stops: number of stages ({stages}) "
                       f"cannot be greater than effective layers ({effective})",
                       "use fewer pipeline stages")
        return 1
    counts = [effective // stages + (1 if i < effective % stages else 0) for i in range(stages)]
    counts[0] -= first
    counts[-1] -= last
    if min(counts) < 1:
        raise InputError(f"{file}: the split torchtitan makes leaves a stage without layers "
                         f"({counts}); the planner needs a layer in every stage")
    if len(set(counts)) > 1:
        parsed.strategy["layers_per_stage"] = tuple(counts)
    return stages // pp


def _read_float8(parsed: ParsedConfig, sections: dict[str, Any], problem: Problem) -> None:
    """FP8 from the 0.2.x [model] converters and their [quantize.linear.*] sections; the
    output layer in FP8 where no filter_fqns entry skips it and 16 divides its dimensions."""
    model = sections.get("model", {})
    converters = model.get("converters", []) if isinstance(model, dict) else []
    linear = sections.get("quantize", {}).get("linear", {}) \
        if isinstance(sections.get("quantize"), dict) else {}
    if not isinstance(converters, list):
        return
    if MX in converters or "mx" in converters:
        options = linear.get("mx", {}) if isinstance(linear, dict) else {}
        parsed.training.update(precision=Precision.FP8, fp8_recipe=Fp8Recipe.MXFP8)
        section = MX
    elif FLOAT8 in converters or "float8" in converters:
        options = linear.get("float8", {}) if isinstance(linear, dict) else {}
        name = options.get("recipe_name") or "tensorwise"
        recipe = Fp8Recipe.ROWWISE if str(name).startswith("rowwise") else Fp8Recipe.TENSORWISE
        parsed.training.update(precision=Precision.FP8, fp8_recipe=recipe)
        parsed.strategy["fp8_param_gather"] = bool(options.get("enable_fsdp_float8_all_gather"))
        section = FLOAT8
    else:
        return
    filters = options.get("filter_fqns", FILTER_DEFAULTS[section]) \
        if isinstance(options, dict) else FILTER_DEFAULTS[section]
    if isinstance(filters, str):        # --quantize.linear.float8.filter_fqns "a,b"
        filters = [f for f in filters.split(",") if f]
    if isinstance(filters, list):
        output = next((b for b in problem.model.blocks if isinstance(b, OutputBlock)), None)
        swappable = output is not None and not (output.vocab_size % 16 or output.hidden % 16)
        parsed.training["fp8_output_layer"] = swappable and not output_layer_filtered(filters)


def parse(text: str, *, file: str, problem: Problem, num_gpus: int | None,
          function: str | None = None) -> ParsedConfig:
    """A torchtitan TOML (0.2.x) or recipe module -> its strategy and what torchtitan refuses.
    `function`: the recipe function to read (`recipe.py:function`)."""
    parsed = ParsedConfig(strategy={}, target=LaunchTarget.TORCHTITAN)
    if file.endswith(".toml"):
        sections = _read_toml(text, file)
    else:
        sections, notes = torchtitan_recipe.sections(text, file, model=problem.model.name,
                                                     function=function)
        parsed.notes.extend(notes)
    for section in SECTION_KEYS:
        if not isinstance(sections.get(section, {}), dict):
            raise InputError(f"{file}: {section}: must be a table of settings "
                             f"(got {sections[section]!r})")
    for section, known in SECTION_KEYS.items():
        for key in sections.get(section, {}):
            if key not in known:
                parsed.finding("torchtitan_unknown_key",
                               f"torchtitan refuses {section}.{key}: no such field"
                               f"{did_you_mean(key, known)}", f"fix or remove {section}.{key}")
    par = sections.get("parallelism", {})
    train = sections.get("training", {})
    tp = _int(par, "tensor_parallel_degree", 1, file)
    pp = _int(par, "pipeline_parallel_degree", 1, file)
    cp = _int(par, "context_parallel_degree", 1, file)
    replicate = _int(par, "data_parallel_replicate_degree", 1, file)
    shard = _int(par, "data_parallel_shard_degree", -1, file)
    if shard == -1:                               # the leftover ranks (parallel_dims.py)
        world = num_gpus or problem.num_gpus
        shard = max(1, world // (replicate * cp * tp * pp))
    dp = replicate * shard
    if replicate > 1 and (shard > 1 or cp > 1):
        parsed.strategy["dp_shard"] = shard        # HSDP (sharded over shard x cp ranks)
    reshard = par.get("fsdp_reshard_after_forward", "default")
    if shard == 1 and cp == 1:
        # With cp > 1 torchtitan shards over the dp_shard x cp ranks even at dp_shard 1
        # (parallel_dims.py fsdp_enabled: dp_shard > 1 or cp > 1).
        zero = ZeroStage.NONE
    elif reshard == "never" or (reshard == "default" and pp > 1):
        zero = ZeroStage.GRADIENTS                # FSDP without resharding after forward
    else:
        zero = ZeroStage.PARAMETERS
    layers = problem.model.num_layers
    vpp = 1
    parts = par.get("module_fqns_per_model_part")
    if pp > 1 and parts is not None:
        counts = _fqn_counts(parts, file)
        if len(counts) % pp:
            parsed.finding("torchtitan_pipeline", f"torchtitan stops: {len(counts)} model parts "
                           f"are not divisible by pipeline_parallel_degree ({pp})",
                           f"give {pp} x (stages per rank) parts")
        else:
            vpp = len(counts) // pp
            parsed.strategy["layers_per_stage"] = counts
    elif pp > 1:
        vpp = _default_split(parsed, par, layers, pp, file)
    if any(key in train for key in TOKEN_KEYS):
        micro, global_batch = _token_batches(parsed, train, par, pp=pp, dp=dp,
                                             seq_len=problem.training.seq_len, file=file)
    else:
        local = _int(train, "local_batch_size", _int(train, "batch_size", 8, file), file)
        micro = _int(par, "pipeline_parallel_microbatch_size", 1, file) if pp > 1 else local
        global_batch = _int(train, "global_batch_size", -1, file)
        if global_batch < 0:
            global_batch = local * dp
    recompute = _recompute(parsed, sections.get("activation_checkpoint", {}), file)
    sp = bool(par.get("enable_sequence_parallel", True)) and tp > 1
    ep = _int(par, "expert_parallel_degree", 1, file)
    # torchtitan before c4b409af2 had expert_tensor_parallel_degree; since, experts are whole
    # with EP and split like the dense MLP without.
    etp = _int(par, "expert_tensor_parallel_degree", 1 if ep > 1 else tp, file)
    parsed.strategy.update(ep=ep, etp=etp)
    if cp > 1:
        # HEAD runs CP through FlexAttention with K/V all-gathered (models/common/
        # decoder_sharding.py); before 8e5554449 context_parallel_rotate_method chose it:
        # "allgather", or "alltoall" passing K/V shards around a ring.
        rotate = par.get("context_parallel_rotate_method", "allgather")
        parsed.strategy.update(cp=cp, cp_comm=CpComm.P2P if rotate == "alltoall"
                               else CpComm.ALL_GATHER)
    parsed.strategy.update(dp=dp, tp=tp, pp=pp, vpp=vpp, micro_batch=micro,
                           global_batch=global_batch, sequence_parallel=sp,
                           recompute=recompute, zero_stage=zero,
                           tp_comm_overlap=_async_tp(parsed, par, sections.get("compile", {}))
                           and tp > 1)
    if not file.endswith(".toml"):
        _cuda_graphs(parsed, sections, pp=pp, ep=ep if problem.model.is_moe else 1)
    if train.get("enable_cpu_offload") is True:
        # FSDP2's CPUOffloadPolicy: parameters, gradients and optimizer states on the host.
        parsed.strategy.update(optimizer_offload=1.0, param_offload=True)
    precision = train.get("mixed_precision_param", "bfloat16")
    parsed.training["precision"] = Precision.FP32 if precision == "float32" else Precision.BF16
    _read_float8(parsed, sections, problem)
    if "seq_len" in train:
        parsed.training["seq_len"] = _int(train, "seq_len", 2048, file)
    return parsed


TOKEN_KEYS = ("num_tokens_per_microbatch_per_dp_rank", "num_tokens_per_train_step",
              "max_context_length")
"""The recipe's TrainingConfig batch fields (configs.py @b5bcd76c): tokens, not samples."""


def _token_batches(parsed: ParsedConfig, train: dict, par: dict, *, pp: int, dp: int,
                   seq_len: int, file: str) -> tuple[int, int]:
    """(micro-batch, global batch) in sequences from the token counts (trainer.py @b5bcd76c):
    a step is num_pp_microbatches micro-batches per data-parallel rank (1 without a pipeline)
    times gradient-accumulation steps, num_tokens_per_train_step // (that iteration's tokens x
    dp), which torchtitan refuses unless whole."""
    if "max_context_length" in train:
        seq_len = _int(train, "max_context_length", seq_len, file)
        parsed.training["seq_len"] = seq_len
    tokens = _int(train, "num_tokens_per_microbatch_per_dp_rank", 16384, file)
    if tokens % seq_len or tokens < seq_len:
        raise InputError(f"{file}: training.num_tokens_per_microbatch_per_dp_rank ({tokens}) "
                         f"must be a multiple of max_context_length ({seq_len}): the planner "
                         f"prices micro-batches of whole sequences")
    micro = tokens // seq_len
    per_iteration = tokens * (_int(par, "num_pp_microbatches", 1, file) if pp > 1 else 1) * dp
    step = _int(train, "num_tokens_per_train_step", -1, file)
    if step < 0:
        step = per_iteration
    elif step % per_iteration:
        parsed.finding("torchtitan_batch", f"torchtitan stops: training.num_tokens_per_train_"
                       f"step ({step}) must be divisible by the number of tokens processed "
                       f"globally in one gradient accumulation iteration ({per_iteration})",
                       f"use num_tokens_per_train_step {max(1, step // per_iteration) * per_iteration}")
    return micro, max(1, step // seq_len)


def _recompute(parsed: ParsedConfig, checkpoint: dict, file: str) -> Recompute:
    """activation_checkpoint.mode (0.2.x TOML, recipes before c5d93d109) or the policy a
    current recipe names; torchtitan refuses any other mode (job_config.py Literal)."""
    mode = checkpoint.get("mode", "selective")
    if not isinstance(mode, str) or mode not in CHECKPOINT_MODES:
        close = closest(str(mode), CHECKPOINT_MODES)
        hint = f" (did you mean '{close}'?)" if close else ""
        raise InputError(f"{file}: activation_checkpoint.mode: {mode!r:.40} is not one of "
                         f"{', '.join(CHECKPOINT_MODES)}{hint}")
    if mode == "memory_budget":
        parsed.notes.append("activation_checkpoint memory_budget: the compiler picks what to "
                            "recompute under the budget; priced as selective")
    return {"none": Recompute.NONE, "full": Recompute.FULL}.get(mode, Recompute.SELECTIVE)


def _async_tp(parsed: ParsedConfig, par: dict, compile_section: dict) -> bool:
    """Async TP: parallelism.enable_async_tensor_parallel (0.2.x), compile's since 737594746,
    which refuses it without compiling the model (CompileConfig.__post_init__)."""
    if compile_section.get("enable_async_tensor_parallel") is not True:
        return bool(par.get("enable_async_tensor_parallel", False))
    components = compile_section.get("components", ["model", "loss"])
    if compile_section.get("enable") is False or "model" not in components:
        parsed.finding("torchtitan_compile", "torchtitan stops: Async TP requires 'model' in "
                       "--compile.components and --compile.enable",
                       "set compile enable=True with 'model' in components")
    return True


def _cuda_graphs(parsed: ParsedConfig, sections: dict, *, pp: int, ep: int) -> None:
    """CUDA graphs are on unless training.disable_cuda_graphs, and refuse pipelines and the
    expert-parallel dispatchers that synchronize with the host (trainer.py @b5bcd76c
    _validate_cuda_graphs): a finding where the file's TrainingConfig leaves them on, a note
    where a base recipe the file imports may switch them off."""
    train = sections.get("training", {})
    if train.get("disable_cuda_graphs") is True or (pp == 1 and ep == 1):
        return
    what = (f"pipeline_parallel_degree {pp}: CUDA graphs do not support pipeline parallelism"
            if pp > 1 else f"expert_parallel_degree {ep}: CUDA graphs support only expert "
            f"parallel token dispatchers without CPU synchronization (HybridEP with "
            f"non_blocking_capacity_factor, MinimalAsyncEP)")
    if "disable_cuda_graphs" in train or sections.get("_constructed", {}).get("training"):
        parsed.finding("torchtitan_cuda_graphs", f"torchtitan stops: {what}",
                       "set training.disable_cuda_graphs=True")
    else:
        parsed.notes.append(f"{what}; this file leaves training.disable_cuda_graphs to its base "
                            f"recipe, and torchtitan stops unless that sets it")


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
