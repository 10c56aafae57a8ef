"""Collective communication times: an alpha-beta model per collective, placed on a topology.

Ref: NVIDIA nccl-tests doc/PERFORMANCE.md. For n ranks and S bytes, an all-reduce moves
2 (n - 1) / n * S per rank; all-gather, reduce-scatter and all-to-all (n - 1) / n * S;
broadcast, reduce and a point-to-point send S. Time = latency term + moved bytes / bus
bandwidth, where "bus bandwidth" is what the slowest link crossed delivers per rank.

Placement. A group of n ranks with k ranks per node spans ceil(n / k) nodes. Inside one node
every rank reaches every other over NVLink/NVSwitch (or HCCS). Across nodes NCCL runs one
ring per NIC, so the k ranks of a node cross the network in parallel and the bus bandwidth is
min(intra-node bandwidth, k * per-GPU network bandwidth): a data-parallel group of whole
nodes is NVLink-bound, a group of one rank per node is bound by one NIC.
Numeric arguments may be numpy arrays.
"""

from __future__ import annotations

import numpy as np

from cost_models.enums import AllReduceAlgorithm, Collective

BUS_FACTOR = {
    Collective.ALL_REDUCE: lambda n: 2 * (n - 1) / n,
    Collective.ALL_GATHER: lambda n: (n - 1) / n,
    Collective.REDUCE_SCATTER: lambda n: (n - 1) / n,
    Collective.ALL_TO_ALL: lambda n: (n - 1) / n,
    Collective.BROADCAST: lambda n: 1 + 0 * n,
    Collective.REDUCE: lambda n: 1 + 0 * n,
    Collective.SEND_RECV: lambda n: 1 + 0 * n,
}
"""Bytes each rank moves per byte of message (nccl-tests doc/PERFORMANCE.md, "bus bandwidth")."""

TREE_BANDWIDTH_RATIO = 0.92
"""NCCL's tuning model gives the tree all-reduce 0.92 of the bus bandwidth the ring gets
(NVIDIA/nccl src/graph/tuning.cc, `busBw * .92` for NCCL_ALGO_TREE): trees win on latency (small
messages, many nodes), rings on bandwidth (large messages)."""


def group_bus_bandwidth(*, ranks_per_node, num_nodes, intra_bytes_per_s: float,
                        inter_bytes_per_s: float):
    """Bus bandwidth (bytes/s per rank) of a group spread over `num_nodes` nodes.

    Ref: NCCL's ring construction (one ring per NIC, nccl-tests doc/PERFORMANCE.md): a
    single-node group is bound by NVLink; a multi-node group by min(NVLink, k x NIC).
    """
    k = ranks_per_node
    return np.where(num_nodes > 1, np.minimum(intra_bytes_per_s, k * inter_bytes_per_s),
                    intra_bytes_per_s)


def group_latency_s(*, num_nodes, intra_latency_s: float, inter_latency_s: float):
    """Per-step latency of a group: a ring step waits for its slowest hop."""
    return np.where(num_nodes > 1, inter_latency_s, intra_latency_s)


def ring_steps(collective: Collective, n):
    """Sequential steps of NCCL's ring algorithm for a collective over n ranks."""
    if collective is Collective.ALL_REDUCE:
        return 2 * (n - 1)
    if collective is Collective.SEND_RECV:
        return 1 + 0 * n
    return n - 1


def collective_time_s(collective: Collective, *, message_bytes, group_size, bus_bytes_per_s,
                      latency_s):
    """Seconds one ring collective takes: steps * latency + bus factor * S / bus bandwidth.

    Ref: nccl-tests doc/PERFORMANCE.md (bus factors); Thakur et al. 2005 (ring algorithms,
    alpha-beta cost). A group of one rank costs nothing.
    """
    n = group_size
    moved = BUS_FACTOR[collective](n) * message_bytes
    t = ring_steps(collective, n) * latency_s + moved / bus_bytes_per_s
    return np.where(n > 1, t, 0.0)


