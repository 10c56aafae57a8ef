"""FLOPs and compute time: matrix multiplies at an achieved efficiency, memory-bound kernels
at an achieved HBM bandwidth.

Symbols: s sequence length, b micro-batch, h hidden, a heads, g key/value heads, d head dim,
f ffn hidden, V vocabulary, t tensor-parallel size, L layers, B global batch (sequences).
Numeric arguments may be numpy arrays; enum arguments are scalars.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from cost_models.enums import AttentionKind, LoadBalancing, MlpKind, NormKind, PositionKind
from cost_models.units import BYTES_16BIT, BYTES_FP32, BYTES_MASK

BACKWARD_ELEMENTWISE_RATIO = 1.5
"""An elementwise op reads one tensor and writes one in the forward pass; its backward reads the
incoming gradient and the saved tensor and writes one gradient: three tensors for two."""

FUSED_ROTARY_BYTES_PER_ELEMENT = 2 * BYTES_16BIT
"""A fused rotary-embedding kernel reads and writes each query and key value once, in 16 bits
(forward; x BACKWARD_ELEMENTWISE_RATIO backward)."""


class Gemm(NamedTuple):
    """A (batched) matrix multiply [m x k] @ [k x n], `batch` times, on one GPU."""

    m: object
    n: object
    k: object
    batch: object = 1


def gemm_flops(g: Gemm):
    """FLOPs of one GEMM: 2 m n k per batch entry (one multiply and one add per MAC)."""
    return 2 * g.m * g.n * g.k * g.batch


ROOFLINE_SHARPNESS = 6
"""How sharply a GEMM turns from memory- to compute-bound: time = (compute^p + memory^p)^(1/p),
1.12x the larger of the two where they meet (a kernel at the ridge keeps neither its tensor
cores nor its HBM busy all the time). Measured on the H100 grid (bench/fit_gemm_shape.py):
p 6 fits 567 shapes best (log RMS 0.073; max(), p infinite, 0.075) and leaves the GEMMs of
256 tokens with wide weights (routed experts) 1% off, not 8% fast."""


def gemm_time_s(g: Gemm, *, peak_flops: float, peak_fraction: float, half_efficiency_k: float,
                fill_dim: float, hbm_bytes_per_s: float, hbm_fraction: float,
                bytes_per_value: int = BYTES_16BIT, shape_loss_flops: float | None = None,
                fill_batch: bool = True, roofline_sharpness: float = ROOFLINE_SHARPNESS):
    """Seconds one GEMM takes: the roofline of its FLOPs and its HBM traffic.

    Ref: Williams et al. 2009 (roofline): FLOPs / attainable FLOP/s against bytes / attainable
    bandwidth, joined as `roofline_sharpness` says (`ROOFLINE_SHARPNESS`, measured); traffic
    is reading A and B and writing C once. The compute side is FLOPs / (datasheet peak x
    `peak_fraction`, what large GEMMs reach inside a training step) times two shape losses,
    measured on kernels
    (bench/fit_gemm_shape.py on an H100 grid of m 256-16,384 and n, k 512-16,384,
    bench/data/kernels_h100_gemm_grid.json):
    - a short reduction loop: each output tile's prologue and epilogue against a loop as long as
      k, (1 + `half_efficiency_k` / k);
    - filling the GPU: too few output tiles for its SMs, which split-K and stream-K kernels
      offset with a long k, (1 + `fill_dim`^2.5 / (batch m n sqrt(k))); a batched GEMM (one
      kernel, torch._grouped_mm's experts) fills the GPU with all its entries' tiles, one whose
      entries run as kernels of their own (`fill_batch` False: Transformer Engine's grouped
      linear, a cuBLAS GEMM per expert) with one entry's. The loss is 1 at m = n = k =
      `fill_dim`.
    The tokens m of a wide GEMM so cost no rate (H100: 1,024 tokens x 9216 x 12288 run as fast
    as 8,192), unlike a rule on min(m, n, k).

    For a narrower format (FP8, FP4) pass `shape_loss_flops`, the bf16 attainable rate: the
    short-loop loss is idle time that does not shrink when the format doubles the MMA rate, so
    it is paid at the bf16 rate; filling scales with the format's rate. The format's speed-up
    over bf16 so falls with k, not with the tokens of a wide GEMM. Measured on an H100 (kernel
    times from CUDA-graph replays, bench/data/kernels_h100_fp8_shapes.json): FP8 over bf16
    1.4-1.6x at k 512-1024, 1.7-2.1x at k 2048-16384 whatever the tokens (1,024-16,384).
    """
    flops = gemm_flops(g)
    rate = peak_flops * peak_fraction
    loss_rate = rate if shape_loss_flops is None else shape_loss_flops
    fill = 1 + fill_dim ** 2.5 / ((g.batch if fill_batch else 1) * g.m * g.n * np.sqrt(g.k))
    compute_s = flops * (1 / rate + half_efficiency_k / (g.k * loss_rate)) * fill
    traffic = bytes_per_value * (g.m * g.k + g.k * g.n + g.m * g.n) * g.batch
    memory_s = traffic / (hbm_bytes_per_s * hbm_fraction)
    return (compute_s ** roofline_sharpness + memory_s ** roofline_sharpness) ** (
        1 / roofline_sharpness)


def backward_gemms(g: Gemm) -> tuple[Gemm, Gemm]:
    """The backward pass of C = A B ([m x k] @ [k x n]): the input gradient dA = dC B^T
    ([m x n] @ [n x k], reducing over n) and the weight gradient dB = A^T dC ([k x m] @
    [m x n], reducing over the tokens m), each of the forward's FLOPs (Narayanan et al. 2021,
    arXiv:2104.04473, Sec. 5.1: "the backward pass requires double the number of FLOPs")."""
    return Gemm(g.m, g.k, g.n, g.batch), Gemm(g.k, g.n, g.m, g.batch)


def low_precision_gemm_efficiency(speedup: float, *, gemms, peak_ratio: float,
                                  half_efficiency_k: float, fill_dim: float) -> float:
    """A low-precision recipe's `fp8_gemm_efficiency` (its GEMMs' share of their peak over
    bf16's share of its peak, at large size) from a measured speed-up over bf16 of `gemms`
    together, with `peak_ratio` = the format's peak / bf16's: the value at which
    `gemm_time_s` (compute-bound, shape loss paid at the bf16 rate) gives that speed-up,
    found by bisection (the speed-up grows with it). Transformer Engine's GEMM profile of a
    5B layer (docs/examples/gemm_profiling) gives the presets' speed-ups.
    """
    kw = dict(half_efficiency_k=half_efficiency_k, fill_dim=fill_dim, hbm_bytes_per_s=np.inf,
              hbm_fraction=1.0)
    bf16 = sum(gemm_time_s(g, peak_flops=1.0, peak_fraction=1.0, **kw) for g in gemms)

    def speedup_at(efficiency):
        return bf16 / sum(gemm_time_s(g, peak_flops=peak_ratio, peak_fraction=efficiency,
                                      shape_loss_flops=1.0, **kw) for g in gemms)
    low, high = 0.05, 4.0
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if speedup_at(mid) < speedup else (low, mid)
    return (low + high) / 2


def memory_bound_time_s(traffic_bytes, *, hbm_bytes_per_s: float, hbm_fraction: float):
    """Seconds an elementwise or normalisation kernel takes: its HBM traffic at the achieved
    bandwidth (Williams et al. 2009, the memory-bound side of the roofline)."""
    return traffic_bytes / (hbm_bytes_per_s * hbm_fraction)


class LayerGemms(NamedTuple):
    """The forward GEMMs of one transformer layer on one rank."""

    projections: tuple[Gemm, ...]
    """Attention weight GEMMs: QKV and output, or MLA's down, up and output projections."""
    scores: Gemm
    """Q K^T, one per (micro-batch sample, local head)."""
    attend: Gemm
    """softmax(Q K^T) V."""
    mlp: tuple[Gemm, ...]
    """The tensor-parallel MLP: the dense one, or an MoE layer's shared experts (may be empty)."""
    experts: tuple[Gemm, ...]
    """The routed experts' grouped GEMMs on this rank (empty for a dense layer)."""
    router: Gemm | None

    def dense(self) -> tuple[Gemm, ...]:
        """Weight GEMMs outside the attention core and the routed experts."""
        return self.projections + self.mlp + ((self.router,) if self.router is not None else ())

    def all(self) -> tuple[Gemm, ...]:
        return self.dense() + (self.scores, self.attend) + self.experts


