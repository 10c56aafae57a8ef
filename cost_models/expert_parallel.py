"""Expert parallelism: the token dispatch and combine of an MoE layer.

Symbols: T tokens a rank routes per micro-batch, k experts per token (top-k), h hidden,
e expert-parallel ranks, t_e expert tensor-parallel ranks.

Ref: Megatron-Core MoEAlltoAllTokenDispatcher (megatron/core/transformer/moe/token_dispatcher.py;
Liu et al. 2025, arXiv:2504.14960, Sec. 3, Fig. 3): the rank permutes its T tokens into T x k
routed copies (num_out_tokens = routing_map.sum(): T k without dropping), sends them over the
expert-parallel group with an all-to-all, then all-gathers them over the expert-TP group;
combine is the reverse (reduce-scatter over expert TP, all-to-all back). EP ranks sit t_e
apart (Megatron-Core's expert rank order tp-ep-dp-pp), expert-TP ranks are consecutive.
"""

from __future__ import annotations

import numpy as np

from cost_models.communication import (SIMPLE, Group, Network, all_gather_time_s,
                                       all_to_all_time_s, exposed_time_s, nic_bytes_per_s,
                                       reduce_scatter_time_s)
from cost_models.enums import Fp8Recipe


def expert_dispatch_bytes(tokens_per_rank, *, top_k: int, hidden: int, imbalance: float,
                          value_bytes: float):
    """Bytes one rank sends in one all-to-all of the token dispatch: T x k routed copies of h
    values, `imbalance` x that on the busiest rank (the one that sets the time).

    Ref: Megatron-Core token_dispatcher.py (num_out_tokens = routing_map.sum(), T k without
    dropping); Liu et al. 2025 (arXiv:2504.14960), Sec. 3.
    """
    return tokens_per_rank * top_k * imbalance * hidden * value_bytes


def expert_dispatch_s(*, tokens_per_rank, pairs, top_k: int, hidden: int, imbalance: float,
                      value_bytes: float, ep, etp, ep_group: Group, etp_group: Group,
                      net: Network, flex=False, flex_group: Group | None = None,
                      num_experts=None, router_groups=None, router_group_topk=None):
    """Seconds of one pass's token dispatch and combine on one rank of an MoE layer: two
    all-to-alls over the EP group (or, where `flex`, two `flex_dispatch_s` over `flex_group`,
    the EP group counted in the backend's NVLink domains) and, with expert TP, an all-gather
    and a reduce-scatter of the `pairs` (token, expert) rows this rank computes over the
    expert-TP group.

    Ref: Liu et al. 2025 (arXiv:2504.14960), Sec. 3, Fig. 3 (MoEAlltoAllTokenDispatcher).
    """
    sent = expert_dispatch_bytes(tokens_per_rank, top_k=top_k, hidden=hidden,
                                 imbalance=imbalance, value_bytes=value_bytes)
    a2a = all_to_all_time_s(sent, ep_group, net)
    if flex_group is not None:
        limit = None if router_groups is None else group_limited_nodes(
            flex_group.num_nodes, num_groups=router_groups, group_topk=router_group_topk)
        a2a = np.where(flex, flex_dispatch_s(
            tokens_per_rank=tokens_per_rank, top_k=top_k, hidden=hidden, imbalance=imbalance,
            value_bytes=value_bytes, ep_group=flex_group, net=net, num_experts=num_experts,
            node_limit=limit), a2a)
    gathered = pairs * hidden * value_bytes
    etp_s = (all_gather_time_s(gathered, etp_group, net)
             + reduce_scatter_time_s(gathered, etp_group, net))
    return np.where(ep > 1, 2 * a2a, 0.0) + np.where(etp > 1, etp_s, 0.0)


