"""torchtitan: reading a 0.2.x TOML job config or a recipe module (`torchtitan_recipe.sections`)
into a strategy, and what torchtitan refuses in it (its config classes refuse unknown fields;
the trainer, parallel_dims.py and the pipeline split refuse degrees, layouts and batches).
"""

from __future__ import annotations

from typing import Any

from cost_models.enums import CpComm, Fp8Recipe, PipelineSchedule, Precision, Recompute, ZeroStage
from planner.core.problem import Problem
from planner.errors import InputError
from planner.frameworks import torchtitan_recipe
from planner.frameworks.base import ParsedConfig, closest, did_you_mean
from planner.inputs.safe_parse import load_toml
from planner.schemas.model import OutputBlock
from planner.schemas.strategy import LaunchTarget

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
SCHEDULES = ("1F1B", "Interleaved1F1B", "GPipe", "LoopedBFS", "InterleavedZeroBubble",
             "PipelineScheduleSingle", "PipelineScheduleMulti", "ZBVZeroBubble", "DualPipeV")
"""pipeline_parallel_schedule names torch.distributed.pipelining knows, matched without case
(schedules.py get_schedule_class: any other name is a ValueError)."""
SCHEDULE_NAMES = {PipelineSchedule.ZERO_BUBBLE: "InterleavedZeroBubble",
                  PipelineSchedule.ZBV: "ZBVZeroBubble", PipelineSchedule.DUALPIPEV: "DualPipeV"}
"""The pipeline_parallel_schedule name of each zero-bubble schedule the planner prices
(`PipelineSchedule`; 1F1B and Interleaved1F1B are its default, by vpp)."""
ZERO_BUBBLE_NAMES = frozenset(name.lower() for name in SCHEDULE_NAMES.values())
"""Their names without case; the stages per rank they need are the pipeline_schedule rule's."""
PRICED_AS_OTHER = {
    "gpipe": "runs every micro-batch's forward before the first backward, so a stage holds all "
             "{m} micro-batches' activations at its peak; priced as 1F1B, which holds at most "
             "pp of them: its memory is a lower bound",
    "loopedbfs": "runs each local stage's forwards for all {m} micro-batches before the next "
                 "stage's, holding all of them at the peak; priced as Interleaved1F1B, which "
                 "holds fewer: its memory is a lower bound",
}
"""What a schedule the planner prices as another does (torch.distributed.pipelining
schedules.py: ScheduleGPipe, ScheduleLoopedBFS)."""