class MlaDims(NamedTuple):
    """Multi-head latent attention (DeepSeek-V2, arXiv:2405.04434, Sec. 2.1.2)."""

    q_lora_rank: int
    """0: queries are one h x a(d_nope + d_rope) matrix."""
    kv_lora_rank: int
    qk_rope_head_dim: int
    v_head_dim: int


class MoeDims(NamedTuple):
    """The routed experts of an MoE layer."""

    num_experts: int
    top_k: int
    expert_ffn_hidden: int


DROPLESS_IMBALANCE = {LoadBalancing.AUX_LOSS: 1.52, LoadBalancing.EXPERT_BIAS: 1.04,
                      LoadBalancing.FORCED: 1.0}
"""Tokens of the busiest expert over the mean with dropless routing: 1 + MaxVio_global of
Wang et al. 2024 (arXiv:2408.15664), Table 2, 3B model: 0.52 with the auxiliary loss, 0.04
loss-free. Per expert; an EP rank holding several experts is at most this far off."""


def routing_imbalance(balancing: LoadBalancing, capacity_factor: float | None) -> float:
    """Tokens the busiest expert-parallel rank processes over the mean: the measured dropless
    imbalance of the balancing method, capped by the capacity factor under token-drop routing
    (an expert takes at most capacity_factor x its even share; Fedus et al. 2022, Switch
    Transformer, arXiv:2101.03961, Sec. 2.2)."""
    natural = DROPLESS_IMBALANCE[balancing]
    return natural if capacity_factor is None else min(capacity_factor, natural)


