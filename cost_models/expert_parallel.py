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
                                       reduce_scatter_time_s)


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
