"""Collective times against published nccl-tests results, NCCL's own cost model (tuning.cc) and
the nccl-tests definitions (doc/PERFORMANCE.md).

Networks come from the presets, so these tests also pin the preset link data. Measured plateaus
get the tolerance of their spread between reports (+-5-10%); NCCL model closed forms rel=1e-9;
small-message latencies +-50% (they depend on launch mode and CPU, NVIDIA/nccl#1984).
"""

import numpy as np
import pytest

from cost_models import communication as comm
from cost_models.communication import Group
from cost_models.enums import Collective, CollectiveAlgorithm
from planner.inputs.loader import load_cluster

GiB = 2**30


def net(preset: str):
    return load_cluster(preset).network


def node_group(n=8):
    return Group(size=n, ranks_per_node=n, num_nodes=1)


def nodes_group(num_nodes, per_node=8):
    return Group(size=num_nodes * per_node, ranks_per_node=per_node, num_nodes=num_nodes)


def busbw_gb(collective, seconds, size, n):
    return comm.bus_bandwidth(collective, size, seconds, n) / 1e9


@pytest.mark.parametrize(("collective", "factor"), [
    (Collective.ALL_REDUCE, 2 * 7 / 8), (Collective.ALL_GATHER, 7 / 8),
    (Collective.REDUCE_SCATTER, 7 / 8), (Collective.ALL_TO_ALL, 7 / 8),
    (Collective.SEND_RECV, 1),
])
def test_nccl_tests_bus_factors(collective, factor):
    assert comm.BUS_FACTOR[collective](8) == pytest.approx(factor)


# ---------------------------------------------------------------- published plateaus

@pytest.mark.parametrize(("preset", "group", "collective", "size", "published_gb", "rel", "source"), [
    # 8x A100 SXM, one node: all_reduce 232.54 GB/s (nccl-tests#175; NVIDIA/nccl#1048).
    ("dgx-a100-80gb", node_group(), Collective.ALL_REDUCE, 4 * GiB, 232.54, 0.05, "nccl-tests#175"),
    # DGX A100, 8x HDR 200 Gb/s, several nodes: 192 GB/s (AddyLaddy, NVIDIA/nccl#812).
    ("dgx-a100-80gb", nodes_group(4), Collective.ALL_REDUCE, 8 * GiB, 192, 0.05, "nccl#812"),
    # 8x H100, one node, NVLS on (the default): ~480 GB/s (sjeaugey, nccl-tests#212; #290: 476).
    ("dgx-h100", node_group(), Collective.ALL_REDUCE, 8 * GiB, 480, 0.05, "nccl-tests#212"),
    # 8x H100, non-all-reduce collectives: "effective NVLink bandwidth of 370GB/s" (nccl-tests#212).
    ("dgx-h100", node_group(), Collective.ALL_GATHER, 8 * GiB, 370, 0.05, "nccl-tests#212"),
    ("dgx-h100", node_group(), Collective.REDUCE_SCATTER, 8 * GiB, 370, 0.05, "nccl-tests#212"),
    # 8x H200, NVLS: 475 GB/s at 4 GB (nccl-tests#272, NCCL 2.20.3).
    ("dgx-h200", node_group(), Collective.ALL_REDUCE, 4 * GiB, 475, 0.05, "nccl-tests#272"),
    # H100 with NDR 400 Gb/s: "46-48GB/s per NIC" (AddyLaddy, nccl-tests#290): one rank per node.
    ("dgx-h100", nodes_group(16, per_node=1), Collective.ALL_REDUCE, 8 * GiB, 47, 0.05,
     "nccl-tests#290"),
    # All-to-all over 2 nodes: "BusBW = 2x network bandwidth per GPU"; N nodes: N/(N-1) x
    # (sjeaugey, nccl-tests#130; one NIC per rank, nccl-tests#267: 48-49 GB/s per NDR NIC).
    ("dgx-h100", nodes_group(2), Collective.ALL_TO_ALL, 8 * GiB, 2 * 48, 0.10, "nccl-tests#130"),
    ("dgx-h100", nodes_group(16), Collective.ALL_TO_ALL, 8 * GiB, 16 / 15 * 48, 0.10,
     "nccl-tests#130"),
    ("dgx-a100-80gb", nodes_group(16), Collective.ALL_TO_ALL, 8 * GiB, 16 / 15 * 24, 0.10,
     "nccl#412"),
])
def test_large_message_bus_bandwidth_matches_nccl_tests(preset, group, collective, size,
                                                        published_gb, rel, source):
    t = comm.collective_time_s(collective, size, group, net(preset))
    assert busbw_gb(collective, t, size, group.size) == pytest.approx(published_gb, rel=rel), source


