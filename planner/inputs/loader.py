"""Read models, clusters and strategies from YAML, HF config.json, zoo names and presets.

Every failure becomes one `InputError` line that names the file, the field and the problem,
with a "did you mean" for typos.
"""

from __future__ import annotations

import difflib
import types
import typing
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ValidationError

import model_zoo
from cost_models.units import GiB
from cost_models.enums import AttentionKind, CpComm, Fp8Recipe, Precision, ZeroStage
from planner.inputs import presets, profiles
from planner.inputs.aliases import meant_field
from planner.inputs.batch import sequences_for_seq_len, sequences_for_tokens
from planner.errors import InputError, clipped, one_line, shown
from planner.inputs.hf_config import shorthand_from_hf
from planner.inputs.safe_parse import is_dir, is_file, load_json, load_yaml, read_text
from planner.schemas.bounds import MAX_GPUS, MAX_LAYERS
from planner.schemas.cluster import ClusterSpec
from planner.schemas.framework import FrameworkProfile
from planner.schemas.model import ModelSpec, TrainingSpec
from planner.schemas.model_file import LayersFile, TransformerShorthand
from planner.schemas.strategy import Strategy, default_cp_a2a
from planner.core.problem import Problem


def load_framework(name: str) -> FrameworkProfile:
    """A framework profile by LaunchTarget value."""
    return profiles.load(name)


def framework_name(explicit: str | None, targets=(), fallback: str = "megatron") -> str:
    """The framework that prices a job: the one named, else the one that runs the single
    launch target (a LaunchTarget, or a framework name), else `fallback`."""
    if explicit is not None:
        return explicit
    if len(targets) == 1:
        return getattr(targets[0], "framework", targets[0])
    return fallback




# --------------------------------------------------------------------------- files and YAML

def _read_text(path: Path) -> str:
    return read_text(path)


def read_mapping(path: Path) -> dict[str, Any]:
    """Parse a YAML (or JSON, a subset of YAML) file whose top level is a mapping."""
    text, file = read_text(path), shown(path)
    data = load_json(text, file) if path.suffix == ".json" else load_yaml(text, file)
    if not isinstance(data, dict):
        kind = "an empty file" if data is None else f"a {type(data).__name__}"
        raise InputError(f"{file}: expected a mapping of fields at the top level, got {kind}")
    return data


# --------------------------------------------------------------------------- validation errors

