"""Megatron tensor-parallel collectives: Narayanan et al. 2021 Sec. 2.3 (after Shoeybi et al.
2019 Fig. 4) and Korthikanti et al. 2022 Sec. 4.2.2."""

import pytest

from cost_models.communication import BUS_FACTOR, Group, Network, all_reduce_time_s
from cost_models.enums import Collective, Recompute
from cost_models.tensor_parallel import (tp_collective_s, tp_exposed_s, tp_passes,
                                         transformer_layer_tp_collectives)

NET = Network(intra_bus_bytes_per_s=300e9, nic_bus_bytes_per_s=25e9, intra_hop_s=1e-6,
              inter_hop_s=5e-6)
NODE = Group(size=8, ranks_per_node=8, num_nodes=1)


def test_two_all_reduces_forward_and_two_backward():
    # SC21 Sec. 2.3: "two all-reduce operations in the forward pass and two in the backward
    # pass" of each transformer layer.
    assert tp_passes(Recompute.NONE) * transformer_layer_tp_collectives(tp_mlp=True) == 4
    # Full recomputation runs the forward (and its two all-reduces) once more.
    assert tp_passes(Recompute.FULL) * transformer_layer_tp_collectives(tp_mlp=True) == 6
    # Selective recomputation reruns the attention core only, which has no collective.
    assert tp_passes(Recompute.SELECTIVE) == tp_passes(Recompute.NONE)
    # An MoE layer without shared experts: attention's all-reduce only.
    assert transformer_layer_tp_collectives(tp_mlp=False) == 1


def test_sequence_parallel_gather_and_scatter_move_the_all_reduce_volume():
    # Korthikanti et al. 2022, Sec. 4.2.2: an all-gather plus a reduce-scatter move what the
    # all-reduce they replace moves (bus factors (n-1)/n + (n-1)/n = 2 (n-1)/n).
    n = 8
    assert BUS_FACTOR[Collective.ALL_GATHER](n) + BUS_FACTOR[Collective.REDUCE_SCATTER](n) == \
        pytest.approx(BUS_FACTOR[Collective.ALL_REDUCE](n))
    elements, value_bytes = 2048 * 12288, 2
    assert tp_collective_s(elements, sequence_parallel=False, value_bytes=value_bytes,
                           group=NODE, net=NET) == \
        pytest.approx(all_reduce_time_s(elements * value_bytes, NODE, NET))
    # A message large enough that the protocols' latencies vanish: the ring moves the
    # all-reduce's 2 (n - 1) / n of it at the bus bandwidth.
    large = 5e9
    split = tp_collective_s(large, sequence_parallel=True, value_bytes=value_bytes, group=NODE,
                            net=NET)
    assert split == pytest.approx(2 * large * value_bytes * (n - 1) / n / 300e9, rel=1e-3)


def test_overlapped_share_hides_behind_compute():
    assert tp_exposed_s(2.0, 10.0, overlap_share=0.0, interference=0.1) == pytest.approx(2.0)
    assert tp_exposed_s(2.0, 10.0, overlap_share=1.0, interference=0.1) == pytest.approx(0.2)
    # Half hidden: 1 s exposed, 1 s hidden at 10% interference.
    assert tp_exposed_s(2.0, 10.0, overlap_share=0.5, interference=0.1) == pytest.approx(1.1)
