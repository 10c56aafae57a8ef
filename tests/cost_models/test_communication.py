"""Collective times against the nccl-tests definitions (doc/PERFORMANCE.md) and hand cases."""

import numpy as np
import pytest

from cost_models import communication as comm
from cost_models.enums import Collective


@pytest.mark.parametrize(("collective", "factor"), [
    (Collective.ALL_REDUCE, 2 * 7 / 8), (Collective.ALL_GATHER, 7 / 8),
    (Collective.REDUCE_SCATTER, 7 / 8), (Collective.ALL_TO_ALL, 7 / 8),
    (Collective.BROADCAST, 1), (Collective.REDUCE, 1), (Collective.SEND_RECV, 1),
])
def test_nccl_tests_bus_factors(collective, factor):
    assert comm.BUS_FACTOR[collective](8) == pytest.approx(factor)


def test_ring_allreduce_by_hand():
    # 1 GB over 8 ranks at 100 GB/s bus bandwidth: 1.75 GB moved per rank, 14 steps of 5 us.
    t = comm.collective_time_s(Collective.ALL_REDUCE, message_bytes=1e9, group_size=8,
                               bus_bytes_per_s=100e9, latency_s=5e-6)
    assert t == pytest.approx(14 * 5e-6 + 1.75e9 / 100e9)


def test_a_group_of_one_costs_nothing():
    assert comm.collective_time_s(Collective.ALL_REDUCE, message_bytes=1e9, group_size=1,
                                  bus_bytes_per_s=1e9, latency_s=1.0) == 0


def test_bus_bandwidth_by_placement():
    nv, ib = 230e9, 24e9
    # One node: NVLink. Whole nodes: 8 NICs in parallel. One rank per node: one NIC.
    assert comm.group_bus_bandwidth(ranks_per_node=8, num_nodes=1, intra_bytes_per_s=nv,
                                    inter_bytes_per_s=ib) == nv
    assert comm.group_bus_bandwidth(ranks_per_node=8, num_nodes=4, intra_bytes_per_s=nv,
                                    inter_bytes_per_s=ib) == 8 * ib
    assert comm.group_bus_bandwidth(ranks_per_node=1, num_nodes=32, intra_bytes_per_s=nv,
                                    inter_bytes_per_s=ib) == ib


def test_nccl_chooses_tree_for_small_messages_at_scale_and_ring_for_large():
    kw = dict(group_size=1024, ranks_per_node=1, num_nodes=1024, intra_bytes_per_s=230e9,
              inter_bytes_per_s=24e9, intra_latency_s=3e-6, inter_latency_s=10e-6)
    _, small_is_tree = comm.allreduce_time_s(message_bytes=1e6, **kw)
    assert small_is_tree
    kw.update(group_size=4, num_nodes=4)
    _, large_is_tree = comm.allreduce_time_s(message_bytes=4e9, **kw)
    assert not large_is_tree


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


def test_vectorised_over_groups():
    t = comm.collective_time_s(Collective.ALL_GATHER, message_bytes=np.array([1e9, 1e9]),
                               group_size=np.array([1, 4]), bus_bytes_per_s=1e11, latency_s=0)
    assert list(t) == [0, pytest.approx(0.75e9 / 1e11)]


@pytest.mark.parametrize(("comm_s", "compute_s", "expected"), [
    (2.0, 5.0, 0.1 * 2.0),              # fully hidden: only the interference is paid
    (5.0, 2.0, 3.0 + 0.1 * 2.0),        # 3 s stick out; the 2 s overlapped cost 10%
    (0.0, 5.0, 0.0),
])
def test_exposed_time_of_overlapped_communication(comm_s, compute_s, expected):
    assert comm.exposed_time_s(comm_s, compute_s, interference=0.1) == pytest.approx(expected)
