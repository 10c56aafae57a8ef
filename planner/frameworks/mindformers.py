"""MindFormers: the run YAML of `run_mindformer.py --config`, as MindFormers reads it for MindSpore.

MindFormers builds `TransformerOpParallelConfig(recompute=..., swap=..., **parallel_config)` and
`TransformerRecomputeConfig(**recompute_config)` from the YAML (core/parallel_config.py), passes
`parallel:` to `mindspore.set_auto_parallel_context` (core/context/parallel.py; parallel_mode
0-3 or the ParallelMode names, core/context/validators.py and tools/utils.py PARALLEL_MODE),
and sizes the global batch from runner_config.batch_size (trainer/base_trainer.py):
batch_size x data_parallel x micro_batch_num x micro_batch_interleave_num with a pipeline,
batch_size x data_parallel x micro_batch_interleave_num x gradient_accumulation_steps without.
MindSpore runs it: the profile and the rules are MindSpore's (planner.frameworks.mindspore).
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from cost_models.enums import AttentionKind, Precision, Recompute, ZeroStage
from planner.errors import InputError
from planner.frameworks import mindspore
from planner.frameworks.base import LaunchPlan, ParsedConfig, did_you_mean, header_lines
from planner.core.problem import Problem
from planner.schemas.strategy import LaunchTarget

CHECKED_AGAINST = ("mindspore-lab/mindformers core/parallel_config.py, "
                   "core/context/parallel.py, trainer/base_trainer.py, tools/check_rules.py, "
                   "configs/qwen3/pretrain_qwen3_32b_4k.yaml @fd4deebc")

PARALLEL_CONFIG_KEYS = mindspore.PARALLEL_CONFIG_KEYS - {"recompute", "swap"}
"""TransformerOpParallelConfig's keywords less the two MindFormers passes itself (recompute,
swap): any other key stops it ("got an unexpected keyword argument")."""
PARALLEL_MODES = {0: "data_parallel", 1: "semi_auto_parallel", 2: "auto_parallel",
                  3: "hybrid_parallel", "DATA_PARALLEL": "data_parallel",
                  "SEMI_AUTO_PARALLEL": "semi_auto_parallel", "AUTO_PARALLEL": "auto_parallel",
                  "HYBRID_PARALLEL": "hybrid_parallel", "STAND_ALONE": "stand_alone",
                  "MANUAL_PARALLEL": "stand_alone"}
"""parallel.parallel_mode values MindFormers accepts (tools/utils.py PARALLEL_MODE); a missing
one is 0, data parallel (validators.py validate_parallel_mode)."""
DTYPES = {"bfloat16": Precision.BF16, "float16": Precision.FP16, "float32": Precision.FP32}
"""model_config.compute_dtype -> the planner's precision."""
SECTIONS = {"parallel_config": ("TransformerOpParallelConfig", PARALLEL_CONFIG_KEYS),
            "recompute_config": ("TransformerRecomputeConfig", mindspore.RECOMPUTE_KEYS),
            "parallel": ("set_auto_parallel_context", mindspore.CONTEXT_KEYS)}


def is_mindformers(text: str) -> bool:
    """Whether a YAML file is a MindFormers run config (a top-level parallel_config: block); a
    planner strategy.yaml cannot have one (its fields are closed)."""
    return re.search(r"^parallel_config\s*:", text, re.MULTILINE) is not None


# --------------------------------------------------------------------------- emitting

def _value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return f'"{value}"' if isinstance(value, str) else str(value)


def _block(fields: dict[str, Any], indent: int = 0) -> list[str]:
    pad = " " * indent
    return [line for key, value in fields.items()
            for line in ([f"{pad}{key}:", *_block(value, indent + 2)] if isinstance(value, dict)
                         else [f"{pad}{key}: {_value(value)}"])]


def _yaml(section: str, fields: dict[str, Any], comment: str) -> list[str]:
    return [f"# {comment}", *_block({section: fields}), ""]


