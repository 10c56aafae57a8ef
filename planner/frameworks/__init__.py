"""Launch configs: one module per target, a registry keyed by `LaunchTarget`, atomic writes.

Every target has an emitter (a test checks the registry is exhaustive), and every emitter's
module reads its own kind of file back, so `planner validate` can judge the configs users
already run and emit -> validate round-trips.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from planner.frameworks import (deepspeed, megatron, mindformers, mindspore, torchrun,
                                torchtitan)
from planner.frameworks.base import Emitter, LaunchPlan, ParsedConfig
from planner.frameworks.megatron_flags import is_launch_text
from planner.errors import InputError, shown
from planner.schemas.strategy import LaunchTarget

EMITTERS: dict[LaunchTarget, Emitter] = {
    module_target: Emitter(module_target, module.emit, module.parse, module.CHECKED_AGAINST)
    for module_target, module in (
        (LaunchTarget.MEGATRON, megatron), (LaunchTarget.DEEPSPEED, deepspeed),
        (LaunchTarget.TORCHRUN, torchrun), (LaunchTarget.TORCHTITAN, torchtitan),
        (LaunchTarget.MINDSPORE, mindspore), (LaunchTarget.MINDFORMERS, mindformers))
}


TORCHRUN_LAUNCHED = (LaunchTarget.MEGATRON, LaunchTarget.TORCHRUN, LaunchTarget.TORCHTITAN)
"""Targets whose scripts start their processes with torchrun (`torchrun.launcher`)."""


def check_launch(targets, num_gpus: int, gpus_per_node: int) -> None:
    """Refuse, before any search, a GPU count a target's launcher cannot start: torchrun
    starts as many processes on every node (`torchrun.nodes_and_gpus`)."""
    if any(t in TORCHRUN_LAUNCHED for t in targets):
        torchrun.nodes_and_gpus(num_gpus, gpus_per_node)


def emit_files(targets: list[LaunchTarget], plan: LaunchPlan) -> dict[str, str]:
    """{file name: text} for every requested target."""
    files: dict[str, str] = {}
    for target in targets:
        files.update(EMITTERS[target].emit(plan))
    return files


def write_files(files: dict[str, str], out_dir: str | Path, *, force: bool) -> list[Path]:
    """Write every file or none: refuse existing files without `force`, and write each one
    to a temporary file in the same directory, then rename them all (never half-written; an
    interrupt before the renames leaves the old files). The files get the mode a plain
    open() would give them under the umask (mkstemp's 0600 would not); scripts are
    executable. A name may hold a sub-directory ('trial-1/pretrain_gpt.sh'): it is made
    before the files are staged."""
    out = Path(out_dir)
    staged: list[tuple[str, Path]] = []
    try:
        if out.exists() and not out.is_dir():
            raise InputError(f"--out {shown(out)}: exists and is not a directory")
        paths = [out / name for name in files]
        existing = [shown(p) for p in paths if p.exists()]
        if existing and not force:
            raise InputError(f"--out: {existing[0]} exists; pass --force to overwrite it"
                             + (f" (and {len(existing) - 1} more)" if len(existing) > 1
                                else ""))
        out.mkdir(parents=True, exist_ok=True)
        try:
            for path, text in zip(paths, files.values()):
                path.parent.mkdir(parents=True, exist_ok=True)     # 'trial-1/run.sh'
                fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.",
                                           suffix=".tmp")
                staged.append((tmp, path))
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    handle.write(text)
                os.chmod(tmp, created_mode(executable=path.suffix == ".sh"))
            for tmp, path in staged:
                os.replace(tmp, path)
        finally:
            for tmp, _ in staged:
                Path(tmp).unlink(missing_ok=True)
    except OSError as e:      # a name too long for the system counts as well
        where = shown(e.filename) if e.filename else f"--out {shown(out)}"
        raise InputError(f"{where}: cannot write: {e.strerror or e}") from None
    return paths


def created_mode(*, executable: bool = False) -> int:
    """The permission bits open() gives a new file: 0666 (0777 for a script) less the
    process umask."""
    umask = os.umask(0)      # the only way to read it is to set it: put it straight back
    os.umask(umask)
    return (0o777 if executable else 0o666) & ~umask


SHELL_SUFFIXES = (".sh", ".bash")
"""Launch scripts: read as Megatron-LM (or a torchrun launcher) whatever they hold."""
READ_SUFFIXES = (".yaml/.yml (strategy, MindFormers), .json (DeepSpeed), .toml (torchtitan), "
                 ".py (torchtitan recipe, MindSpore), .sh/.bash (Megatron-LM, torchrun)")


def _split_function(path: str) -> tuple[str, str | None]:
    """'recipe.py:planner_plan' -> ('recipe.py', 'planner_plan'), as torchtitan's --config
    names one function of a recipe module; any other path as it is."""
    head, sep, name = path.rpartition(":")
    if sep and head.endswith(".py") and name.isidentifier() and not Path(path).exists():
        return head, name
    return path, None


def read_config(path: str, problem, num_gpus: int | None = None) -> ParsedConfig:
    """A strategy from any file `validate` accepts, by its kind: strategy.yaml, a MindFormers
    run YAML (a top-level parallel_config), a DeepSpeed JSON, a torchtitan TOML or recipe, a
    MindSpore module, a Megatron-LM script or argument file (or a torchrun launcher, which
    carries only its world size). A file of another suffix is read as Megatron-LM only where
    its text is an argument file or a launch line (`megatron_flags.is_launch_text`).
    `recipe.py:function` reads that one function of a torchtitan recipe module."""
    from planner.inputs.loader import _read_text, load_strategy

    path, function = _split_function(path)
    file = Path(path)
    text = _read_text(file)
    if function is not None:
        if "ParallelismConfig" not in text and "Trainer.Config" not in text:
            raise InputError(f"{path}:{function}: only a torchtitan recipe names a function "
                             f"to read")
        return torchtitan.parse(text, file=path, problem=problem, num_gpus=num_gpus,
                                function=function)
    if file.suffix in (".yaml", ".yml"):
        if mindformers.is_mindformers(text):
            return mindformers.parse(text, file=path, problem=problem, num_gpus=num_gpus)
        strategy = load_strategy(path)
        # A key left empty (YAML null) means what leaving it out means: its default.
        fields = strategy.model_dump(exclude_unset=True, exclude_none=True)
        return ParsedConfig(strategy=fields, target=None)
    if file.suffix == ".json":
        module = deepspeed
    elif file.suffix == ".toml":
        module = torchtitan
    elif file.suffix == ".py":
        if "set_auto_parallel_context" in text or "TransformerOpParallelConfig" in text:
            module = mindspore
        elif "ParallelismConfig" in text or "Trainer.Config" in text:
            module = torchtitan
        else:
            raise InputError(f"{path}: a Python file that is neither a torchtitan recipe "
                             f"(ParallelismConfig) nor a MindSpore setup "
                             f"(set_auto_parallel_context)")
    elif file.suffix not in SHELL_SUFFIXES and not is_launch_text(text):
        raise InputError(f"{path}: not a launch config: the planner reads {READ_SUFFIXES}, "
                         f"or a Megatron-LM argument file or launch line of any other suffix")
    elif "torchrun" in text and "--tensor-model-parallel-size" not in text \
            and "pretrain_" not in text:
        module = torchrun
    else:
        module = megatron
    return module.parse(text, file=path, problem=problem, num_gpus=num_gpus)


__all__ = ["EMITTERS", "TORCHRUN_LAUNCHED", "Emitter", "LaunchPlan", "LaunchTarget",
           "ParsedConfig", "check_launch", "emit_files", "read_config", "write_files"]
