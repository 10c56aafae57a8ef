"""One AlphaFold-2 Evoformer block: parameters, forward GEMMs, stored activations, TP traffic.

Ref: Jumper et al. 2021 (doi:10.1038/s41586-021-03819-2), Supplementary Algorithm 6 and
Sec. 1.6, as implemented in OpenFold (aqlaboratory/openfold openfold/model/evoformer.py,
msa.py, outer_product_mean.py, triangular_multiplicative_update.py, triangular_attention.py,
pair_transition.py, primitives.py). Each gated attention has bias-free Q, K, V projections,
a gating projection with bias and an output projection with bias.

Symbols: S MSA rows, R residues (the sequence length of this block), c_m MSA channels,
c_z pair channels, H_m / H_z MSA / pair attention heads of width d, c outer-product-mean
channels, c' triangle-multiplication channels, n transition factor, t tensor-parallel size.
Tensor parallelism (Megatron style) splits heads, transition and projection channels; the
residual streams (S x R x c_m and R x R x c_z) and every LayerNorm stay replicated, so the
pair attention's H_z heads cap t (FastFold, Cheng et al. 2022, arXiv:2203.00854, Sec. 1,
replaced TP with dynamic axial parallelism for this reason).
"""

from __future__ import annotations

from typing import NamedTuple

from cost_models.compute import Gemm
from cost_models.enums import Recompute
from cost_models.parameters import ParamCount
from cost_models.units import BYTES_16BIT, BYTES_FP32


class EvoformerShape(NamedTuple):
    msa_dim: int          # c_m
    pair_dim: int         # c_z
    num_msa_heads: int    # H_m
    num_pair_heads: int   # H_z
    head_dim: int         # d
    outer_dim: int        # c
    tri_mul_dim: int      # c'
    transition_factor: int  # n
    num_msa_rows: int     # S


def _gated_attention_params(c_in: int, heads: int, d: int) -> ParamCount:
    """LayerNorm, Q/K/V without bias, gate with bias, output with bias (OpenFold Attention)."""
    hd = heads * d
    return ParamCount(sharded=3 * c_in * hd + (c_in * hd + hd) + hd * c_in,
                      replicated=2 * c_in + c_in)   # LayerNorm (2 c_in) and output bias


def evoformer_block_params(e: EvoformerShape) -> ParamCount:
    """Parameters of one Evoformer block (1,829,952 with AlphaFold-2's sizes).

    Ref: Jumper et al. 2021, Suppl. Algorithms 7-15; OpenFold's module list (see module doc).
    """
    cm, cz, c, c2, n = e.msa_dim, e.pair_dim, e.outer_dim, e.tri_mul_dim, e.transition_factor
    msa_row = _gated_attention_params(cm, e.num_msa_heads, e.head_dim) + ParamCount(
        sharded=cz * e.num_msa_heads, replicated=2 * cz)          # pair-bias projection, LN_z
    msa_col = _gated_attention_params(cm, e.num_msa_heads, e.head_dim)
    msa_transition = ParamCount(sharded=cm * n * cm + n * cm + n * cm * cm,
                                replicated=2 * cm + cm)
    outer_product_mean = ParamCount(sharded=2 * (cm * c + c) + c * c * cz,
                                    replicated=2 * cm + cz)
    tri_mul = ParamCount(sharded=4 * (cz * c2 + c2) + cz * cz + c2 * cz,
                         replicated=2 * cz + cz + cz + 2 * c2)   # LN_in, two output biases, LN_out
    tri_att = _gated_attention_params(cz, e.num_pair_heads, e.head_dim) + ParamCount(
        sharded=cz * e.num_pair_heads, replicated=0)              # triangle bias projection
    pair_transition = ParamCount(sharded=cz * n * cz + n * cz + n * cz * cz,
                                 replicated=2 * cz + cz)
    return (msa_row + msa_col + msa_transition + outer_product_mean
            + tri_mul + tri_mul + tri_att + tri_att + pair_transition)


