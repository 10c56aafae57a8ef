"""Plans the model cannot tell apart, and which of them to list first.

Two plans are tied when the slower one's predicted step lies within the ranking tolerance of
the faster (`costing.uncertainty.ranking_tolerance`: the model's measured error on the ratio of
two strategies' step times for one job). Among plans tied with the fastest, the search lists
the conventional one first, since a real run of it is the less likely to meet what the model
leaves out: by `conventional_key`, then by predicted step time.
"""

from __future__ import annotations

import numpy as np

from cost_models.enums import ZeroStage
from planner.core.candidates import CP_COMM_ORDER, MOE_DISPATCHER_ORDER
from planner.core.problem import Problem, default_min_free_bytes
from planner.costing.uncertainty import tie_limit_s
from planner.search.pool import Pool

def tied_with(step_s: np.ndarray, best_step_s: float, tolerance: float) -> np.ndarray:
    """Where a predicted step lies within `tolerance` (relative) of `best_step_s`."""
    return step_s <= tie_limit_s(best_step_s, tolerance)


WIDEST_PUBLISHED_EP = 64
"""The widest expert parallelism of the published MoE production runs and recipes: DeepSeek-V3
on 2,048 H800 (arXiv:2412.19437, Sec. 3.2: EP 64 over 8 nodes), and every MoE row of
Megatron-Bridge's performance summaries (DeepSeek-V3, Kimi K2, DeepSeek V4 Flash, Nemotron 3
Ultra: EP 64 at most; docs/performance-summary*.md @067f987df). Wider groups put every token's
all-to-all across more nodes than any of them ran."""


def exotic_features(problem: Problem, pool: Pool) -> np.ndarray:
    """Per candidate, how many features it uses that few production runs do: TP across nodes,
    a parameter server, ZeRO sharded over part of data parallelism (HSDP), a context-parallel
    exchange other than the framework's first, an uneven layout where the even split exists,
    any CPU offload, expert parallelism wider than any published run (`WIDEST_PUBLISHED_EP`),
    a token dispatcher other than the framework's default (the flex one needs DeepEP or HybridEP
    installed).
    Where the layers do not divide over pp x vpp chunks an uneven layout is no choice: the
    frameworks need one (Megatron-LM refuses an uneven default split; DeepSeek-V3's 61 layers
    run on NVIDIA's recipes with --pipeline-model-parallel-layout)."""
    c = pool.cands
    default_cp = (CP_COMM_ORDER.index(problem.framework.context_parallel[0])
                  if problem.framework.context_parallel else 0)
    default_dispatcher = MOE_DISPATCHER_ORDER.index(problem.framework.defaults.moe_dispatcher)
    layers = problem.model.num_layers
    uneven_batch = np.array([len(set(b.layout.layers_per_chunk(problem.model))) > 1
                             and layers % b.layout.num_chunks == 0
                             for b in pool.batches], dtype=bool)
    features = (
        c.tp > problem.cluster.gpus_per_node,                     # --cross-node-tp
        c.dp_comm != 0,                                           # parameter server
        (c.zero > 0) & (c.shard != c.dp),                         # HSDP
        (c.cp > 1) & (c.cp_comm != default_cp),                   # all-to-all CP variants
        uneven_batch[pool.batch],                                 # uneven where even exists
        (c.opt_offload > 0) | (c.param_offload != 0) | (c.act_offload > 0),   # CPU offload
        c.ep > WIDEST_PUBLISHED_EP,                               # EP beyond production
        (c.ep > 1) & (c.dispatcher != default_dispatcher),        # flex dispatcher
    )
    return np.sum(features, axis=0, dtype=np.int64)


def conventional_key(problem: Problem, pool: Pool) -> tuple[np.ndarray, ...]:
    """Sort keys, most significant first, smaller = more conventional: exotic features, parallel
    axes beyond data parallelism (tp, pp, cp, ep above 1, and ZeRO-3's sharded weights: each is
    a dimension a run needs only when the plans without it do not fit or are clearly slower),
    a plan under the default memory margin (`Problem.margin_bytes`; only where --min-free 0
    let one in). Interleaving is not counted: with a pipeline, NVIDIA's recipes interleave."""
    c = pool.cands
    axes = ((c.tp > 1).astype(np.int64) + (c.pp > 1) + (c.cp > 1) + (c.ep > 1)
            + (c.zero == int(ZeroStage.PARAMETERS)))
    margin = default_min_free_bytes(problem.cluster.capacity_bytes)
    tight = (problem.cluster.capacity_bytes - pool.peak_bytes) < margin
    return exotic_features(problem, pool), axes, tight.astype(np.int64)


def tied_first(problem: Problem, pool: Pool, best: int, tolerance: float,
               objective: np.ndarray, limit: int) -> list[int]:
    """The candidates tied with candidate `best` (itself included), the conventional first,
    then the faster, then by `objective` (unique per candidate, so the order is total);
    at most `limit` of them, `best` always among them when limit > 1 (last, when more
    conventional ones fill the rest): the fastest found stays in view."""
    tied = np.flatnonzero(tied_with(pool.step_s, float(pool.step_s[best]), tolerance))
    keys = [key[tied] for key in conventional_key(problem, pool)]
    order = [int(i) for i in tied[np.lexsort((objective[tied], pool.step_s[tied],
                                              *keys[::-1]))]]
    listed = order[:limit]
    if limit > 1 and best not in listed:
        listed[-1] = best
    return listed
