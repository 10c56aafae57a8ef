"""Data-parallel traffic of a batch of candidates per pipeline stage: the groups it runs on,
the per-micro-batch time as a `stage_terms.Term` (what the layout balancer sees too) and the
step-end time. The collectives and their overlap are `cost_models.data_parallel`'s.

Dense gradients are reduced over the dp x cp ranks holding the same weights (CP ranks sit tp
apart, DP ranks tp x cp apart, or tp x cp x pp where the rank order puts pp inside dp); an MoE
model's routed experts over their expert data-parallel group (edp ranks etp x ep apart, times
pp likewise): `placement.strided_placement` with `inner` cp ranks and a `gap` of pp or 1. ZeRO collectives run inside
the shard group (consecutive data-parallel ranks, so inside a node when they fit one); under
HSDP each rank also all-reduces its shard with its peers of the other replicas.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from cost_models import communication as comm
from cost_models.communication import Group
from cost_models.enums import ZeroStage
from cost_models.data_parallel import (ddp_bucket_count, hsdp_replica_bytes,
                                       zero3_block_collectives_s,
                                       zero_micro_batch_pieces, zero_step_end_s)
from planner.costing.placement import as_column, strided_placement
from planner.costing.stage_terms import Linear, Term


@dataclass(frozen=True)
class DataParallelGroups:
    """Where a batch's data-parallel ranks sit, as (N, 1) groups."""

    everyone: Group
    """All dp ranks (the all-reduce of ZeRO-0)."""
    shard: Group
    """The ranks ZeRO shards over."""
    replicas: Group
    """One rank of each shard group (HSDP's replica all-reduce; size 1 without HSDP)."""