def _unwrap(annotation: Any) -> list[Any]:
    """The model classes an annotation can hold (through Optional, tuples, Annotated unions)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType, tuple, list, dict):
        found: list[Any] = []
        for arg in typing.get_args(annotation):
            found += _unwrap(arg)
        return found
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return []


def _model_at(root: type[BaseModel], loc: tuple) -> type[BaseModel] | None:
    """The pydantic model class whose fields live at `loc` (for "did you mean")."""
    current: list[type[BaseModel]] = [root]
    for part in loc:
        if isinstance(part, int):
            continue
        tagged = [c for c in current if _kind_tag(c) == part]
        if tagged:
            current = tagged
            continue
        nxt: list[type[BaseModel]] = []
        for cls in current:
            field = cls.model_fields.get(part)
            if field is not None:
                nxt += _unwrap(field.annotation)
        current = nxt
        if not current:
            return None
    return current[0] if len(current) == 1 else None


def _kind_tag(cls: type[BaseModel]) -> str | None:
    field = cls.model_fields.get("kind")
    if field is None:
        return None
    args = typing.get_args(field.annotation)
    return args[0] if args else None


def _path_text(loc: tuple) -> str:
    """('layers', 3, 'transformer', 'hidden') -> 'layers[3].hidden'."""
    text = ""
    previous_int = False
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
            previous_int = True
            continue
        if previous_int and part in _KIND_TAGS:
            previous_int = False
            continue
        text += f".{part}" if text else str(part)
        previous_int = False
    return text


_KIND_TAGS = {"embedding", "transformer", "norm", "output", "evoformer"}


def _suggestion(error: dict, root: type[BaseModel]) -> str | None:
    """For an unknown field, the field allowed at its place that it means: the one another
    framework's name stands for (`aliases`, 'tensor_model_parallel_size' -> 'tp', or
    'training.seq_len' where the field lives one section down), else the closest in
    spelling."""
    loc = tuple(error.get("loc", ()))
    parent = _model_at(root, loc[:-1])
    if error["type"] != "extra_forbidden" or parent is None:
        return None
    meant = meant_field(str(loc[-1]))
    if meant in parent.model_fields:
        return meant
    for name, field in parent.model_fields.items():
        if meant is not None and any(meant in section.model_fields
                                     for section in _unwrap(field.annotation)):
            return f"{name}.{meant}"
    close = difflib.get_close_matches(str(loc[-1]), list(parent.model_fields), n=1)
    return close[0] if close else None


def _describe(error: dict, root: type[BaseModel]) -> str:
    loc = tuple(error.get("loc", ()))
    field = _path_text(loc)
    if error["type"] == "extra_forbidden":
        close = _suggestion(error, root)
        meant = meant_field(str(loc[-1])) if loc else None
        hint = (f" (did you mean '{close}'?)" if close else
                f" (the planner's {meant}, which this file does not set)" if meant else "")
        return f"{field}: unknown field{hint}"
    if error["type"] == "missing":
        return f"{field}: required field is missing"
    message = error["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, "):]
    if error["type"].startswith(("value_error", "assertion_error")):
        return f"{field}: {message}" if field else message
    got = error.get("input")
    shown = repr(got) if isinstance(got, str) else got
    suffix = f" (got {shown})" if not isinstance(got, (dict, list)) else ""
    return f"{field}: {message}{suffix}" if field else f"{message}{suffix}"


def _ranked(errors: list[dict], root: type[BaseModel]) -> list[dict]:
    """Typos first; a "missing" error that a typo explains (num_layer for num_layers) is dropped."""
    meant = {(tuple(e["loc"][:-1]), _suggestion(e, root)) for e in errors
             if e["type"] == "extra_forbidden"}
    kept = [e for e in errors
            if not (e["type"] == "missing" and (tuple(e["loc"][:-1]), e["loc"][-1]) in meant)]
    return sorted(kept, key=lambda e: e["type"] != "extra_forbidden")


def validate_file(cls: type[BaseModel], data: dict[str, Any], file: str | Path) -> Any:
    """Build `cls` from `data`; any validation failure becomes one InputError line."""
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        raise InputError(f"{file}: {_summary(_ranked(e.errors(), cls), cls)}") from None


def _summary(errors: list[dict], root: type[BaseModel]) -> str:
    """The errors of one file in one line: all missing fields by name, else the first error
    in full and the fields of the others ("+2 more: pp, micro_batch")."""
    if len(errors) > 1 and all(e["type"] == "missing" for e in errors):
        return f"required fields are missing: {_field_list(errors)}"
    first, rest = _describe(errors[0], root), errors[1:]
    return f"{first} (+{len(rest)} more: {_field_list(rest)})" if rest else first


def _field_list(errors: list[dict], *, shown_at_most: int = 8) -> str:
    """'gpu, intra_node, inter_node': the field of each error, once, in order (names cut at
    40 characters; past `shown_at_most` fields, how many others)."""
    names = list(dict.fromkeys(_short(_path_text(tuple(e.get("loc", ()))) or "(the file)")
                               for e in errors))
    others = len(names) - shown_at_most
    return ", ".join(names[:shown_at_most]) + (f" and {others} others" if others > 0 else "")


def _short(name: str, limit: int = 40) -> str:
    return name if len(name) <= limit else name[:limit - 3] + "..."


# --------------------------------------------------------------------------- models

def _attention_in_model(data: dict[str, Any], file: str) -> tuple[dict[str, Any], str | None]:
    """A model file's `attention:` (at the top, or on its transformer layers), from before the
    attention kernel became a run setting (issue 25): read as the file's training.attention
    unless that says otherwise, with a note either way. Returns the mapping without it, and
    the note."""
    data = dict(data)
    found: dict[str, Any] = {}
    if "attention" in data:
        found["attention"] = data.pop("attention")
    layers = data.get("layers")
    if isinstance(layers, list):
        stripped = []
        for i, entry in enumerate(layers):
            if isinstance(entry, dict) and entry.get("kind") == "transformer" \
                    and "attention" in entry:
                entry = dict(entry)
                found[f"layers[{i}].attention"] = entry.pop("attention")
            stripped.append(entry)
        data["layers"] = stripped
    if not found:
        return data, None
    kinds = {}
    for where, value in found.items():
        try:
            kinds[where] = AttentionKind(value)
        except ValueError:
            raise InputError(f"{file}: {where}: Input should be 'flash' or 'unfused' (got "
                             f"{value!r:.40})") from None
    if len(set(kinds.values())) > 1:
        raise InputError(f"{file}: attention differs between layers "
                         f"({', '.join(sorted({k.value for k in kinds.values()}))}); the attention "
                         f"kernel is a setting of the run: give one in training.attention")
    where, kind = next(iter(kinds.items()))
    training = data.get("training", {})
    if isinstance(training, dict) and training.get("attention") is not None:
        return data, (f"{file}: {where} {kind.value} has no effect: the attention kernel is a "
                      f"setting of the run, and training.attention sets it")
    if isinstance(training, dict):
        data["training"] = {**training, "attention": kind.value}
    return data, (f"{file}: {where} {kind.value} read as training.attention: the attention "
                  f"kernel is a setting of the run (move it there, or pass --attention)")


def _model_from_mapping(data: dict[str, Any], file: str) -> tuple[ModelSpec, TrainingSpec]:
    data, note = _attention_in_model(data, file)
    model, training = _parsed_model(data, file)
    _plain_name(file, "name", model.name)
    if note is not None:
        model = model.model_copy(update={"notes": (*model.notes, note)})
    return model, training


def _parsed_model(data: dict[str, Any], file: str) -> tuple[ModelSpec, TrainingSpec]:
    if "layers" in data:
        data = dict(data)
        layers = data.get("layers")
        if isinstance(layers, list):
            repeats = []
            stripped = []
            for i, entry in enumerate(layers):
                if isinstance(entry, dict) and "repeat" in entry:
                    entry = dict(entry)
                    count = entry.pop("repeat")
                    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
                        raise InputError(f"{file}: layers[{i}].repeat: must be a positive "
                                         f"integer (got {count!r:.40})")
                    if count > MAX_LAYERS:
                        raise InputError(f"{file}: layers[{i}].repeat: {count:.3g} exceeds the "
                                         f"largest accepted, {MAX_LAYERS:,} (80x the deepest "
                                         f"models trained)")
                    repeats.append(count)
                else:
                    repeats.append(1)
                stripped.append(entry)
            data["layers"], data["repeats"] = stripped, repeats
        parsed = validate_file(LayersFile, data, file)
    else:
        parsed = validate_file(TransformerShorthand, data, file)
    try:
        return parsed.to_model(), parsed.training
    except ValidationError as e:
        raise InputError(f"{file}: {_describe(e.errors()[0], ModelSpec)}") from None


def _not_a_directory(ref: str, expected: str, patterns: tuple[str, ...]) -> None:
    """Refuse a directory given for a file (`expected`, e.g. "a cluster.yaml file"), pointing
    at the first file in it that matches one of `patterns`, if any."""
    path = Path(ref)
    if not is_dir(path):
        return
    try:
        found = [f for pattern in patterns for f in sorted(path.glob(pattern)) if is_file(f)]
    except OSError:
        found = []
    hint = f" (did you mean '{shown(found[0])}'?)" if found else ", and it holds none"
    raise InputError(f"{shown(ref)}: is a directory; expected {expected}{hint}")


MODEL_FILES = ("model.yaml", "model.yml", "config.json", "*model*.yaml", "*model*.yml")
CLUSTER_FILES = ("cluster.yaml", "cluster.yml", "*cluster*.yaml", "*cluster*.yml")
"""Files looked for, in this order, in a directory given as MODEL or CLUSTER (to suggest)."""


def load_model(ref: str) -> tuple[ModelSpec, TrainingSpec]:
    """A model from a model.yaml, a Hugging Face config.json, or a zoo name."""
    path = Path(ref)
    if ref not in model_zoo.names():
        _not_a_directory(ref, "a model.yaml or a Hugging Face config.json file", MODEL_FILES)
    if is_file(path) or path.suffix in (".yaml", ".yml", ".json") or "/" in ref:
        data = read_mapping(path)
        if path.suffix == ".json":
            name = path.parent.name if path.name == "config.json" else path.stem
            data = shorthand_from_hf(data, file=shown(path), name=name or "model")
        return _model_from_mapping(data, shown(path))
    if ref in model_zoo.names():
        file = model_zoo.path(ref)
        return _model_from_mapping(read_mapping(file), f"model_zoo/{file.name}")
    close = difflib.get_close_matches(ref, model_zoo.names(), n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    raise InputError(f"no model named '{clipped(ref)}' in the zoo{hint}; see `planner zoo`, "
                     f"or give a path to a model.yaml or config.json")


# --------------------------------------------------------------------------- clusters

def is_preset(ref: str) -> bool:
    """Whether `load_cluster` reads `ref` as a preset name rather than a file."""
    path = Path(ref)
    return not (is_file(path) or path.suffix in (".yaml", ".yml") or "/" in ref) \
        and ref in presets.names()


def load_cluster(ref: str, *, nodes: int | None = None) -> ClusterSpec:
    """A cluster from a cluster.yaml or a preset name; `nodes` overrides its node count."""
    path = Path(ref)
    if not is_preset(ref):
        _not_a_directory(ref, "a cluster.yaml file", CLUSTER_FILES)
    if is_preset(ref):
        data, file = read_mapping(presets.path(ref)), f"presets/{ref}.yaml"
    elif is_file(path) or path.suffix in (".yaml", ".yml") or "/" in ref:
        data, file = read_mapping(path), shown(path)
    else:
        raise _no_preset(ref)
    if nodes is not None:
        data = {**data, "num_nodes": nodes}
    cluster = validate_file(ClusterSpec, data, file)
    _plain_name(file, "name", cluster.name)
    _plain_name(file, "gpu.name", cluster.gpu.name)
    return cluster


def _plain_name(file: str, field: str, name: str) -> None:
    """Names go into headings and into the configs `--emit` writes (comments, TOML strings,
    shell variables), where a newline or an escape sequence would break the file: refuse
    control characters."""
    if not name.isprintable():
        raise InputError(f"{file}: {field}: a name must not hold control characters (got "
                         f"'{clipped(one_line(name), 60)}')")


def _no_preset(ref: str) -> InputError:
    close = difflib.get_close_matches(ref, presets.names(), n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return InputError(f"no cluster preset named '{clipped(ref)}'{hint}; presets: "
                      f"{', '.join(presets.names())}")


def preset_text(name: str) -> str:
    """A preset's own file, comments citing its sources included: a cluster.yaml that
    `load_cluster` reads back as the same ClusterSpec (the preset is validated first)."""
    if name not in presets.names():
        raise _no_preset(name)
    load_cluster(name)
    text = read_text(presets.path(name))
    return text if text.endswith("\n") else text + "\n"


DEFAULT_TOKENS_PER_BATCH = 4 * 2**20
"""Without a stated batch, about 4M tokens per step (Llama 2 and 3 pretraining, Touvron et al.
2023 Sec. 2.2; Dubey et al. 2024 Sec. 3.4), as whole sequences at the run's seq_len."""


