"""torchrun: the multi-node launch command and the environment the collectives need.

`torchrun.sh` starts any training script on every node with the c10d rendezvous; the Megatron-LM
script launches through the same lines. Reading one back gives the world size it launches,
nnodes x nproc_per_node: torchrun carries no parallel strategy of its own.
"""

from __future__ import annotations

from planner.frameworks.base import LaunchPlan, ParsedConfig, header_lines
from planner.frameworks.launchers import read_launch
from planner.frameworks.shell import ShellScript
from planner.inputs import profiles
from planner.schemas.framework import FrameworkProfile
from planner.core.problem import Problem
from planner.schemas.cluster import ClusterSpec, LinkKind
from planner.schemas.strategy import LaunchTarget

CHECKED_AGAINST = "pytorch/pytorch torch/distributed/run.py (torch 2.x option spellings)"



def _comment(lines: list[str]) -> list[str]:
    return [f"# {line}" for line in lines]


def environment(cluster: ClusterSpec, *, tp: int, cp: int = 1, ordered_kernels: bool = True,
                nvls: bool = True) -> list[str]:
    """`export` lines for the cluster's collective library and network. `ordered_kernels`:
    whether tensor parallelism may ask for one CUDA connection (Megatron-FSDP refuses it);
    `nvls`: False turns NCCL's NVSwitch reduction off (NCCL_NVLS_ENABLE=0, NCCL docs
    env.html; on by default where the switch has it)."""
    lines = []
    hccl = cluster.intra_node.kind is LinkKind.HCCS      # Ascend: HCCL, else NCCL
    if not hccl:
        kind = cluster.inter_node.kind
        if kind is LinkKind.ETHERNET:
            lines += ["# NCCL over TCP sockets: no InfiniBand verbs on this network",
                      "export NCCL_IB_DISABLE=1",
                      "export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-eth0}"]
        else:
            lines += [f"# NCCL over {kind.value} (GPUDirect RDMA); list the HCAs in NCCL_IB_HCA "
                      "if NCCL picks the wrong ones",
                      "export NCCL_IB_DISABLE=0"]
            if kind is LinkKind.ROCE:
                lines.append("export NCCL_IB_GID_INDEX=${NCCL_IB_GID_INDEX:-3}"
                             "   # RoCE v2 GID on most fabrics")
        if not nvls:
            lines += ["# No NVLS (NVSwitch in-switch reduction): NCCL runs ring and tree inside "
                      "the node", "export NCCL_NVLS_ENABLE=0"]
        lines += ["export NCCL_DEBUG=${NCCL_DEBUG:-WARN}",
                  "export TORCH_NCCL_ASYNC_ERROR_HANDLING=1   # fail fast on a hung collective"]
    else:
        lines += ["# HCCL (Ascend, torch_npu): allow slow first connections on large clusters",
                  "export HCCL_CONNECT_TIMEOUT=${HCCL_CONNECT_TIMEOUT:-1200}"]
    # megatron/training/arguments.py validate_args @d98e8a64: before Blackwell, "Using tensor
    # model parallelism or context parallelism require setting the environment variable
    # CUDA_DEVICE_MAX_CONNECTIONS to 1" (tp > 1 or cp > 1).
    if (tp > 1 or cp > 1) and ordered_kernels:
        lines += ["# Tensor- and context-parallel kernels must be issued in order (Megatron-LM "
                  "asserts it with tp > 1 or cp > 1)", "export CUDA_DEVICE_MAX_CONNECTIONS=1"]
    return lines


def nodes_and_gpus(num_gpus: int, gpus_per_node: int) -> tuple[int, int]:
    """(nodes, processes per node) that launch exactly `num_gpus` on the fewest nodes: torchrun
    starts the same number of processes on every node."""
    from planner.errors import InputError

    nodes = -(-num_gpus // gpus_per_node)
    if num_gpus % nodes:
        raise InputError(f"--emit: {num_gpus} GPUs cannot be spread evenly over nodes of "
                         f"{gpus_per_node} (torchrun starts as many processes on every node); "
                         f"use a GPU count that {nodes} nodes share equally")
    return nodes, num_gpus // nodes


def launcher(plan: LaunchPlan) -> list[str]:
    """Variable lines for the rendezvous: every node runs the same command."""
    p = plan.problem
    nodes, per_node = nodes_and_gpus(p.num_gpus, p.cluster.gpus_per_node)
    return [
        f"NNODES=${{NNODES:-{nodes}}}            # {p.num_gpus} GPUs = {nodes} x {per_node}",
        f"NPROC_PER_NODE=${{NPROC_PER_NODE:-{per_node}}}",
        "MASTER_ADDR=${MASTER_ADDR:?set MASTER_ADDR to the address of the first node}",
        "MASTER_PORT=${MASTER_PORT:-29500}",
        f"RDZV_ID=${{RDZV_ID:-planner-{p.model.name}}}",
    ]


TORCHRUN = ('torchrun --nnodes "$NNODES" --nproc-per-node "$NPROC_PER_NODE" \\\n'
            '  --rdzv-backend c10d --rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT" '
            '--rdzv-id "$RDZV_ID"')


def emit(plan: LaunchPlan) -> dict[str, str]:
    lines = ["#!/usr/bin/env bash", *_comment(header_lines(plan, "torchrun", CHECKED_AGAINST)),
             "# Run on every node: MASTER_ADDR=<first node> bash torchrun.sh train.py [args]",
             "set -euo pipefail", "", *launcher(plan), "",
             *environment(plan.problem.cluster, tp=plan.strategy.tp, cp=plan.strategy.cp,
                          nvls=plan.strategy.nvls), "",
             f'{TORCHRUN} \\\n  "$@"', ""]
    return {"torchrun.sh": "\n".join(lines)}


def parse(text: str, *, file: str, problem: Problem, num_gpus: int | None) -> ParsedConfig:
    script = ShellScript(text, file=file)
    parsed = ParsedConfig(strategy={}, target=LaunchTarget.TORCHRUN)
    read_launch(parsed, script, file=file, problem=problem, num_gpus=num_gpus)
    return parsed


# --------------------------------------------------------------------------- profile

def profile() -> FrameworkProfile:
    """Features, overlaps and constants of a PyTorch script under torchrun (profiles/torchrun.yaml, with sources)."""
    return profiles.load("torchrun")
