"""torchtitan: a recipe module for the current releases and a TOML job config for 0.2.x, and a
reader for both.

Current torchtitan describes a run as a Python function returning its `Trainer.Config`,
chosen with `--module` and `--config` (torchtitan/config/manager.py; the `--section.option`
flags are frozen); releases up to 0.2.x read `--job.config_file x.toml`. Field names were
checked against torchtitan/config/configs.py @0014ac2c and trainer.py @003fe280 (recipe),
torchtitan/config/job_config.py @6404b932 (TOML), and the degree check against
torchtitan/distributed/parallel_dims.py @0119de15. The reader parses a recipe with `ast` and
never runs it.
"""

from __future__ import annotations

import ast
import math
import textwrap
from typing import Any

import numpy as np

from cost_models.enums import AttentionKind, CpComm, Fp8Recipe, Precision, Recompute, ZeroStage
from planner.frameworks.base import (LaunchPlan, ParsedConfig, did_you_mean, header_lines,
                               parse_python, transformer_shape)
from planner.errors import InputError
from planner.inputs import profiles
from planner.schemas.framework import FrameworkProfile
from planner.schemas.model import OutputBlock
from planner.core.rules import (Rule, TargetRule, any_offload, context_parallel_rule, everywhere,
                                fp8_rule, largest_divisor_at_most, num_micro_batches)
from planner.core.problem import Problem
from planner.inputs.safe_parse import load_toml
from planner.schemas.strategy import LaunchTarget

CHECKED_AGAINST = ("pytorch/torchtitan torchtitan/config/configs.py @0014ac2c, trainer.py "
                   "@003fe280 (recipe); torchtitan/config/job_config.py @6404b932 (0.2.x TOML)")

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
})
TRAINING_KEYS = frozenset({
    "dataset", "dataset_path", "local_batch_size", "batch_size", "global_batch_size", "seq_len",
    "max_norm", "steps", "enable_cpu_offload", "dtype", "mixed_precision_param",
    "mixed_precision_reduce", "compile", "gc_freq", "gc_debug", "seed", "deterministic",
})
CHECKPOINT_KEYS = frozenset({"mode", "selective_ac_option",
                             "per_op_sac_force_recompute_mm_shapes_by_fqns", "early_stop",
                             "memory_budget", "visualize_memory_budget_pareto",
                             "preserve_rng_state", "determinism_check", "debug"})
SECTION_KEYS = {"parallelism": PARALLELISM_KEYS, "training": TRAINING_KEYS,
                "activation_checkpoint": CHECKPOINT_KEYS}
"""Fields of the config sections the planner reads; torchtitan refuses any other field."""

LLAMA3_FLAVORS = {"llama3-8b": ("8B", "llama3_8b"), "llama3-70b": ("70B", "llama3_70b"),
                  "llama3-405b": ("405B", "llama3_405b")}
"""Zoo models torchtitan ships: TOML flavor and recipe function (models/llama3)."""

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


def _parallelism(plan: LaunchPlan) -> dict[str, Any]:
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
    if plan.overlap("tp_comm_overlap") and s.tp > 1:
        fields["enable_async_tensor_parallel"] = True      # micro-pipelined TP (async TP)
    if s.pp > 1:
        fields.update(
            pipeline_parallel_schedule="Interleaved1F1B" if s.vpp > 1 else "1F1B",
            pipeline_parallel_microbatch_size=s.micro_batch)
        if s.layers_per_stage is None:
            fields.update(
                pipeline_parallel_layers_per_stage=layers // (s.pp * s.vpp),
                # The embedding and the output layer are not counted as layers of their stages.
                pipeline_parallel_first_stage_less_layers=0,
                pipeline_parallel_last_stage_less_layers=0)
        else:
            fields["module_fqns_per_model_part"] = module_fqns(s.layers_per_stage)
    return fields


def module_fqns(counts) -> list[list[str]]:
    """torchtitan's module names per pipeline part (model chunk) of a decoder: tok_embeddings
    first, layers.<i> in order, norm and output last (pipeline_parallel.py,
    generate_llm_fqn_per_model_part)."""
    parts, layer = [], 0
    for k, count in enumerate(counts):
        part = ["tok_embeddings"] if k == 0 else []
        part += [f"layers.{i}" for i in range(layer, layer + count)]
        layer += count
        if k == len(counts) - 1:
            part += ["norm", "output"]
        parts.append(part)
    return parts