def emit(plan: LaunchPlan) -> dict[str, str]:
    s, p = plan.strategy, plan.problem
    m = plan.num_micro_batches
    precision = next((k for k, v in DTYPES.items() if v is p.training.precision), None)
    if precision is None:
        raise InputError(f"--emit mindformers: MindFormers trains in bfloat16, float16 or "
                         f"float32, not {p.training.precision_label}")
    parallel_config = {"data_parallel": s.dp, "model_parallel": s.tp, "pipeline_stage": s.pp,
                       "micro_batch_num": m if s.pp > 1 else 1,
                       "use_seq_parallel": s.sequence_parallel,
                       # A vocabulary-parallel embedding, as the planner's memory assumes.
                       "vocab_emb_dp": False}
    if s.cp > 1:
        parallel_config["context_parallel"] = s.cp
        parallel_config["context_parallel_algo"] = mindspore.CP_ALGORITHMS[s.cp_comm]
    if p.model.is_moe:
        parallel_config["expert_parallel"] = s.ep
    # The run's attention kernel: FlashAttentionScore, or the unfused scores (LlamaConfig
    # use_flash_attention, whose own default is False).
    model_config = {"seq_length": p.training.seq_len, "num_layers": p.model.num_layers,
                    "compute_dtype": precision,
                    "use_flash_attention": p.attention.fused}
    if s.layers_per_stage is not None:
        model_config["offset"] = [n - p.model.num_layers // s.pp for n in s.layers_per_stage]
    lines = [*(f"# {line}" for line in header_lines(plan, "MindFormers", CHECKED_AGAINST)),
             "# Merge into your model's run YAML (model, datasets and optimizer stay yours) and",
             f"# launch run_mindformer.py --config on {p.num_gpus} devices "
             f"(msrun --worker_num {p.num_gpus}).", "",
             "run_mode: train", "use_parallel: true", "",
             *_yaml("runner_config", {"batch_size": s.micro_batch,
                                      "gradient_accumulation_steps": 1 if s.pp > 1 else m},
                    "Samples per data-parallel rank per micro-batch; accumulation only "
                    "without a pipeline."),
             "micro_batch_interleave_num: 1", "",
             *_yaml("parallel", {"parallel_mode": 1, "full_batch": True,
                                 "gradients_mean": False,
                                 # The parallel optimizer shards optimizer states over dp.
                                 "enable_parallel_optimizer":
                                     s.zero_stage >= ZeroStage.OPTIMIZER_STATES},
                    "MindSpore auto-parallel context: 1 = semi_auto_parallel."),
             *_yaml("parallel_config", parallel_config,
                    "data_parallel x model_parallel x pipeline_stage = devices "
                    "(tools/check_rules.py)."),
             *_yaml("recompute_config", {"recompute": s.recompute is Recompute.FULL,
                                         "select_recompute": s.recompute is Recompute.SELECTIVE,
                                         "parallel_optimizer_comm_recompute": False,
                                         "mp_comm_recompute": True,
                                         "recompute_slice_activation": False},
                    "Full or selective recomputation of every layer."),
             *_yaml("model", {"model_config": model_config},
                    "Stage i runs num_layers // pipeline_stage + offset[i] layers."
                    if "offset" in model_config else "The shapes the plan was made for.")]
    return {"mindformers.yaml": "\n".join(lines)}


# --------------------------------------------------------------------------- reading

def _mapping(doc: dict, key: str, file: str) -> dict[str, Any]:
    value = doc.get(key) or {}
    if not isinstance(value, dict):
        raise InputError(f"{file}: {key}: expected a mapping of settings (got {value!r})")
    return value


def _load(text: str, file: str) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise InputError(f"{file}: {where}YAML syntax error: "
                         f"{getattr(e, 'problem', None) or e}") from None
    if not isinstance(doc, dict):
        raise InputError(f"{file}: expected a MindFormers run config (a mapping)")
    return doc


def _check_keys(parsed: ParsedConfig, doc: dict, file: str) -> None:
    for section, (call, keys) in SECTIONS.items():
        for key in _mapping(doc, section, file):
            if section == "parallel_config" and key in ("recompute", "swap"):
                parsed.finding("mindformers_unknown_key", f"MindFormers stops: "
                               f"parallel_config.{key} clashes with the {key}_config it passes "
                               f"to {call} (\"got multiple values for keyword argument "
                               f"'{key}'\")", f"move {key} to {key}_config")
            elif key not in keys:
                what = ("does not know" if section == "parallel" else
                        "got an unexpected keyword argument")
                parsed.finding("mindformers_unknown_key", f"MindFormers stops: {call} {what} "
                               f"'{key}' ({section}.{key}){did_you_mean(key, keys)}",
                               f"fix or remove {section}.{key}")


def _mode(parsed: ParsedConfig, context: dict) -> str:
    value = context.get("parallel_mode", 0)
    if not isinstance(value, (int, str)) or value not in PARALLEL_MODES:
        known = [str(k) for k in PARALLEL_MODES]
        close = next((k for k in PARALLEL_MODES if str(k).lower() == str(value).lower()),
                     None)
        hint = f" (did you mean '{close}'?)" if close is not None else did_you_mean(
            str(value), known)
        parsed.finding("mindspore_mode", f"MindFormers stops: parallel.parallel_mode "
                       f"'{value}' is not one of {', '.join(known)}{hint}",
                       "use parallel_mode: 1 (semi_auto_parallel)")
        return "semi_auto_parallel"
    return PARALLEL_MODES[value]


def _batches(parsed: ParsedConfig, doc: dict, parallel_config: dict, *, dp: int, pp: int,
             file: str) -> None:
    """micro_batch and global_batch as trainer/base_trainer.py computes the global batch."""
    runner = _mapping(doc, "runner_config", file)
    batch = mindspore.read_int(runner, "batch_size", 1, file)
    accumulation = mindspore.read_int(runner, "gradient_accumulation_steps", 1, file)
    interleave = mindspore.read_int(doc, "micro_batch_interleave_num", 1, file)
    micro_num = mindspore.read_int(parallel_config, "micro_batch_num", 1, file)
    if pp > 1:
        m = micro_num
        if accumulation > 1:
            parsed.notes.append(f"runner_config.gradient_accumulation_steps {accumulation} "
                                "does not take effect with pipeline parallelism "
                                "(trainer/base_trainer.py)")
    else:
        m = accumulation
        if micro_num > 1:
            parsed.notes.append(f"parallel_config.micro_batch_num {micro_num} does not take "
                                "effect without pipeline parallelism: MindFormers resets it "
                                "to 1")
    if interleave > 1:
        parsed.notes.append(f"micro_batch_interleave_num {interleave}: each micro-batch of "
                            f"{batch * interleave} samples runs as {interleave} interleaved "
                            f"slices of batch_size {batch}; the planner prices micro-batches "
                            f"of {batch * interleave}")
    micro = batch * interleave
    parsed.strategy.update(micro_batch=micro, global_batch=micro * dp * m)


def _recompute(parsed: ParsedConfig, recompute: dict) -> Recompute:
    full, selective = recompute.get("recompute", False), recompute.get("select_recompute", False)
    if isinstance(full, list):
        # Layers to recompute per pipeline stage (check_rules.py _rule_recompute).
        if any(full):
            parsed.notes.append(f"recompute_config.recompute {full} recomputes some layers "
                                "per stage; the planner prices full recomputation of every "
                                "layer")
        full = any(full)
    if full is True:
        return Recompute.FULL
    return Recompute.SELECTIVE if selective else Recompute.NONE


def _optimizer(parsed: ParsedConfig, context: dict, parallel_config: dict, *,
               file: str) -> ZeroStage:
    sharded = context.get("enable_parallel_optimizer") is True
    if "optimizer_shard" in parallel_config:
        # TransformerOpParallelConfig: "optimizer_shard is deprecated from MindFormers r0.7.
        # It will not have any effect."
        if parallel_config["optimizer_shard"] and not sharded:
            parsed.finding("mindformers_optimizer_shard", "parallel_config.optimizer_shard "
                           "has no effect since MindFormers r0.7: the optimizer stays "
                           "unsharded (parallel.enable_parallel_optimizer is not true)",
                           "set parallel.enable_parallel_optimizer: true")
        else:
            parsed.notes.append("parallel_config.optimizer_shard has no effect since "
                                "MindFormers r0.7; parallel.enable_parallel_optimizer decides")
    level = _mapping(context, "parallel_optimizer_config", file).get("optimizer_level",
                                                                      "level1")
    if sharded and level != "level1":
        parsed.notes.append(f"parallel_optimizer_config.optimizer_level {level} also shards "
                            "gradients; the planner prices MindSpore's parallel optimizer as "
                            "ZeRO stage 1 (level1)")
    return ZeroStage.OPTIMIZER_STATES if sharded else ZeroStage.NONE


def _model(parsed: ParsedConfig, doc: dict, problem: Problem, *, pp: int, file: str) -> None:
    """seq_length and precision from model.model_config; its shapes must be the model's."""
    model_config = _mapping(_mapping(doc, "model", file), "model_config", file)
    if "seq_length" in model_config:
        parsed.training["seq_len"] = mindspore.read_int(model_config, "seq_length", 1, file)
    dtype = model_config.get("compute_dtype")
    if isinstance(dtype, str) and dtype in DTYPES:
        parsed.training["precision"] = DTYPES[dtype]
    elif dtype is not None:   # MindFormers' dtype map has no other name (it stops there)
        raise InputError(f"{file}: model.model_config.compute_dtype: {dtype!r:.40} is not one "
                         f"of {', '.join(DTYPES)}{did_you_mean(str(dtype), list(DTYPES))}")
    flash = model_config.get("use_flash_attention")
    if isinstance(flash, bool):
        parsed.training["attention"] = AttentionKind.FLASH if flash else AttentionKind.UNFUSED
    else:
        parsed.notes.append("model.model_config.use_flash_attention not set: priced with the "
                            "run's attention kernel (flash unless --attention says); "
                            "LlamaConfig's own default is False, unfused (MindFormers' "
                            "pretraining recipes set it true)")
    layers = model_config.get("num_layers", model_config.get("num_hidden_layers"))
    shapes = {"num_layers": (layers, problem.model.num_layers)}
    hidden = model_config.get("hidden_size")
    first = next((b for b in problem.model.blocks if b.kind == "transformer"), None)
    if first is not None:
        shapes["hidden_size"] = (hidden, first.hidden)
    for key, (got, want) in shapes.items():
        if got is not None and got != want:
            parsed.finding("mindformers_model_mismatch", f"model_config.{key} is {got} but "
                           f"{problem.model.name} has {want}: the config trains another model "
                           "than the one planned", f"use {key} {want}, or plan for the "
                           "config's model")
    offset = model_config.get("offset", 0)
    if pp > 1 and offset != 0:
        offsets = [offset] * pp if isinstance(offset, int) else offset   # LayerSetting
        if not isinstance(offsets, list):
            raise InputError(f"{file}: model.model_config.offset: expected an integer or a "
                             f"list of {pp} integers (got {offset!r})")
        layout = mindspore.read_offset(parsed, offsets, pp=pp,
                                       num_layers=problem.model.num_layers,
                                       where="model.model_config.offset", file=file)
        if layout is not None:
            parsed.strategy["layers_per_stage"] = layout


def parse(text: str, *, file: str, problem: Problem, num_gpus: int | None) -> ParsedConfig:
    """A MindFormers run YAML -> its strategy, and what MindFormers or MindSpore refuses."""
    doc = _load(text, file)
    parsed = ParsedConfig(strategy={}, target=LaunchTarget.MINDFORMERS)
    _check_keys(parsed, doc, file)
    context = _mapping(doc, "parallel", file)
    parallel_config = _mapping(doc, "parallel_config", file)
    dp = mindspore.read_int(parallel_config, "data_parallel", 1, file)
    tp = mindspore.read_int(parallel_config, "model_parallel", 1, file)
    pp = mindspore.read_int(parallel_config, "pipeline_stage", 1, file)
    ep = mindspore.read_int(parallel_config, "expert_parallel", 1, file)
    mindspore.read_context_parallel(parsed, parallel_config, file)
    cp = parsed.strategy.get("cp", 1)
    mode = _mode(parsed, context)
    if doc.get("use_parallel") is not True and dp * tp * cp * pp > 1:
        parsed.finding("mindformers_use_parallel", "use_parallel is not true: MindFormers runs "
                       "on one device and ignores parallel_config", "set use_parallel: true")
    if mode not in ("semi_auto_parallel", "auto_parallel") and tp * cp * pp > 1:
        # trainer/base_trainer.py: outside (semi-)auto parallel, data_parallel, model_parallel
        # and context_parallel are reset to 1.
        parsed.finding("mindspore_mode", f"parallel.parallel_mode {mode}: MindFormers resets "
                       "model_parallel and context_parallel to 1 and runs data parallelism "
                       "only", "use parallel_mode: 1 (semi_auto_parallel)")
    world = num_gpus or dp * tp * cp * pp
    searched = mindspore.check_search_mode(parsed, mode, context.get("search_mode"),
                                           key="parallel.search_mode", num_devices=world)
    if searched is not None:
        # auto_parallel: MindSpore's strategy search shards the operators when the graph
        # compiles; parallel_config only seeds the strategies MindFormers' layers set.
        parsed.notes.append(f"parallel.parallel_mode 2 (auto_parallel): MindSpore's {searched} "
                            f"search picks the operator shards when it compiles the graph, "
                            f"from the ones parallel_config sets; priced as parallel_config's "
                            f"fixed data_parallel {dp}, model_parallel {tp}, which the search "
                            f"may change")
    if context.get("pipeline_stages", pp) != pp:
        parsed.notes.append(f"parallel.pipeline_stages {context['pipeline_stages']}: "
                            f"MindFormers sets it from parallel_config.pipeline_stage ({pp})")
    vocab_emb_dp = parallel_config.get("vocab_emb_dp", True)
    if vocab_emb_dp and pp > 1:
        parsed.notes.append("vocab_emb_dp: MindFormers resets it to false with pipeline_stage "
                            "> 1 (core/parallel_config.py)")
    elif vocab_emb_dp and tp > 1:
        default = "" if "vocab_emb_dp" in parallel_config else " (MindFormers' default)"
        parsed.notes.append(f"vocab_emb_dp true{default}: each of the {tp} model-parallel ranks holds the whole embedding "
                            "table; the planner prices a vocabulary-parallel one (vocab_emb_dp "
                            "false), so its memory is low by that table's share")
    parsed.strategy.update(dp=dp, tp=tp, pp=pp, ep=ep, etp=1 if ep > 1 else tp,
                           sequence_parallel=parallel_config.get("use_seq_parallel") is True,
                           recompute=_recompute(parsed, _mapping(doc, "recompute_config", file)),
                           zero_stage=_optimizer(parsed, context, parallel_config,
                                                file=file))
    _batches(parsed, doc, parallel_config, dp=dp, pp=pp, file=file)
    _model(parsed, doc, problem, pp=pp, file=file)
    return parsed