def a2a_overlap_share(*, num_micro_batches, pp, vpp):
    """Share of a rank's chunk passes whose expert all-to-all runs beside another micro-batch's
    compute under Megatron-Core's combined 1F1B schedule (--overlap-moe-expert-parallel-comm).

    The schedule pairs the forward of one micro-batch with the backward of an earlier one,
    layer by layer: combine-backward beside attention-forward, dispatch-forward beside the
    expert backward, dispatch-backward beside the (delayed) expert weight gradients,
    combine-forward beside attention-backward (megatron/core/models/common/
    model_chunk_schedule_plan.py, TransformerLayerSchedulePlan.run). Only the warm-up forwards
    and the matching cool-down backwards run alone. Warm-up chunk passes per rank
    (megatron/core/pipeline_parallel/schedules.py, get_pp_rank_microbatches): with a
    pipeline, 2 (p - rank - 1) + (v - 1) p + 1 (the extra one the overlap schedules), p - 1 + (v
    - 1) p + 1 averaged over the ranks; without one (forward_backward_no_pipelining's combined
    1F1B), the first forward and the last backward: 1. Of the m v chunk forwards (and as many
    backwards) the rest are paired.
    """
    m, p, v = num_micro_batches, pp, vpp
    warmup = np.where(p > 1, (p - 1) + (v - 1) * p + 1, 1)
    return np.clip(1 - warmup / (m * v), 0.0, 1.0)


ROUTER_SCORE_BYTES = 4
"""Router scores in fp32 (Megatron-Core router.py: logits cast to fp32, moe_router_dtype)."""


def router_bytes(tokens_per_rank, *, num_experts: int, top_k: int, aux_loss: bool):
    """HBM bytes the router's memory-bound kernels move in one forward pass on one rank, after
    the router GEMM (priced as a GEMM).

    Ref: Megatron-Core moe_utils.topk_routing_with_score_function (router.py TopKRouter.routing):
    the score function (softmax or sigmoid) reads and writes the T x E fp32 logits (8 bytes per
    entry), top-k reads them (4) and writes T x k values and int64 indices (12 per pair), the
    probabilities are scattered to a T x E fp32 map (4) and the routing map to a T x E bool (1):
    17 T E + 12 T k. With an auxiliary loss, compute_routing_scores_for_aux_loss runs the score
    function and top-k again and writes its own bool map (8 + 4 + 1), and
    switch_load_balancing_loss_func reads the scores and the map to sum them per expert (4 + 1):
    18 T E more.
    """
    per_entry = 17 + (18 if aux_loss else 0)
    return tokens_per_rank * (per_entry * num_experts + 12 * top_k)


def dispatcher_sync_s(*, ep, etp, sync_s: float):
    """Seconds the token dispatcher's host synchronisation adds to one MoE layer's forward pass.

    Ref: Megatron-Core MoEAlltoAllTokenDispatcher (megatron/core/transformer/moe/
    token_dispatcher.py, preprocess / _maybe_dtoh_and_synchronize): with ep > 1 or expert TP the
    all-to-all split sizes are copied to the host and the CPU waits for them
    (cuda_sync_point "before_ep_alltoall" at the latest) before it can launch the all-to-all,
    once per layer and forward pass (the backward reuses the splits). The GPU drains its queue
    and idles until the CPU launches again: `sync_s` per sync (framework data).
    """
    return np.where((ep > 1) | (etp > 1), sync_s, 0.0)


def expert_gemm_launches(expert_gemms, *, backward: bool):
    """cuBLAS GEMMs the host launches for one MoE layer's routed experts in one pass: one per
    local expert and grouped linear in the forward, two (input and weight gradient) in the
    backward.

    Ref: Transformer Engine GroupedLinear (transformer_engine/pytorch/module/grouped_linear.py:
    general_grouped_gemm once in the forward, for dgrad and wgrad in the backward) over
    nvte_multi_tensor_gemm, which outside Hopper's opt-in CUTLASS path loops over the
    num_gemms GEMMs launching each on its own stream (common/gemm/cublaslt_gemm.cu
    multi_stream_cublas_gemm @d0067d0da); `expert_gemms` are the layer's grouped GEMMs, each
    `batch` local experts.
    """
    per_pass = sum(g.batch for g in expert_gemms)
    return (2 if backward else 1) * per_pass


