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

from cost_models.communication import (Group, Network, all_gather_time_s, all_to_all_time_s,
                                       exposed_time_s, reduce_scatter_time_s)


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
                      net: Network):
    """Seconds of one pass's token dispatch and combine on one rank of an MoE layer: two
    all-to-alls over the EP group and, with expert TP, an all-gather and a reduce-scatter of
    the `pairs` (token, expert) rows this rank computes over the expert-TP group.

    Ref: Liu et al. 2025 (arXiv:2504.14960), Sec. 3, Fig. 3 (MoEAlltoAllTokenDispatcher).
    """
    sent = expert_dispatch_bytes(tokens_per_rank, top_k=top_k, hidden=hidden,
                                 imbalance=imbalance, value_bytes=value_bytes)
    a2a = all_to_all_time_s(sent, ep_group, net)
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
    and weight gradients (each about the expert forward, BACKWARD_FLOPS_RATIO 2 split evenly)
    and the attention-side backward (`backward_s` less those). Each pair costs
    `communication.exposed_time_s` of its all-to-all (a quarter of `a2a_s`) beside its compute.
    """
    one = a2a_s / 4
    beside = (forward_s - expert_forward_s, expert_forward_s, expert_forward_s,
              np.maximum(backward_s - 2 * expert_forward_s, 0.0))
    return sum(exposed_time_s(one, compute, interference=interference) for compute in beside)