def evoformer_block_gemms(e: EvoformerShape, *, num_residues, micro_batch, tp) -> list[Gemm]:
    """The forward GEMMs of one Evoformer block on one TP rank.

    Ref: Jumper et al. 2021, Suppl. Algorithms 7-15. Summed, the FLOPs per sample are
      MSA row attention   10 S R c_m^2 + 4 S R^2 H_m d + 2 R^2 c_z H_m
      MSA column attn.    10 S R c_m^2 + 4 R S^2 H_m d
      MSA transition      4 n S R c_m^2
      outer product mean  4 S R c_m c + 2 S R^2 c^2 + 2 R^2 c^2 c_z
      triangle mult. (x2) 10 R^2 c_z c' + 2 R^2 c_z^2 + 2 R^3 c'
      triangle attn. (x2) 10 R^2 c_z^2 + 4 R^3 H_z d + 2 R^2 c_z H_z
      pair transition     4 n R^2 c_z^2
    all divided by t.
    """
    S, R, b, t = e.num_msa_rows, num_residues, micro_batch, tp
    cm, cz, d, c, c2, n = (e.msa_dim, e.pair_dim, e.head_dim, e.outer_dim, e.tri_mul_dim,
                           e.transition_factor)
    hm, hz = e.num_msa_heads, e.num_pair_heads
    msa_tokens, pair_tokens = b * S * R, b * R * R
    gemms = [
        # MSA row attention with pair bias: Q, K, V, gate; scores over residues; output.
        Gemm(msa_tokens, 4 * hm * d / t, cm),
        Gemm(pair_tokens, hm / t, cz),
        Gemm(R, R, d, b * S * hm / t),
        Gemm(R, d, R, b * S * hm / t),
        Gemm(msa_tokens, cm, hm * d / t),
        # MSA column attention: scores over MSA rows.
        Gemm(msa_tokens, 4 * hm * d / t, cm),
        Gemm(S, S, d, b * R * hm / t),
        Gemm(S, d, S, b * R * hm / t),
        Gemm(msa_tokens, cm, hm * d / t),
        # MSA transition.
        Gemm(msa_tokens, n * cm / t, cm),
        Gemm(msa_tokens, cm, n * cm / t),
        # Outer product mean: project, outer product summed over rows, project to c_z.
        Gemm(msa_tokens, 2 * c / t, cm),
        Gemm(R * c, R * c / t, S, b),
        Gemm(pair_tokens, cz, c * c / t),
    ]
    for _ in range(2):  # triangle multiplication, outgoing and incoming edges
        gemms += [
            Gemm(pair_tokens, 4 * c2 / t, cz),      # a, b projections and their gates
            Gemm(pair_tokens, cz / t, cz),          # output gate
            Gemm(R, R, R, b * c2 / t),              # sum_k a_ik b_jk per channel
            Gemm(pair_tokens, cz, c2 / t),          # output projection
        ]
    for _ in range(2):  # triangle attention, starting and ending node
        gemms += [
            Gemm(pair_tokens, 4 * hz * d / t, cz),
            Gemm(pair_tokens, hz / t, cz),
            Gemm(R, R, d, b * R * hz / t),
            Gemm(R, d, R, b * R * hz / t),
            Gemm(pair_tokens, cz, hz * d / t),
        ]
    gemms += [Gemm(pair_tokens, n * cz / t, cz), Gemm(pair_tokens, cz, n * cz / t)]
    return gemms


def _feature_maps(e: EvoformerShape, num_residues, micro_batch):
    """Elements of one MSA feature map (F = S R c_m) and one pair feature map (P = R^2 c_z)."""
    R, b = num_residues, micro_batch
    return b * e.num_msa_rows * R * e.msa_dim, b * R * R * e.pair_dim


def _attention_probabilities(e: EvoformerShape, num_residues, micro_batch):
    """Elements of the softmax outputs: MSA rows H_m S R^2, columns H_m R S^2, two triangle
    attentions 2 H_z R^3."""
    S, R, b = e.num_msa_rows, num_residues, micro_batch
    return b * (e.num_msa_heads * S * R * R + e.num_msa_heads * R * S * S
                + 2 * e.num_pair_heads * R**3)