def expert_tokens_per_rank(tokens_per_rank, *, top_k: int, etp, imbalance):
    """Token-expert pairs one rank's experts process per micro-batch.

    Each of the ep ranks of an expert-parallel group sends its T tokens to top_k experts; with
    the E experts spread evenly over the group a rank receives T * top_k pairs on average, times
    the routing imbalance on the busiest rank (dropless), and the expert-tensor-parallel
    all-gather makes each rank of an etp group process the pairs of all etp of them
    (Megatron-Core MoEAlltoAllTokenDispatcher; Liu et al. 2025, arXiv:2504.14960, Sec. 3).
    """
    return tokens_per_rank * top_k * imbalance * etp


def transformer_layer_gemms(
    *, seq_len, micro_batch, hidden: int, num_heads: int, num_kv_heads: int, head_dim: int,
    ffn_hidden: int, mlp: MlpKind, tp, mla: MlaDims | None = None, moe: MoeDims | None = None,
    tokens_per_rank=None, ep=1, etp=1, imbalance=1.0,
) -> LayerGemms:
    """The forward GEMMs of one transformer layer on one of t tensor-parallel ranks.

    Ref: Narayanan et al. 2021 (arXiv:2104.04473), Sec. 5.1 and Appendix: QKV 6 b s h^2,
    attention scores 2 b s^2 h, attention over values 2 b s^2 h, output 2 b s h^2, MLP
    16 b s h^2 FLOPs; summed: 24 b s h^2 + 4 b s^2 h. Megatron-LM's sharding (Shoeybi et al.
    2019, Sec. 3) divides every term by t. GQA shrinks K and V to g*d columns; SwiGLU's
    gate adds one h x f matrix. `ffn_hidden` is the tensor-parallel MLP (an MoE layer's shared
    experts; 0 for none).
    MLA (`mla`; DeepSeek-V2 Eq. 9-19, Megatron-Core MLASelfAttention): the down projections
    run whole on every TP rank, the up and output projections are sharded; scores use
    d_nope + d_rope per head, values d_v.
    MoE (`moe`; Jiang et al. 2024, arXiv:2401.04088): an h x E router on the rank's
    `tokens_per_rank` tokens (s b / t with sequence parallelism), and grouped GEMMs over the
    E / ep local experts, each expert seeing its share of `expert_tokens_per_rank` rows and
    f / etp columns.
    """
    s, b, h, t = seq_len, micro_batch, hidden, tp
    tokens = s * b
    local_heads = num_heads / t
    num_in = 2 if mlp.gated else 1
    if mla is None:
        q_dim, kv_dim = num_heads * head_dim, num_kv_heads * head_dim
        projections = (Gemm(tokens, (q_dim + 2 * kv_dim) / t, h), Gemm(tokens, h, q_dim / t))
        qk_dim, v_dim = head_dim, head_dim
    else:
        qk_dim, v_dim = head_dim + mla.qk_rope_head_dim, mla.v_head_dim
        down = mla.q_lora_rank + mla.kv_lora_rank + mla.qk_rope_head_dim
        q_in = mla.q_lora_rank or h
        projections = (
            Gemm(tokens, down, h),                                           # replicated
            Gemm(tokens, num_heads * qk_dim / t, q_in),                      # q up
            Gemm(tokens, num_heads * (head_dim + v_dim) / t, mla.kv_lora_rank),  # kv up
            Gemm(tokens, h, num_heads * v_dim / t))                          # output
    dense_mlp: tuple[Gemm, ...] = ()
    if ffn_hidden:
        dense_mlp = (Gemm(tokens, num_in * ffn_hidden / t, h), Gemm(tokens, h, ffn_hidden / t))
    experts: tuple[Gemm, ...] = ()
    router = None
    if moe is not None:
        mine = tokens if tokens_per_rank is None else tokens_per_rank
        pairs = expert_tokens_per_rank(mine, top_k=moe.top_k, etp=etp, imbalance=imbalance)
        local = moe.num_experts / ep
        f = moe.expert_ffn_hidden / etp
        experts = (Gemm(pairs / local, num_in * f, h, local), Gemm(pairs / local, h, f, local))
        router = Gemm(mine, moe.num_experts, h)
    return LayerGemms(
        projections=projections,
        scores=Gemm(s, s, qk_dim, b * local_heads),
        attend=Gemm(s, v_dim, s, b * local_heads),
        mlp=dense_mlp, experts=experts, router=router)