def _training(plan: LaunchPlan) -> dict[str, Any]:
    s, training = plan.strategy, plan.problem.training
    # With a pipeline a step feeds local_batch_size samples in micro-batches; without one,
    # local_batch_size is the micro-batch and torchtitan accumulates gradients up to the
    # global batch.
    local = s.global_batch // s.dp if s.pp > 1 else s.micro_batch
    out = {"local_batch_size": local, "global_batch_size": s.global_batch,
           "seq_len": training.seq_len,
           "mixed_precision_param": PRECISIONS.get(training.precision, "bfloat16"),
           "mixed_precision_reduce": "float32", "steps": plan.train_iters or 10000}
    if s.optimizer_offload or s.param_offload:   # FSDP2 CPUOffloadPolicy: all of it, together
        out["enable_cpu_offload"] = True
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
    flavor = LLAMA3_FLAVORS.get(name)
    lines = [*_header(plan, "torchtitan 0.2.x"),
             "# Run: torchrun ... -m torchtitan.train --job.config_file torchtitan.toml", "",
             "[job]", f'description = "planner plan for {name}"', "", "[model]"]
    if flavor:
        lines += ['name = "llama3"', f'flavor = "{flavor[0]}"']
    else:
        lines += [f"# torchtitan ships no {name}: register it as a model and name it here",
                  f'name = "{name}"']
    converters, quantize = _float8_sections(plan)
    if converters:
        lines.append(f"converters = {_toml_value(converters)}")
    sections = {"training": _training(plan), "parallelism": _parallelism(plan),
                "activation_checkpoint": {"mode": _checkpoint_mode(plan.strategy.recompute)},
                **quantize}
    if plan.strategy.recompute is Recompute.SELECTIVE:
        sections["activation_checkpoint"]["selective_ac_option"] = "op"
    for section, fields in sections.items():
        lines += ["", f"[{section}]", *(f"{k} = {_toml_value(v)}" for k, v in fields.items())]
    return "\n".join(lines) + "\n"


def _recipe(plan: LaunchPlan) -> str:
    name = plan.problem.model.name
    flavor = LLAMA3_FLAVORS.get(name)
    parallelism = {**_parallelism(plan),
                   "enable_sequence_parallel": plan.strategy.sequence_parallel}
    if flavor:
        base = [f"from torchtitan.models.llama3.config_registry import {flavor[1]} as base_config"]
    else:
        base = ["", f"# torchtitan ships no recipe for {name}: import the function that returns "
                "its", "# Trainer.Config as base_config.",
                "def base_config():",
                f'    raise RuntimeError("set base_config to the recipe of {name} (see the '
                f'comment above)")']

    def call(head: str, fields: dict[str, Any]) -> str:
        inner = "".join(f"\n            {k}={v!r}," for k, v in fields.items())
        return f"{head}({inner}\n        )"

    lines = [
        *_header(plan, "torchtitan"),
        "# Run: torchrun ... -m torchtitan.train --module torchtitan_recipe --config planner_plan",
        "",
        "from dataclasses import replace", "",
        "from torchtitan.config.configs import ActivationCheckpointConfig, ParallelismConfig",
        "from torchtitan.trainer import Trainer", "",
        *base, "", "",
        "def planner_plan() -> Trainer.Config:",
        f'    """{name}: {plan.strategy.degrees_label()} (planner)."""',
        "    config = base_config()",
        "    return replace(",
        "        config,",
        "        training=" + call("replace", {"__obj__": None, **_training(plan)})
        .replace("\n            __obj__=None,", "config.training,") + ",",
        "        parallelism=" + call("ParallelismConfig", parallelism) + ",",
        "        activation_checkpoint=ActivationCheckpointConfig("
        f"mode={_checkpoint_mode(plan.strategy.recompute)!r}),",
        "    )", ""]
    return "\n".join(lines)


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


