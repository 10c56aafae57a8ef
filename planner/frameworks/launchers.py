"""How many GPUs a launch script starts its trainer on, read from its launcher: torchrun (or
`python -m torch.distributed.run` / `.launch`), the deepspeed launcher, srun, mpirun, and the
Slurm job around them.

torchrun: nnodes x nproc_per_node, each 1 when absent (torch/distributed/run.py: `--nnodes`
default "1:1", `--nproc-per-node` default "1"; "gpu" and "auto" mean the node's GPUs); an
elastic `MIN:MAX` launches at most MAX nodes. srun without torchrun: its tasks, one process per
GPU for Megatron-LM: `-n`, else nodes x `--ntasks-per-node`, else one task per node (srun's
default); srun's own options win over the job's (#SBATCH lines, `sbatch` options).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.errors import InputError
from planner.frameworks import slurm
from planner.frameworks.shell import ShellScript
from planner.frameworks.shell_flags import one_line
from planner.frameworks.shell_expand import as_written, is_known, why_unknown

_TORCH_MODULES = ("torch.distributed.run", "torch.distributed.launch")
_NNODES = ("--nnodes",)
_NPROC = ("--nproc-per-node", "--nproc_per_node")


@dataclass(frozen=True)
class LaunchSize:
    num_gpus: int | None
    """None when the script launches through a value it does not hold (a note says which)."""
    source: str
    """How the script says it: 'torchrun --nnodes 8 --nproc-per-node 8'."""
    notes: tuple[str, ...] = field(default_factory=tuple)


def _torchrun_options(words: tuple[str, ...]) -> tuple[str, ...] | None:
    """The launcher options of a command that starts torchrun, up to its training script."""
    for k, word in enumerate(words):
        if word.rsplit("/", 1)[-1] == "torchrun":
            start = k + 1
        elif word in _TORCH_MODULES and k and words[k - 1] == "-m":
            start = k + 1
        else:
            continue
        end = next((j for j in range(start, len(words))
                    if words[j].endswith(".py") or words[j] == "-m"), len(words))
        return words[start:end]
    return None


def _option(options: tuple[str, ...], names: tuple[str, ...]) -> str | None:
    value = None
    for k, word in enumerate(options):
        name, has_value, inline = word.partition("=")
        if name in names:
            value = inline if has_value else (options[k + 1] if k + 1 < len(options) else "")
    return value


def _number(value: str, what: str, file: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise InputError(f"{file}: {what} {one_line(value)}: expected a number") from None
    if number < 1:
        raise InputError(f"{file}: {what} {one_line(value)}: must be at least 1")
    return number


def _unknown(what: str, value: str, file: str) -> LaunchSize:
    shown = one_line(as_written(value))
    return LaunchSize(None, f"{what} {shown}",
                      (f"{file}: {what} {shown}: {why_unknown(value)}, so the GPU count it "
                       f"launches is not known",))


def _torchrun(options: tuple[str, ...], file: str, gpus_per_node: int) -> LaunchSize:
    nnodes = _option(options, _NNODES)
    nproc = _option(options, _NPROC)
    if "--standalone" in options and nnodes is None:
        nnodes = "1"
    for what, value in (("--nnodes", nnodes), ("--nproc-per-node", nproc)):
        if value is not None and not is_known(value):
            return _unknown(f"torchrun {what}", value, file)
    notes = []
    if nnodes is None:
        notes.append(f"{file}: torchrun without --nnodes launches one node (its default)")
        nodes = 1
    else:
        nodes = _number(nnodes.split(":")[-1], "torchrun --nnodes", file)
    if nproc in ("gpu", "auto"):
        per_node = gpus_per_node
        notes.append(f"{file}: torchrun --nproc-per-node {nproc}: one process per GPU of the "
                     f"cluster's nodes ({gpus_per_node})")
    elif nproc is None:
        per_node = 1
        notes.append(f"{file}: torchrun without --nproc-per-node starts one process per node "
                     f"(its default)")
    else:
        per_node = _number(nproc, "torchrun --nproc-per-node", file)
    source = f"torchrun --nnodes {nnodes or 1} --nproc-per-node {nproc or 1}"
    return LaunchSize(nodes * per_node, source, tuple(notes))


def _deepspeed(words: tuple[str, ...], file: str, gpus_per_node: int) -> LaunchSize:
    """The deepspeed launcher (deepspeed/launcher/runner.py): --num_nodes nodes of its hostfile
    (all of them by default; one, this node, without a hostfile) and --num_gpus GPUs on each
    (all the node's by default)."""
    options = words[:next((k for k, w in enumerate(words) if w.endswith(".py")), len(words))]
    nodes = _option(options, ("--num_nodes",))
    gpus = _option(options, ("--num_gpus", "--num_accelerators"))
    for what, value in (("--num_nodes", nodes), ("--num_gpus", gpus)):
        if value is not None and not is_known(value):
            return _unknown(f"deepspeed {what}", value, file)
    hostfile = _option(options, ("--hostfile", "-H"))
    count = _all_or_count(nodes, "deepspeed --num_nodes", file)
    if count is None and hostfile is not None:
        return LaunchSize(None, f"deepspeed --hostfile {one_line(hostfile)}",
                          (f"{file}: deepspeed --hostfile {one_line(hostfile)} without "
                           f"--num_nodes runs on every host the file lists, which the planner "
                           f"cannot read",))
    notes = []
    if count is None:
        count = 1
        notes.append(f"{file}: deepspeed without --num_nodes or --hostfile runs on this node")
    per_node = _all_or_count(gpus, "deepspeed --num_gpus", file) or gpus_per_node
    return LaunchSize(count * per_node, f"deepspeed --num_nodes {count} --num_gpus {per_node}",
                      tuple(notes))


def _all_or_count(value: str | None, what: str, file: str) -> int | None:
    """A deepspeed launcher count, None for its default -1 (all) or when absent."""
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise InputError(f"{file}: {what} {one_line(value)}: expected a number") from None
    return number if number > 0 else None


def _srun(options: dict[str, str], job: dict[str, str], file: str) -> LaunchSize | None:
    merged = {**job, **options}
    for key in ("ntasks", "nodes", "ntasks-per-node"):
        if key in merged and not is_known(merged[key]):
            return _unknown(f"srun --{key}", merged[key], file)
    tasks, nodes = slurm.count(merged.get("ntasks")), slurm.count(merged.get("nodes"))
    per_node = slurm.count(merged.get("ntasks-per-node"))
    if tasks is not None:
        return LaunchSize(tasks, f"srun --ntasks {tasks}")
    if nodes is None:
        return None
    if per_node is None:
        return LaunchSize(nodes, f"srun --nodes {nodes}",
                          (f"{file}: srun without --ntasks-per-node starts one task per node "
                           f"({nodes} nodes, {nodes} processes); Megatron-LM runs one "
                           f"process per GPU",))
    return LaunchSize(nodes * per_node, f"srun --nodes {nodes} --ntasks-per-node {per_node}")


def launch_size(script: ShellScript, *, file: str, gpus_per_node: int) -> LaunchSize | None:
    """The GPUs the script's first launcher starts, or None when it has none."""
    for command in script.commands:
        options = _torchrun_options(command.words)
        if options is not None:
            return _torchrun(options, file, gpus_per_node)
    for command in script.commands:
        program = command.words[0].rsplit("/", 1)[-1]
        if program == "deepspeed":
            return _deepspeed(command.words[1:], file, gpus_per_node)
        if program == "srun":
            found, _ = slurm.read_options(list(command.words[1:]))
            size = _srun(found, script.slurm, file)
            if size is not None:
                return size
        if program in ("mpirun", "mpiexec"):
            count = _option(command.words[1:], ("-np", "-n", "--np", "--n"))
            if count is not None and not is_known(count):
                return _unknown(f"{program} -np", count, file)
            if count is not None:
                return LaunchSize(_number(count, f"{program} -np", file), f"{program} -np {count}")
    return None


def read_launch(parsed, script: ShellScript, *, file: str, problem, num_gpus: int | None
                ) -> None:
    """Fill `parsed` with the script's GPU count and its notes, and the script's own notes
    (branches it cannot decide, files it cannot source); when the script does not say how
    many GPUs it launches, a note says where the count comes from instead."""
    size = launch_size(script, file=file, gpus_per_node=problem.cluster.gpus_per_node)
    parsed.notes.extend(script.notes)
    if size is not None:
        parsed.world_size, parsed.world_size_source = size.num_gpus, size.source
        parsed.notes.extend(size.notes)
    flags_only = all(c.words[0].startswith("-") for c in script.commands)
    if parsed.world_size is None and not (flags_only and num_gpus):
        # An argument file holds no launcher: with --gpus, the count is the user's own.
        given = (f"--gpus {num_gpus}" if num_gpus else
                 f"the whole {problem.cluster.name} cluster ({problem.num_gpus} GPUs; pass "
                 f"--gpus to price fewer)")
        if size is None:
            parsed.notes.append(f"{file}: no launcher says how many GPUs it runs on (torchrun "
                                f"--nnodes/--nproc-per-node, srun or #SBATCH --nodes, mpirun "
                                f"-np); priced on {given}")
        else:
            parsed.notes.append(f"{file}: priced on {given}")
