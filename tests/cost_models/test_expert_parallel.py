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


# --- flex dispatcher (DeepEP / HybridEP normal kernels) -------------------------------------
from itertools import combinations, product  # noqa: E402

from cost_models.expert_parallel import expected_nodes_per_token, flex_dispatch_s  # noqa: E402


@pytest.mark.parametrize(("nodes", "k"), [(2, 2), (3, 3), (4, 2), (4, 5)])
def test_expected_nodes_closed_form_matches_enumeration_with_replacement(nodes, k):
    # N (1 - (1 - 1/N)^k): every ordered choice of k nodes, equally likely.
    brute = np.mean([len(set(c)) for c in product(range(nodes), repeat=k)])
    assert expected_nodes_per_token(nodes, k) == pytest.approx(brute, rel=1e-12)


@pytest.mark.parametrize(("experts", "nodes", "k"), [(8, 2, 2), (12, 4, 3), (16, 4, 4)])
def test_expected_nodes_matches_enumeration_of_distinct_experts(experts, nodes, k):
    # Top-k picks k distinct experts, E / N per node: every k-subset equally likely.
    per = experts // nodes
    brute = np.mean([len({e // per for e in c}) for c in combinations(range(experts), k)])
    assert expected_nodes_per_token(nodes, k, num_experts=experts) == pytest.approx(brute,
                                                                                   rel=1e-12)


def test_node_limited_routing_bounds_the_nodes():
    # DeepSeek-V3 (arXiv:2412.19437, Sec. 3.2.2): 256 experts on 8 nodes (EP 64), each token
    # to at most 4 nodes: 4 (1 - C(96, 8) / C(128, 8)) = 3.63 nodes, against 5.29 unlimited.
    assert expected_nodes_per_token(8, 8, num_experts=256, node_limit=4) == pytest.approx(
        3.629, abs=1e-3)
    assert expected_nodes_per_token(8, 8, num_experts=256) == pytest.approx(5.295, abs=1e-3)


def test_flex_dispatch_prices_deepep_readme_internode_bandwidth():
    # DeepEP README, normal kernels on H800 with one CX7 400 Gb/s NIC (~50 GB/s) per GPU,
    # DeepSeek-V3 setting (4096 tokens, hidden 7168, top-4 groups, top-8 experts, FP8
    # dispatch): internode EP 64 dispatch reaches 46 GB/s of RDMA bottleneck bandwidth
    # (EP 16: 43, EP 32: 44). With the NIC at NCCL's 47 GB/s bus bandwidth (0.94 x 50) the
    # model's RDMA bytes over its time come within 10% of the measured 46 GB/s. (At EP 16 the
    # model's NVLink forwarding, ~7 GPUs per token, would be the slower side: 1.3 ms against
    # the 0.7 ms the README's 43 GB/s implies; not pinned.)
    net = Network(intra_bus_bytes_per_s=160e9 * 0.97, nic_bus_bytes_per_s=47e9,
                  intra_hop_s=3.4e-6, inter_hop_s=14e-6)
    group = Group(size=64, ranks_per_node=8, num_nodes=8)
    fp8_token = 7168 + 7168 / 128 * 4        # FP8 values + one fp32 scale per 128
    seconds = flex_dispatch_s(tokens_per_rank=4096, top_k=8, hidden=fp8_token, imbalance=1.0,
                              value_bytes=1, ep_group=group, net=net, num_experts=256,
                              node_limit=4)
    remote = expected_nodes_per_token(8, 8, num_experts=256, node_limit=4) * 7 / 8
    assert 4096 * fp8_token * remote / seconds == pytest.approx(46e9, rel=0.10)


def test_flex_sends_one_copy_per_remote_node_not_per_expert():
    # Qwen3-30B-A3B on 16 H100 (EP 16 over two nodes, top-8 of 128): the NCCL all-to-all sends
    # half of a token's 8 copies off the node, the flex dispatcher about one.
    net = Network(intra_bus_bytes_per_s=1e15, nic_bus_bytes_per_s=47e9, intra_hop_s=0,
                  inter_hop_s=0)
    group = Group(size=16, ranks_per_node=8, num_nodes=2)
    kw = dict(tokens_per_rank=4096, top_k=8, hidden=2048, imbalance=1.0, value_bytes=2)
    a2a = all_to_all_time_s(expert_dispatch_bytes(**kw), group, net)
    flex = flex_dispatch_s(**kw, ep_group=group, net=net, num_experts=128)
    # (within the launch latency both pay)
    assert a2a / flex == pytest.approx(4 / expected_nodes_per_token(2, 8, num_experts=128) * 2,
                                       rel=0.03)
    assert flex_dispatch_s(**kw, ep_group=Group(size=1, ranks_per_node=1, num_nodes=1),
                           net=net) == 0


@pytest.mark.parametrize(("nodes", "groups", "topk", "bound"), [
    (8, 8, 4, 4),      # DeepSeek-V3 on EP 64 (8 nodes of 8): one group per node, top-4 groups
    (4, 8, 4, 4),      # EP 32: half-node groups, four of them reach at most 4 nodes
    (16, 8, 4, 8),     # EP 128: each group spans 2 nodes
    (2, 8, 4, 2),      # EP 16: the limit is above the nodes there are
])
def test_group_limited_nodes(nodes, groups, topk, bound):
    # Megatron-Core transformer_config.py moe_router_num_groups / moe_router_group_topk.
    from cost_models.expert_parallel import group_limited_nodes
    assert group_limited_nodes(nodes, num_groups=groups, group_topk=topk) == bound


from cost_models.compute import MoeDims, transformer_layer_gemms  # noqa: E402
from cost_models.enums import Fp8Recipe, MlpKind  # noqa: E402
from cost_models.expert_parallel import (dispatcher_token_copies,  # noqa: E402
                                         expert_gemm_launches, expert_quantizations,
                                         host_wait_s, moe_host_s)


def _qwen3_30b_experts(ep: int):
    """Qwen3-30B-A3B's routed experts on one rank (128 experts, top 8, 768 wide, h 2048)."""
    moe = MoeDims(num_experts=128, top_k=8, expert_ffn_hidden=768)
    return transformer_layer_gemms(seq_len=4096, micro_batch=1, hidden=2048, num_heads=32,
                                   num_kv_heads=4, head_dim=128, ffn_hidden=0,
                                   mlp=MlpKind.SWIGLU, tp=1, moe=moe, tokens_per_rank=4096,
                                   ep=ep, etp=1).experts


def test_grouped_linear_launches_one_gemm_per_local_expert_and_pass():
    # Transformer Engine's grouped linear: fc1 and fc2, one cuBLAS GEMM per local expert
    # forward; dgrad and wgrad backward. EP 8 of 128 experts: 16 local experts.
    experts = _qwen3_30b_experts(ep=8)
    assert expert_gemm_launches(experts, backward=False) == 2 * 16
    assert expert_gemm_launches(experts, backward=True) == 4 * 16
    assert expert_gemm_launches(_qwen3_30b_experts(ep=64), backward=True) == 4 * 2


@pytest.mark.parametrize("recipe, launches", [
    (None, 0),                      # bf16: nothing to cast
    (Fp8Recipe.TENSORWISE, 3 * 32),  # amax, scale, cast per split (quantizer.cpp)
    (Fp8Recipe.MXFP8, 32),          # one nvte_quantize_v2 per split
    (Fp8Recipe.BLOCKWISE, 32),
    (Fp8Recipe.DELAYED, 2),         # one fused multi-cast-transpose per grouped linear
    (Fp8Recipe.NVFP4, 2),           # fused split_quantize_nvfp4_impl per grouped linear
])
def test_quantize_launches_follow_transformer_engines_split_quantize(recipe, launches):
    # Transformer Engine @d0067d0da pytorch/csrc/extensions/cast.cpp split_quantize: EP 8 of
    # 128 experts, 16 local experts in fc1 and fc2: 32 splits per pass.
    assert expert_quantizations(_qwen3_30b_experts(ep=8), recipe=recipe) == launches


def test_host_time_is_gone_inside_a_cuda_graph():
    host = moe_host_s(np.array([32, 32]), np.array([32, 32]), token_path_s=3e-3,
                      gemm_launch_s=30e-6, quantize_launch_s=50e-6,
                      graphed=np.array([False, True]))
    assert host[0] == pytest.approx(3e-3 + 32 * 30e-6 + 32 * 50e-6)
    assert host[1] == 0.0


def test_gpu_waits_only_where_the_host_is_slower():
    # max(host, GPU) - GPU: the token path's GPU time or the host's, whichever is longer.
    assert host_wait_s(5e-3, 2e-3) == pytest.approx(3e-3)
    assert host_wait_s(1e-3, 2e-3) == 0.0


def test_per_layer_graphs_capture_the_token_path_only_with_drop_padding():
    from cost_models.expert_parallel import token_path_graphed
    assert token_path_graphed(layer_graphs=False, full_graph=True, drop_padded=False)
    assert token_path_graphed(layer_graphs=True, full_graph=False, drop_padded=True)
    assert not token_path_graphed(layer_graphs=True, full_graph=False, drop_padded=False)
    assert not token_path_graphed(layer_graphs=False, full_graph=False, drop_padded=True)


def test_the_alltoall_dispatcher_sorts_received_tokens_by_local_expert():
    # Megatron-Core MoEAlltoAllTokenDispatcher: permute, and with more than one local expert
    # "Permutation 2" (sort_chunks_by_idxs) after the exchange and its inverse before the
    # combine, then unpermute: 4 copies of the pairs; one local expert, or the flex
    # dispatcher (DeepEP permutes after its dispatch, unpermutes before its combine): 2.
    copies = dispatcher_token_copies(alltoall=np.array([True, True, False]),
                                     local_experts=np.array([8, 1, 8]))
    assert copies.tolist() == [4, 2, 2]