def tree_allreduce_time_s(*, message_bytes, group_size, ranks_per_node, num_nodes,
                          bus_bytes_per_s, intra_latency_s: float, inter_latency_s: float):
    """Seconds of NCCL's tree all-reduce: a chain inside each node, a double binary tree
    across nodes.

    Ref: Sanders et al. 2009 (double binary trees), as NCCL 2.4 implements them: the latency
    term grows as log2(nodes) instead of the ring's 2 (n - 1); each rank still moves about
    2 (n - 1) / n * S, pipelined through the tree, at TREE_BANDWIDTH_RATIO of the bus bandwidth.
    """
    n, k = group_size, ranks_per_node
    steps_latency = 2 * (np.log2(np.maximum(num_nodes, 1)) * inter_latency_s
                         + (k - 1) * intra_latency_s)
    moved = BUS_FACTOR[Collective.ALL_REDUCE](n) * message_bytes
    return np.where(n > 1, steps_latency + moved / (TREE_BANDWIDTH_RATIO * bus_bytes_per_s), 0.0)


def allreduce_time_s(*, message_bytes, group_size, ranks_per_node, num_nodes,
                     intra_bytes_per_s: float, inter_bytes_per_s: float,
                     intra_latency_s: float, inter_latency_s: float):
    """Seconds of an all-reduce with the faster of NCCL's ring and tree algorithms.

    NCCL picks between them by message size and group shape (its tuning model compares
    predicted times); we do the same with our alpha-beta times. Returns (seconds, algorithm
    is tree) so reports can say which was chosen.
    """
    bus = group_bus_bandwidth(ranks_per_node=ranks_per_node, num_nodes=num_nodes,
                              intra_bytes_per_s=intra_bytes_per_s,
                              inter_bytes_per_s=inter_bytes_per_s)
    latency = group_latency_s(num_nodes=num_nodes, intra_latency_s=intra_latency_s,
                              inter_latency_s=inter_latency_s)
    ring = collective_time_s(Collective.ALL_REDUCE, message_bytes=message_bytes,
                             group_size=group_size, bus_bytes_per_s=bus, latency_s=latency)
    tree = tree_allreduce_time_s(message_bytes=message_bytes, group_size=group_size,
                                 ranks_per_node=ranks_per_node, num_nodes=num_nodes,
                                 bus_bytes_per_s=bus, intra_latency_s=intra_latency_s,
                                 inter_latency_s=inter_latency_s)
    return np.minimum(ring, tree), tree < ring


def allreduce_algorithm(is_tree) -> AllReduceAlgorithm:
    return AllReduceAlgorithm.TREE if bool(is_tree) else AllReduceAlgorithm.RING


def parameter_server_time_s(*, message_bytes, num_workers, num_servers, worker_bytes_per_s,
                            server_bytes_per_s, latency_s):
    """Seconds for every worker to push its gradients to and pull parameters from k servers.

    Ref: Li et al. 2014 (OSDI, "Scaling Distributed Machine Learning with the Parameter
    Server"): each worker sends its S gradient bytes and receives S parameter bytes; with the
    model sharded over k servers each server's link carries 2 S n / k. The slower of the two
    links sets the time; push and pull are two round trips of latency.
    """
    n, k = num_workers, num_servers
    worker_s = 2 * message_bytes / worker_bytes_per_s
    server_s = 2 * message_bytes * n / (k * server_bytes_per_s)
    return np.where(n > 1, 2 * latency_s + np.maximum(worker_s, server_s), 0.0)


def exposed_time_s(comm_s, compute_s, *, interference: float):
    """Seconds a collective overlapped with independent compute adds to the critical path.

    Ref: Rashidi et al. 2021 (ACE, ISCA '21, Sec. 2): endpoint collectives run as GPU kernels
    that take SMs and HBM bandwidth from the compute they overlap. The part longer than the
    compute is exposed; the hidden part still costs `interference` of its time (cluster data).
    """
    hidden = np.minimum(comm_s, compute_s)
    return comm_s - hidden + interference * hidden


def send_recv_time_s(*, message_bytes, bytes_per_s, latency_s):
    """Seconds of one point-to-point transfer: latency + S / link bandwidth."""
    return latency_s + message_bytes / bytes_per_s
