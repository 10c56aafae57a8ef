"""torchtitan's current config API: a Python recipe returning `Trainer.Config`, written and read.

Current torchtitan (main after v0.2.2) runs `torchrun ... -m torchtitan.train --module M
--config F`: F is a function of module M returning its Trainer.Config (config/manager.py).
Field names checked against pytorch/torchtitan @b5bcd76c:

* config/configs.py: TrainingConfig counts tokens, not samples (num_tokens_per_microbatch_per_
  dp_rank, num_tokens_per_train_step, max_context_length; 73aed7f6, 2026-08-20), and has
  disable_cuda_graphs; ParallelismConfig has num_pp_microbatches (922856452) and no
  enable_async_tensor_parallel, which moved to CompileConfig (737594746).
* distributed/activation_checkpoint.py: the Trainer's activation_checkpoint is a policy,
  FullAC.Config(), SelectiveAC.Config() or None (c5d93d109 removed ActivationCheckpointConfig
  and its mode string).
* trainer.py Trainer.Config._validate_cuda_graphs: CUDA graphs, on by default, refuse pipeline
  parallelism and the expert-parallel dispatchers that synchronize with the host.
* models/<module>/config_registry.py and __init__.py model_registry: the registered models,
  flavors and recipe functions.

The reader parses a recipe with `ast` and never runs it. It reads one function: the one the
user names (`recipe.py:function`), else the one a file's `--config NAME` names, else the one
named after the model, else the file's only top-level recipe; same-file functions it calls
(its base) are read first, and `config.<section>.<field> = value` assignments count too.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

from planner.errors import InputError
from planner.frameworks.base import parse_python

CHECKED_AGAINST = "pytorch/torchtitan torchtitan/config/configs.py, trainer.py @b5bcd76c (recipe)"


@dataclass(frozen=True)
class RegisteredModel:
    """A zoo model that torchtitan registers (models/<module>/__init__.py model_registry)."""

    module: str
    flavor: str
    recipe: str | None
    """The config_registry function that trains it; None: torchtitan has the flavor only."""
    stand_in: str | None = None
    """Where `recipe` is None: a recipe of the same family whose model is swapped."""
    hf_assets: str | None = None
    """hf_assets_path to set where the recipe is a stand-in."""


REGISTERED = {
    "llama3-8b": RegisteredModel("llama3", "8B", "llama3_8b"),
    "llama3-70b": RegisteredModel("llama3", "70B", "llama3_70b"),
    "llama3-405b": RegisteredModel("llama3", "405B", "llama3_405b"),
    "deepseek-v3": RegisteredModel("deepseek_v3", "671B", "deepseek_v3_671b"),
    "gpt-oss-120b": RegisteredModel("gpt_oss", "120b", "gpt_oss_120b"),
    "qwen3-30b-a3b": RegisteredModel("qwen3", "30B-A3B", "qwen3_30b_a3b"),
    "qwen3-235b-a22b": RegisteredModel("qwen3", "235B-A22B", None, stand_in="qwen3_30b_a3b",
                                       hf_assets="./assets/hf/Qwen3-235B-A22B"),
}
"""Zoo models torchtitan ships, by their module, flavor and recipe (the flavors are the same
names in v0.2.2's TOML [model] name/flavor)."""

AC_POLICIES = {"full": "FullAC", "selective": "SelectiveAC"}
"""distributed/activation_checkpoint.py policies by the planner's recompute; none is None."""
AC_MODES = {"FullAC": "full", "SelectiveAC": "selective", "MemoryBudgetAC": "memory_budget"}


@dataclass
class RecipeParts:
    """What the torchtitan emitter hands the recipe writer: settings by section."""

    name: str
    label: str
    header: list[str]
    training: dict[str, Any]
    parallelism: dict[str, Any]
    recompute: str
    """"full", "selective" or "none"."""
    async_tp: bool | None
    """compile.enable_async_tensor_parallel (None: leave the base's)."""
    mtp_layers: int = 0
    compile_components: tuple[str, ...] = ("model", "loss")
    """CompileConfig.components, enabled ("model" unless the plan runs eager ops, "loss" unless
    its loss runs eager); empty: compile off."""
    model_notes: list[str] = field(default_factory=list)
    replaced: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Other Trainer.Config fields set over the base's, {field: {setting: value}} (a trial
    run's metrics, checkpoint and validator)."""
    run_line: str = ("# Run: torchrun ... -m torchtitan.train --module torchtitan_recipe "
                     "--config planner_plan")


def _call(head: str, fields: dict[str, Any], indent: str = "        ") -> str:
    inner = "".join(f"\n{indent}    {k}={v!r}," for k, v in fields.items())
    return f"{head}({inner}\n{indent})"


def _model_lines(parts: RecipeParts) -> tuple[list[str], list[str]]:
    """(imports, statements) that set the base recipe's model where the plan needs another:
    llama3_405b converts its linear layers to float8 (a bf16 plan must not), a stand-in
    recipe trains another flavor, DeepSeek-V3's multi-token prediction (num_mtp_layers)."""
    registered = REGISTERED.get(parts.name)
    if registered is None:
        return [], []
    registry = f"from torchtitan.models.{registered.module} import model_registry"
    if registered.recipe is None:
        return [registry], [
            f"    # torchtitan registers the {registered.flavor} flavor but no recipe for it: "
            f"{registered.stand_in}'s,",
            "    # with the model swapped (the same tokenizer).",
            f"    config.model_spec = model_registry({registered.flavor!r})",
            f"    config.hf_assets_path = {registered.hf_assets!r}"]
    if parts.name == "llama3-405b":
        return [registry], [
            "    # llama3_405b converts the linear layers to float8; this plan trains in bf16.",
            f"    config.model_spec = model_registry({registered.flavor!r})"]
    if registered.module == "deepseek_v3" and parts.mtp_layers:
        return [registry, "from torchtitan.models.common.config_utils import decoder_vocab_size",
                "from torchtitan.models.deepseek_v3.mtp import MTPLoss"], [
            f"    # The model trains {parts.mtp_layers} multi-token-prediction module(s), as "
            f"planned.",
            f"    config.model_spec = model_registry({registered.flavor!r}, attn_backend='flex', "
            f"num_mtp_layers={parts.mtp_layers})",
            "    config.loss = MTPLoss.Config(global_vocab_size=decoder_vocab_size("
            "config.model_spec))"]
    return [], []


def render(parts: RecipeParts) -> str:
    """The recipe module: the registered recipe (or a placeholder) as base, the plan's
    settings over it."""
    registered = REGISTERED.get(parts.name)
    recipe = registered and (registered.recipe or registered.stand_in)
    if recipe:
        base = [f"from torchtitan.models.{registered.module}.config_registry import {recipe} "
                f"as base_config"]
    else:
        base = ["", f"# torchtitan ships no recipe for {parts.name}: import the function that "
                "returns its", "# Trainer.Config as base_config.",
                "def base_config():",
                f'    raise RuntimeError("set base_config to the recipe of {parts.name} (see '
                f'the comment above)")']
    model_imports, model_lines = _model_lines(parts)
    policy = AC_POLICIES.get(parts.recompute)
    imports = ["from dataclasses import replace", "",
               "from torchtitan.config import ParallelismConfig"]
    if policy:
        imports.append(f"from torchtitan.distributed.activation_checkpoint import {policy}")
    imports += ["from torchtitan.trainer import Trainer", *model_imports]
    training = "        training=" + _call("replace", {"__obj__": None, **parts.training}) \
        .replace("\n            __obj__=None,", "config.training,") + ","
    fields = [training,
              "        parallelism=" + _call("ParallelismConfig", parts.parallelism) + ",",
              f"        activation_checkpoint={policy + '.Config()' if policy else None},"]
    # CompileConfig: on with the model and loss unless the plan runs eager ("Async TP
    # requires 'model' in --compile.components and --compile.enable").
    compile_fields: dict = ({"enable": True, "components": list(parts.compile_components)}
                            if parts.compile_components else {"enable": False})
    if parts.async_tp is not None:
        compile_fields["enable_async_tensor_parallel"] = parts.async_tp
    fields.append("        compile=" + _call("replace", {"__obj__": None, **compile_fields})
                  .replace("\n            __obj__=None,", "config.compile,") + ",")
    for name, settings in parts.replaced.items():
        fields.append(f"        {name}=" + _call("replace", {"__obj__": None, **settings})
                      .replace("\n            __obj__=None,", f"config.{name},") + ",")
    lines = [*parts.header, parts.run_line, "", *imports, "", *base, "", "",
             "def planner_plan() -> Trainer.Config:",
             f'    """{parts.name}: {parts.label} (planner)."""',
             "    config = base_config()", *model_lines,
             "    return replace(", "        config,", *fields, "    )", ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------- reading

SECTIONS = {"ParallelismConfig": "parallelism", "TrainingConfig": "training",
            "ActivationCheckpointConfig": "activation_checkpoint", "CompileConfig": "compile"}
"""Config constructors by the Trainer.Config field they fill (ActivationCheckpointConfig:
recipes written before c5d93d109)."""


def _name(node: ast.AST) -> str | None:
    return node.id if isinstance(node, ast.Name) else getattr(node, "attr", None)


def _ac_mode(value: ast.AST) -> str | None:
    """The activation-checkpoint mode a policy expression selects: FullAC.Config() -> full,
    None -> none; None when it is something else."""
    if isinstance(value, ast.Constant) and value.value is None:
        return "none"
    if isinstance(value, ast.Call) and _name(value.func) == "Config" \
            and isinstance(value.func, ast.Attribute):
        return AC_MODES.get(_name(value.func.value))
    return None


def _section_of(target: ast.AST) -> tuple[str, str] | None:
    """(section, field) of an assignment target config.<section>.<field>."""
    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Attribute) \
            and target.value.attr in SECTIONS.values():
        return target.value.attr, target.attr
    return None


def _literal(node: ast.AST) -> tuple[bool, Any]:
    try:
        return True, ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None                       # computed at run time: not ours to guess


def _read_statement(node: ast.AST, sections: dict[str, dict[str, Any]]) -> None:
    """Settings one statement of a recipe function makes."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Assign):
            for target in sub.targets:
                where = _section_of(target)
                if where:
                    ok, value = _literal(sub.value)
                    if ok:
                        sections.setdefault(where[0], {})[where[1]] = value
                elif isinstance(target, ast.Attribute) and target.attr == "activation_checkpoint":
                    mode = _ac_mode(sub.value)
                    if mode:
                        sections.setdefault("activation_checkpoint", {})["mode"] = mode
        if not isinstance(sub, ast.Call):
            continue
        called = _name(sub.func)
        section = SECTIONS.get(called)
        if called == "replace" and sub.args and isinstance(sub.args[0], ast.Attribute) \
                and sub.args[0].attr in SECTIONS.values():
            section = sub.args[0].attr
        for keyword in sub.keywords:
            if keyword.arg == "activation_checkpoint":
                mode = _ac_mode(keyword.value)
                if mode:
                    sections.setdefault("activation_checkpoint", {})["mode"] = mode
        if section is None:
            continue
        if called in SECTIONS:      # a fresh config: the fields it leaves out are defaults
            sections.setdefault("_constructed", {})[section] = True
        for keyword in sub.keywords:
            if keyword.arg is None:
                continue
            ok, value = _literal(keyword.value)
            if ok:
                sections.setdefault(section, {})[keyword.arg] = value


def _calls(function: ast.FunctionDef, names) -> list[str]:
    return [n.func.id for n in ast.walk(function) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name) and n.func.id in names]


def _read_function(functions: dict[str, ast.FunctionDef], name: str,
                   sections: dict[str, dict[str, Any]], seen: set[str]) -> None:
    """The settings of one function: those of the same-file functions it calls first (its
    base recipe), then its own statements in order."""
    seen.add(name)
    for statement in functions[name].body:
        for base in _calls(statement, functions):
            if base not in seen:
                _read_function(functions, base, sections, seen)
        _read_statement(statement, sections)


def _is_recipe(function: ast.FunctionDef) -> bool:
    returns = ast.unparse(function.returns) if function.returns is not None else ""
    return returns.endswith("Trainer.Config") or any(
        isinstance(n, ast.Call) and (_name(n.func) in SECTIONS or _name(n.func) == "Config"
                                     and isinstance(n.func, ast.Attribute)
                                     and _name(n.func.value) == "Trainer")
        for n in ast.walk(function))


def _choose(functions: dict[str, ast.FunctionDef], text: str, file: str, model: str,
            function: str | None) -> tuple[str | None, str | None]:
    """(the recipe function to read, a note on the choice where the file holds several)."""
    recipes = [name for name, f in functions.items() if _is_recipe(f)]
    if function is not None:
        if function not in functions:
            close = [n for n in recipes if n.startswith(function[:4])] or recipes
            raise InputError(f"{file}: no function '{function}'; its recipes are "
                             f"{', '.join(recipes) or 'none'}"
                             + (f" (did you mean '{close[0]}'?)" if close else ""))
        return function, None
    called = {c for name in recipes for c in _calls(functions[name], functions) if c != name}
    roots = [name for name in recipes if name not in called]
    if len(roots) <= 1:
        return (roots[0] if roots else None), None
    named = re.findall(r"--config[ =]([A-Za-z_][A-Za-z0-9_]*)", text)
    by_model = re.sub(r"[^0-9a-z]+", "_", model.lower())
    if named and named[0] in recipes:
        chosen, why = named[0], "the one its --config names"
    elif by_model in recipes:
        chosen, why = by_model, f"the one named after {model}"
    else:
        chosen, why = roots[0], "the first not built on another"
    return chosen, (f"{file} defines {len(recipes)} recipes ({', '.join(recipes)}): read "
                    f"{chosen}, {why}; name another as {file}:FUNCTION")


def sections(text: str, file: str, *, model: str, function: str | None = None
             ) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Keyword arguments of the config constructors in one recipe function (literals only),
    by section, and notes on which function that is. The pseudo-section "_constructed" names
    the sections the function builds afresh (TrainingConfig(...), not replace(...))."""
    tree = parse_python(text, file)
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    chosen, note = _choose(functions, text, file, model, function)
    found: dict[str, dict[str, Any]] = {}
    if chosen is None:
        for statement in tree.body:     # a module of plain statements
            _read_statement(statement, found)
    else:
        _read_function(functions, chosen, found, set())
    return found, [note] if note else []