def transformer_layer_forward_flops(gemms: LayerGemms):
    """Forward FLOPs of one layer on one rank: the sum of its GEMMs (elementwise ops excluded,
    as in Narayanan et al. 2021, Sec. 5.1)."""
    return sum(gemm_flops(g) for g in gemms.all())


def token_copy_bytes(*, copies, pairs, hidden: int, bytes_per_value: int):
    """HBM bytes of `copies` copies of an MoE layer's `pairs` token-expert pairs of `hidden`
    values on one rank: each copy reads them and writes them once (a permutation, a padding)."""
    return copies * 2 * bytes_per_value * pairs * hidden


def moe_elementwise_bytes(*, pairs, hidden: int, expert_ffn_hidden, mlp: MlpKind,
                          bytes_per_value: int, token_copies=2):
    """HBM bytes an MoE layer's memory-bound kernels move in the forward pass on one rank.

    Ref: Megatron-Core moe_utils.permute/unpermute: the permutation reads the rank's tokens and
    writes one copy per routed pair, the unpermutation reads the expert outputs and writes the
    weighted sum back; the expert activation (SwiGLU: read gate and up, write their product;
    GeLU: read and write) runs on each pair's f / etp columns. `pairs` are the token-expert
    pairs this rank handles (`expert_tokens_per_rank`); `token_copies` the copies of them the
    dispatcher makes (`expert_parallel.dispatcher_token_copies`: 2, the permutation and the
    unpermutation).
    """
    v = bytes_per_value
    permute = token_copy_bytes(copies=token_copies, pairs=pairs, hidden=hidden,
                               bytes_per_value=v)
    act = (3 if mlp.gated else 2) * v * pairs * expert_ffn_hidden
    return permute + act


def transformer_layer_elementwise_bytes(
    *, seq_len, micro_batch, hidden: int, num_heads: int, num_kv_heads: int, head_dim: int,
    ffn_hidden: int, mlp: MlpKind, attention: AttentionKind, position: PositionKind,
    dropout: bool, norms_per_layer: int = 2, tp, sequence_parallel: bool,
):
    """HBM bytes the memory-bound kernels of one layer's forward pass move, on one TP rank.

    Ref: the kernels Megatron-LM fuses (Narayanan et al. 2021, Sec. 4.2: bias+GeLU,
    bias+dropout+add, scale+mask+softmax; megatron/core/fusions/), each reading its inputs
    and writing its outputs once in 16 bits, masks in one byte (Korthikanti et al. 2022,
    Sec. 4.1 sizes every one of these tensors):
      each norm              read 2sbh, write 2sbh
      bias-dropout-add (x2)  read 2sbh (output) + 2sbh (residual), write 2sbh (+ sbh mask)
      rotary embedding       read and write Q and K
      bias-GeLU              read 2sbf, write 2sbf (SwiGLU: read 4sbf, write 2sbf)
      scale-mask-softmax     read and write 2as^2b; attention dropout reads 2as^2b and
                             writes 2as^2b plus an as^2b mask (none with flash attention,
                             which keeps the scores on chip)
    Without sequence parallelism the norm and residual kernels run on the full s x h on every
    TP rank; the rest is split over t.
    """
    s, b, h, a, t = seq_len, micro_batch, hidden, num_heads, tp
    sbh = s * b * h
    mask = BYTES_MASK if dropout else 0
    per_token_rows = (
        norms_per_layer * 2 * BYTES_16BIT * sbh                  # norms: read + write
        + 2 * (3 * BYTES_16BIT + mask) * sbh                      # two bias-dropout-add kernels
    )
    rotary = 0
    if position is PositionKind.ROTARY:
        rotary = FUSED_ROTARY_BYTES_PER_ELEMENT * s * b * (num_heads + num_kv_heads) * head_dim
    mlp_act = (3 if mlp.gated else 2) * BYTES_16BIT * s * b * ffn_hidden
    if attention.fused:
        softmax = 0 * s
    else:
        softmax = 2 * BYTES_16BIT * a * s * s * b                 # scale-mask-softmax
        if dropout:
            softmax = softmax + (2 * BYTES_16BIT + BYTES_MASK) * a * s * s * b
    sharded = rotary + mlp_act + softmax
    if sequence_parallel:
        return (per_token_rows + sharded) / t
    return per_token_rows + sharded / t


