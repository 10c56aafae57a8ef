"""Per-block costs: each block kind evaluated through the cost_models functions.

`block_cost` returns, for one block and arrays of (tp, micro_batch) points at one setting of
sequence parallelism and recompute, the time of its forward and backward passes on one TP
rank, the time its recomputation adds, its tensor-parallel collectives, the activation bytes it
keeps per micro-batch and its parameters. `costing` adds them up per pipeline stage.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from cost_models import communication as comm
from cost_models.communication import Group
from cost_models.compute import (BACKWARD_ELEMENTWISE_RATIO, Gemm, backward_gemms,
                                 attended_keys, attention_kernel_fraction,
                                 attention_sink_backward_s, complex_rotary_extra_bytes,
                                 cross_entropy_bytes, eager_layer_elementwise_bytes,
                                 expert_bias_bytes, glu_clamp_bytes,
                                 expert_tokens_per_rank, routing_imbalance,
                                 flash_attention_time_s, gemm_flops, gemm_time_s,
                                 memory_bound_time_s, moe_elementwise_bytes, output_layer_gemm,
                                 quantization_padding_bytes,
                                 transformer_layer_elementwise_bytes,
                                 transformer_layer_forward_flops, transformer_layer_gemms)
from cost_models.context_parallel import (cp_attention_comm, cp_working_bytes, kv_chunk_bytes,
                                          ulysses_bytes)
from cost_models.enums import (DEFAULT_RECOMPUTE_MODULES, AttentionKind, Collective, CpComm,
                               CudaGraphs, LoadBalancing, MoeDispatcher, PositionKind, Precision,
                               Recompute, RecomputeModule)
from cost_models.expert_parallel import (DEEPEP_NVL_PEERS_MAX, dispatcher_sync_s,
                                         dispatcher_token_copies, expert_dispatch_s,
                                         expert_gemm_launches, expert_quantizations,
                                         host_wait_s, moe_host_s, router_bytes,
                                         token_path_graphed)
from cost_models.evoformer import (evoformer_block_activation_bytes,
                                   evoformer_block_elementwise_bytes, evoformer_block_gemms,
                                   evoformer_block_tp_allreduce_elements)
from cost_models.fp8 import (fp8_attention_fraction, fp8_attention_quantize_bytes, layout_copy_s,
                             fp8_attention_value_bytes, fp8_value_bytes, gemm_operand_bytes,
                             quantize_bytes)
from cost_models.memory import (eager_cross_entropy_working_bytes, embedding_activation_bytes,
                                moe_activation_bytes,
                                op_sac_layer_activation_bytes, output_activation_bytes,
                                returned_logits_bytes,
                                transformer_layer_activation_bytes)
from cost_models.tensor_parallel import (tp_collective_s, tp_passes,
                                         transformer_layer_tp_collectives)
from cost_models.units import bytes_per_value
from planner.core.candidates import CUDA_GRAPHS_ORDER, MOE_DISPATCHER_ORDER
from planner.costing.placement import strided_placement, tp_placement
from planner.schemas.cluster import ClusterSpec
from planner.schemas.framework import FrameworkProfile
from planner.schemas.model import (EmbeddingBlock, EvoformerBlock, MtpBlock, NormBlock,
                                   OutputBlock, TrainingSpec, TransformerBlock)


class BlockCost(NamedTuple):
    """Costs of one block per micro-batch on one TP rank (arrays over points)."""

    forward_s: object
    backward_s: object
    recompute_s: object
    """Extra forward work in the backward pass (full: the whole block; selective: attention)."""
    tp_comm_s: object
    """Tensor-parallel collectives of one forward and one backward pass, and of the recompute."""
    activation_bytes: object
    output_elements: object
    """Values the block hands to the next one (a pipeline send at a stage boundary)."""
    recompute_working_bytes: object = 0.0
    """Activations a recomputed block rebuilds for its own backward pass, beyond those it
    keeps: alive while that one block runs backward (Korthikanti et al. 2022, Sec. 5)."""
    ep_comm_s: object = 0.0
    """Expert-parallel token dispatch and combine (and expert-TP gathers) of the passes."""
    cp_comm_s: object = 0.0
    """Context-parallel K/V exchange of the passes left on the critical path (ring steps
    hidden behind the attention they run beside)."""
    expert_forward_s: object = 0.0
    """The routed experts' share of `forward_s` (grouped GEMMs, their FP8 casts and
    activation): the compute an overlapped all-to-all runs beside in the expert passes."""
    host_wait_s: object = 0.0
    """GPU idle time waiting for the host to launch an MoE layer's eager token path, forward
    and backward (`expert_parallel.host_wait_s`)."""
    paired_host_wait_s: object = 0.0
    """The same on a paired pass of the combined 1F1B schedule (moe_a2a_overlap): one host
    thread issues micro-batch i + 1's forward and micro-batch i's backward of the layer
    together, and the GPU runs the one's work while the host issues the other's."""
    weight_grad_s: object = 0.0
    """Of `backward_s`, the weight-gradient GEMMs (`weight_gradients`): what a zero-bubble
    pipeline schedule runs apart from the input gradients, in the bubble."""


def _tp_collective_s(elements, *, sequence_parallel: bool, place: Group, cluster: ClusterSpec,
                     value_bytes: int):
    return tp_collective_s(elements, sequence_parallel=sequence_parallel, value_bytes=value_bytes,
                           group=place, net=cluster.network)


def weight_gradients(gemms) -> list:
    """The weight-gradient GEMM of each weight GEMM in `gemms` (None entries skipped): the
    second of `compute.backward_gemms`, dB = A^T dC, as many FLOPs as the forward. A
    zero-bubble schedule runs these (its W pass) apart from the input gradients (its B pass;
    Qi et al. 2024, arXiv:2401.10241, Sec. 2: "W ... computes the gradient for the
    parameters")."""
    return [backward_gemms(g)[1] for g in gemms if g is not None]


def _gemms_s(gemms, backward: bool, kw: dict) -> object:
    """Seconds of `gemms` (None entries skipped) at `gemm_time_s`'s keywords `kw`."""
    gemms = [g for g in gemms if g is not None]
    if backward:
        gemms = [part for g in gemms for part in backward_gemms(g)]
    return sum(gemm_time_s(g, **kw) for g in gemms)


class _Kernels:
    """GEMM and memory-bound kernel times on this cluster's GPU at one precision."""

    def __init__(self, cluster: ClusterSpec, training: TrainingSpec,
                 framework: FrameworkProfile, dispatcher=0, layer_graphs=False,
                 full_graph=False, sinks: bool = False) -> None:
        eff = cluster.efficiency
        self.dispatcher = dispatcher
        """The MoE dispatcher per point (index into MoeDispatcher)."""
        self.layer_graphs = layer_graphs
        """Per point: a CUDA graph per layer (CudaGraphs.LAYER)."""
        self.full_graph = full_graph
        """Per point: one CUDA graph replays the whole forward and backward."""
        self.selective_attention = framework.selective_recompute_attention
        self.selective_gemm_share = framework.selective_recompute_gemm_share
        self.selective_elementwise = framework.selective_recompute_elementwise
        self.selective_alternate_linears = framework.selective_keeps_alternate_linears
        self.eager = training.eager_elementwise(framework)
        """The layers' memory-bound ops run as eager PyTorch ops (no torch.compile)."""
        self.eager_loss = training.eager_loss(framework)
        """The loss runs as PyTorch's eager cross entropy (`TrainingSpec.eager_loss`)."""
        self.value_bytes = bytes_per_value(training.precision)
        self.peak = cluster.gpu.peak_flops(training.precision)
        self._gemm = dict(peak_flops=self.peak, peak_fraction=eff.gemm_peak_fraction,
                          half_efficiency_k=eff.gemm_half_efficiency_k,
                          fill_dim=eff.gemm_fill_dim,
                          hbm_bytes_per_s=cluster.gpu.hbm_gb_per_s * 1e9,
                          hbm_fraction=eff.hbm_fraction, bytes_per_value=self.value_bytes)
        self._hbm = dict(hbm_bytes_per_s=cluster.gpu.hbm_gb_per_s * 1e9,
                         hbm_fraction=eff.hbm_fraction)
        self.attention = training.attention_kernel(framework, sinks=sinks)   # the run's
        self.flash_fraction = eff.flash_attention_fraction
        if self.attention is AttentionKind.FLASH2 and eff.flash2_attention_fraction is not None:
            self.flash_fraction = eff.flash2_attention_fraction
        self.attention_halves = dict(half_keys=eff.attention_half_keys,
                                     half_head_dim=eff.attention_half_head_dim)
        self.sink_row_s = eff.attention_sink_row_s if sinks else 0.0
        """Per query row and head, what the sinks' gradient adds to a fused backward."""
        self.framework = framework
        # FP8: the linear layers' GEMMs at the FP8 peak, times the recipe's efficiency on this
        # GPU relative to bf16 (cluster data), reading 1-byte operands, their shape loss paid at
        # the bf16 rate (compute.gemm_time_s); the bf16 peak for the rest.
        self.fp8 = training.fp8_recipe if training.precision is Precision.FP8 else None
        self._linear = self._gemm
        self.fp8_linears_saved = (self.fp8 is not None and self.selective_alternate_linears
                                  and not framework.selective_fp8_linears_as_mm)
        """torchtitan's per-op policy keeps every FP8 linear's output: none re-runs."""
        if self.fp8_linears_saved:
            self.selective_gemm_share = 0.0
        if self.fp8 is not None:
            relative = eff.fp8_gemm_efficiency.get(self.fp8, 0.0) or 1.0   # unsupported: a rule
            self.peak = cluster.gpu.peak_flops(Precision.BF16)
            self._gemm = dict(self._gemm, peak_flops=self.peak)
            self._linear = dict(self._gemm,
                                peak_flops=cluster.gpu.linear_peak_flops(self.fp8),
                                peak_fraction=eff.gemm_peak_fraction * relative,
                                bytes_per_value=gemm_operand_bytes(self.fp8),
                                shape_loss_flops=self.peak * eff.gemm_peak_fraction)
            self.transpose_free = cluster.gpu.fp8_transpose_free
            fp8 = framework.fp8
            self.separate_layouts = fp8 is not None and self.fp8 in fp8.separate_layout_recipes
            self._cast_hbm, self.layout_copy_rate = self._hbm, None
            if self.separate_layouts:
                self._cast_hbm = dict(self._hbm,
                                      hbm_fraction=eff.hbm_fraction * fp8.cast_efficiency)
                self.layout_copy_rate = fp8.layout_copy_elements_per_s
            self.fp8_caches_weights = fp8 is not None and fp8.caches_weights
            self.fp8_saves_inputs = fp8 is not None and fp8.saves_fp8_inputs
        # The attention core: bf16 at the fused kernel's share of the bf16 peak, or FP8
        # (training.fp8_attention) at the FP8 kernel's share of the FP8 peak where the cluster
        # gives its rate (`fp8.fp8_attention_fraction`); without one, at the bf16 speed.
        self.fp8_attention = self.fp8 is not None and training.fp8_attention
        self.attention_peak, self.attention_fraction = self.peak, self.flash_fraction
        relative = eff.fp8_attention_efficiency
        if self.fp8_attention and relative is not None:
            self.attention_peak = cluster.gpu.peak_flops(Precision.FP8)
            self.attention_fraction = fp8_attention_fraction(
                flash_fraction=self.flash_fraction, relative_efficiency=relative)
        self.attention_value_bytes = (fp8_attention_value_bytes(self.fp8) if self.fp8_attention
                                      else self.value_bytes)
        # The output layer: bf16 (every framework's default), or FP8 (training.fp8_output_layer).
        self.fp8_output_layer = self.fp8 is not None and training.fp8_output_layer
        # Routed experts: the linear layers' GEMMs, filling the GPU together or one by one.
        self._experts = dict(self._linear, fill_batch=framework.expert_gemms_one_kernel)

    def gemms_s(self, gemms, *, backward: bool = False) -> object:
        """Seconds of bf16 GEMMs in one pass (backward: each one's input and weight
        gradients, `compute.backward_gemms`)."""
        return _gemms_s(gemms, backward, self._gemm)

    def linear_s(self, gemms, *, backward: bool = False) -> object:
        """Seconds of weight GEMMs that run in FP8 under precision fp8 (bf16 else), one pass."""
        return _gemms_s(gemms, backward, self._linear)

    def experts_s(self, gemms, *, backward: bool = False) -> object:
        """`linear_s` of the routed experts' grouped GEMMs: one kernel for all local experts
        or one per expert (`FrameworkProfile.expert_gemms_one_kernel`)."""
        return _gemms_s(gemms, backward, self._experts)

    def quantize_s(self, gemms, *, backward: bool) -> object:
        """Seconds of quantizing the FP8 GEMMs' bf16 operands in one pass (0 without FP8):
        forward, each input; backward, each output gradient, and each input again where the
        framework saved it in bf16; both passes, each weight where the framework does not keep
        its FP8 copies across micro-batches (torchao casts in every pass), each cast writing
        both GEMM layouts. A recipe the framework casts one layout at a time
        (`Fp8Profile.separate_layout_recipes`: torchao rowwise) casts each operand in the one
        layout its GEMM reads (the input and weight once per pass, the output gradient in
        both), at the framework's cast rate, and in the backward copies the weight gradient's
        operands and the data gradient's weight into the layout torch._scaled_mm takes
        (`fp8.layout_copy_s`)."""
        if self.fp8 is None:
            return 0.0
        both = one = copied = 0.0   # elements cast into both layouts, into one; copied
        for g in gemms:
            if g is None:
                continue
            inputs, grads, weights = g.m * g.k * g.batch, g.m * g.n * g.batch, g.k * g.n * g.batch
            operands = ((inputs if not backward or not self.fp8_saves_inputs else 0.0)
                        + (0.0 if self.fp8_caches_weights else weights))
            if self.separate_layouts:
                one = one + operands
            else:
                both = both + operands
            if backward:
                both = both + grads
                copied = copied + grads + inputs + weights
        kw = dict(transpose_free=self.transpose_free)
        seconds = memory_bound_time_s(quantize_bytes(both, self.fp8, **kw)
                                      + quantize_bytes(one, self.fp8, layouts=1, **kw),
                                      **self._cast_hbm)
        if self.layout_copy_rate is not None and not self.transpose_free:
            seconds = seconds + layout_copy_s(copied, elements_per_s=self.layout_copy_rate)
        return seconds

    @property
    def linear_input_bytes(self) -> float:
        """Bytes per value of the linear layers' inputs kept for the backward pass."""
        if self.fp8 is not None and self.fp8_saves_inputs:
            return fp8_value_bytes(self.fp8)
        return self.value_bytes

    def traffic_s(self, traffic_bytes) -> object:
        return memory_bound_time_s(traffic_bytes, **self._hbm)

    def attention_quantize_s(self, elements) -> object:
        """Seconds of casting `elements` bf16 values to FP8 at the attention's boundary (0
        without FP8 attention)."""
        if not self.fp8_attention:
            return 0.0
        return self.traffic_s(fp8_attention_quantize_bytes(elements, self.fp8))


def _bf16_training(training: TrainingSpec) -> TrainingSpec:
    """The run's settings for a layer it keeps out of FP8 (`TransformerBlock.keep_bf16`): its
    linear layers and attention in bf16, as outside Transformer Engine's fp8_autocast."""
    return training.model_copy(update={"precision": Precision.BF16, "fp8_recipe": None,
                                       "fp8_attention": False, "fp8_output_layer": False})


class ContextParallel:
    """Context parallelism at arrays of points: `size` ranks (tp apart, Megatron-LM's rank
    order tp-cp-ep-dp-pp) share each sequence of `seq_len` tokens and exchange K/V by `kind`;
    `a2a` is the inner all-to-all group of the hierarchical kind."""

    def __init__(self, *, size, seq_len: int, kind: CpComm = CpComm.P2P, a2a=1) -> None:
        self.size = np.asarray(size, dtype=float)
        self.seq_len = seq_len
        self.kind = kind
        self.a2a = np.asarray(a2a, dtype=float) + 0 * self.size

    def _kv_bytes(self, block, *, mb, tp, k: _Kernels):
        heads, d_k, d_v = block.attention_core_shape
        return kv_chunk_bytes(seq_len=self.seq_len, micro_batch=mb, num_kv_heads=heads,
                              k_head_dim=d_k, v_head_dim=d_v, tp=tp, cp=self.size,
                              bytes_per_value=k.value_bytes)

    def attention_comm_s(self, block, *, mb, tp, k: _Kernels, cluster: ClusterSpec,
                         core_fwd, core_bwd):
        """(forward, backward) seconds of one layer's K/V exchange left on the critical path:
        ring steps hide behind the attention kernels, slowing them by the overlap interference."""
        node, net = cluster.nvlink_gpus, cluster.network
        kv = self._kv_bytes(block, mb=mb, tp=tp, k=k)
        heads, d_k, d_v = block.attention_core_shape
        qkvo = ulysses_bytes(seq_len=self.seq_len, micro_batch=mb, num_heads=block.num_heads,
                             num_kv_heads=heads, k_head_dim=d_k, v_head_dim=d_v, tp=tp,
                             cp=self.size, bytes_per_value=k.value_bytes)
        outer = np.maximum(self.size // self.a2a, 1)
        t = cp_attention_comm(
            self.kind, kv_bytes=kv, qkvo_bytes=qkvo, net=net,
            cp_group=strided_placement(self.size, tp, node),
            inner=strided_placement(self.a2a, tp, node), outer_size=outer,
            outer_across_nodes=strided_placement(outer, tp * self.a2a, node).num_nodes > 1)
        interference = cluster.efficiency.overlap_interference
        fwd = t.forward_exposed_s + comm.exposed_time_s(t.forward_ring_s, core_fwd,
                                                        interference=interference)
        bwd = t.backward_exposed_s + comm.exposed_time_s(t.backward_ring_s, core_bwd,
                                                         interference=interference)
        single = self.size <= 1
        return np.where(single, 0.0, fwd), np.where(single, 0.0, bwd)

    def working_bytes(self, block, *, mb, tp, k: _Kernels):
        ring = self.size if self.kind is CpComm.P2P else np.maximum(self.size // self.a2a, 1)
        held = cp_working_bytes(self.kind, kv_bytes=self._kv_bytes(block, mb=mb, tp=tp, k=k),
                                cp=self.size, ring_size=ring)
        return np.where(self.size <= 1, 0.0, held)


def _transformer(block: TransformerBlock, *, seq_len, mb, tp, sp: bool, rc: Recompute,
                 k: _Kernels, place: Group, cluster: ClusterSpec, ep, etp,
                 cp: ContextParallel,
                 modules: frozenset[RecomputeModule] = DEFAULT_RECOMPUTE_MODULES) -> BlockCost:
    # `seq_len` is this rank's share of the sequence (s / cp); attention alone sees all of it.
    shape = dict(seq_len=seq_len, micro_batch=mb, hidden=block.hidden,
                 num_heads=block.num_heads, num_kv_heads=block.kv_heads,
                 head_dim=block.dim_per_head, ffn_hidden=block.tp_ffn, mlp=block.mlp)
    mla, moe = block.mla, block.moe
    # With sequence parallelism each TP rank routes its own s b / t tokens (Megatron-Core
    # requires it for MoE with TP); without, tp is 1 for an MoE layer (a rule).
    tokens_per_rank = seq_len * mb / tp if sp else seq_len * mb + 0 * tp
    imbalance = routing_imbalance(block.load_balancing, block.capacity_factor) if moe else 1.0
    g = transformer_layer_gemms(**shape, tp=tp, mla=mla, moe=moe,
                                tokens_per_rank=tokens_per_rank, ep=ep, etp=etp,
                                imbalance=imbalance)
    flash = k.attention.fused
    # The weight GEMMs: the linear layers (FP8 under precision fp8) and the router (bf16).
    dense = g.projections + g.mlp
    linears = dense + g.experts
    weights_s = k.linear_s(dense) + k.experts_s(g.experts) + k.gemms_s((g.router,))
    weight_grads = (k.linear_s(weight_gradients(dense))
                    + k.experts_s(weight_gradients(g.experts))
                    + k.gemms_s(weight_gradients((g.router,))))
    weights_bwd = (k.linear_s(dense, backward=True) + k.experts_s(g.experts, backward=True)
                   + k.gemms_s((g.router,), backward=True))
    elementwise = dict(**shape, position=block.position, dropout=block.dropout,
                       norms_per_layer=block.norms_per_layer, tp=tp, sequence_parallel=sp)
    traffic = transformer_layer_elementwise_bytes(**elementwise, attention=k.attention)
    # Elementwise kernels tied to the scores (softmax, dropout) belong to the attention core.
    core_traffic = traffic - transformer_layer_elementwise_bytes(**elementwise,
                                                                 attention=AttentionKind.FLASH)
    pairs = 0 * tp
    expert_forward = 0 * tp
    # The expert path's own copies beyond its GEMMs and activation (bytes): biased experts'
    # eager output bias, a clamped GLU's eager clamp, the padding copies of a quantized
    # grouped GEMM.
    copies_fwd = copies_bwd = 0 * tp
    # A clamped GLU's eager clamp (bytes forward; moe_act re-runs it).
    eager_clamp = (moe is not None and block.glu_clamp is not None and block.mlp.gated
                   and k.framework.eager_glu_clamp)
    clamp_fwd = 0 * tp
    waited = paired_waited = 0 * tp
    if moe is not None:
        pairs = expert_tokens_per_rank(tokens_per_rank, top_k=moe.top_k, etp=etp,
                                       imbalance=imbalance)
        alltoall = np.asarray(k.dispatcher) == MOE_DISPATCHER_ORDER.index(MoeDispatcher.ALLTOALL)
        token_copies = dispatcher_token_copies(alltoall=alltoall,
                                               local_experts=moe.num_experts / ep)
        traffic = traffic + moe_elementwise_bytes(
            pairs=pairs, hidden=block.hidden, expert_ffn_hidden=moe.expert_ffn_hidden / etp,
            mlp=block.mlp, bytes_per_value=k.value_bytes,
            token_copies=token_copies) + router_bytes(
            tokens_per_rank, num_experts=moe.num_experts, top_k=moe.top_k,
            aux_loss=block.load_balancing is LoadBalancing.AUX_LOSS)
        activation = moe_elementwise_bytes(
            pairs=pairs, hidden=0, expert_ffn_hidden=moe.expert_ffn_hidden / etp,
            mlp=block.mlp, bytes_per_value=k.value_bytes)
        expert_forward = (k.experts_s(g.experts) + k.quantize_s(g.experts, backward=False)
                          + k.traffic_s(activation))
        if block.bias and k.framework.eager_expert_bias:
            fwd, bwd = expert_bias_bytes(pairs=pairs, hidden=block.hidden)
            copies_fwd, copies_bwd = copies_fwd + fwd, copies_bwd + bwd
        if eager_clamp:
            clamp_fwd, bwd = glu_clamp_bytes(rows=pairs, columns=moe.expert_ffn_hidden / etp)
            copies_fwd, copies_bwd = copies_fwd + clamp_fwd, copies_bwd + bwd
        if k.fp8 is not None:
            padded = np.isin(k.dispatcher, [MOE_DISPATCHER_ORDER.index(d)
                                            for d in k.framework.moe_padding_copies])
            fwd, bwd = quantization_padding_bytes(pairs=pairs, hidden=block.hidden,
                                                  bytes_per_value=k.value_bytes)
            copies_fwd = copies_fwd + np.where(padded, fwd, 0.0)
            copies_bwd = copies_bwd + np.where(padded, bwd, 0.0)
        expert_forward = expert_forward + k.traffic_s(copies_fwd)
    kv_heads, qk_dim, v_dim = block.attention_core_shape
    if flash:
        # Load-balanced chunks give each CP rank 1 / cp of the whole sequence's attention; each
        # kernel call sees one chunk's keys, which sets the kernel's rate.
        fraction = attention_kernel_fraction(
            keys=attended_keys(cp.seq_len / cp.size, causal=block.causal,
                               window=block.sliding_window, chunk=block.attention_chunk),
            head_dim=(qk_dim + v_dim) / 2, reference_fraction=k.attention_fraction,
            **k.attention_halves)
        attn = dict(seq_len=cp.seq_len, micro_batch=mb, num_heads=block.num_heads,
                    head_dim=qk_dim, v_head_dim=v_dim, window=block.sliding_window,
                    chunk=block.attention_chunk, tp=tp,
                    causal=block.causal, peak_flops=k.attention_peak, flash_fraction=fraction)
        # FP8 attention casts this rank's Q, K, V in the forward and dO in the backward.
        q_values = seq_len * mb * block.num_heads * qk_dim / tp
        kv_values = seq_len * mb * kv_heads * (qk_dim + v_dim) / tp
        core_fwd = (flash_attention_time_s(**attn, backward=False) / cp.size
                    + k.attention_quantize_s(q_values + kv_values))
        core_bwd = (flash_attention_time_s(**attn, backward=True) / cp.size
                    + k.attention_quantize_s(seq_len * mb * block.num_heads * v_dim / tp)
                    + attention_sink_backward_s(seq_len=seq_len, micro_batch=mb,
                                                num_heads=block.num_heads, tp=tp,
                                                row_s=k.sink_row_s))
    else:
        # The rank's s / cp queries against all s keys: cp times its local square (CP runs
        # on fused attention only, a rule; this prices a strategy that breaks it).
        core_fwd = cp.size * (k.gemms_s((g.scores, g.attend)) + k.traffic_s(core_traffic))
        core_bwd = cp.size * (k.gemms_s((g.scores, g.attend), backward=True)
                              + BACKWARD_ELEMENTWISE_RATIO * k.traffic_s(core_traffic))
    rest_traffic = traffic - core_traffic
    rest_fwd = k.traffic_s(rest_traffic)
    rest_bwd = BACKWARD_ELEMENTWISE_RATIO * rest_fwd
    if k.eager:
        # The norms, rotary embedding, dense activation and residual adds as eager ops, with the
        # copies fusion avoids; dropout masks and an MoE layer's own kernels as before.
        fused = transformer_layer_elementwise_bytes(**{**elementwise, "dropout": False},
                                                    attention=AttentionKind.FLASH)
        eager_fwd, eager_bwd = eager_layer_elementwise_bytes(
            **{key: elementwise[key] for key in elementwise if key != "dropout"},
            norm=block.norm)
        rest_fwd = k.traffic_s(rest_traffic - fused + eager_fwd)
        rest_bwd = (BACKWARD_ELEMENTWISE_RATIO * k.traffic_s(rest_traffic - fused)
                    + k.traffic_s(eager_bwd))
    elif k.framework.complex_rotary and block.position is PositionKind.ROTARY:
        # Compiled, but the complex-number rotary embedding stays eager.
        extra_fwd, extra_bwd = complex_rotary_extra_bytes(
            seq_len=seq_len, micro_batch=mb, num_heads=block.num_heads,
            num_kv_heads=block.kv_heads, head_dim=block.dim_per_head, tp=tp)
        rest_fwd = rest_fwd + k.traffic_s(extra_fwd)
        rest_bwd = rest_bwd + k.traffic_s(extra_bwd)
    forward = (weights_s + k.quantize_s(linears, backward=False) + rest_fwd + core_fwd
               + k.traffic_s(copies_fwd))
    if moe is not None:
        forward = forward + dispatcher_sync_s(ep=ep, etp=etp,
                                              sync_s=k.framework.moe_dispatcher_sync_s)
    backward = (weights_bwd + k.quantize_s(linears, backward=True)
                + rest_bwd + core_bwd + k.traffic_s(copies_bwd))
    # Megatron TP (Narayanan et al. 2021, Sec. 2.3): an all-reduce of s*b*h values after
    # attention and one after the MLP in the forward pass, the same in the backward. An MoE
    # layer's routed experts take their tokens from the sequence-parallel shard through the
    # expert-parallel all-to-all instead; only its shared experts (if any) are a TP MLP.
    tokens_hidden = seq_len * mb * block.hidden
    one_pass_comm = transformer_layer_tp_collectives(tp_mlp=bool(block.tp_ffn)) * _tp_collective_s(
        tokens_hidden, sequence_parallel=sp, place=place, cluster=cluster,
        value_bytes=k.value_bytes)
    one_pass_ep = 0 * tp
    if moe is not None:
        one_pass_ep = _expert_dispatch_s(
            tokens_per_rank=tokens_per_rank, pairs=pairs, top_k=moe.top_k, hidden=block.hidden,
            imbalance=imbalance, ep=ep, etp=etp, k=k, cluster=cluster,
            num_experts=moe.num_experts, router_groups=block.router_groups,
            router_group_topk=block.router_group_topk)
    if moe is not None:
        # The host issues the token path (dispatch, permutation, one GEMM per local expert,
        # combine) after the dispatcher's sync: the GPU waits where that takes longer than
        # the GPU work it issues (forward: the experts and their all-to-alls; backward: the
        # whole layer's, the host running ahead of it).
        graphed = token_path_graphed(layer_graphs=k.layer_graphs, full_graph=k.full_graph,
                                     drop_padded=block.capacity_factor is not None)
        fw = k.framework
        host = dict(token_path_s=fw.moe_token_path_host_s,
                    gemm_launch_s=fw.moe_gemm_launch_host_s,
                    quantize_launch_s=fw.moe_quantize_launch_host_s, graphed=graphed)
        casts = expert_quantizations(g.experts, recipe=k.fp8)
        host_fwd = moe_host_s(expert_gemm_launches(g.experts, backward=False), casts, **host)
        host_bwd = moe_host_s(expert_gemm_launches(g.experts, backward=True), casts, **host)
    comm_passes = tp_passes(rc)
    modules = modules if rc is Recompute.SELECTIVE else frozenset()
    tp_rerun, ep_rerun = 0 * tp, 0 * tp
    if rc is Recompute.FULL:
        recompute = forward
    else:
        rerun = _selective_rerun(block, modules, g=g, k=k, core_fwd=core_fwd,
                                 weights_s=weights_s, sp=sp, tp=tp,
                                 tokens_hidden=seq_len * mb * block.hidden,
                                 expert_forward=expert_forward, elementwise_fwd=rest_fwd,
                                 activation_extra_s=k.traffic_s(clamp_fwd))
        recompute, tp_rerun = rerun.compute_s, rerun.tp_collectives * _tp_collective_s(
            seq_len * mb * block.hidden, sequence_parallel=sp, place=place, cluster=cluster,
            value_bytes=k.value_bytes)
        if moe is not None and RecomputeModule.MOE in modules:
            # The checkpointed MoE forward dispatches and combines again.
            recompute = recompute + dispatcher_sync_s(ep=ep, etp=etp,
                                                      sync_s=k.framework.moe_dispatcher_sync_s)
            ep_rerun = 1.0
    # Context parallelism: the forward's exchange again wherever the attention core reruns.
    cp_fwd, cp_bwd = cp.attention_comm_s(block, mb=mb, tp=tp, k=k, cluster=cluster,
                                         core_fwd=core_fwd, core_bwd=core_bwd)
    reruns_attention = rc is Recompute.FULL or (RecomputeModule.CORE_ATTN in modules
                                                and k.selective_attention)
    cp_comm = cp_fwd + cp_bwd + (cp_fwd if reruns_attention else 0.0)

    # Memory holds every layer's expert activations at once: over a rank's layers the routing
    # imbalance (which rank is busiest changes from layer to layer) averages out, so they are
    # kept at the mean load; time pays the busiest rank of each layer.
    mean_pairs = pairs / imbalance

    def stored(recompute):
        if (recompute is Recompute.SELECTIVE and k.selective_alternate_linears and mla is None
                and moe is None and k.attention.fused):
            # torchtitan's per-op checkpointing keeps the block input, the attention kernel's
            # outputs and every second linear's output.
            return op_sac_layer_activation_bytes(
                seq_len=seq_len, micro_batch=mb, hidden=block.hidden,
                num_heads=block.num_heads, q_dim=block.num_heads * block.dim_per_head,
                kv_dim=block.kv_heads * block.dim_per_head, ffn_hidden=block.tp_ffn,
                gated=block.mlp.gated, tp=tp, sequence_parallel=sp,
                bytes_per_value=k.value_bytes, scaled_linears=k.fp8_linears_saved)
        kept = transformer_layer_activation_bytes(
            **shape, attention=k.attention, dropout=block.dropout,
            norms_per_layer=block.norms_per_layer, tp=tp, sequence_parallel=sp,
            recompute=recompute, bytes_per_value=k.value_bytes, mla=mla,
            linear_input_bytes=k.linear_input_bytes, qk_norm=block.qk_norm,
            attention_input_bytes=k.attention_value_bytes, recompute_modules=modules,
            moe_layer=moe is not None)
        if moe is not None and recompute is not Recompute.FULL:
            kept = kept + moe_activation_bytes(
                pairs=mean_pairs, tokens_per_rank=tokens_per_rank, hidden=block.hidden,
                expert_ffn_hidden=moe.expert_ffn_hidden / etp, num_experts=moe.num_experts,
                mlp=block.mlp, bytes_per_value=k.value_bytes,
                linear_input_bytes=k.linear_input_bytes,
                recompute_modules=modules if recompute is Recompute.SELECTIVE else frozenset(),
                eager_glu_clamp=eager_clamp)
        return kept

    activations = stored(rc)
    working = stored(Recompute.NONE) - activations + cp.working_bytes(block, mb=mb, tp=tp, k=k)
    if moe is not None:
        # A recomputed token path (full recompute, or the moe module) is issued again in the
        # backward pass, beside the recomputation and its all-to-alls.
        rerun_ep = comm_passes - 2 + ep_rerun
        host_bwd = host_bwd + np.where(rerun_ep > 0, host_fwd, 0.0)
        waited = host_wait_s(host_fwd, expert_forward + one_pass_ep) + host_wait_s(
            host_bwd, backward + recompute + (1 + rerun_ep) * one_pass_ep)
        # Paired (combined 1F1B, Megatron-Core TransformerLayerSchedulePlan.run): the host
        # issues both halves in one sequence while the GPU runs both halves' compute on one
        # stream and their all-to-alls on the other.
        paired_waited = host_wait_s(host_fwd + host_bwd, forward + backward + recompute
                                    + (comm_passes + ep_rerun) * one_pass_ep)
    return BlockCost(forward, backward, recompute,
                     comm_passes * one_pass_comm + tp_rerun, activations,
                     tokens_hidden + 0 * tp, working, (comm_passes + ep_rerun) * one_pass_ep,
                     cp_comm, expert_forward, waited, paired_waited, weight_grads)


class SelectiveRerun(NamedTuple):
    """What selective recompute's modules run again in one layer's backward pass."""

    compute_s: object
    """Forward kernels re-run (GEMMs, their FP8 casts, elementwise passes)."""
    tp_collectives: float
    """Tensor-parallel collectives of s b h values the re-run forward repeats, each an
    all-reduce or, with sequence parallelism, an all-gather / reduce-scatter pair (0.5: only
    the all-gather of a pair)."""


def _selective_rerun(block: TransformerBlock, modules: frozenset[RecomputeModule], *, g, k,
                     core_fwd, weights_s, sp: bool, tp, tokens_hidden,
                     expert_forward, elementwise_fwd=0.0,
                     activation_extra_s=0.0) -> SelectiveRerun:
    """The forward work each recompute module repeats (Megatron-Core @d98e8a64, the modules'
    checkpoints; `RecomputeModule`): core_attn the attention core (torchtitan's per-op policy,
    priced through the same module, re-runs every other matmul instead: the framework profile's
    selective_recompute_attention and selective_recompute_gemm_share); layernorm two norm
    passes (read and write s b h values each); mla_up_proj MLA's query and key-value up
    projections and RoPE (read and write Q and K); mlp / shared_experts the tensor-parallel
    MLP's GEMMs, activation and its one TP collective; moe the routed experts' forward and
    router (the dispatch and combine are counted by the caller) and the shared experts;
    moe_act the expert activation (read the first GEMM's output, write its product; with
    `activation_extra_s`, the eager ops the checkpoint runs before it: a clamped GLU's). Where the
    framework's policy also re-runs every memory-bound op (torchtitan's per-op policy:
    selective_recompute_elementwise), core_attn repeats `elementwise_fwd`, the layer's forward
    elementwise seconds, and its TP all-gathers (all-reduces without sequence parallelism)."""
    M = RecomputeModule
    v, moe = k.value_bytes, block.moe
    shard = tp if sp else 1
    compute, collectives = 0 * tp, 0
    if M.CORE_ATTN in modules:
        compute = compute + core_fwd * k.selective_attention + k.selective_gemm_share * weights_s
        if k.selective_elementwise:
            # Every op not in the policy's save list: the forward's memory-bound ops, and its
            # TP collectives but the reduce-scatters it saves (torchtitan _save_list @4d88a8a44
            # holds _c10d_functional.reduce_scatter_tensor): with sequence parallelism the
            # all-gathers, half of each all-gather / reduce-scatter pair; without, the
            # all-reduces.
            compute = compute + elementwise_fwd
            tp_ops = transformer_layer_tp_collectives(tp_mlp=bool(block.tp_ffn))
            collectives += tp_ops * (0.5 if sp else 1.0)
    if M.LAYERNORM in modules:
        compute = compute + k.traffic_s(2 * v * block.norms_per_layer * tokens_hidden / shard)
    if M.MLA_UP_PROJ in modules and block.mla is not None:
        up = g.projections[1:3]             # (down, q up, kv up, output): see LayerGemms
        rope = 2 * v * sum(x.m * x.n * x.batch for x in up)
        compute = compute + k.linear_s(up) + k.quantize_s(up, backward=False) + k.traffic_s(rope)
    dense_mlp = M.MLP in modules if moe is None else bool({M.SHARED_EXPERTS, M.MOE} & modules)
    if dense_mlp and g.mlp:
        # The activation reads the first GEMM's output(s) and writes the second's input.
        act = (3 if block.mlp.gated else 2) * v * g.mlp[-1].m * g.mlp[-1].k * g.mlp[-1].batch
        compute = compute + (k.linear_s(g.mlp) + k.quantize_s(g.mlp, backward=False)
                             + k.traffic_s(act))
        collectives += 1
    if moe is not None and M.MOE in modules:
        compute = compute + expert_forward + k.gemms_s((g.router,))
    elif moe is not None and M.MOE_ACT in modules and g.experts:
        fc2 = g.experts[-1]
        act = (3 if block.mlp.gated else 2) * v * fc2.m * fc2.k * fc2.batch
        compute = compute + k.traffic_s(act) + activation_extra_s
    return SelectiveRerun(compute, collectives)


def _expert_dispatch_s(*, tokens_per_rank, pairs, top_k: int, hidden: int, imbalance: float,
                       ep, etp, k: _Kernels, cluster: ClusterSpec, num_experts=None,
                       router_groups=None, router_group_topk=None):
    """`expert_parallel.expert_dispatch_s` on this cluster: EP ranks etp apart (the expert
    rank order tp-ep-dp-pp), expert-TP ranks consecutive."""
    node = cluster.nvlink_gpus
    # The flex backends' NVLink domains: DeepEP forwards inside at most NUM_MAX_NVL_PEERS = 8
    # GPUs of one host (csrc/kernels/configs.cuh), HybridEP across the NVLink domain (MNNVL;
    # Megatron-Core transformer_config.py: "only hybridep backend supports the MNNVL case").
    dispatcher = np.asarray(k.dispatcher)
    deepep = strided_placement(ep, etp, min(cluster.gpus_per_node, DEEPEP_NVL_PEERS_MAX))
    hybrid = strided_placement(ep, etp, node)
    is_hybrid = dispatcher == MOE_DISPATCHER_ORDER.index(MoeDispatcher.FLEX_HYBRIDEP)
    flex_group = Group(size=ep, ranks_per_node=np.where(is_hybrid, hybrid.ranks_per_node,
                                                       deepep.ranks_per_node),
                       num_nodes=np.where(is_hybrid, hybrid.num_nodes, deepep.num_nodes))
    return expert_dispatch_s(tokens_per_rank=tokens_per_rank, pairs=pairs, top_k=top_k,
                             hidden=hidden, imbalance=imbalance, value_bytes=k.value_bytes,
                             ep=ep, etp=etp, ep_group=strided_placement(ep, etp, node),
                             etp_group=tp_placement(etp, node), net=cluster.network,
                             flex=dispatcher != MOE_DISPATCHER_ORDER.index(MoeDispatcher.ALLTOALL),
                             flex_group=flex_group, num_experts=num_experts,
                             router_groups=router_groups, router_group_topk=router_group_topk)


def _evoformer(block: EvoformerBlock, *, seq_len, mb, tp, sp: bool, rc: Recompute,
               k: _Kernels, place: Group, cluster: ClusterSpec, **_) -> BlockCost:
    e, flash = block.shape, block.attention.fused
    gemms = evoformer_block_gemms(e, num_residues=seq_len, micro_batch=mb, tp=tp)
    traffic = evoformer_block_elementwise_bytes(e, num_residues=seq_len, micro_batch=mb, tp=tp,
                                                sequence_parallel=sp, flash=flash,
                                                bytes_per_value=k.value_bytes)
    no_softmax = evoformer_block_elementwise_bytes(e, num_residues=seq_len, micro_batch=mb,
                                                   tp=tp, sequence_parallel=sp, flash=True,
                                                   bytes_per_value=k.value_bytes)
    forward = k.gemms_s(gemms) + k.traffic_s(traffic)
    backward = (k.gemms_s(gemms, backward=True)
                + BACKWARD_ELEMENTWISE_RATIO * k.traffic_s(traffic))
    elements = evoformer_block_tp_allreduce_elements(e, num_residues=seq_len, micro_batch=mb)
    one_pass_comm = _tp_collective_s(elements, sequence_parallel=sp, place=place,
                                     cluster=cluster, value_bytes=k.value_bytes)
    passes = tp_passes(rc)
    if rc is Recompute.FULL:
        recompute = forward
    elif rc is Recompute.SELECTIVE:
        recompute = k.traffic_s(traffic - no_softmax)
    else:
        recompute = 0 * forward
    def stored(recompute):
        return evoformer_block_activation_bytes(
            e, num_residues=seq_len, micro_batch=mb, tp=tp, sequence_parallel=sp,
            recompute=recompute, flash=flash, bytes_per_value=k.value_bytes)

    activations = stored(rc)
    R = seq_len
    output = mb * (e.num_msa_rows * R * e.msa_dim + R * R * e.pair_dim) + 0 * tp
    return BlockCost(forward, backward, recompute, passes * one_pass_comm, activations, output,
                     stored(Recompute.NONE) - activations)


def _embedding(block: EmbeddingBlock, *, seq_len, mb, tp, sp: bool, rc: Recompute,
               k: _Kernels, place: Group, cluster: ClusterSpec, **_) -> BlockCost:
    tokens_hidden = seq_len * mb * block.hidden
    # Gather rows and write them (and the dropout mask); the backward scatters the gradients.
    traffic = 2 * k.value_bytes * tokens_hidden
    forward = k.traffic_s(traffic) + 0 * tp
    backward = BACKWARD_ELEMENTWISE_RATIO * forward
    # Vocabulary-parallel embedding: one all-reduce (reduce-scatter with sequence
    # parallelism) of its output in the forward pass (Megatron-LM VocabParallelEmbedding).
    collective = Collective.REDUCE_SCATTER if sp else Collective.ALL_REDUCE
    tp_comm = comm.collective_time_s(collective, tokens_hidden * k.value_bytes, place,
                                     cluster.network)
    activations = embedding_activation_bytes(seq_len=seq_len, micro_batch=mb,
                                             hidden=block.hidden, dropout=block.dropout, tp=tp,
                                             sequence_parallel=sp)
    return BlockCost(forward, backward, 0 * forward, tp_comm, activations, tokens_hidden + 0 * tp)


def _norm(block: NormBlock, *, seq_len, mb, tp, sp: bool, rc: Recompute, k: _Kernels,
          place: Group, cluster: ClusterSpec, **_) -> BlockCost:
    tokens_hidden = seq_len * mb * block.hidden
    shard = tp if sp else 1
    forward = k.traffic_s(2 * k.value_bytes * tokens_hidden / shard) + 0 * tp
    activations = k.value_bytes * tokens_hidden / shard + 0 * tp   # the norm's input
    return BlockCost(forward, BACKWARD_ELEMENTWISE_RATIO * forward, 0 * forward, 0 * forward,
                     activations, tokens_hidden + 0 * tp)


def _output(block: OutputBlock, *, seq_len, mb, tp, sp: bool, rc: Recompute, k: _Kernels,
            place: Group, cluster: ClusterSpec, **_) -> BlockCost:
    h, V = block.hidden, block.vocab_size
    logits = output_layer_gemm(seq_len=seq_len, micro_batch=mb, hidden=h, vocab_size=V, tp=tp)
    gemms = [logits]
    traffic_fwd = cross_entropy_bytes(seq_len=seq_len, micro_batch=mb, vocab_size=V, tp=tp,
                                      backward=False)
    traffic_bwd = cross_entropy_bytes(seq_len=seq_len, micro_batch=mb, vocab_size=V, tp=tp,
                                      backward=True)
    if block.transform_norm is not None:   # BERT's dense transform + norm, replicated
        gemms.append(Gemm(seq_len * mb, h, h))
        traffic_fwd = traffic_fwd + 2 * k.value_bytes * seq_len * mb * h
    # The logits GEMM: bf16, or FP8 where the run puts the output layer in FP8 (with its
    # quantization, like the transformer layers' linear layers).
    fp8_gemms = gemms[:1] if k.fp8_output_layer else []
    bf16_gemms = gemms[len(fp8_gemms):]
    gemms_s = k.gemms_s(bf16_gemms) + k.linear_s(fp8_gemms)
    forward = gemms_s + k.quantize_s(fp8_gemms, backward=False) + k.traffic_s(traffic_fwd)
    backward = (k.gemms_s(bf16_gemms, backward=True) + k.linear_s(fp8_gemms, backward=True)
                + k.quantize_s(fp8_gemms, backward=True)
                + k.traffic_s(traffic_bwd))
    # The column-parallel output layer gathers its input with sequence parallelism (and
    # reduce-scatters the gradient); without it, its input gradient is all-reduced.
    tokens_hidden = seq_len * mb * h
    tp_comm = _tp_collective_s(tokens_hidden, sequence_parallel=sp, place=place,
                               cluster=cluster, value_bytes=k.value_bytes)
    activations = output_activation_bytes(
        seq_len=seq_len, micro_batch=mb, hidden=h, vocab_size=V, tp=tp, sequence_parallel=sp,
        final_norm=False, bytes_per_value=k.value_bytes,
        input_bytes=k.linear_input_bytes if k.fp8_output_layer else k.value_bytes)
    if k.framework.loss_keeps_logits:
        activations = activations + returned_logits_bytes(
            seq_len=seq_len, micro_batch=mb, vocab_size=V, tp=tp, bytes_per_value=k.value_bytes)
    # PyTorch's eager cross entropy holds more fp32 copies of the logits at the start of the
    # backward (a peak of the last stage's, while the kept activations are all alive).
    working = 0 * tp
    if k.eager_loss:
        working = eager_cross_entropy_working_bytes(seq_len=seq_len, micro_batch=mb,
                                                    vocab_size=V, tp=tp)
    weight_grads = (k.gemms_s(weight_gradients(bf16_gemms))
                    + k.linear_s(weight_gradients(fp8_gemms)))
    return BlockCost(forward, backward, 0 * forward, tp_comm, activations, 0 * tp,
                     recompute_working_bytes=working, weight_grad_s=weight_grads)


def _mtp(block: MtpBlock, *, seq_len, mb, tp, sp: bool, rc: Recompute, k: _Kernels,
         place: Group, cluster: ClusterSpec, ep, etp, cp: ContextParallel,
         modules: frozenset[RecomputeModule] = DEFAULT_RECOMPUTE_MODULES) -> BlockCost:
    """A multi-token-prediction module: the 2h -> h projection of the two normalised inputs,
    one transformer layer, and one more pass through the (shared) output layer and loss
    (DeepSeek-V3, arXiv:2412.19437, Sec. 2.2)."""
    kw = dict(seq_len=seq_len, mb=mb, tp=tp, sp=sp, rc=rc, k=k, place=place, cluster=cluster)
    layer = _transformer(block.layer, **kw, ep=ep, etp=etp, cp=cp, modules=modules)
    head = _output(OutputBlock(vocab_size=block.vocab_size, hidden=block.hidden), **kw)
    h = block.hidden
    projection = Gemm(seq_len * mb, h / tp, 2 * h)        # column-parallel, like fc1
    forward = k.gemms_s([projection])
    # The projection input (two normalised h-vectors per token) is kept for its backward.
    kept = k.value_bytes * seq_len * mb * 2 * h / (tp if sp else 1)
    parts = (layer, head)
    return BlockCost(
        forward_s=sum(p.forward_s for p in parts) + forward,
        backward_s=sum(p.backward_s for p in parts) + k.gemms_s([projection], backward=True),
        recompute_s=layer.recompute_s, tp_comm_s=layer.tp_comm_s + head.tp_comm_s,
        activation_bytes=layer.activation_bytes + head.activation_bytes + kept,
        output_elements=seq_len * mb * h + 0 * tp,
        recompute_working_bytes=layer.recompute_working_bytes, ep_comm_s=layer.ep_comm_s,
        cp_comm_s=layer.cp_comm_s, expert_forward_s=layer.expert_forward_s,
        host_wait_s=layer.host_wait_s, paired_host_wait_s=layer.paired_host_wait_s,
        weight_grad_s=layer.weight_grad_s + head.weight_grad_s
        + k.gemms_s(weight_gradients([projection])))


_BY_KIND = {"transformer": _transformer, "evoformer": _evoformer, "embedding": _embedding,
            "norm": _norm, "output": _output, "mtp": _mtp}


def block_cost(block, *, training: TrainingSpec, cluster: ClusterSpec,
               framework: FrameworkProfile, tp, mb, sequence_parallel: bool,
               recompute: Recompute, place: Group, ep=1, etp=1, cp=1,
               cp_comm: CpComm = CpComm.P2P, cp_a2a=1, dispatcher=0, cuda_graphs=0,
               recompute_modules: frozenset[RecomputeModule] = DEFAULT_RECOMPUTE_MODULES
               ) -> BlockCost:
    """Costs of `block` at arrays of tp, micro-batch, ep, etp, cp, cp_a2a, MoE dispatcher
    (index into MoeDispatcher) and CUDA graphs (index into CudaGraphs) values (one SP,
    recompute and CP communication setting). Every block sees s / cp tokens per sequence.
    `recompute_modules`: what selective recompute re-runs in a transformer layer
    (`RecomputeModule`)."""
    tp = np.asarray(tp, dtype=float)
    mb = np.asarray(mb, dtype=float)
    ep = np.asarray(ep, dtype=float) + 0 * tp
    etp = np.asarray(etp, dtype=float) + 0 * tp
    context = ContextParallel(size=np.asarray(cp, dtype=float) + 0 * tp,
                              seq_len=training.seq_len, kind=cp_comm, a2a=cp_a2a)
    if getattr(block, "keep_bf16", False) and training.precision is Precision.FP8:
        training = _bf16_training(training)
    graphs = np.asarray(cuda_graphs) + 0 * tp.astype(int)
    k = _Kernels(cluster, training, framework,
                 dispatcher=np.asarray(dispatcher) + 0 * tp.astype(int),
                 layer_graphs=graphs == CUDA_GRAPHS_ORDER.index(CudaGraphs.LAYER),
                 full_graph=graphs == CUDA_GRAPHS_ORDER.index(CudaGraphs.FULL_ITERATION),
                 sinks=getattr(block, "attention_sinks", False))
    # An Evoformer's pair representation has no context parallelism (a rule): whole sequence.
    local = training.seq_len if block.kind == "evoformer" else training.seq_len / context.size
    return _BY_KIND[block.kind](block, seq_len=local, mb=mb, tp=tp,
                                sp=sequence_parallel, rc=recompute, k=k, place=place,
                                cluster=cluster, ep=ep, etp=etp, cp=context,
                                modules=recompute_modules)


def block_model_flops(block, *, seq_len: int) -> float:
    """Forward FLOPs of one block for one sequence on one GPU (no TP): the MFU numerator's
    share, counting every GEMM including attention scores (Narayanan et al. 2021, Sec. 5.1)."""
    if isinstance(block, TransformerBlock):
        return float(transformer_layer_forward_flops(layer_gemms(block, seq_len=seq_len)))
    if isinstance(block, EvoformerBlock):
        return float(sum(gemm_flops(x) for x in evoformer_block_gemms(
            block.shape, num_residues=seq_len, micro_batch=1, tp=1)))
    if isinstance(block, MtpBlock):
        h = block.hidden
        return (block_model_flops(block.layer, seq_len=seq_len)
                + gemm_flops(Gemm(seq_len, h, 2 * h))
                + block_model_flops(OutputBlock(vocab_size=block.vocab_size, hidden=h),
                                    seq_len=seq_len))
    if isinstance(block, OutputBlock):
        flops = gemm_flops(output_layer_gemm(seq_len=seq_len, micro_batch=1, hidden=block.hidden,
                                             vocab_size=block.vocab_size, tp=1))
        if block.transform_norm is not None:
            flops += gemm_flops(Gemm(seq_len, block.hidden, block.hidden))
        return float(flops)
    return 0.0


def layer_gemms(block: TransformerBlock, *, seq_len: int):
    """One sequence's GEMMs of a transformer layer on one GPU (no parallelism, no imbalance)."""
    return transformer_layer_gemms(seq_len=seq_len, micro_batch=1, hidden=block.hidden,
                                   num_heads=block.num_heads, num_kv_heads=block.kv_heads,
                                   head_dim=block.dim_per_head, ffn_hidden=block.tp_ffn,
                                   mlp=block.mlp, tp=1, mla=block.mla, moe=block.moe)