def test_sendrecv_on_nvlink_a100():
    # sendrecv_perf -g 8 on 8x A100: 195.1 GB/s at 1 GB (li-plus/playground cuda/nccl.md); our
    # point-to-point runs at the ring plateau (234), 20% above: pinned so a change shows.
    t = comm.send_recv_time_s(2**30, across_nodes=False, net=net("dgx-a100-80gb"))
    assert 2**30 / t / 1e9 == pytest.approx(195.1, rel=0.22)


def test_h200_bus_bandwidth_curve_against_a_measured_sweep():
    # stas00/ml-engineering all-reduce-8xH200.md (torch-level timing, NVLS from 2 MiB):
    # 256M 436.15, 1G 463.58, 4G 473.10 GB/s. Torch adds launch overhead mid-range (64M: 346.5,
    # we say ~430), so only the plateau side is pinned.
    n8 = net("dgx-h200")
    for size, measured in ((256 * 2**20, 436.15), (2**30, 463.58), (4 * 2**30, 473.10)):
        t = comm.all_reduce_time_s(size, node_group(), n8)
        assert busbw_gb(Collective.ALL_REDUCE, t, size, 8) == pytest.approx(measured, rel=0.07)


# ---------------------------------------------------------------- NCCL model closed forms

def test_small_message_all_reduce_is_the_ll_ring_latency():
    # tuning.cc @5067397c: Ring LL on 8 NVLink ranks = base 6.6 + 2 * 7 hops * 0.6 us = 15.0 us
    # (measured 12.5-16.7 us for 4 B-4 KB on 8 H20, deepseek-ai/DeepEP#303).
    t = comm.all_reduce_time_s(8, node_group(), net("dgx-a100-80gb"))
    assert t == pytest.approx(15.0e-6 + 2 * 7 / 8 * 8 / (0.5 * 234e9), rel=1e-9)
    assert t == pytest.approx(14.6e-6, rel=0.5)


def test_two_node_simple_ring_latency_is_nccls_own():
    # tuning.cc: 2 nodes x 8 ranks, Ring Simple: 8.4 + 28 * max(3.4, 3 * 1.0) + 2 * 14 = 131.6 us,
    # x1.4 for the multi-node plateau effect. A 16 GiB message runs Simple.
    n = net("dgx-a100-80gb")
    size = 16 * GiB
    t = comm.all_reduce_time_s(size, nodes_group(2), n)
    ring = 1.4 * 131.6e-6 + 2 * 15 / 16 * size / min(n.intra_bus_bytes_per_s,
                                                     8 * n.nic_bus_bytes_per_s)
    tree = 8.4e-6 + 2 * (7 * 3.4e-6 + 1 * 14e-6) + 2 * 15 / 16 * size / (
        0.92 * n.intra_bus_bytes_per_s)
    assert t == pytest.approx(min(ring, tree), rel=1e-9)


def test_bus_bandwidth_never_climbs_for_small_messages():
    n = net("dgx-a100-80gb")
    sizes = 2.0 ** np.arange(3, 34)
    t = comm.all_reduce_time_s(sizes, node_group(), n)
    busbw = busbw_gb(Collective.ALL_REDUCE, t, sizes, 8)
    assert np.all(np.diff(busbw) > 0)                       # rises with size...
    assert busbw[sizes == 2**16][0] < 0.1 * busbw[-1]       # ...64 KB is under 10% of the plateau
    assert busbw[-1] == pytest.approx(n.intra_bus_bytes_per_s / 1e9, rel=0.01)


def test_algorithm_choice_by_size_and_scale():
    n = net("dgx-a100-80gb")
    wide = Group(size=1024, ranks_per_node=1, num_nodes=1024)
    assert comm.ALL_REDUCE_ALGORITHMS[int(comm.all_reduce(1e6, wide, n).algorithm)] \
        is CollectiveAlgorithm.TREE                          # log2(N) beats 2(n-1) latencies
    few = nodes_group(4)
    assert comm.ALL_REDUCE_ALGORITHMS[int(comm.all_reduce(4e9, few, n).algorithm)] \
        is CollectiveAlgorithm.RING                          # 0.92 of the bandwidth loses
    h100 = net("dgx-h100")
    assert comm.ALL_REDUCE_ALGORITHMS[int(comm.all_reduce(4e9, node_group(), h100).algorithm)] \
        is CollectiveAlgorithm.NVLS
    assert comm.ALL_REDUCE_ALGORITHMS[int(comm.all_reduce(8, node_group(), h100).algorithm)] \
        is CollectiveAlgorithm.RING                          # NVLS's 25 us loses on tiny messages