def data_parallel_groups(gpus_per_node: int, *, dp, shard, stride, inner=1, gap=1,
                         nvls=True) -> DataParallelGroups:
    """The groups of `dp` data-parallel ranks: `inner` (cp) of them `stride` apart, the rest
    in blocks `gap` (pp or 1) further apart; ZeRO shards over the first `shard` of them."""
    replicas = np.maximum(dp // shard, 1)     # a dp_shard over dp breaks a rule
    nvls = np.broadcast_to(np.asarray(nvls, dtype=bool), np.shape(dp))
    return DataParallelGroups(
        everyone=as_column(strided_placement(dp, stride, gpus_per_node, inner=inner, gap=gap,
                                           nvls=nvls)),
        shard=as_column(strided_placement(shard, stride, gpus_per_node, inner=inner, gap=gap,
                                        nvls=nvls)),
        replicas=as_column(strided_placement(replicas, stride * shard * gap, gpus_per_node,
                                           nvls=nvls)))


def grad_overlap(problem, cands) -> np.ndarray:
    """(N,) the gradient reduction overlaps the backward pass: as asked, where the framework
    can (DeepSpeed's pipeline engine reduces after the last micro-batch: not with a pipeline)."""
    fw = problem.framework
    return (cands.overlap & fw.overlap_grad_reduce
            & ((cands.pp == 1) | fw.overlap_grad_reduce_with_pipeline))


def gather_overlap(problem, cands) -> np.ndarray:
    """(N,) the all-gather of the updated parameters overlaps the next forward pass."""
    return cands.param_gather & problem.framework.overlap_param_gather


def _fastest_somewhere(lines: list, least_bytes: float, most_bytes: float) -> list[int]:
    """Of one-row protocol lines, the indices of those that can be the fastest for some
    message from `least_bytes` to `most_bytes`: a line no faster than another at both ends is
    never faster in between (the first of equal lines is kept)."""
    def at(line, size):
        return float(np.asarray(line.latency_s + size * line.seconds_per_byte).reshape(-1)[0])

    ends = [(at(line, least_bytes), at(line, most_bytes)) for line in lines]
    return [q for q in range(len(lines))
            if not any(ends[o][0] <= ends[q][0] and ends[o][1] <= ends[q][1]
                       and (ends[o], o) < (ends[q], q) for o in range(len(lines)) if o != q)]


def _micro_batch_lines(problem, *, dp, shard, stride, inner, gap,
                       nvls) -> tuple[list, list, list]:
    """NCCL's protocol lines of the per-micro-batch collectives over the shard group: the
    stage's reduce-scatter (ZeRO-2), ZeRO-3's per-block all-gather and reduce-scatter, at the
    framework's share of the bandwidth (NCCL's own latency steps)."""
    cluster, fw = problem.cluster, problem.framework
    net = cluster.network
    groups = data_parallel_groups(cluster.nvlink_gpus, dp=dp, shard=shard, stride=stride,
                                  inner=inner, gap=gap, nvls=nvls)
    z3_net = replace(net,
                     intra_bus_bytes_per_s=net.intra_bus_bytes_per_s * fw.zero3.collective_efficiency,
                     nic_bus_bytes_per_s=net.nic_bus_bytes_per_s * fw.zero3.collective_efficiency)
    return (comm.reduce_scatter_lines(groups.shard, net),
            comm.all_gather_lines(groups.shard, z3_net),
            comm.reduce_scatter_lines(groups.shard, z3_net))


def _pieces(problem, cands, *, reduce_scatter_s, block_all_gather_s, block_reduce_scatter_s,
            forward, backward) -> tuple:
    fw = problem.framework
    return zero_micro_batch_pieces(
        zero_stage=cands.zero[:, None], reduce_scatter_s=reduce_scatter_s,
        block_all_gather_s=block_all_gather_s, block_reduce_scatter_s=block_reduce_scatter_s,
        forward_s=forward, backward_s=backward, overlap=grad_overlap(problem, cands)[:, None],
        prefetch_share=fw.zero3.overlap_fraction,
        interference=problem.cluster.efficiency.overlap_interference)


def micro_batch_term(problem, cands, *, dp, shard, stride, inner, gap, nvls, params: Linear,
                     gather: Linear,
                     forward: Linear, backward: Linear, gate=None,
                     message_ranges: tuple | None = None) -> Term:
    """Seconds of data-parallel traffic per micro-batch on each stage (ZeRO 2 and 3) as a term
    over what a stage holds, for the layout balancer: the least over NCCL's protocols
    (`communication.fastest_s`) of the largest of `data_parallel.zero_micro_batch_pieces`,
    one option per protocol of each collective (the fastest depends on the stage's bytes).
    `params` are the parameters a rank holds (their gradients travel), `gather` the bytes its
    weight all-gathers move; zero on a stage without a `gate` block. ZeRO-3 gathers and
    reduces block by block, `fetches_per_block` times each. `message_ranges` (one candidate):
    the (least, most) bytes of a stage's reduce-scatter (ZeRO-2), of one ZeRO-3 gather and of
    one ZeRO-3 reduction in any layout; the protocols never the fastest in those ranges are
    left out, which the balancer then need not choose between."""
    fw = problem.framework
    reduce_scatter, block_gather, block_reduce = _micro_batch_lines(
        problem, dp=dp, shard=shard, stride=stride, inner=inner, gap=gap, nvls=nvls)
    grads = params * problem.training.state_bytes.gradients
    fetches = Linear(block=np.full(params.block.shape, float(fw.zero3.fetches_per_block)))
    pairs = list(zip(reduce_scatter, block_reduce))
    if not np.any(cands.zero == ZeroStage.PARAMETERS):
        block_gather = block_gather[:1]    # only ZeRO-3 gathers per block
    if message_ranges is not None:
        stage_rs, one_gather, one_rs = message_ranges
        if int(cands.zero[0]) == 2:        # one reduce-scatter of the stage's gradients
            pairs = [pairs[q] for q in _fastest_somewhere(reduce_scatter, *stage_rs)]
        else:                              # per block: a share of its weights and gradients
            pairs = [pairs[q] for q in _fastest_somewhere(block_reduce, *one_rs)]
            block_gather = [block_gather[q]
                            for q in _fastest_somewhere(block_gather, *one_gather)]
    options = []
    for gather_line in block_gather:
        for rs_line, block_rs_line in pairs:
            options.append(_pieces(
                problem, cands, reduce_scatter_s=comm.line_time_s(rs_line, grads),
                block_all_gather_s=zero3_block_collectives_s(gather_line, message_bytes=gather,
                                                             fetches=fetches),
                block_reduce_scatter_s=zero3_block_collectives_s(block_rs_line,
                                                                 message_bytes=grads,
                                                                 fetches=fetches),
                forward=forward, backward=backward))
    return Term(tuple(options), gate=gate)


def micro_batch_s(problem, cands, *, dp, shard, stride, inner, gap, nvls, params: np.ndarray,
                  gather: np.ndarray, blocks: np.ndarray, forward: np.ndarray,
                  backward: np.ndarray) -> np.ndarray:
    """`micro_batch_term` in one layout, (N, p) seconds from the stages' (N, p) sums: each
    collective on its fastest protocol there, then the largest piece (the pieces rise with
    each collective's time, so this is the term's least over the options)."""
    fw = problem.framework
    reduce_scatter, block_gather, block_reduce = _micro_batch_lines(
        problem, dp=dp, shard=shard, stride=stride, inner=inner, gap=gap, nvls=nvls)
    grads = params * problem.training.state_bytes.gradients
    fetches = blocks * float(fw.zero3.fetches_per_block)

    def fastest(lines, message):
        times = [zero3_block_collectives_s(line, message_bytes=message, fetches=fetches)
                 for line in lines]
        return np.minimum.reduce(np.broadcast_arrays(*times))

    pieces = _pieces(problem, cands, reduce_scatter_s=comm.fastest_s(reduce_scatter, grads),
                     block_all_gather_s=fastest(block_gather, gather),
                     block_reduce_scatter_s=fastest(block_reduce, grads),
                     forward=forward, backward=backward)
    return np.maximum.reduce(np.broadcast_arrays(*pieces))


def step_end_s(problem, cands, *, dp, shard, stride, inner, gap, use_server: np.ndarray,
               params: np.ndarray, gather_bytes: np.ndarray, forward_s: np.ndarray,
               backward_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(seconds of data-parallel traffic at the step's end, index of the all-reduce algorithm
    into communication.ALL_REDUCE_ALGORITHMS), (N, p) each; `params` (N, p) the parameters a
    rank holds per stage, `gather_bytes` the bytes its weight all-gather moves, `use_server`
    (N,) a parameter server in place of the all-reduce."""
    cluster = problem.cluster
    net = cluster.network
    # The collectives depend on the groups and what a rank holds (set by tp, ep, etp and the
    # FP8 gather in this layout), not on the micro-batch or recompute: time each once.
    code = np.zeros(len(cands), dtype=np.int64)
    for column in (dp, shard, stride, inner, gap, cands.nvls, cands.num_servers, cands.tp,
                   cands.ep, cands.etp, cands.fp8_gather & (cands.zero > 0)):
        values, index = np.unique(column, return_inverse=True)
        code = code * len(values) + index.reshape(-1)
    _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    groups = data_parallel_groups(cluster.nvlink_gpus, dp=dp[first], shard=shard[first],
                                  stride=stride[first], inner=inner[first], gap=gap[first], nvls=cands.nvls[first])
    fw = problem.framework
    bucketed = fw.grad_bucket_elements_min > 0 or fw.grad_bucket_elements_per_rank > 0
    # One collective per bucket, each paying its latency (ddp_bucket_count); the time of a
    # stage's collective is the sum over its buckets.
    buckets = ddp_bucket_count(params[first], dp_size=groups.everyone.size,
                               min_elements=fw.grad_bucket_elements_min,
                               elements_per_rank=fw.grad_bucket_elements_per_rank,
                               overlap=grad_overlap(problem, cands)[first][:, None])
    grads = params[first] * problem.training.state_bytes.gradients
    nodes = groups.everyone.num_nodes
    all_reduce, algorithm = comm.all_reduce(grads / buckets, groups.everyone, net)
    all_reduce = all_reduce * buckets
    replica = comm.all_reduce_time_s(hsdp_replica_bytes(grads, shard_size=groups.shard.size),
                                     groups.replicas, net)
    server = comm.parameter_server_time_s(
        message_bytes=grads, num_workers=groups.everyone.size,
        num_servers=cands.num_servers[first][:, None],
        worker_bytes_per_s=np.where(nodes > 1, net.nic_bus_bytes_per_s,
                                    net.intra_bus_bytes_per_s),
        server_bytes_per_s=net.nic_bus_bytes_per_s,
        latency_s=np.where(nodes > 1, net.inter_hop_s, net.intra_hop_s))
    reduce_scatter = comm.reduce_scatter_time_s(grads / buckets, groups.shard, net) * buckets
    all_gather = comm.all_gather_time_s(gather_bytes[first] / buckets, groups.shard,
                                        net) * buckets
    shape = params[first].shape
    all_reduce, algorithm, replica, server, reduce_scatter, all_gather, buckets = (
        np.broadcast_to(t, shape)[inverse]
        for t in (all_reduce, algorithm, replica, server, reduce_scatter, all_gather,
                  buckets))
    use_server = use_server[:, None]
    zero = cands.zero[:, None]
    end = zero_step_end_s(
        zero_stage=zero, gradient_all_reduce_s=np.where(use_server, server, all_reduce),
        gradient_reduce_scatter_s=reduce_scatter, weight_all_gather_s=all_gather,
        replica_all_reduce_s=replica, forward_s=forward_s, backward_s=backward_s,
        overlap_grad_reduce=grad_overlap(problem, cands)[:, None],
        overlap_param_gather=gather_overlap(problem, cands)[:, None],
        interference=cluster.efficiency.overlap_interference, buckets=buckets,
        bucketed=bucketed)
    single = dp[:, None] <= 1
    # The algorithm of the step-end all-reduce (ZeRO-0); ring otherwise.
    algorithm = np.where(~use_server & (zero == 0) & ~single, algorithm, 0)
    return np.where(single, 0.0, end), algorithm