def expert_quantizations(expert_gemms, *, recipe):
    """Quantize kernels the host launches for one MoE layer's routed experts in one pass: the
    forward casts each grouped linear's input split per local expert, the backward its output
    gradient (the weights' FP8 copies are cached across micro-batches, the inputs saved in
    FP8); none in bf16 (`recipe` None).

    Per split: current scaling (tensorwise) launches three kernels (amax, scale from amax,
    cast); MXFP8 and FP8 block scaling one (the scales are computed inside the cast). Per
    grouped linear: delayed scaling one fused multi-tensor cast for all splits, NVFP4 one
    fused split-quantize kernel, torchao (rowwise) one grouped cast.

    Ref: Transformer Engine @d0067d0da: GroupedLinear splits by m_splits with one quantizer per
    GEMM (pytorch/module/grouped_linear.py); split_quantize (pytorch/csrc/extensions/cast.cpp)
    runs multi_tensor_quantize_impl, fused (nvte_multi_cast_transpose) only for delayed
    scaling, else quantizer->quantize per split: Float8CurrentScalingQuantizer::quantize_impl
    calls nvte_compute_amax_with_config, nvte_compute_scale_from_amax and nvte_quantize_v2,
    MXFP8Quantizer and Float8BlockQuantizer nvte_quantize_v2 alone (pytorch/csrc/quantizer.cpp);
    NVFP4 takes the fused split_quantize_nvfp4_impl.
    """
    if recipe is None:
        return 0
    splits = sum(g.batch for g in expert_gemms)
    if recipe is Fp8Recipe.TENSORWISE:
        return 3 * splits
    if recipe in (Fp8Recipe.MXFP8, Fp8Recipe.BLOCKWISE):
        return splits
    return len(expert_gemms)


def dispatcher_token_copies(*, alltoall, local_experts):
    """Copies of a rank's token-expert pairs an MoE layer's dispatch and combine make in one
    pass outside the all-to-all kernels: the permutation by expert before the exchange and the
    unpermutation after it (2), and with the all-to-all dispatcher and more than one local
    expert also the sort of the received chunks by local expert and its inverse before the
    combine (4).

    Ref: Megatron-Core token_dispatcher.py @d98e8a64: MoEAlltoAllTokenDispatcher
    dispatch_preprocess (permute), dispatch_postprocess ("Permutation 2: Sort tokens by local
    expert", sort_chunks_by_idxs when num_local_experts > 1), combine_preprocess ("Unpermutation
    2"), combine_postprocess (unpermute); the flex dispatcher's DeepEP manager permutes after
    the dispatch and unpermutes before the combine, its HybridEP manager inside its kernels
    (priced as the same two copies: the kernels move those bytes too).
    """
    return np.where(np.asarray(alltoall) & (np.asarray(local_experts) > 1), 4, 2)


def token_path_graphed(*, layer_graphs, full_graph, drop_padded):
    """Whether CUDA graphs replay an MoE layer's token path: a full-iteration graph always,
    per-layer graphs only with drop-padding (static expert shapes).

    Ref: Megatron-Core transformer_config.py @d98e8a64: "moe cuda graph is only supported
    with drop-padding MoE" (moe_expert_capacity_factor with moe_pad_expert_input_to_capacity).
    """
    return full_graph | (layer_graphs & drop_padded)


def moe_host_s(launches, quantizations=0, *, token_path_s: float, gemm_launch_s: float,
               quantize_launch_s: float = 0.0, graphed):
    """Host seconds to issue one MoE layer's token path in one pass: the dispatcher's and the
    permutation's kernels (`token_path_s`, framework data), `launches` expert GEMMs at
    `gemm_launch_s` and `quantizations` per-expert FP8 casts at `quantize_launch_s` each;
    none where a CUDA graph replays the layer (`graphed`).

    Ref: Megatron-Core MoE README, "CPU Overhead Bottleneck" (megatron/core/transformer/moe/
    README.md @d98e8a64): gaps between GPU kernels where the CPU cannot launch them fast
    enough; CUDA graphs, fewer kernel launches or larger micro-batches remove them.
    """
    return np.where(graphed, 0.0, token_path_s + launches * gemm_launch_s
                    + quantizations * quantize_launch_s)


def host_wait_s(host_s, gpu_s):
    """Seconds the GPU idles waiting for the host to issue work whose GPU time is `gpu_s`.

    Ref: the token dispatcher copies the split sizes to the host and waits for them before the
    expert GEMMs, whose m_splits Transformer Engine takes as a host list (Megatron-Core
    token_dispatcher.py _maybe_dtoh_and_synchronize; grouped_linear.py m_splits): the GPU's
    queue is empty there, so the token path takes max(host, GPU) and the GPU waits the
    difference. Without such a sync (the backward pass) the host runs ahead by the same rule.
    """
    return np.maximum(np.asarray(host_s) - gpu_s, 0.0)