def _recipe_sections(text: str, file: str) -> dict[str, dict[str, Any]]:
    """Keyword arguments of the config constructors in a recipe module (literals only)."""
    tree = parse_python(text, file)
    names = {"ParallelismConfig": "parallelism", "TrainingConfig": "training",
             "ActivationCheckpointConfig": "activation_checkpoint"}
    sections: dict[str, dict[str, Any]] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        section = names.get(called)
        if called == "replace" and node.args and isinstance(node.args[0], ast.Attribute) \
                and node.args[0].attr == "training":
            section = "training"
        if section is None:
            continue
        for keyword in node.keywords:
            if keyword.arg is None:
                continue
            try:
                value = ast.literal_eval(keyword.value)
            except ValueError:
                continue                          # computed at run time: not ours to guess
            sections.setdefault(section, {})[keyword.arg] = value
    return sections


def _int(fields: dict, key: str, default: int, file: str) -> int:
    value = fields.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{file}: {key}: expected an integer (got {value!r})")
    return value



def _degree(par: dict, key: str, file: str, default: int = 1) -> int:
    """A [parallelism] degree: an integer of at least 1 (torchtitan's ParallelDims asserts
    the same; 0 would divide by zero here)."""
    value = _int(par, key, default, file)
    if value < 1:
        raise InputError(f"{file}: parallelism.{key}: must be at least 1 (got {value})")
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


def parse(text: str, *, file: str, problem: Problem, num_gpus: int | None) -> ParsedConfig:
    """A torchtitan TOML (0.2.x) or recipe module -> its strategy and what torchtitan refuses."""
    sections = (_read_toml(text, file) if file.endswith(".toml")
                else _recipe_sections(text, file))
    parsed = ParsedConfig(strategy={}, target=LaunchTarget.TORCHTITAN)
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
    tp = _degree(par, "tensor_parallel_degree", file)
    pp = _degree(par, "pipeline_parallel_degree", file)
    cp = _degree(par, "context_parallel_degree", file)
    replicate = _degree(par, "data_parallel_replicate_degree", file)
    shard = _int(par, "data_parallel_shard_degree", -1, file)
    if shard != -1 and shard < 1:
        raise InputError(f"{file}: parallelism.data_parallel_shard_degree: must be at least 1, "
                         f"or -1 for the ranks left over (got {shard})")
    if shard == -1:                               # the leftover ranks (parallel_dims.py)
        world = num_gpus or problem.num_gpus
        shard = max(1, world // (replicate * cp * tp * pp))
    dp = replicate * shard
    if replicate > 1 and shard > 1:
        parsed.strategy["dp_shard"] = shard        # HSDP
    reshard = par.get("fsdp_reshard_after_forward", "default")
    if shard == 1:
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
    local = _int(train, "local_batch_size", _int(train, "batch_size", 8, file), file)
    micro = _int(par, "pipeline_parallel_microbatch_size", 1, file) if pp > 1 else local
    global_batch = _int(train, "global_batch_size", -1, file)
    if global_batch < 0:
        global_batch = local * dp
    mode = sections.get("activation_checkpoint", {}).get("mode", "selective")
    if not isinstance(mode, str):
        raise InputError(f"{file}: activation_checkpoint.mode: must be a string such as "
                         f"\"selective\" (got {mode!r:.40})")
    recompute = {"none": Recompute.NONE, "full": Recompute.FULL}.get(mode, Recompute.SELECTIVE)
    sp = bool(par.get("enable_sequence_parallel", True)) and tp > 1
    ep = _degree(par, "expert_parallel_degree", file)
    # torchtitan before c4b409af2 had expert_tensor_parallel_degree; since, experts are whole
    # with EP and split like the dense MLP without.
    etp = _degree(par, "expert_tensor_parallel_degree", file, 1 if ep > 1 else tp)
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
                           tp_comm_overlap=bool(par.get("enable_async_tensor_parallel", False))
                           and tp > 1)
    if train.get("enable_cpu_offload") is True:
        # FSDP2's CPUOffloadPolicy: parameters, gradients and optimizer states on the host.
        parsed.strategy.update(optimizer_offload=1.0, param_offload=True)
    precision = train.get("mixed_precision_param", "bfloat16")
    parsed.training["precision"] = Precision.FP32 if precision == "float32" else Precision.BF16
    _read_float8(parsed, sections, problem)
    if "seq_len" in train:
        parsed.training["seq_len"] = _int(train, "seq_len", 2048, file)
    return parsed


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


RULES: dict[Rule, TargetRule] = {
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