def evoformer_block_activation_bytes(
    e: EvoformerShape, *, num_residues, micro_batch, tp, sequence_parallel: bool,
    recompute: Recompute, flash: bool, bytes_per_value: int = BYTES_16BIT,
):
    """Bytes one Evoformer block keeps for its backward pass, per micro-batch, on one TP rank.

    Derived by listing what autograd saves in each sub-module of OpenFold's unfused path, in
    units of F = S R c_m and P = R^2 c_z (the same bookkeeping Korthikanti et al. 2022,
    Sec. 4.1 does for a transformer layer):
      each gated attention   LN input and output (2, replicated); Q, K, V, gate, output and
                             gated output (6, split over heads); its softmax output
      MSA transition         LN input and output (2F); hidden after ReLU (4F, n = 4)
      outer product mean     LN (2F); the two c-channel projections (2 S R c); the R^2 c^2
                             outer product
      triangle mult. (each)  LN_in (2P); projections, gates, a, b, the triangle product and
                             LN_out (10P with c' = c_z)
      pair transition        LN (2P); hidden (4P)
    Replicated: 8F + 12P; split over t: 16F + 36P + 2 S R c + R^2 c^2 + the softmax
    outputs. Selective recompute or a fused attention kernel drops the softmax outputs (a
    fused kernel keeps fp32 log-sum-exp statistics instead); full recompute keeps the block
    input F + P. Sequence (here: residue) parallelism splits the replicated part as well.
    """
    S, R, b, t, v = e.num_msa_rows, num_residues, micro_batch, tp, bytes_per_value
    F, P = _feature_maps(e, R, b)
    if recompute is Recompute.FULL:
        block_input = v * (F + P)
        return block_input / t if sequence_parallel else block_input
    c, c2, cz = e.outer_dim, e.tri_mul_dim, e.pair_dim
    replicated = v * (8 * F + 12 * P)
    tri_mul_scale = c2 / cz                                       # 10P assumes c' = c_z
    sharded = v * (16 * F + (16 + 20 * tri_mul_scale) * P + 2 * b * S * R * c + b * R * R * c * c)
    probs = _attention_probabilities(e, R, b)
    if recompute is Recompute.SELECTIVE:
        scores = 0 * probs
    elif flash:
        scores = BYTES_FP32 * b * (e.num_msa_heads * (S * R + R * S) + 2 * e.num_pair_heads * R * R)
    else:
        scores = v * probs
    sharded = sharded + scores
    if sequence_parallel:
        return (replicated + sharded) / t
    return replicated + sharded / t


def evoformer_block_elementwise_bytes(
    e: EvoformerShape, *, num_residues, micro_batch, tp, sequence_parallel: bool, flash: bool,
    bytes_per_value: int = BYTES_16BIT,
):
    """HBM bytes the memory-bound kernels of one Evoformer block's forward pass move.

    Each of the 12 LayerNorms reads and writes its map; each of the 9 residual updates reads
    two maps and writes one; each gate (sigmoid and product) reads two and writes one; each
    softmax reads and writes its probabilities (none with a fused kernel). Units F and P as in
    `evoformer_block_activation_bytes`: LayerNorms 2 x (4F + 8P), residuals 3 x (3F + 6P),
    gates 3 x (2F + 6P) (two attentions on F; two triangle multiplications with two gates
    each and two triangle attentions on P).
    """
    R, b, t, v = num_residues, micro_batch, tp, bytes_per_value
    F, P = _feature_maps(e, R, b)
    replicated = v * (2 * (4 * F + 8 * P) + 3 * (3 * F + 6 * P))
    sharded = v * 3 * (2 * F + 6 * P)
    if not flash:
        sharded = sharded + 2 * v * _attention_probabilities(e, R, b)
    if sequence_parallel:
        return (replicated + sharded) / t
    return replicated + sharded / t


def evoformer_block_tp_allreduce_elements(e: EvoformerShape, *, num_residues, micro_batch):
    """Elements all-reduced across TP ranks in one block's forward pass: every row-parallel
    output projection (Shoeybi et al. 2019, Sec. 3): three on the MSA stack (3F) and the outer
    product mean plus five pair modules (6P)."""
    F, P = _feature_maps(e, num_residues, micro_batch)
    return 3 * F + 6 * P
