"""Slurm's options for the size of a job, as sbatch (`#SBATCH` lines and its command line) and
srun take them.

Ref: https://slurm.schedmd.com/sbatch.html and srun.html: -N/--nodes=<min>[-max], -n/--ntasks,
--ntasks-per-node, -G/--gpus, --gpus-per-node, --gpus-per-task, --gres=gpu[:type]:N. Both
take `--opt=value`, `--opt value`, `-N 8` and `-N8`. srun runs one task per node unless asked
for more (-n or --ntasks-per-node).
"""

from __future__ import annotations

import re

SIZE_OPTIONS = {"-N": "nodes", "--nodes": "nodes", "-n": "ntasks", "--ntasks": "ntasks",
                "--ntasks-per-node": "ntasks-per-node", "-G": "gpus", "--gpus": "gpus",
                "--gpus-per-node": "gpus-per-node", "--gpus-per-task": "gpus-per-task",
                "--gres": "gres"}
"""The options that size a job, by the name this module files them under."""
_SHORT_WITH_VALUE = set("ABCDFGJLMNSTWabcdeimnopqrstwx")
"""Short options that take a value (sbatch/srun man pages); the others are switches."""
_LONG_SWITCHES = frozenset({
    "--exclusive", "--overcommit", "--label", "--unbuffered", "--pty", "--wait", "--quiet",
    "--verbose", "--no-kill", "--kill-on-bad-exit", "--hold", "--requeue", "--no-requeue",
    "--contiguous", "--spread-job", "--use-min-nodes", "--test-only", "--parsable",
    "--container-remap-root", "--no-container-remap-root", "--container-mount-home",
    "--no-container-mount-home", "--container-writable", "--container-readonly",
    "--container-entrypoint", "--no-container-entrypoint", "--container-save",
    "--no-container-entrypoint-log", "--help", "--usage", "--version", "--disable-status",
    "--multi-prog", "--preserve-env", "--ignore-pbs", "--nv"})


def read_options(words: list[str]) -> tuple[dict[str, str], int]:
    """({name: value} of the size options, index of the first word after the options: the
    program srun runs or the script sbatch submits)."""
    found: dict[str, str] = {}
    i = 0
    while i < len(words):
        word = words[i]
        if not word.startswith("-") or word in ("-", "--"):
            return found, i + (word == "--")
        if word.startswith("--"):
            name, has_value, value = word.partition("=")
            if not has_value and name not in _LONG_SWITCHES and i + 1 < len(words) \
                    and not words[i + 1].startswith("-"):
                value, i = words[i + 1], i + 1
        else:
            name, value = word[:2], word[2:]
            if not value and word[1] in _SHORT_WITH_VALUE and i + 1 < len(words):
                value, i = words[i + 1], i + 1
        if name in SIZE_OPTIONS:
            found[SIZE_OPTIONS[name]] = value
        i += 1
    return found, i


def read_directives(lines: list[str]) -> dict[str, str]:
    """The size options of `#SBATCH` lines (later lines win, as sbatch reads them)."""
    import shlex

    found: dict[str, str] = {}
    for line in lines:
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        found.update(read_options(words)[0])
    return found


def count(value: str | None) -> int | None:
    """A count Slurm reads: `8`, a node range `2-4` (the most it allocates), or the GPUs of
    `--gres gpu:8` / `gpu:h100:8` / `--gpus h100:8`; None when it is not a number."""
    if value is None:
        return None
    for part in value.split(","):
        match = re.fullmatch(r"(?:gpu:)?(?:[A-Za-z][\w.-]*:)?(\d+)(?:-(\d+))?(?:\(.*\))?",
                             part.strip())
        if match:
            return int(match.group(2) or match.group(1))
    return None


def environment(options: dict[str, str]) -> dict[str, str]:
    """The SLURM_* variables a batch script sees for these options (sbatch.html, OUTPUT
    ENVIRONMENT VARIABLES): only those the options fix."""
    env: dict[str, str] = {}
    nodes, per_node = count(options.get("nodes")), count(options.get("ntasks-per-node"))
    if nodes is not None:
        env["SLURM_NNODES"] = env["SLURM_JOB_NUM_NODES"] = str(nodes)
    if per_node is not None:
        env["SLURM_NTASKS_PER_NODE"] = str(per_node)
    tasks = count(options.get("ntasks"))
    if tasks is None and nodes is not None and per_node is not None:
        tasks = nodes * per_node
    if tasks is not None:
        env["SLURM_NTASKS"] = env["SLURM_NPROCS"] = str(tasks)
    gpus = count(options.get("gpus-per-node")) or count(options.get("gres"))
    if gpus is not None:
        env["SLURM_GPUS_PER_NODE"] = env["SLURM_GPUS_ON_NODE"] = str(gpus)
    return env
