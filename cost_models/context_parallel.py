"""Context parallelism: what the attention of a sequence split over cp ranks communicates.

Each of the cp ranks holds s / cp tokens of every sequence: every token-wise operation (GEMMs,
norms, activations) shrinks cp-fold, and only attention, where each query needs the keys and
values of the whole (causal) prefix, communicates. The sequence is cut into 2 cp chunks and rank
r holds chunks r and 2 cp - 1 - r, so each rank does 1 / cp of the causal attention work
(Megatron-LM / Transformer Engine load-balanced chunking; Liu et al. 2023, Ring Attention,
arXiv:2310.01889; Llama 3, arXiv:2407.21783, Sec. 3.3.2).

Per layer and pass, for one rank (t tensor-parallel ranks, g key/value heads of d_k and d_v,
b sequences, 2-byte values), with KV = (s / cp) b (g / t) (d_k + d_v) x 2 bytes:

  type        forward                               backward
  p2p         cp - 1 ring steps of KV               cp - 1 ring steps of KV and dKV (2 KV)
  all_gather  all-gather of cp x KV                 all-gather of cp x KV, reduce-scatter of dKV
  a2a         all-to-all of Q, K, V and of O        the same, for their gradients
  a2a+p2p     a2a over the inner group, p2p ring over the outer one

Ring steps overlap with the attention of the chunk in hand (Transformer Engine runs them on
separate streams); the all-gather and all-to-alls sit on the critical path.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from cost_models import communication as comm
from cost_models.communication import Group, Network
from cost_models.enums import CpComm


class CpTraffic(NamedTuple):
    """Seconds of one layer's context-parallel communication on one rank, per pass: the part
    on the critical path (all-gathers, all-to-alls) and the ring steps that run beside the
    attention kernels."""

    forward_exposed_s: object
    forward_ring_s: object
    backward_exposed_s: object
    backward_ring_s: object


def kv_chunk_bytes(*, seq_len, micro_batch, num_kv_heads: int, k_head_dim: int,
                   v_head_dim: int, tp, cp, bytes_per_value: float):
    """Bytes of the keys and values one rank holds for its s / cp tokens (GQA: g heads, split
    over t tensor-parallel ranks; MLA: d_k = d_nope + d_rope and d_v per head)."""
    return (seq_len / cp) * micro_batch * (num_kv_heads / tp) * (k_head_dim + v_head_dim) \
        * bytes_per_value


def ulysses_bytes(*, seq_len, micro_batch, num_heads: int, num_kv_heads: int, k_head_dim: int,
                  v_head_dim: int, tp, cp, bytes_per_value: float):
    """Bytes one rank sends through the all-to-alls of one pass: Q, K and V before attention
    (sequence shards to head shards) and the output O after it (back to sequence shards).

    Ref: Jacobs et al. 2023 (DeepSpeed-Ulysses, arXiv:2309.14509), Sec. 3.1: with N tokens,
    hidden h and P ranks each rank sends 3 N h / P for Q, K, V and N h / P for O; GQA shrinks
    K and V to the key/value heads.
    """
    per_token = (num_heads * k_head_dim + num_kv_heads * (k_head_dim + v_head_dim)
                 + num_heads * v_head_dim) / tp
    return (seq_len / cp) * micro_batch * per_token * bytes_per_value


def ring_time_s(kv_bytes, *, steps, across_nodes, net: Network):
    """Seconds of `steps` ring steps, each a send and a receive of `kv_bytes` to the neighbours
    (all ranks at once; the slowest hop sets the pace: the network once the ring spans nodes)."""
    return np.where(steps > 0, steps * comm.send_recv_time_s(kv_bytes, across_nodes=across_nodes,
                                                            net=net), 0.0)


def cp_attention_comm(kind: CpComm, *, kv_bytes, qkvo_bytes, cp_group: Group, inner: Group,
                      outer_size, outer_across_nodes, net: Network) -> CpTraffic:
    """One layer's context-parallel communication for one rank, by `kind` (table above).

    `cp_group` is the whole CP group; for a2a+p2p `inner` is the all-to-all group and the ring
    runs over `outer_size` ranks (across nodes if `outer_across_nodes`). Ref: Transformer Engine
    transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py
    (AttnFuncWithCPAndKVP2P, AttnFuncWithCPAndKVAllGather, AttnFuncWithCPAndQKVOA2A).
    """
    cp, zero = cp_group.size, 0 * kv_bytes
    if kind is CpComm.P2P:
        across = cp_group.num_nodes > 1
        fwd = ring_time_s(kv_bytes, steps=cp - 1, across_nodes=across, net=net)
        bwd = ring_time_s(2 * kv_bytes, steps=cp - 1, across_nodes=across, net=net)
        return CpTraffic(zero, fwd, zero, bwd)
    if kind is CpComm.ALL_GATHER:
        gathered = cp * kv_bytes
        fwd = comm.all_gather_time_s(gathered, cp_group, net)
        bwd = fwd + comm.reduce_scatter_time_s(gathered, cp_group, net)
        return CpTraffic(fwd, zero, bwd, zero)
    if kind is CpComm.A2A:
        a2a = comm.all_to_all_time_s(qkvo_bytes, cp_group, net)
        return CpTraffic(a2a, zero, a2a, zero)
    # a2a+p2p: after the inner all-to-all a rank holds s / outer tokens of heads / inner, so the
    # ring moves the same bytes per step as plain p2p, in outer - 1 steps.
    a2a = comm.all_to_all_time_s(qkvo_bytes, inner, net)
    fwd = ring_time_s(kv_bytes, steps=outer_size - 1, across_nodes=outer_across_nodes, net=net)
    bwd = ring_time_s(2 * kv_bytes, steps=outer_size - 1, across_nodes=outer_across_nodes,
                      net=net)
    return CpTraffic(a2a, fwd, a2a, bwd)


def cp_working_bytes(kind: CpComm, *, kv_bytes, cp, ring_size):
    """Bytes context parallelism holds while one layer's attention runs, beyond the stored
    activations: the K/V of the whole sequence. all_gather gathers them (Transformer Engine
    AttnFuncWithCPAndKVAllGather, again in the backward); the ring keeps every received chunk
    in its list of `ring_size` buffers until the forward returns (AttnFuncWithCPAndKVP2P's
    p2p_comm_buffers); a2a holds its heads' share, no more than it stores."""
    if kind is CpComm.ALL_GATHER:
        return cp * kv_bytes
    if kind in (CpComm.P2P, CpComm.A2A_P2P):
        return ring_size * kv_bytes
    return 0 * kv_bytes
