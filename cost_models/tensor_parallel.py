"""Tensor-parallel (Megatron) collectives: how many a block runs, and their time.

Symbols: s sequence length (the rank's share under context parallelism), b micro-batch,
h hidden, t tensor-parallel ranks.

Refs:
- Shoeybi et al. 2019 (arXiv:1909.08053), Sec. 3, Fig. 3 and Fig. 4: the operators f and g put
  one all-reduce of s*b*h values in the forward and one in the backward pass of each
  partitioned sub-layer (self-attention, MLP): "two all-reduce operations in the forward pass
  and two in the backward pass" of a transformer layer (Narayanan et al. 2021, Sec. 2.3).
- Korthikanti et al. 2022 (arXiv:2205.05198), Sec. 4.2.2: with sequence parallelism each
  all-reduce becomes an all-gather and a reduce-scatter of the same volume; Sec. 5: full
  recomputation runs the forward pass again, its collectives with it.
"""

from __future__ import annotations

import numpy as np

from cost_models.communication import (Group, Network, all_gather_time_s, all_reduce_time_s,
                                       exposed_time_s, reduce_scatter_time_s)
from cost_models.enums import Recompute


def tp_passes(recompute: Recompute) -> int:
    """Passes per micro-batch that run a block's tensor-parallel collectives: the forward and
    the backward pass, and the forward again under full recompute; selective recompute reruns
    only the attention core, which has none.

    Ref: Korthikanti et al. 2022 (arXiv:2205.05198), Sec. 5.
    """
    return 3 if recompute is Recompute.FULL else 2


def transformer_layer_tp_collectives(*, tp_mlp: bool) -> int:
    """Tensor-parallel all-reduces one pass of a transformer layer runs: one after attention,
    one after a tensor-parallel MLP. An MoE layer's routed experts take their tokens through
    the expert-parallel all-to-all; only a tensor-parallel MLP (its shared experts, if any)
    counts.

    Ref: Shoeybi et al. 2019 (arXiv:1909.08053), Fig. 4 (operators f and g); Narayanan et al.
    2021, Sec. 2.3.
    """
    return 1 + int(tp_mlp)


def tp_collective_s(elements, *, sequence_parallel: bool, value_bytes: float, group: Group,
                    net: Network):
    """Seconds of one Megatron tensor-parallel all-reduce of `elements` values, or with
    sequence parallelism of the all-gather plus reduce-scatter that replace it.

    Ref: Korthikanti et al. 2022 (arXiv:2205.05198), Sec. 4.2.2 (same volume).
    """
    message = elements * value_bytes
    if sequence_parallel:
        return all_gather_time_s(message, group, net) + reduce_scatter_time_s(message, group, net)
    return all_reduce_time_s(message, group, net)


def tp_overlap_reaches(tp_num_nodes):
    """Whether GEMM/collective overlap can run over a TP group spanning `tp_num_nodes`
    NVLink domains: only inside one.

    Ref: Transformer Engine comm+GEMM overlap (userbuffers, module/base.py initialize_ub) and
    PyTorch's async TP (torch.distributed._symmetric_memory) write into the peers' memory
    through CUDA IPC / NVLink multicast, which exists only inside an NVLink domain; a TP group
    across InfiniBand runs its collectives through NCCL, exposed.
    """
    return np.asarray(tp_num_nodes) <= 1


def tp_exposed_s(comm_s, compute_s, *, overlap_share, interference: float):
    """Seconds of a block's tensor-parallel collectives left on the critical path: with
    overlap (Megatron-LM --tp-comm-overlap: Transformer Engine splits each GEMM and its
    all-gather / reduce-scatter into chunks and pipelines them, which needs sequence
    parallelism; torchtitan's async TP does the same) `overlap_share` of them hides behind the
    block's compute (`communication.overlap_pieces`); 0 without overlap.

    Ref: Megatron-LM --tp-comm-overlap (Transformer Engine userbuffers); Rashidi et al. 2021
    (ACE), Sec. 2, for the interference of the hidden part.
    """
    return exposed_time_s(comm_s, compute_s, interference=interference,
                          share=np.asarray(overlap_share, dtype=float))