EAGER_BYTES_PER_ELEMENT = {
    "rmsnorm": (36.0, 92.0),   # per s b h: x.float(), pow, mean, rsqrt, mul, type_as, * weight
    "rotary": (20.4, 21.2),    # per s b (a + a_kv) d: to fp32 complex pairs, x freqs, back
    "kv_repeat": (2.5, 2.5),   # per s b a d of K and V: repeat_kv's copy; its gradient's sum
    "attn_out": (4.0, 0.0),    # per s b h: the attention output's transpose(1, 2).contiguous()
    "swiglu": (10.0, 18.0),    # per s b f: silu(g) * u
    "gelu": (4.0, 6.0),        # per s b f: F.gelu, one native kernel
    "layernorm": (4.0, 6.0),   # per s b h: F.layer_norm, one native kernel
    "residual": (12.0, 0.0),   # per s b h: the two residual adds (their gradient flows on)
    "expert_bias": (12.0, 16.0),   # per pair and h: Megatron-Core's t + b * p per expert, cat
    "glu_clamp": (16.0, 30.0),     # per row and GLU output column: clamp both halves, cat
}
"""HBM bytes per element, (forward, backward), of a Llama block's memory-bound work run as
eager PyTorch ops (no torch.compile), each op one kernel reading its inputs and writing its
output: torchtitan's Llama at 4d88a8a44 (2024-12; models/norms.py RMSNorm, models/llama/
model.py apply_rotary_emb, repeat_kv, FeedForward), counted from PyTorch 2.13's dispatch by
bench/torch_elementwise.py (tests/golden/test_pytorch_measured.py pins them; the norms' per-row
fp32 statistics, under 0.2% at h 512, are left out). GeLU and LayerNorm are one native kernel
each, the fused counts of `transformer_layer_elementwise_bytes` (4 and 1.5 x 4). expert_bias:
Megatron-Core's biased experts (`expert_bias_bytes`); glu_clamp: its clamped GLU
(`glu_clamp_bytes`), counted the same way."""


def _eager_op_bytes(op: str, elements):
    """(forward, backward) HBM bytes of an eager op of `EAGER_BYTES_PER_ELEMENT` on `elements`
    elements of the tensor it scales with."""
    forward, backward = EAGER_BYTES_PER_ELEMENT[op]
    return forward * elements, backward * elements


def expert_bias_bytes(*, pairs, hidden: int):
    """(forward, backward) HBM bytes of adding biased experts' output bias on one rank, where
    the framework adds it in eager PyTorch after the grouped GEMM: `pairs` token-expert pairs of
    `hidden` values.

    Ref: Megatron-Core TEGroupedMLP._apply_bias (megatron/core/transformer/moe/experts.py,
    a329dd6da5 2025-09-22 "Enable bias in expert mlp [gpt-oss 5/5]"): linear_fc2 runs with
    skip_bias_add, then per local expert `t + b * p` (b the expert's bias, p the pairs' routing
    probabilities), torch.cat and .to(dtype); the backward also reduces the bias and
    probability gradients and concatenates the output gradient. Bytes per element counted on
    PyTorch's dispatch (`EAGER_BYTES_PER_ELEMENT["expert_bias"]`, bench/torch_elementwise.py).
    The first grouped linear's bias rides in its GEMM's epilogue, as a dense layer's does.
    """
    return _eager_op_bytes("expert_bias", pairs * hidden)