def _schedule(parsed: ParsedConfig, par: dict, *, pp: int, vpp: int, micro_batches: int,
              file: str) -> None:
    """What torch.distributed.pipelining refuses in pipeline_parallel_schedule (and its csv),
    and a note where the planner prices the schedule as another
    (`PRICED_AS_OTHER`)."""
    name = par.get("pipeline_parallel_schedule", "1F1B")
    csv = par.get("pipeline_parallel_schedule_csv")
    if pp == 1:
        if "pipeline_parallel_schedule" in par and str(name).lower() != "1f1b" or csv:
            key = "pipeline_parallel_schedule" + ("_csv" if csv else "")
            parsed.notes.append(f"parallelism.{key} has no effect at pipeline_parallel_degree "
                                f"1 (no pipeline)")
        return
    if csv:
        parsed.notes.append(f"pipeline_parallel_schedule_csv: the schedule in {csv} is priced "
                            f"as {'Interleaved1F1B' if vpp > 1 else '1F1B'}; the planner does "
                            f"not read it")
        return
    key = str(name).lower()
    if key not in {s.lower() for s in SCHEDULES}:
        parsed.finding("torchtitan_pipeline", f"torchtitan stops: unknown pipeline schedule "
                       f"'{name}'{did_you_mean(str(name), SCHEDULES)}",
                       f"use one of {', '.join(SCHEDULES)}")
        return
    if key in ("pipelineschedulesingle", "pipelineschedulemulti"):
        parsed.finding("torchtitan_pipeline", f"torchtitan stops: {name} is an abstract base "
                       f"class that runs only a schedule read from "
                       f"pipeline_parallel_schedule_csv",
                       "use a concrete schedule such as 1F1B or Interleaved1F1B")
        return
    # The zero-bubble schedules are priced as themselves; what they need (2 stages per rank,
    # DualPipeV's micro-batches) is the pipeline_schedule rule's (`rules.gate`).
    for schedule, schedule_name in SCHEDULE_NAMES.items():
        if key == schedule_name.lower():
            parsed.strategy["pipeline_schedule"] = schedule
    if key in PRICED_AS_OTHER:
        parsed.notes.append(f"pipeline_parallel_schedule {name} "
                            + PRICED_AS_OTHER[key].format(m=micro_batches))


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
        elif not single and stages // pp < 2 and schedule not in ZERO_BUBBLE_NAMES:
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
    if pp > 1:
        _schedule(parsed, par, pp=pp, vpp=vpp, micro_batches=max(1, global_batch // (micro * dp)),
                  file=file)
    elif par.get("pipeline_parallel_schedule") is not None or par.get(
            "pipeline_parallel_schedule_csv"):
        _schedule(parsed, par, pp=1, vpp=1, micro_batches=1, file=file)
    recompute = _recompute(parsed, sections.get("activation_checkpoint", {}), file)
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
    components = sections.get("compile", {}).get("components", [])
    if not isinstance(components, list) or not all(isinstance(c, str) for c in components):
        raise InputError(f"{file}: compile.components: expected a list of names such as "
                         f"[\"model\", \"loss\"] (got {components!r:.40})")
    compiled = _compiled(sections.get("compile", {}), train, toml=file.endswith(".toml"))
    parsed.strategy.update(dp=dp, tp=tp, pp=pp, vpp=vpp, micro_batch=micro,
                           global_batch=global_batch, sequence_parallel=sp,
                           recompute=recompute, zero_stage=zero,
                           tp_comm_overlap=_async_tp(parsed, par, sections.get("compile", {}),
                                                     compiled=compiled) and tp > 1)
    if not file.endswith(".toml"):
        _cuda_graphs(parsed, sections, pp=pp, ep=ep if problem.model.is_moe else 1)
    if train.get("enable_cpu_offload") is True:
        # FSDP2's CPUOffloadPolicy: parameters, gradients and optimizer states on the host.
        parsed.strategy.update(optimizer_offload=1.0, param_offload=True)
    if compiled is not None:
        parsed.training["compile"] = compiled
    compiled_loss = _compiled_loss(sections.get("compile", {}), train)
    if compiled_loss is not None and compiled_loss != compiled:
        parsed.training["compile_loss"] = compiled_loss
        if not compiled_loss:
            parsed.notes.append("the loss is not compiled: PyTorch's eager cross entropy holds "
                                "more fp32 copies of the logits at its peak, priced so; "
                                "\"loss\" in [compile] components compiles it")
    if compiled is False:
        ops = ("norms, rotary embedding and activation" if compiled_loss
               else "norms, rotary embedding, activation and loss")
        parsed.notes.append(f"compile is off: torchtitan runs its {ops} as eager PyTorch ops, "
                            f"priced so; [compile] enable = true with components "
                            f"[\"model\", \"loss\"] fuses them")
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
        if seq_len < 1:
            raise InputError(f"{file}: training.max_context_length: must be at least 1 (got "
                             f"{seq_len})")
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


def _compiled_component(compile_section: dict, component: str) -> bool | None:
    """Whether [compile] compiles `component`: enable with it among the components
    (job_config.py Compile, v0.2.x: enable False, components ["model", "loss"] by default);
    None where the section does not say."""
    if "enable" not in compile_section:
        return None
    components = compile_section.get("components", ["model", "loss"])
    return compile_section["enable"] is True and component in components


def _compiled(compile_section: dict, train: dict, *, toml: bool) -> bool | None:
    """Whether the model runs compiled: [compile]'s "model", or the older [training] compile
    (2024). A TOML that says neither runs eager (the default); a recipe that does not say
    keeps its base recipe's, unknown here (None)."""
    model = _compiled_component(compile_section, "model")
    if model is not None:
        return model
    if "compile" in train:
        return train["compile"] is True
    return False if toml else None


def _compiled_loss(compile_section: dict, train: dict) -> bool | None:
    """Whether the loss runs compiled: [compile]'s "loss"; the 2024 [training] compile left it
    eager (train.py @9dec370: "compiling loss function causes CUDA errors, turning off for
    now"); None where the config does not say (the model's)."""
    loss = _compiled_component(compile_section, "loss")
    if loss is not None:
        return loss
    return False if train.get("compile") is True else None


def _async_tp(parsed: ParsedConfig, par: dict, compile_section: dict, *,
              compiled: bool | None) -> bool:
    """Async TP: parallelism.enable_async_tensor_parallel (0.2.x), compile's since 737594746,
    which refuses it without compiling the model (CompileConfig.__post_init__; `compiled`:
    `_compiled`, None where a recipe leaves it to its base)."""
    if compile_section.get("enable_async_tensor_parallel") is not True:
        return bool(par.get("enable_async_tensor_parallel", False))
    if compiled is False:
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
