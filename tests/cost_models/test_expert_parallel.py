"""Expert-parallel token dispatch (Megatron-Core MoEAlltoAllTokenDispatcher; Liu et al. 2025,
arXiv:2504.14960, Sec. 3)."""

import numpy as np
import pytest

from cost_models.communication import Group, Network, all_to_all_time_s
from cost_models.expert_parallel import expert_dispatch_bytes, expert_dispatch_s

NET = Network(intra_bus_bytes_per_s=300e9, nic_bus_bytes_per_s=25e9, intra_hop_s=1e-6,
              inter_hop_s=5e-6)


def test_each_token_goes_to_top_k_experts():
    # Mixtral 8x7B (Jiang et al. 2024): top-2 routing, hidden 4096; 4096 tokens on a rank in
    # bf16 send 4096 x 2 copies of 4096 values (num_out_tokens = tokens x top_k).
    assert expert_dispatch_bytes(4096, top_k=2, hidden=4096, imbalance=1.0, value_bytes=2) == \
        4096 * 2 * 4096 * 2
    # The busiest rank receives `imbalance` times the mean.
    assert expert_dispatch_bytes(4096, top_k=2, hidden=4096, imbalance=1.5, value_bytes=2) == \
        pytest.approx(1.5 * 4096 * 2 * 4096 * 2)


def test_dispatch_and_combine_are_two_all_to_alls():
    ep_group = Group(size=8, ranks_per_node=8, num_nodes=1)
    one = Group(size=1, ranks_per_node=1, num_nodes=1)
    kw = dict(tokens_per_rank=4096, pairs=8192, top_k=2, hidden=4096, imbalance=1.0,
              value_bytes=2, net=NET)
    got = expert_dispatch_s(ep=8, etp=1, ep_group=ep_group, etp_group=one, **kw)
    assert got == pytest.approx(2 * all_to_all_time_s(4096 * 2 * 4096 * 2, ep_group, NET))
    assert expert_dispatch_s(ep=1, etp=1, ep_group=one, etp_group=one, **kw) == 0
    with_etp = expert_dispatch_s(ep=np.array([8]), etp=np.array([2]), ep_group=ep_group,
                                 etp_group=Group(size=2, ranks_per_node=2, num_nodes=1), **kw)
    assert with_etp[0] > got
