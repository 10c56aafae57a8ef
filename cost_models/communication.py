"""Collective communication times: one function per NCCL collective, by size, ranks and placement.

Refs:
- nccl-tests doc/PERFORMANCE.md: the bus factors. For n ranks and S bytes an all-reduce moves
  2 (n - 1) / n * S per rank; all-gather, reduce-scatter and all-to-all (n - 1) / n * S;
  send/recv S. "Bus bandwidth" = moved bytes / time.
- NVIDIA/nccl src/graph/tuning.cc (commit 5067397c, NCCL 2.30.7): NCCL's own cost model, which
  this module follows. Per (algorithm, protocol): time = base latency + steps x hop latency +
  bytes / (protocol's share of the bus bandwidth); NCCL runs the pair with the lowest predicted
  time, so small messages take the low-latency protocols and large ones the bandwidth ones. The
  bus-bandwidth curve of nccl-tests (small messages never reach the plateau) falls out of this.
- Hierarchy. A group of n ranks with k ranks per node spans N = n / k nodes. Inside a node every
  rank reaches every other over NVLink/NVSwitch. Across nodes NCCL runs one ring (or tree) per
  NIC, so the k ranks of a node cross the network in parallel and a ring's bus bandwidth is
  min(NVLink bus bandwidth, k x NIC bandwidth) (NVIDIA/nccl#812: 8 HDR NICs give 192 GB/s on
  DGX A100). All-to-all cannot aggregate NICs (nccl-tests#267): each rank's off-node bytes go
  through its own NIC.

`Network` holds the cluster's measured plateaus (the bandwidth protocol's bus bandwidth) and
per-hop latencies; `Group` says where a group's ranks sit. Numeric fields may be numpy arrays
(one entry per candidate strategy); every function broadcasts over them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from cost_models.enums import CollectiveAlgorithm, Collective

BUS_FACTOR = {
    Collective.ALL_REDUCE: lambda n: 2 * (n - 1) / n,
    Collective.ALL_GATHER: lambda n: (n - 1) / n,
    Collective.REDUCE_SCATTER: lambda n: (n - 1) / n,
    Collective.ALL_TO_ALL: lambda n: (n - 1) / n,
    Collective.SEND_RECV: lambda n: 1 + 0 * n,
}
"""Bytes each rank moves per byte of message (nccl-tests doc/PERFORMANCE.md, "bus bandwidth")."""


class Protocol(NamedTuple):
    """One NCCL protocol on one algorithm: latencies in seconds, bandwidth as a share of the
    plateau bus bandwidth the cluster preset measures (the Simple protocol's)."""

    name: str
    base_s: float
    """Fixed launch/setup latency (tuning.cc baseLatencies)."""
    nvlink_hop_s: float
    """Latency per step over NVLink (tuning.cc hwLatencies[NVLINK])."""
    network_hop_s: float
    """Latency per step over the network (tuning.cc hwLatencies[NET])."""
    bandwidth_share: float
    """Share of the plateau bus bandwidth (tuning.cc: LL 0.5, LL128 120/128 ~ 0.92)."""
    simple: bool = False
    """NCCL's Simple protocol: its hop latencies are the cluster's own (`Network`), it pays
    three times the network overhead, and the multi-node ring all-reduce plateau factor."""


US = 1e-6
# NVIDIA/nccl src/graph/tuning.cc @5067397c (NCCL 2.30.7), ncclTunerConstantsDefaults:
# baseLatencies and hwLatencies (microseconds) for LL / LL128 / Simple. The Simple hop
# latencies are the cluster's own (`Network.intra_hop_s`, `inter_hop_s`, from the preset, whose
# defaults are these NCCL values); LL and LL128 keep NCCL's, which are properties of the protocol.
RING_PROTOCOLS = (
    Protocol("LL", 6.6 * US, 0.6 * US, 2.7 * US, 0.5),
    Protocol("LL128", 14.0 * US, 1.9 * US, 4.0 * US, 0.92),
    Protocol("Simple", 8.4 * US, 0.0, 0.0, 1.0, simple=True),
)
TREE_PROTOCOLS = (
    # Tree all-reduce: busBw x 0.92, then LL / 3.8 and LL128 x 120/128 (tuning.cc).
    Protocol("LL", 6.8 * US, 0.6 * US, 5.0 * US, 0.92 / 3.8),
    Protocol("LL128", 14.0 * US, 1.25 * US, 8.5 * US, 0.92 * 120 / 128),
    Protocol("Simple", 8.4 * US, 0.0, 0.0, 0.92, simple=True),
)
SIMPLE = RING_PROTOCOLS[2]
"""Point-to-point transfers (send/recv, all-to-all) run NCCL's Simple protocol."""

NVLS_LATENCY_S = 25.0 * US
"""NVLS (NVSwitch in-switch reduction, Hopper and later) is Simple-only and pays 25 us on
NVLink, plus 18 us on the network for the multi-node NVLSTree (tuning.cc hwLatencies[.][NVLS])."""
NVLS_NETWORK_LATENCY_S = 18.0 * US
NETWORK_OVERHEAD_S = 1.0 * US
"""tuning.cc: once a ring crosses nodes, each intra-node step costs at least the network
overhead (1 us on Intel x86, three times that for the Simple protocol)."""
RING_PLATEAU_LATENCY_FACTOR = 1.4
"""tuning.cc: a multi-node Simple ring all-reduce pays 1.4x its latency on sm80+ ("plateau")."""


@dataclass(frozen=True)
class Network:
    """The links a collective can use, as achieved (not datasheet) numbers."""

    intra_bus_bytes_per_s: float
    """Ring bus bandwidth inside a node (nccl-tests all_reduce plateau, NVLS off)."""
    nic_bus_bytes_per_s: float
    """Bus bandwidth one rank's NIC sustains across nodes (nccl-tests, per NIC)."""
    intra_hop_s: float
    """Per-step latency of the Simple protocol over NVLink."""
    inter_hop_s: float
    """Per-step latency of the Simple protocol over the network."""
    nvls_bus_bytes_per_s: float | None = None
    """All-reduce bus bandwidth with NVLS inside a node; None where the switch has none."""
    oversubscription: float = 1.0
    """Fabric oversubscription above a leaf switch (1: non-blocking fat tree)."""
    nodes_per_leaf: float = 1.0
    """Placement units (NVLink domains) under one leaf switch: groups within them are not
    oversubscribed."""


def nic_bytes_per_s(group: Group, net: Network):
    """Bus bandwidth of one rank's NIC share for a group: a group spanning more nodes than a
    leaf switch holds crosses the oversubscribed tier, which gives each flow 1/oversubscription
    of its line rate (Leiserson 1985 fat trees; an s:1 tier carries 1/s of the leaves' load)."""
    crosses = group.num_nodes > net.nodes_per_leaf
    return net.nic_bus_bytes_per_s / np.where(crosses, net.oversubscription, 1.0)


@dataclass(frozen=True)
class Group:
    """Where the ranks of a communicator sit: n ranks, k per node, over N nodes."""

    size: object
    ranks_per_node: object
    num_nodes: object
    nvls: object = True
    """NCCL may run NVLS on this communicator: NCCL_NVLS_ENABLE, on by default where the
    NVSwitch supports it (NCCL docs, env.html#nccl-nvls-enable); NVIDIA's recipes often set 0."""


def _hop_latency(p: Protocol, net: Network):
    """(intra, inter) per-step latency of a protocol."""
    intra = net.intra_hop_s if p.simple else p.nvlink_hop_s
    inter = net.inter_hop_s if p.simple else p.network_hop_s
    return intra, inter


def ring_bus_bytes_per_s(group: Group, net: Network):
    """Plateau bus bandwidth of a ring over the group (bytes/s per rank).

    Ref: NCCL builds one ring per NIC (nccl-tests doc/PERFORMANCE.md; NVIDIA/nccl#812): inside a
    node NVLink-bound; across nodes min(NVLink, k x NIC) with k ranks of the group per node.
    """
    k, nodes = group.ranks_per_node, group.num_nodes
    return np.where(nodes > 1, np.minimum(net.intra_bus_bytes_per_s,
                                          k * nic_bytes_per_s(group, net)),
                    net.intra_bus_bytes_per_s)


def _ring_latency_s(p: Protocol, steps, inter_steps, multi_node, net: Network):
    """tuning.cc ring latency: base + intra steps x intra hop + inter steps x network hop."""
    intra, inter = _hop_latency(p, net)
    overhead = NETWORK_OVERHEAD_S * (3 if p.simple else 1)
    intra = np.where(multi_node, np.maximum(intra, overhead), intra)
    return p.base_s + (steps - inter_steps) * intra + inter_steps * inter


def _best(times: list) -> tuple[object, object]:
    """Elementwise minimum over the options and the index of the winner."""
    stacked = np.stack(np.broadcast_arrays(*times))
    return stacked.min(0), stacked.argmin(0)


class Line(NamedTuple):
    """One protocol's time as a line in the message size: latency_s + bytes x seconds_per_byte
    (NCCL's per-(algorithm, protocol) model, tuning.cc ncclTopoGetAlgoTime)."""

    latency_s: object
    seconds_per_byte: object


def line_time_s(line: Line, message_bytes):
    """Seconds of one protocol on `message_bytes` (linear in it: the layout balancer passes its
    per-stage sums).

    Ref: NCCL src/graph/tuning.cc (ncclTopoGetAlgoTime): latency + bytes / bandwidth.
    """
    return message_bytes * line.seconds_per_byte + line.latency_s


def fastest_s(lines: list[Line], message_bytes):
    """Seconds of the fastest protocol on `message_bytes`: the least of the lines.

    Ref: NCCL src/graph/tuning.cc (ncclTopoTuneModel): NCCL runs the (algorithm, protocol) its
    model predicts fastest.
    """
    best = np.inf
    for line in lines:
        best = np.minimum(best, line_time_s(line, message_bytes))
    return best


def _ring_lines(collective: Collective, group: Group, net: Network, steps,
                inter_steps) -> list[Line]:
    """One line per ring protocol (LL, LL128, Simple); zero lines for a group of one."""
    n, nodes = group.size, group.num_nodes
    factor = BUS_FACTOR[collective](n)
    bus = ring_bus_bytes_per_s(group, net)
    single = n <= 1
    lines = []
    for p in RING_PROTOCOLS:
        latency = _ring_latency_s(p, steps, inter_steps, nodes > 1, net)
        if collective is Collective.ALL_REDUCE and p.simple:
            latency = np.where(nodes > 1, RING_PLATEAU_LATENCY_FACTOR * latency, latency)
        lines.append(Line(np.where(single, 0.0, latency),
                          np.where(single, 0.0, factor / (p.bandwidth_share * bus))))
    return lines


def _ring_time_s(collective: Collective, message_bytes, group: Group, net: Network,
                 steps, inter_steps):
    """Fastest protocol of a ring collective: seconds."""
    return fastest_s(_ring_lines(collective, group, net, steps, inter_steps), message_bytes)


class AllReduceTime(NamedTuple):
    seconds: object
    algorithm: object
    """Index into ALL_REDUCE_ALGORITHMS of the algorithm NCCL would pick."""


ALL_REDUCE_ALGORITHMS = (CollectiveAlgorithm.RING, CollectiveAlgorithm.TREE,
                         CollectiveAlgorithm.NVLS)


def all_reduce(message_bytes, group: Group, net: Network) -> AllReduceTime:
    """Seconds of an all-reduce of `message_bytes` per rank, with the algorithm NCCL picks.

    Ref: tuning.cc (ncclTopoTuneModel, ncclTopoGetAlgoTime) and nccl-tests PERFORMANCE.md.
    - Ring: 2 (n - 1) steps, 2 (N - 1) of them over the network; bus bandwidth as
      `ring_bus_bytes_per_s`.
    - Tree (Sanders et al. 2009 double binary tree across nodes, a chain inside each):
      latency 2 ((k - 1) intra + log2(N) inter) steps; 0.92 of the ring's bandwidth, which for
      up to two nodes is NVLink's (tuning.cc takes bwIntra when nNodes <= 2).
    - NVLS / NVLSTree (Hopper NVSwitch reduction): 25 us (+18 us and 2 log2(N) network steps
      across nodes); bandwidth the measured NVLS plateau, across nodes at most k NICs (twice that
      for two nodes, tuning.cc interBw x 2). Not where the group says NVLS is off
      (NCCL_NVLS_ENABLE=0): NVIDIA/nccl#2140 measures 8x B300 at 695 GB/s busbw without it
      and 845 GB/s with it.
    """
    n, k, nodes = group.size, group.ranks_per_node, group.num_nodes
    ring = _ring_time_s(Collective.ALL_REDUCE, message_bytes, group, net,
                        steps=2 * (n - 1), inter_steps=np.where(nodes > 1, 2 * (nodes - 1), 0))
    moved = BUS_FACTOR[Collective.ALL_REDUCE](n) * message_bytes
    log_nodes = np.log2(np.maximum(nodes, 1))
    tree_bus = np.where(nodes > 2, ring_bus_bytes_per_s(group, net), net.intra_bus_bytes_per_s)
    tree = np.inf
    for p in TREE_PROTOCOLS:
        intra, inter = _hop_latency(p, net)
        latency = p.base_s + 2 * ((k - 1) * intra + log_nodes * inter)
        tree = np.minimum(tree, latency + moved / (p.bandwidth_share * tree_bus))
    options = [ring, np.where(nodes > 1, tree, np.inf)]   # one node: NCCL's tree is a chain; ring wins
    if net.nvls_bus_bytes_per_s is not None:
        across = k * nic_bytes_per_s(group, net) * np.where(nodes <= 2, 2, 1)
        nvls_bus = np.where(nodes > 1, np.minimum(net.nvls_bus_bytes_per_s, across),
                            net.nvls_bus_bytes_per_s)
        nvls_latency = NVLS_LATENCY_S + np.where(
            nodes > 1, NVLS_NETWORK_LATENCY_S + 2 * log_nodes * net.inter_hop_s, 0.0)
        # Needs ranks sharing a switch, and NCCL_NVLS_ENABLE not 0.
        nvls = np.where((k > 1) & np.asarray(group.nvls, dtype=bool),
                        nvls_latency + moved / nvls_bus, np.inf)
        options.append(nvls)
    else:
        options.append(np.full(np.shape(ring), np.inf))
    seconds, index = _best(options)
    single = n <= 1
    return AllReduceTime(np.where(single, 0.0, seconds), np.where(single, 0, index))


def all_reduce_time_s(message_bytes, group: Group, net: Network):
    """Seconds of an all-reduce (see `all_reduce`)."""
    return all_reduce(message_bytes, group, net).seconds


def all_gather_lines(group: Group, net: Network) -> list[Line]:
    """The protocols of a ring all-gather as lines in the gathered (full) buffer per rank.

    Ref: tuning.cc: n - 1 steps, N - 1 over the network; nccl-tests counts the full buffer.
    """
    n, nodes = group.size, group.num_nodes
    return _ring_lines(Collective.ALL_GATHER, group, net, steps=n - 1,
                       inter_steps=np.where(nodes > 1, nodes - 1, 0))


def reduce_scatter_lines(group: Group, net: Network) -> list[Line]:
    """The protocols of a ring reduce-scatter of a buffer per rank, as lines.

    Ref: tuning.cc: as all-gather, n - 1 steps, N - 1 over the network.
    """
    n, nodes = group.size, group.num_nodes
    return _ring_lines(Collective.REDUCE_SCATTER, group, net, steps=n - 1,
                       inter_steps=np.where(nodes > 1, nodes - 1, 0))


def all_gather_time_s(message_bytes, group: Group, net: Network):
    """Seconds of a ring all-gather; `message_bytes` is the gathered (full) buffer per rank."""
    return fastest_s(all_gather_lines(group, net), message_bytes)


def reduce_scatter_time_s(message_bytes, group: Group, net: Network):
    """Seconds of a ring reduce-scatter of a `message_bytes` buffer per rank (as all-gather)."""
    return fastest_s(reduce_scatter_lines(group, net), message_bytes)


def all_to_all_time_s(message_bytes, group: Group, net: Network):
    """Seconds of an all-to-all: each rank sends `message_bytes` in total, 1/n to each rank.

    Ref: NCCL runs all-to-all as grouped send/recv, outside tuning.cc's model. NVIDIA
    (nccl-tests#130, #267): it cannot aggregate NICs, so the off-node share (n - k) / n of the
    bytes goes through the rank's own NIC, while the on-node share (k - 1) / n crosses NVLink
    at the same time; the bus bandwidth then tends to N / (N - 1) x one NIC. One Simple send:
    base + one hop of latency.
    """
    n, k, nodes = group.size, group.ranks_per_node, group.num_nodes
    on_node = message_bytes * (k - 1) / n / net.intra_bus_bytes_per_s
    off_node = message_bytes * (n - k) / n / nic_bytes_per_s(group, net)
    latency = SIMPLE.base_s + np.where(nodes > 1, net.inter_hop_s, net.intra_hop_s)
    return np.where(n > 1, latency + np.maximum(on_node, off_node), 0.0)


def send_recv_time_s(message_bytes, *, across_nodes, net: Network):
    """Seconds of one point-to-point transfer (a pipeline send): latency + S / link.

    Ref: nccl-tests sendrecv_perf (bus factor 1): 195 GB/s on NVLink A100 at 1 GB
    (li-plus/playground cuda/nccl.md), one NIC across nodes. One Simple step.
    """
    bandwidth = np.where(across_nodes, net.nic_bus_bytes_per_s, net.intra_bus_bytes_per_s)
    hop = np.where(across_nodes, net.inter_hop_s, net.intra_hop_s)
    return SIMPLE.base_s + hop + message_bytes / bandwidth


def collective_time_s(collective: Collective, message_bytes, group: Group, net: Network):
    """Seconds of any group collective (send/recv has its own function)."""
    return {
        Collective.ALL_REDUCE: all_reduce_time_s,
        Collective.ALL_GATHER: all_gather_time_s,
        Collective.REDUCE_SCATTER: reduce_scatter_time_s,
        Collective.ALL_TO_ALL: all_to_all_time_s,
    }[collective](message_bytes, group, net)


def bus_bandwidth(collective: Collective, message_bytes, seconds, group_size):
    """nccl-tests bus bandwidth (bytes/s) of a collective that took `seconds`."""
    return BUS_FACTOR[collective](group_size) * message_bytes / seconds


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


def overlap_pieces(comm_s, compute_s, *, interference: float, share=1.0):
    """The two linear pieces whose larger is the critical-path time of `comm_s` of
    communication, `share` of it overlapped with `compute_s` of independent compute.

    Ref: Rashidi et al. 2021 (ACE, ISCA '21, Sec. 2): endpoint collectives run as GPU kernels
    that take SMs and HBM bandwidth from the compute they overlap. The overlapped part longer
    than the compute is exposed; the hidden part still costs `interference` of its time
    (cluster data). With c = share x comm and h = min(c, compute) the time is
    (comm - c) + (c - h) + interference x h, which is the larger of
    (1 - share + interference x share) x comm (the compute covers c) and
    comm - (1 - interference) x compute (it does not). Both are linear in comm and compute,
    so the arguments may be anything with + and scalar x (the layout balancer passes its
    per-stage sums); both rise with comm.
    """
    covered = (1 - share + interference * share) * comm_s
    exposed = comm_s - (1 - interference) * compute_s
    return covered, exposed


def exposed_time_s(comm_s, compute_s, *, interference: float, share=1.0):
    """Seconds a collective overlapped with independent compute adds to the critical path
    (`overlap_pieces`: `share` of it overlapped, the rest exposed)."""
    return np.maximum(*overlap_pieces(comm_s, compute_s, interference=interference,
                                      share=share))
