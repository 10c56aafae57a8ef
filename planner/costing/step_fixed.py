"""The fixed per-step terms of a batch of candidates per pipeline stage: zeroing the gradient
buffer, the gradient norm and clipping, the loss all-reduce (`cost_models.step_fixed`), where
the framework profile says its framework runs them. The groups sit where the rank order puts
them (`placement`).

The groups: the distributed optimizer (ZeRO >= 1) reduces the norm over every rank of the run
(Megatron-LM distrib_optimizer.py: the grad-stats group is the whole world; torchtitan reduces
its DTensor norm over the whole mesh); without it over the model-parallel ranks (tp x pp,
optimizer.py get_grad_stats_parallel_group). The loss goes over the dp x cp ranks.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from cost_models import communication as comm
from cost_models.communication import Group
from cost_models.step_fixed import (GRAD_NORM_BYTES, LOSS_REDUCE_BYTES, grad_buffer_zero_time_s,
                                    grad_clip_time_s, step_sync_time_s)
from planner.costing.placement import (as_column, data_parallel_gap, pipeline_placement,
                                       strided_placement)


class StepFixed(NamedTuple):
    """(N, p) seconds per stage of each fixed term."""

    grad_zero_s: np.ndarray
    grad_norm_s: np.ndarray
    loss_reduce_s: np.ndarray


def _model_parallel_group(cands, gpus_per_node: int) -> Group:
    """The tp x pp ranks of one model replica: tp consecutive ranks, pp of them placed by the
    rank order (`placement.pipeline_placement`)."""
    pipeline = pipeline_placement(cands, gpus_per_node)
    return Group(size=cands.tp * cands.pp,
                 ranks_per_node=np.minimum(cands.tp, gpus_per_node) * pipeline.ranks_per_node,
                 num_nodes=pipeline.num_nodes)


_FIELDS = ("size", "ranks_per_node", "num_nodes")


def step_fixed_s(problem, cands, *, gradient_bytes: np.ndarray,
                 updated_params: np.ndarray) -> StepFixed:
    """The fixed terms of each stage: `gradient_bytes` (N, p) the gradient memory a rank holds
    (what a buffer zeroing clears), `updated_params` (N, p) the parameters whose optimizer step
    it runs (whose gradients the norm reads)."""
    cluster, fw = problem.cluster, problem.framework
    hbm = dict(hbm_bytes_per_s=cluster.gpu.hbm_gb_per_s * 1e9,
               hbm_fraction=cluster.efficiency.hbm_fraction)
    zeros = np.zeros_like(gradient_bytes)
    grad_zero = grad_buffer_zero_time_s(gradient_bytes, **hbm) if fw.zeroes_grad_buffer else zeros
    grad_norm = zeros
    if fw.clips_grad_norm:
        gpn = cluster.nvlink_gpus
        world = strided_placement(cands.num_gpus, 1, gpn)
        model_parallel = _model_parallel_group(cands, gpn)
        sharded = cands.zero >= 1
        group = Group(*(np.where(sharded, getattr(world, f), getattr(model_parallel, f))
                        for f in _FIELDS))
        norm_all_reduce = comm.all_reduce_time_s(GRAD_NORM_BYTES, as_column(group),
                                                 cluster.network)
        grad_norm = grad_clip_time_s(
            updated_params * problem.training.state_bytes.gradients,
            norm_all_reduce_s=norm_all_reduce, **hbm)
    loss = zeros
    if fw.reduces_loss_every_step:
        group = as_column(strided_placement(cands.dp * cands.cp, cands.tp, cluster.nvlink_gpus,
                                          inner=cands.cp, gap=data_parallel_gap(cands)))
        loss = zeros.copy()
        loss[:, -1] = comm.all_reduce_time_s(LOSS_REDUCE_BYTES, group, cluster.network)[:, 0]
    return StepFixed(np.broadcast_to(grad_zero, zeros.shape), np.broadcast_to(grad_norm,
                                                                             zeros.shape), loss)


def step_overhead_s(problem) -> float:
    """Seconds every step of `problem` adds once, whatever the strategy: the cluster's fixed
    overhead and the framework's host and synchronisation time (`step_sync_time_s`; the
    job spans NVLink domains when it has more GPUs than one holds)."""
    fw, cluster = problem.framework, problem.cluster
    return cluster.efficiency.step_overhead_s + step_sync_time_s(
        host_s=fw.step_host_s, cross_node_s=fw.step_cross_node_s,
        spans_nodes=problem.num_gpus > cluster.nvlink_gpus)