def test_ring_latency_grows_with_ranks_at_thousands_of_ranks():
    # The small-message regime: a 10 MB all-gather over 1024 ranks on 128 nodes pays
    # ~ (n - N) intra + (N - 1) network steps; the bandwidth term alone would be ~55 us.
    n = net("dgx-a100-80gb")
    t = comm.all_gather_time_s(10e6, nodes_group(128), n)
    bandwidth_only = 1023 / 1024 * 10e6 / (8 * n.nic_bus_bytes_per_s)
    assert t > 10 * bandwidth_only


def test_group_placement_sets_the_bottleneck():
    n = net("dgx-a100-80gb")
    assert comm.ring_bus_bytes_per_s(node_group(), n) == n.intra_bus_bytes_per_s
    assert comm.ring_bus_bytes_per_s(nodes_group(4), n) == 8 * n.nic_bus_bytes_per_s
    assert comm.ring_bus_bytes_per_s(nodes_group(32, per_node=1), n) == n.nic_bus_bytes_per_s


def test_a_group_of_one_costs_nothing():
    n = net("dgx-h100")
    for collective in (Collective.ALL_REDUCE, Collective.ALL_GATHER, Collective.REDUCE_SCATTER,
                       Collective.ALL_TO_ALL):
        assert comm.collective_time_s(collective, 1e9, node_group(1), n) == 0


def test_vectorised_over_groups():
    n = net("dgx-a100-80gb")
    group = Group(size=np.array([1, 4, 8]), ranks_per_node=np.array([1, 4, 8]),
                  num_nodes=np.array([1, 1, 1]))
    t = comm.all_gather_time_s(np.array([1e9, 1e9, 1e9]), group, n)
    assert t[0] == 0 and 0 < t[1] < t[2]


def test_parameter_server_by_hand():
    # 16 workers, 4 servers, 1 GB of gradients, 25 GB/s links: servers carry 2 * 1 * 16/4 GB.
    t = comm.parameter_server_time_s(message_bytes=1e9, num_workers=16, num_servers=4,
                                     worker_bytes_per_s=25e9, server_bytes_per_s=25e9,
                                     latency_s=0.0)
    assert t == pytest.approx(2 * 1e9 * 16 / (4 * 25e9))
    # With one server per worker the worker link is the bottleneck: 2 S / B.
    t = comm.parameter_server_time_s(message_bytes=1e9, num_workers=16, num_servers=16,
                                     worker_bytes_per_s=25e9, server_bytes_per_s=25e9,
                                     latency_s=0.0)
    assert t == pytest.approx(2 * 1e9 / 25e9)


@pytest.mark.parametrize(("comm_s", "compute_s", "expected"), [
    (2.0, 5.0, 0.1 * 2.0),              # fully hidden: only the interference is paid
    (5.0, 2.0, 3.0 + 0.1 * 2.0),        # 3 s stick out; the 2 s overlapped cost 10%
    (0.0, 5.0, 0.0),
])
def test_exposed_time_of_overlapped_communication(comm_s, compute_s, expected):
    assert comm.exposed_time_s(comm_s, compute_s, interference=0.1) == pytest.approx(expected)


def test_protocol_lines_are_what_nccl_picks_between():
    # tuning.cc: per protocol, time = latency + bytes / bandwidth; NCCL runs the fastest. The
    # lines' least is the collective's time, small messages on LL, large ones on Simple.
    group = nodes_group(4)
    lines = comm.reduce_scatter_lines(group, net("dgx-a100-80gb"))
    assert [round(float(l.seconds_per_byte) / float(lines[2].seconds_per_byte), 2)
            for l in lines] == [2.0, round(1 / 0.92, 2), 1.0]       # LL 0.5, LL128 0.92, Simple 1
    for size in (1e3, 1e6, 1e9):
        times = [float(l.latency_s + size * l.seconds_per_byte) for l in lines]
        assert comm.fastest_s(lines, size) == pytest.approx(min(times))
        assert comm.reduce_scatter_time_s(size, group, net("dgx-a100-80gb")) == \
            pytest.approx(min(times))
    assert comm.fastest_s(lines, 1e3) == pytest.approx(float(lines[0].latency_s
                                                             + 1e3 * lines[0].seconds_per_byte))
    assert comm.fastest_s(lines, 1e9) == pytest.approx(float(lines[2].latency_s
                                                             + 1e9 * lines[2].seconds_per_byte))
