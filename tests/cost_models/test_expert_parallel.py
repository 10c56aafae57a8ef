"""Expert-parallel token dispatch (Megatron-Core MoEAlltoAllTokenDispatcher; Liu et al. 2025,
arXiv:2504.14960, Sec. 3)."""

import numpy as np
import pytest

from cost_models.communication import Group, Network, all_to_all_time_s
from cost_models.expert_parallel import (a2a_overlap_share, dispatcher_sync_s,
                                       expert_dispatch_bytes, expert_dispatch_s,
                                       paired_a2a_exposed_s, router_bytes)

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


# megatron/core/pipeline_parallel/schedules.py (get_pp_rank_microbatches @d98e8a64): with the
# interleaved schedule a rank runs (p - rank - 1) * 2 + (v - 1) * p warm-up chunk forwards, one
# more with --overlap-moe-expert-parallel-comm; averaged over the p ranks that is
# (p - 1) + (v - 1) p + 1. NVIDIA's DeepSeek-V3 H100 recipe (Megatron-Bridge perf_recipes/
# deepseek/h100/deepseek_v3.py: PP 8, VP 4, GBS 16384 on 1024 GPUs with TP 2: dp 64, 256
# micro-batches): (7 + 24 + 1) / (256 x 4) = 32 / 1024 of the chunk passes run alone.
@pytest.mark.parametrize(("m", "pp", "vpp", "share"), [
    (256, 8, 4, 1 - 32 / 1024),
    (64, 1, 1, 1 - 1 / 64),        # no pipeline: the first forward and the last backward alone
    (1, 1, 1, 0.0),                # one micro-batch: nothing to pair with
    (4, 8, 2, 0.0),                # warm-up longer than the step: all alone
])
def test_a2a_overlap_share_counts_the_paired_chunk_passes(m, pp, vpp, share):
    assert a2a_overlap_share(num_micro_batches=m, pp=pp, vpp=vpp) == pytest.approx(share,
                                                                                  rel=1e-12)


def test_router_bytes_follow_the_kernels():
    # Qwen3-30B-A3B (128 experts, top-8), 4096 tokens: 17 bytes per (token, expert) entry for
    # the score function, top-k and the two scattered maps, 12 per routed pair, and 18 more
    # per entry for the auxiliary loss's second scoring and its sum (moe_utils.py).
    T, E, k = 4096, 128, 8
    assert router_bytes(T, num_experts=E, top_k=k, aux_loss=False) == T * (17 * E + 12 * k)
    assert router_bytes(T, num_experts=E, top_k=k, aux_loss=True) == T * (35 * E + 12 * k)


def test_dispatcher_syncs_once_per_layer_with_expert_parallelism():
    got = dispatcher_sync_s(ep=np.array([1, 8, 1]), etp=np.array([1, 1, 2]), sync_s=2e-5)
    assert got.tolist() == [0.0, 2e-5, 2e-5]


def test_paired_all_to_alls_hide_behind_the_piece_beside_them():
    # Hand-derived: a layer whose forward is 3 s (1 s of it the experts) and backward 6 s (2 s
    # the experts' dX and dW), so the four pieces beside the four all-to-alls are attention
    # forward 2, expert dX 1, expert dW 1, attention backward 4. Each all-to-all of a2a_s / 4
    # costs max(k x a, a - (1 - k) x c) (communication.overlap_pieces, share 1), k = 0.1.
    kw = dict(forward_s=3.0, backward_s=6.0, expert_forward_s=1.0, interference=0.1)
    # a = 1: every piece covers it; each still costs k x a.
    assert paired_a2a_exposed_s(4.0, **kw) == pytest.approx(4 * 0.1)
    # a = 2: attention forward 2 covers it (max(0.2, 2 - 1.8)), each expert piece leaves
    # 2 - 0.9 = 1.1, attention backward covers it: 0.2 + 1.1 + 1.1 + 0.2.
    assert paired_a2a_exposed_s(8.0, **kw) == pytest.approx(2.6)