def paired_a2a_exposed_s(a2a_s, *, forward_s, backward_s, expert_forward_s,
                         interference: float):
    """Seconds a layer's expert all-to-alls add to the critical path on a paired chunk pass of
    the combined 1F1B schedule: micro-batch i + 1's forward of the layer beside micro-batch
    i's backward of it (`a2a_s`: the four all-to-alls of one forward and one backward).

    Ref: Megatron-Core TransformerLayerSchedulePlan.run (megatron/core/models/common/
    model_chunk_schedule_plan.py @d98e8a64), with delayed expert weight gradients
    (--delay-wgrad-compute):
        comm stream: combine_bwd  | dispatch_fwd  | dispatch_bwd | (idle)  | combine_fwd
        comp stream: attn_fwd     | mlp_bwd (dX)  | mlp_bwd_dw   | mlp_fwd | attn_bwd
    each all-to-all hides behind the compute beside it, not behind the layer's whole compute:
    attention and router forward (`forward_s - expert_forward_s`), the expert backward's data
    and weight gradients (each taken as the expert forward: `compute.backward_gemms` has two
    GEMMs of its FLOPs) and the attention-side backward (`backward_s` less those). Each pair costs
    `communication.exposed_time_s` of its all-to-all (a quarter of `a2a_s`) beside its compute.
    """
    one = a2a_s / 4
    beside = (forward_s - expert_forward_s, expert_forward_s, expert_forward_s,
              np.maximum(backward_s - 2 * expert_forward_s, 0.0))
    return sum(exposed_time_s(one, compute, interference=interference) for compute in beside)


def expected_nodes_per_token(num_nodes, top_k: int, *, num_experts=None, node_limit=None):
    """Expected distinct nodes a token's top_k experts sit on, experts spread evenly over
    `num_nodes` nodes and routing uniform (force-balanced, as Megatron-Bridge benchmarks).

    Occupancy closed form: a node is missed when all k picks fall outside it, so
    E[nodes] = N (1 - C(E - E/N, k) / C(E, k)) for k distinct experts out of E; with E
    unknown (None) its large-E limit N (1 - (1 - 1/N)^k). Node-limited routing (DeepSeek-V3,
    arXiv:2412.19437 Sec. 3.2.2: each token to at most M = 4 nodes; Megatron-Core
    --moe-router-num-groups / --moe-router-group-topk with groups aligned to nodes) picks M
    nodes first and the k experts among their E M / N: the same form over min(N, M) nodes.
    """
    n = np.asarray(num_nodes, dtype=float)
    if node_limit is not None:
        limited = np.minimum(n, node_limit)
        if num_experts is not None:
            num_experts = num_experts * limited / n
        n = limited
    if num_experts is None:
        missed = (1 - 1 / n) ** top_k
    else:
        # C(E - E/N, k) / C(E, k) = prod_{i<k} (E - E/N - i) / (E - i)
        e = np.asarray(num_experts, dtype=float)
        missed = np.ones_like(n * e)
        for i in range(top_k):
            missed = missed * np.clip((e - e / n - i) / (e - i), 0.0, None)
    return n * (1 - missed)


def group_limited_nodes(num_nodes, *, num_groups: int, group_topk: int):
    """Most nodes a token can reach under group-limited routing: its experts come from
    `group_topk` of `num_groups` equal expert groups laid over the EP group's `num_nodes`
    nodes in order, a group spanning max(1, N / G) nodes: min(N, topk x max(1, N / G)).

    Ref: Megatron-Core transformer_config.py moe_router_num_groups ("Node-limited routing:
    set moe_router_num_groups equal to number of nodes in EP group"); DeepSeek-V3
    (arXiv:2412.19437) Sec. 3.2.2: 8 groups on EP 64's 8 nodes, top-4 groups: at most 4 nodes.
    """
    n = np.asarray(num_nodes, dtype=float)
    return np.minimum(n, group_topk * np.maximum(1.0, n / num_groups))


