"""Where the ranks of each parallel group sit on the nodes of a cluster.

Rank order follows the strategy's `RankOrder` (megatron/core/parallel_state.py RankGenerator):
tp innermost, then cp, then (for the experts) ep with expert TP innermost, then dp and pp in the
order asked. Worked example, 16 GPUs on nodes of 8, tp 2, dp 4, pp 2:
- tp-cp-ep-dp-pp (Megatron-LM's default): rank = tp + 2 dp + 8 pp. A data-parallel group
  {0, 2, 4, 6} sits in one node; a pipeline pair {0, 8} spans two nodes.
- tp-cp-ep-pp-dp (--use-tp-pp-dp-mapping): rank = tp + 2 pp + 4 dp. A pipeline pair {0, 2}
  shares a node; a data-parallel group {0, 4, 8, 12} holds 2 ranks in each of 2 nodes.
"""

from __future__ import annotations

import numpy as np

from cost_models.communication import Group
from cost_models.enums import RankOrder
from planner.core.candidates import RANK_ORDER


def tp_placement(tp, gpus_per_node: int, *, nvls=True) -> Group:
    """TP ranks are innermost (consecutive ranks): a group of t fills min(t, node) per node."""
    return Group(size=tp, ranks_per_node=np.minimum(tp, gpus_per_node),
                 num_nodes=np.ceil(tp / gpus_per_node), nvls=nvls)


def as_column(group: Group) -> Group:
    """The group with each field an (N, 1) column, to broadcast against (N, p) stage values."""
    return Group(size=np.asarray(group.size, dtype=float)[:, None],
                 ranks_per_node=np.asarray(group.ranks_per_node)[:, None],
                 num_nodes=np.asarray(group.num_nodes)[:, None],
                 nvls=np.broadcast_to(np.asarray(group.nvls, dtype=bool),
                                      np.shape(group.size))[:, None])


def _per_node(size, stride, gpus_per_node: int):
    """Ranks of one axis (`size` values `stride` apart) that share a node."""
    return np.where(stride >= gpus_per_node, 1,
                    np.minimum(size, np.maximum(gpus_per_node // np.maximum(stride, 1), 1)))


def strided_placement(size, stride, gpus_per_node: int, *, inner=1, gap=1, nvls=True) -> Group:
    """A group of `size` ranks: blocks of `inner` ranks `stride` apart, the blocks
    `inner x stride x gap` apart (the dp x cp group: cp ranks tp apart, then dp ranks past the
    pipeline stages where pp sits inside dp). Each axis keeps as many of its ranks in a node
    as its stride allows; the group's ranks per node are their product."""
    outer = np.maximum(size // np.maximum(inner, 1), 1)
    per_node = (_per_node(inner, stride, gpus_per_node)
                * _per_node(outer, stride * inner * gap, gpus_per_node))
    return Group(size=size, ranks_per_node=per_node, num_nodes=np.ceil(size / per_node),
                 nvls=nvls)


def pipeline_inner(cands) -> np.ndarray:
    """(N,) pp sits inside dp in the rank order (tp-cp-ep-pp-dp)."""
    return cands.rank_order == RANK_ORDER.index(RankOrder.TP_CP_EP_PP_DP)


def data_parallel_gap(cands) -> np.ndarray:
    """(N,) how many pipeline stages lie between consecutive data-parallel blocks: pp where
    pp sits inside dp, else 1."""
    return np.where(pipeline_inner(cands), cands.pp, 1)


def pipeline_placement(cands, gpus_per_node: int) -> Group:
    """The pp ranks of one pipeline: tp x cp x dp apart (pp outermost) or tp x cp apart (pp
    inside dp). The expert grid keeps the same pipeline groups (parallel_state.py asserts it)."""
    stride = cands.tp * cands.cp * np.where(pipeline_inner(cands), 1, cands.dp)
    return strided_placement(cands.pp, stride, gpus_per_node)
