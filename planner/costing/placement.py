"""Where the ranks of each parallel group sit on the nodes of a cluster.

Rank order follows Megatron-LM's default tp-dp-pp (tp innermost), and for experts its
tp-ep-dp-pp order with expert TP innermost (megatron/core/parallel_state.py RankGenerator).
"""

from __future__ import annotations

import numpy as np

from cost_models.communication import Group


def tp_placement(tp, gpus_per_node: int) -> Group:
    """TP ranks are innermost (consecutive ranks): a group of t fills min(t, node) per node."""
    return Group(size=tp, ranks_per_node=np.minimum(tp, gpus_per_node),
                 num_nodes=np.ceil(tp / gpus_per_node))


def strided_placement(size, stride, gpus_per_node: int) -> Group:
    """A group of `size` ranks `stride` apart (DP after TP; PP after TP and DP, Megatron-LM's
    default order tp-dp-pp)."""
    per_node = np.where(stride >= gpus_per_node, 1,
                        np.minimum(size, np.maximum(gpus_per_node // stride, 1)))
    return Group(size=size, ranks_per_node=per_node, num_nodes=np.ceil(size / per_node))