def flex_dispatch_s(*, tokens_per_rank, top_k: int, hidden: int, imbalance: float,
                    value_bytes: float, ep_group: Group, net: Network, num_experts=None,
                    node_limit=None):
    """Seconds of one dispatch (or one combine) of Megatron-Core's flex dispatcher (DeepEP or
    HybridEP normal kernels) on one rank: each token crosses the network once per distinct
    remote node its experts sit on and is forwarded inside the node over NVLink to the GPUs
    holding them; the RDMA and NVLink transfers run at once in one kernel, so the slower sets
    the time. `ep_group.num_nodes` / `ranks_per_node` count the backend's NVLink domains
    (DeepEP: one node of at most 8 GPUs; HybridEP: the whole NVLink domain, MNNVL).

    Ref: DeepEP README (deepseek-ai/DeepEP, normal kernels; "NVLink and RDMA forwarding");
    DeepSeek-V3 (arXiv:2412.19437) Sec. 3.2.2: tokens go over IB to the GPU with the same
    in-node index on each target node, then over NVLink to the experts' GPUs. Megatron-LM
    megatron/core/transformer/moe/README.md (flex: "Removes redundant tokens during
    cross-node communication"). By symmetry a rank's own node is one of the E[nodes] touched
    with probability 1 / N: E[nodes] (N - 1) / N copies go over RDMA; of the E[ranks] distinct
    GPUs touched, all but about 1 / g in each node take an NVLink copy (g GPUs per node).
    Megatron passes the bf16 hidden states (fused_a2a.py; HybridEP asserts no fp8 dispatch).
    """
    n, g = ep_group.num_nodes, ep_group.ranks_per_node
    copy = tokens_per_rank * imbalance * hidden * value_bytes
    nodes = expected_nodes_per_token(n, top_k, num_experts=num_experts, node_limit=node_limit)
    reach = n if node_limit is None else np.minimum(n, node_limit)
    ranks = expected_nodes_per_token(reach * g, top_k, num_experts=None if num_experts is None
                                     else num_experts * reach / n)
    rdma_s = copy * nodes * (n - 1) / n / nic_bytes_per_s(ep_group, net)
    nvlink_s = copy * ranks * (1 - 1 / g) / net.intra_bus_bytes_per_s
    latency = SIMPLE.base_s + np.where(n > 1, net.inter_hop_s, net.intra_hop_s)
    return np.where(ep_group.size > 1, latency + np.maximum(rdma_s, nvlink_s), 0.0)


DEEPEP_CONFIGS = {
    # EP ranks: (dispatch (nvl recv, rdma send, rdma recv), combine (...)) chunk sizes in tokens
    2: ((256, 6, 128), (256, 6, 128)), 4: ((256, 6, 128), (256, 6, 128)),
    8: ((256, 6, 128), (256, 6, 128)), 16: ((288, 20, 128), (288, 12, 128)),
    24: ((288, 8, 128), (288, 8, 128)), 32: ((288, 8, 128), (288, 8, 128)),
    48: ((288, 8, 128), (288, 8, 128)), 64: ((288, 8, 128), (288, 8, 128)),
    96: ((480, 12, 128), (480, 8, 128)), 128: ((560, 12, 128), (560, 8, 128)),
    144: ((720, 12, 128), (720, 8, 128)), 160: ((720, 12, 128), (720, 8, 128)),
}
"""DeepEP's recommended normal-kernel configs by EP group size (deep_ep/buffers/legacy.py
Buffer.get_dispatch_config / get_combine_config @dd758caf, the chunk sizes that set the buffer:
NVLink receive tokens, RDMA send and receive tokens). Other sizes DeepEP refuses; the next larger
entry stands in."""
DEEPEP_NUM_SMS = 20
"""Buffer.num_sms, DeepEP's default (Megatron-Core leaves it unless moe_flex_dispatcher_num_sms)."""
DEEPEP_NVL_PEERS_MAX = 8
"""LEGACY_NUM_MAX_NVL_PEERS: ranks one NVLink forwarding step reaches."""
DEEPEP_TOKEN_META_BYTES = 8 + 128 * 8 + 128 * 4 + 128 * 4
"""Per buffered token besides its hidden bytes: the SourceMeta (two ints), kNumMaxTopK = 128
int64 top-k indices and fp32 weights, kNumMaxScales = 128 fp32 scales (csrc/legacy/config.hpp)."""


def _up_to_128(num_bytes):
    return np.ceil(np.asarray(num_bytes, dtype=float) / 128) * 128