def glu_clamp_bytes(*, rows, columns):
    """(forward, backward) HBM bytes of clamping a GLU's input as eager PyTorch ops before its
    fused kernel, on one rank: `rows` tokens (or token-expert pairs) of a GLU with `columns`
    output columns (its input has 2 x columns).

    Ref: Megatron-Core weighted_bias_quick_geglu_impl (megatron/core/fusions/
    fused_bias_geglu.py, 2e29a5e1e3 2025-09-09 "Add quick geglu activation for gpt-oss"), the
    expert activation of gpt-oss (Megatron-Bridge's provider: quick_gelu, glu_linear_offset 1,
    activation_func_clamp_value 7, swiglu_limit in the HF config): `x_glu.clamp(max=c)`,
    `x_linear.clamp(-c, c)`, `torch.cat`, then the fused kernel on the copy; the backward
    masks each half's gradient (ge, le, logical_and, where) and concatenates them. Bytes per
    element counted on PyTorch's dispatch (`EAGER_BYTES_PER_ELEMENT["glu_clamp"]`,
    bench/torch_elementwise.py). The SwiGLU kernels clamp inside their fused code
    (fused_bias_swiglu.py clamped_swiglu), which costs nothing apart.
    """
    return _eager_op_bytes("glu_clamp", rows * columns)


def quantization_padding_bytes(*, pairs, hidden: int, bytes_per_value: int = BYTES_16BIT):
    """(forward, backward) HBM bytes of copying an MoE layer's dispatched tokens into a buffer
    whose per-expert rows a quantized (FP8/FP4) grouped GEMM can take, and its output back, on
    one rank: `pairs` token-expert pairs of `hidden` values, each copy reading and writing them
    once (forward: the input padded, the output unpadded; backward: the same for their
    gradients).

    Ref: Megatron-Core TEGroupedMLP.forward (megatron/core/transformer/moe/experts.py
    @d98e8a64) runs Transformer Engine's Fp8Padding on the permuted tokens and Fp8Unpadding
    on the output under FP8 or FP4 unless the router, HybridEP or NCCL-EP padded them already
    (moe_utils.skip_routed_expert_padding); Fp8Padding copies every row into the padded buffer
    whenever any expert's count is not a multiple of the recipe's alignment, as dropless routing
    leaves them (transformer_engine/pytorch/module/fp8_padding.py, fp8_unpadding.py:
    fused_multi_row_padding / fused_multi_row_unpadding, forward and backward @d0067d0da).
    """
    copies = token_copy_bytes(copies=2, pairs=pairs, hidden=hidden,
                              bytes_per_value=bytes_per_value)
    return copies, copies


def eager_layer_elementwise_bytes(
    *, seq_len, micro_batch, hidden: int, num_heads: int, num_kv_heads: int, head_dim: int,
    ffn_hidden: int, mlp: MlpKind | None, norm: NormKind, position: PositionKind,
    norms_per_layer: int = 2, tp, sequence_parallel: bool,
):
    """(forward, backward) HBM bytes of one transformer layer's memory-bound kernels in eager
    PyTorch, on one TP rank: what `transformer_layer_elementwise_bytes` prices as fused kernels
    (Megatron's, or torch.compile's), as torchtitan's Llama block runs them without compile
    (`EAGER_BYTES_PER_ELEMENT`), plus the eager copies fusion avoids: the attention output made
    contiguous, and K and V repeated to every query head for SDPA (GQA). `mlp` None: no dense
    MLP (an MoE layer prices its experts' activation apart). Norms and residual adds run on
    s b h / t with sequence parallelism, on all of it without; the rest is split over t.
    """
    s, b, h, t = seq_len, micro_batch, hidden, tp
    e = EAGER_BYTES_PER_ELEMENT
    sbh = s * b * h
    norm_kind = "rmsnorm" if norm is NormKind.RMSNORM else "layernorm"

    def bytes_of(i):   # i: 0 forward, 1 backward
        rows = (e[norm_kind][i] * norms_per_layer + e["residual"][i]) * sbh
        sharded = e["attn_out"][i] * s * b * num_heads * head_dim
        if position is PositionKind.ROTARY:
            sharded = sharded + e["rotary"][i] * s * b * (num_heads + num_kv_heads) * head_dim
        if num_kv_heads < num_heads:
            sharded = sharded + e["kv_repeat"][i] * 2 * s * b * num_heads * head_dim
        if mlp is not None:
            sharded = sharded + e["swiglu" if mlp.gated else "gelu"][i] * s * b * ffn_hidden
        return (rows + sharded) / t if sequence_parallel else rows + sharded / t

    return bytes_of(0), bytes_of(1)