def compile_notes(training: TrainingSpec, profile: FrameworkProfile) -> list[str]:
    """Notes on torch.compile settings that do nothing on `profile`'s framework."""
    notes = []
    if training.compile is not None and profile.compiles is None:
        notes.append(f"compile {str(training.compile).lower()} has no effect with "
                     f"{profile.name}: it runs fused kernels of its own whatever torch.compile "
                     f"does (the setting prices torchtitan's or a PyTorch script's compiled or eager "
                     f"ops)")
    if training.compile_loss is not None and not profile.torch_cross_entropy:
        notes.append(f"compile_loss {str(training.compile_loss).lower()} has no effect with "
                     f"{profile.name}: its loss is a fused cross entropy of its own (the "
                     f"setting prices torchtitan's or a PyTorch script's compiled or eager loss)")
    return notes


def make_problem(model_ref: str, cluster_ref: str, *, gpus: int | None = None,
                 nodes: int | None = None, seq_len: int | None = None,
                 global_batch: int | None = None, global_batch_tokens: float | None = None,
                 precision: str | None = None, optimizer: str | None = None,
                 framework: str = "megatron", fp8_recipe: str | None = None,
                 min_free_gib: float | None = None, attention: str | None = None,
                 compile: bool | None = None, compile_loss: bool | None = None,
                 fp8_attention: bool | None = None,
                 fp8_output_layer: bool | None = None, bf16_first_layers: int | None = None,
                 bf16_last_layers: int | None = None) -> Problem:
    """Load a model and a cluster, apply CLI overrides, and check the GPU count."""
    model, training = load_model(model_ref)
    cluster = load_cluster(cluster_ref, nodes=nodes)
    if global_batch is not None and global_batch_tokens is not None:
        raise InputError("--global-batch-tokens: give it or --global-batch, not both")
    if precision in RECIPE_PRECISIONS:   # --precision mxfp8 / nvfp4: a low-precision recipe
        if fp8_recipe not in (None, precision):
            raise InputError(f"--fp8-recipe {fp8_recipe}: --precision {precision} is the "
                             f"{precision} recipe")
        precision, fp8_recipe = Precision.FP8.value, precision
    overrides = {k: v for k, v in (("seq_len", seq_len), ("global_batch", global_batch),
                                   ("precision", precision), ("optimizer", optimizer),
                                   ("fp8_recipe", fp8_recipe), ("attention", attention),
                                   ("compile", compile), ("compile_loss", compile_loss),
                                   ("fp8_attention", fp8_attention),
                                   ("fp8_output_layer", fp8_output_layer),
                                   ("bf16_first_layers", bf16_first_layers),
                                   ("bf16_last_layers", bf16_last_layers))
                 if v is not None}
    notes = list(model.notes)
    stated = training.attention
    if seq_len is not None and seq_len != training.seq_len and global_batch is None \
            and global_batch_tokens is None and training.global_batch is not None:
        # The model's batch at its own seq_len, kept in tokens per step (inputs.batch).
        sequences, note = sequences_for_seq_len(training.global_batch, training.seq_len,
                                                seq_len, model.name)
        overrides["global_batch"] = sequences
        notes.append(note)
    if overrides:   # validated like the file's own training section, enums included
        training = validate_file(TrainingSpec, {**training.model_dump(), **overrides},
                                 "command line")
    if attention is not None and stated is not None and stated is not training.attention:
        notes.append(f"--attention {training.attention.value} replaces the model file's "
                     f"attention {stated.value}")
    if training.attention is not None and not any(True for _ in model.attention_layers()):
        notes.append(f"attention {training.attention.value} has no effect on {model.name}: it "
                     f"sets the kernel of transformer layers, and it has none (an Evoformer "
                     f"block's kernel is its own `attention`)")
    tokens = global_batch_tokens
    if tokens is None and training.global_batch is None:
        tokens = DEFAULT_TOKENS_PER_BATCH
    if tokens is not None:
        if tokens < 1:
            raise InputError(f"--global-batch-tokens: must be at least 1 (got {tokens:g})")
        sequences, note = sequences_for_tokens(tokens, training.seq_len)
        training = validate_file(TrainingSpec, {**training.model_dump(),
                                                "global_batch": sequences},
                                 "--global-batch-tokens")
        if global_batch_tokens is not None and note is not None:
            notes.append(note)
    if model.max_context is not None and training.seq_len > model.max_context:
        notes.append(f"seq_len {training.seq_len} exceeds the {model.max_context} positions "
                     f"{model.name} was built for (extend its context first)")
    num_gpus = cluster.num_gpus if gpus is None else gpus
    if num_gpus < 1:
        raise InputError(f"--gpus: must be at least 1 (got {num_gpus})")
    if num_gpus > MAX_GPUS:
        raise InputError(f"--gpus: {num_gpus:,} exceeds the largest accepted, {MAX_GPUS:,}")
    if num_gpus > cluster.num_gpus and nodes is None and is_preset(cluster_ref):
        # A preset is a node type: its node count is a default, not a cap.
        cluster = load_cluster(cluster_ref, nodes=-(-num_gpus // cluster.gpus_per_node))
        notes.append(f"{cluster.name}: {cluster.num_nodes} nodes of {cluster.gpus_per_node} "
                     f"GPUs for --gpus {num_gpus} (the preset's node count is only a default)")
    if num_gpus > cluster.num_gpus:
        raise InputError(f"--gpus: {num_gpus} exceeds the {cluster.num_gpus} GPUs of "
                         f"{cluster.name} ({cluster.num_nodes} nodes x {cluster.gpus_per_node}); "
                         f"pass --nodes to describe a larger cluster")
    if min_free_gib is not None and not 0 <= min_free_gib < cluster.gpu.memory_gib:
        raise InputError(f"--min-free: {min_free_gib:g} GiB leaves nothing of the "
                         f"{cluster.gpu.memory_gib:g} GiB of a {cluster.gpu.name}")
    profile = load_framework(framework)
    notes += compile_notes(training, profile)
    training = resolve_training(training, cluster, profile,
                                file="command line" if overrides else model_ref)
    return Problem(model=model, training=training, cluster=cluster, num_gpus=num_gpus,
                   framework=profile, notes=tuple(notes),
                   min_free_bytes=None if min_free_gib is None else min_free_gib * GiB)


def fp8_param_gather_allowed(problem: Problem, zero) -> np.ndarray:
    """Where the linear weights can be FP8 parameters gathered in FP8: precision fp8 with a
    recipe the framework gathers so (its profile), and sharded states to gather from
    (Megatron-LM asserts --fp8-param-gather needs the distributed optimizer or FSDP)."""
    t, fp8 = problem.training, problem.framework.fp8
    ok = (t.precision is Precision.FP8 and fp8 is not None
          and t.fp8_recipe in fp8.param_gather_recipes)
    return ok & (np.asarray(zero) >= ZeroStage.OPTIMIZER_STATES)


RECIPE_PRECISIONS = (Fp8Recipe.MXFP8.value, Fp8Recipe.NVFP4.value)
"""`--precision mxfp8` and `--precision nvfp4` name the linear layers' low-precision training
with that recipe (Blackwell): precision fp8 in the TrainingSpec, the recipe its fp8_recipe."""


def resolve_training(training: TrainingSpec, cluster: ClusterSpec, framework: FrameworkProfile,
                     *, file: str) -> TrainingSpec:
    """The FP8 recipe where precision fp8 leaves it out: the framework's first (its default)
    that this GPU runs, else its first (a rule then says the GPU cannot)."""
    if training.precision is not Precision.FP8:
        for name, value in (("fp8_recipe", training.fp8_recipe is not None),
                            ("fp8_attention", training.fp8_attention),
                            ("fp8_output_layer", training.fp8_output_layer),
                            ("bf16_first_layers", training.bf16_first_layers),
                            ("bf16_last_layers", training.bf16_last_layers)):
            if value:
                raise InputError(f"{file}: {name}: only with precision fp8 (precision is "
                                 f"{training.precision.value})")
        return training
    if training.fp8_recipe is not None:
        return training
    offered = framework.fp8.recipes if framework.fp8 is not None else tuple(Fp8Recipe)
    runs = [r for r in offered if r in cluster.efficiency.fp8_gemm_efficiency]
    return training.model_copy(update={"fp8_recipe": (runs or list(offered))[0]})


# --------------------------------------------------------------------------- strategies

def load_strategy(ref: str) -> Strategy:
    path = Path(ref)
    return validate_file(Strategy, read_mapping(path), shown(path))


def resolve_strategy(strategy: Strategy, problem: Problem, *, file: str = "strategy") -> Strategy:
    """Fill in dp (the GPUs left over), global_batch (the model's) and the hierarchical CP
    all-to-all group where they are left out."""
    update: dict[str, Any] = {}
    if strategy.global_batch is None:
        update["global_batch"] = problem.training.global_batch
    if strategy.dp is None:
        model_parallel = strategy.tp * strategy.cp * strategy.pp
        named = "tp * cp * pp" if strategy.cp > 1 else "tp * pp"
        if problem.num_gpus % model_parallel:
            raise InputError(
                f"{file}: dp: cannot derive dp: {named} ({model_parallel}) does not divide the "
                f"{problem.num_gpus} GPUs; give dp or change tp and pp")
        update["dp"] = problem.num_gpus // model_parallel
    if strategy.fp8_param_gather is None:
        update["fp8_param_gather"] = bool(problem.framework.defaults.fp8_param_gather
                                          and fp8_param_gather_allowed(problem, strategy.zero_stage))
    if strategy.cp_comm is CpComm.A2A_P2P and strategy.cp_a2a is None:
        update["cp_a2a"] = default_cp_a2a(strategy.cp, strategy.tp, problem.cluster.nvlink_gpus)
    return strategy.model_copy(update=update) if update else strategy