def deepep_buffer_bytes(*, hidden: int, ep):
    """Bytes of the NVLink and RDMA buffers DeepEP's normal kernels hold on each rank, allocated
    once for the run (Megatron-Core's flex dispatcher, backend deepep).

    Ref: Megatron-Core megatron/core/transformer/moe/fused_a2a.py get_buffer: the larger of the
    dispatch and combine configs' get_nvl_buffer_size_hint / get_rdma_buffer_size_hint at
    hidden_bytes = hidden x max(element size, 2); DeepEP csrc/legacy/config.hpp @dd758caf:
    channels = num_sms / 2; NVLink: channels x nvl ranks x (recv tokens x (hidden_bytes + meta)
    + counters); RDMA (only past 8 ranks): channels x rdma ranks x rdma recv tokens x 2 x
    (hidden_bytes + meta + 16); each rounded up to 128 bytes.
    """
    ep = np.asarray(ep)
    hidden_bytes = 2 * hidden
    channels = DEEPEP_NUM_SMS // 2
    sizes = np.array(sorted(DEEPEP_CONFIGS))
    config = np.minimum(np.searchsorted(sizes, ep), len(sizes) - 1)    # this size, else next
    nvl_ranks = np.minimum(ep, DEEPEP_NVL_PEERS_MAX)
    rdma_ranks = np.maximum(ep // DEEPEP_NVL_PEERS_MAX, 1)
    nvl = rdma = 0 * ep
    for which in (0, 1):                  # dispatch, combine
        table = np.array([DEEPEP_CONFIGS[int(k)][which] for k in sizes], dtype=float)
        recv, send, rdma_recv = table[config].T
        rdma_recv = np.ceil(rdma_recv / send) * send      # Config aligns it up
        per_nvl = (recv * (hidden_bytes + DEEPEP_TOKEN_META_BYTES)
                   + (2 * rdma_ranks + 3) * 4)
        per_rdma = (rdma_recv * 2 * (hidden_bytes + DEEPEP_TOKEN_META_BYTES + 16)
                    + (DEEPEP_NVL_PEERS_MAX * 2 + 2) * 2 * 4)
        nvl = np.maximum(nvl, _up_to_128(channels * nvl_ranks * per_nvl))
        rdma = np.maximum(rdma, np.where(ep > DEEPEP_NVL_PEERS_MAX,
                                         _up_to_128(channels * rdma_ranks * per_rdma), 0))
    return np.where(ep > 1, nvl + rdma, 0.0)


def hybridep_buffer_bytes(*, hidden: int, tokens_per_rank, ep, experts_per_rank,
                          ranks_per_domain):
    """Bytes of the buffers HybridEP holds on each rank, allocated once at the first dispatch
    for its token count (Megatron-Core's flex dispatcher, backend hybridep).

    Ref: Megatron-Core fused_a2a.py init_hybrid_ep_buffer (max_num_of_tokens_per_rank = the
    first dispatch's tokens, bf16: no FP8 dispatch); DeepEP hybrid-ep branch @94a9f8f
    csrc/hybrid_ep/buffer/intranode.cu: sized for the worst case, every token of the EP group
    routed to this rank, T = tokens x ranks per NVLink domain x domains, each with its bf16
    hidden, fp32 probabilities for the domain's experts (experts per rank x ranks per domain)
    and fp32 scales per 128 values (dispatch and combine share the token buffer);
    internode_doca.cu: across N > 1 domains, the attention-side input (its hidden,
    probabilities for all the group's experts, scales) and per other domain three
    hidden-sized relay buffers (dispatch's group buffer with its scales, combine's reduction
    and group buffers) with their probabilities.
    """
    t, h = np.asarray(tokens_per_rank, dtype=float), hidden
    ep = np.asarray(ep)
    domains = np.maximum(ep // np.maximum(ranks_per_domain, 1), 1)
    domain_experts = experts_per_rank * ranks_per_domain
    scales = 4 * (h // 128)
    intranode = t * ep * (2 * h + 4 * domain_experts + scales)
    others = domains - 1
    internode = np.where(domains > 1, t * (2 * h + 4 * experts_per_rank * ep + scales
                                           + others * (2 * h + 4 * domain_experts + scales)
                                           + others * 2 * (2 * h + 4 * domain_experts)), 0.0)
    return np.where(ep > 1, intranode + internode, 0.0)