def complex_rotary_extra_bytes(*, seq_len, micro_batch, num_heads: int, num_kv_heads: int,
                               head_dim: int, tp):
    """(forward, backward) HBM bytes a rotary embedding computed with complex numbers moves
    beyond a fused kernel's, on one TP rank, when the model is compiled: torch.compile leaves
    complex operators to eager kernels (Inductor: "does not support code generation for complex
    operators"; measured on an H100, torchtitan's rotary embedding takes the same time compiled
    and eager: bench/data/kernels_h100_eager.json), so its eager bytes
    (`EAGER_BYTES_PER_ELEMENT["rotary"]`) replace the fused kernel's
    (`FUSED_ROTARY_BYTES_PER_ELEMENT`, as `transformer_layer_elementwise_bytes` charges)."""
    elements = seq_len * micro_batch * (num_heads + num_kv_heads) * head_dim / tp
    eager_fwd, eager_bwd = EAGER_BYTES_PER_ELEMENT["rotary"]
    fused = FUSED_ROTARY_BYTES_PER_ELEMENT
    return ((eager_fwd - fused) * elements,
            (eager_bwd - BACKWARD_ELEMENTWISE_RATIO * fused) * elements)


def attended_keys(seq_len, *, causal: bool, window: int | None = None,
                  chunk: int | None = None):
    """Keys one query attends to, averaged over the sequence.

    Causal: query i sees i + 1 keys, (s + 1) / 2 on average, which a fused kernel exploits by
    skipping masked blocks (Dao 2023, FlashAttention-2, Sec. 3.1.1), ~ s / 2. A sliding window of
    w keys (Beltagy et al. 2020, Longformer; Mistral 7B, arXiv:2310.06825, Sec. 2; gpt-oss's
    alternating layers) caps it: sum_i min(i + 1, w) / s = w - w (w - 1) / (2 s) for w <= s.
    Chunked attention of c tokens (Llama 4's attention_chunk_size, transformers
    modeling_llama4.py: a query sees only the keys of its own block of c positions, causally
    inside it) restarts the count at every block: with s = q c + r, (q c (c + 1) / 2
    + r (r + 1) / 2) / s causal, (q c^2 + r^2) / s not.
    """
    s = np.asarray(seq_len, dtype=float)
    if chunk is not None:
        q, r = np.floor(s / chunk), s - np.floor(s / chunk) * chunk
        if causal:
            return (q * chunk * (chunk + 1) / 2 + r * (r + 1) / 2) / s
        return (q * chunk ** 2 + r ** 2) / s
    if window is not None:
        w = np.minimum(window, s)
        return w - w * (w - 1) / (2 * s) if causal else w
    return s / 2 if causal else s


ATTENTION_REFERENCE_KEYS = 4096
"""Keys per query at which a preset states its attention kernel's share of peak: a causal
8K sequence, where most published long-context kernel benchmarks sit."""

ATTENTION_REFERENCE_HEAD_DIM = 128
"""Head dim at which a preset states its attention kernel's share of peak (Llama, GPT-3)."""


def attention_kernel_fraction(*, keys, head_dim, reference_fraction: float,
                              half_keys: float, half_head_dim: float):
    """Share of peak a fused attention kernel reaches, forward and backward, at `keys`
    attended keys per query (per kernel call) and head dim `head_dim`.

    Ref: Shah et al. 2024 (FlashAttention-3, arXiv:2407.08608), Sec. 3.1: each score costs an
    exponential on the special-function units (3.9 TFLOP/s of them against 989 of bf16
    matmul on H100), work that does not shrink with the head dim: the rate grows as
    d / (d + `half_head_dim`). Each query tile's loop over the keys has a fixed cost (loading
    Q, the masked diagonal tile, writing O and its softmax statistics): the rate grows as
    keys / (keys + `half_keys`). `reference_fraction` is the share at (4096 keys, d 128);
    both halves are GPU data (bench/data/kernels_h100.json, kernels_h200.json;
    bench/fit_attention_rate.py); 0 keeps the rate flat.
    """
    def shape(k, d):
        return k / (k + half_keys) * d / (d + half_head_dim)
    return reference_fraction * shape(keys, head_dim) / shape(ATTENTION_REFERENCE_KEYS,
                                                              ATTENTION_REFERENCE_HEAD_DIM)


def flash_attention_time_s(*, seq_len, micro_batch, num_heads: int, head_dim: int, tp,
                           causal: bool, peak_flops: float, flash_fraction: float,
                           backward: bool, v_head_dim: int | None = None,
                           window: int | None = None, chunk: int | None = None):
    """Seconds a fused attention kernel takes for one layer's core attention on one TP rank.

    Ref: Dao 2023 (FlashAttention-2, arXiv:2307.08691), Sec. 3: the forward pass does the
    2 s^2 d FLOPs of Q K^T and the 2 s^2 d of P V per head on chip (d_qk and d_v apart for MLA);
    the backward does 2.5x that (it recomputes P). Only attended blocks are computed
    (`attended_keys`: half of them for a causal mask). `flash_fraction` is the share of peak
    such kernels reach (cluster data).
    """
    s, b, t = seq_len, micro_batch, tp
    keys = attended_keys(s, causal=causal, window=window, chunk=chunk)
    d_v = head_dim if v_head_dim is None else v_head_dim
    flops = 2 * s * keys * (head_dim + d_v) * b * num_heads / t
    if backward:
        flops = flops * 2.5
    return flops / (peak_flops * flash_fraction)


def attention_sink_backward_s(*, seq_len, micro_batch, num_heads: int, tp, row_s: float):
    """Seconds a fused attention backward adds for a learnable softmax offset (attention
    sinks, gpt-oss) in one layer on one TP rank: `row_s` per query row and head.

    Ref: Transformer Engine `common/fused_attn/fused_attn_f16_arbitrary_seqlen.cu` @d0067d0da
    (set_sink_token / set_dsink_token): cuDNN's backward also returns the offset's gradient,
    one scalar per head summed over every query row of the batch. Measured through cuDNN's
    graph API (`bench/device_kernels.py --sections cudnn`): the backward grows by a time
    proportional to rows x heads and independent of the keys each row attends (a 128-key window
    pays what full causal attention pays), of the head dim and of the sequence length; the
    forward does not change.
    """
    return seq_len * micro_batch * num_heads / tp * row_s


def output_layer_gemm(*, seq_len, micro_batch, hidden: int, vocab_size: int, tp) -> Gemm:
    """The logits GEMM on the last stage: [s b x h] @ [h x V / t] (vocabulary-parallel)."""
    return Gemm(seq_len * micro_batch, vocab_size / tp, hidden)


def cross_entropy_bytes(*, seq_len, micro_batch, vocab_size: int, tp, backward: bool):
    """HBM bytes the vocabulary-parallel cross entropy moves on one TP rank.

    Ref: Megatron-LM megatron/core/tensor_parallel/cross_entropy.py: the forward reads the
    16-bit logits and writes them as fp32 (2 + 4 bytes), reads them for the max and the sum
    of exponentials (4), and rewrites them in place as the softmax (4 + 4); the backward reads
    the softmax (4) and writes the 16-bit gradient (2).
    """
    per_logit = (BYTES_FP32 + BYTES_16BIT) if backward else (
        BYTES_16BIT + BYTES_FP32 + BYTES_FP32 + 2 * BYTES_FP32)
    return per_logit * seq_len * micro_batch * vocab_size / tp


def optimizer_step_bytes_per_param(*, weight_bytes: float, gradient_bytes: float,
                                   optimizer_bytes: float) -> float:
    """HBM bytes the optimizer step moves per parameter it updates.

    Ref: Kingma & Ba 2015 (arXiv:1412.6980), Algorithm 1, as a fused multi-tensor kernel
    (Megatron-LM / apex FusedAdam): read the gradient, read and write every optimizer state
    (fp32 master weights and moments), write the updated working weights.
    """
    return gradient_bytes + 2 * optimizer_bytes + weight_bytes


def megatron_flops_per_iteration(*, global_batch, seq_len, num_layers, hidden, vocab_size,
                                 full_recompute: bool):
    """FLOPs of one training iteration of a Megatron GPT model.

    Ref: Narayanan et al. 2021 (arXiv:2104.04473), Sec. 5.1, Eq. 3 with full recomputation:
    96 B s l h^2 (1 + s/(6h) + V/(16 l h)); without recomputation (model FLOPs, Korthikanti
    et al. 2022, arXiv:2205.05198, Sec. 6, Eq. 7): 72 B s l h^2 (1 + s/(6h) + V/(12 l h)).
    """
    B, s, l, h, V = global_batch, seq_len, num_layers, hidden, vocab_size
    if full_recompute:
        return 96 * B * s * l * h**2 * (1 + s / (6 * h) + V / (16 * l * h))
    return 72 * B * s * l * h**2 * (1 + s / (6 * h) + V / (12 * l * h))


def training_time_s(*, num_tokens, tokens_per_step, step_s):
    """Seconds to train on `num_tokens`: the steps they take, `tokens_per_step` (global batch
    x sequence length) each, times the step time.

    Ref: Narayanan et al. 2021 (arXiv:2104.04473), Sec. 5.1: T / (B s) iterations of Eq. 3's
    FLOPs at X FLOP/s on each of n GPUs, which they round to 8 T P / (n X) with full
    recomputation: GPT-3 175B on 300B tokens on 1024 A100s at 140 TFLOP/s, about 34 days.
    """
    return num_tokens / tokens_per_step * step_s
