"""FP8 training: the bytes an FP8 value, an FP8 weight and a quantization pass cost.

Linear layers multiply in FP8 and keep everything else in bf16 (`Precision.FP8`). A tensor a
GEMM reads in FP8 is quantized from bf16 first; each GEMM operand is needed in two layouts
(the weight row-wise for the forward, column-wise for the data gradient; an input row-wise
for the forward, column-wise for the weight gradient), and the recipe (`Fp8Recipe`) decides
how many copies that takes and how often the bf16 tensor is read.

Sources (NVIDIA/TransformerEngine docs/features/low_precision_training/ @d0067d0d):
performance_considerations.rst ("Handling transposes", Table 2: Hopper's FP8 tensor cores read
only the row-wise layout, so a transposed copy is made; Blackwell reads both from one copy for
per-tensor scaling), fp8_current_scaling.rst (current scaling reads the tensor twice: amax,
then the cast), fp8_delayed_scaling.rst (one read: the scale comes from earlier steps),
mxfp8/mxfp8.rst (one E8M0 scale per 32 values; row-wise and column-wise blocks differ, so both
copies are quantized from the source), fp8_blockwise_scaling.rst (fp32 scales per 1x128
activation tile and per 128x128 weight tile, both directions kept), nvfp4/nvfp4.rst (NVFP4:
E2M1 with an E4M3 scale per 16 values and an fp32 scale per tensor from its amax; GEMMs in the
TN layout only, so row-wise and column-wise copies are both kept; weights scaled per 16x16
tile; the random Hadamard transform of the weight-gradient operands runs inside their
column-wise cast and is not priced apart).
"""

from __future__ import annotations

from cost_models.enums import Fp8Recipe
from cost_models.units import BYTES_16BIT, BYTES_FP32

BYTES_FP8 = 1
BYTES_FP4 = 0.5
NVFP4_BLOCK = 16
"""Values sharing one 1-byte E4M3 scale in NVFP4's 1D scaling (activations, gradients)."""
NVFP4_WEIGHT_TILE = 16 * 16
"""Values of a 16x16 weight tile sharing one E4M3 scale (NVFP4's default 2D weight scaling)."""
MX_BLOCK = 32
"""Values sharing one 1-byte E8M0 scale in MXFP8 (OCP Microscaling Formats spec v1.0)."""
ACTIVATION_TILE = 128
"""Values of a 1x128 activation tile sharing one fp32 scale in block scaling."""
WEIGHT_TILE = 128 * 128
"""Values of a 128x128 weight tile sharing one fp32 scale in block scaling."""

_AMAX_PASS = {Fp8Recipe.TENSORWISE: True, Fp8Recipe.ROWWISE: True, Fp8Recipe.NVFP4: True}
"""Recipes that read a tensor once for its amax before the pass that casts it (current
scaling, and NVFP4, whose fp32 per-tensor scale comes from the global amax: TE nvfp4.rst;
MXFP8 and FP8 blocks find each block's amax inside the cast kernel, delayed scaling takes
it from the history)."""


def gemm_operand_bytes(recipe: Fp8Recipe) -> float:
    """Bytes per value a low-precision GEMM streams for its operands (their scales aside): 1
    for the FP8 formats, 1/2 for NVFP4's E2M1 (TE nvfp4.rst)."""
    return BYTES_FP4 if recipe is Fp8Recipe.NVFP4 else float(BYTES_FP8)


def fp8_value_bytes(recipe: Fp8Recipe) -> float:
    """Bytes of one FP8 activation value with its share of the scales: 1 for per-tensor and
    per-row scaling (one fp32 per tensor or per row of thousands), 1 + 1/32 for MXFP8, 1 +
    4/128 for block scaling's 1x128 tiles (TE mxfp8.rst, fp8_blockwise_scaling.rst)."""
    if recipe is Fp8Recipe.MXFP8:
        return BYTES_FP8 + 1 / MX_BLOCK
    if recipe is Fp8Recipe.NVFP4:           # 4.5 bits: E2M1 and an E4M3 scale per 16 values
        return BYTES_FP4 + 1 / NVFP4_BLOCK
    if recipe is Fp8Recipe.BLOCKWISE:
        return BYTES_FP8 + BYTES_FP32 / ACTIVATION_TILE
    return float(BYTES_FP8)


def fp8_copies_bytes(recipe: Fp8Recipe, *, transpose_free: bool, weight: bool = False) -> float:
    """Bytes per value of the FP8 copies one tensor needs for both of its GEMM layouts.

    Per-tensor scaling (delayed, tensorwise): one copy where the tensor cores read either
    layout (Blackwell), a row-wise and a transposed copy otherwise (Hopper, Ada): TE
    performance_considerations.rst, Table 2. MXFP8, block and row-wise scaling scale along
    the layout, so the two copies differ and both are kept: 2 x (1 + 1/32) for MXFP8 ("MXFP8
    requires 2 bytes/param", TE issue #1880), 2 x (1 + 4/128) for block-scaled activations and
    2 x (1 + 4/128^2) for block-scaled weights.
    """
    if recipe in (Fp8Recipe.DELAYED, Fp8Recipe.TENSORWISE):
        return float(BYTES_FP8 if transpose_free else 2 * BYTES_FP8)
    if recipe is Fp8Recipe.BLOCKWISE and weight:
        return 2 * (BYTES_FP8 + BYTES_FP32 / WEIGHT_TILE)
    if recipe is Fp8Recipe.NVFP4 and weight:    # TN-only GEMMs: both layouts, 16x16 scales
        return 2 * (BYTES_FP4 + 1 / NVFP4_WEIGHT_TILE)
    return 2 * fp8_value_bytes(recipe)


def quantize_bytes(elements, recipe: Fp8Recipe, *, transpose_free: bool, layouts: int = 2):
    """HBM bytes of quantizing `elements` bf16 values into the FP8 copies of `layouts` GEMM
    layouts: each read of the bf16 tensor (two with current scaling's amax pass, one
    otherwise; TE fp8_current_scaling.rst "Performance analysis") plus the copies written.
    Both layouts (`fp8_copies_bytes`), as Transformer Engine's casts write them at once; one
    (`fp8_value_bytes`), as torchao casts an operand for the GEMM at hand. Row-wise scales run
    along one dimension, so each layout is its own cast with its own amax pass (torchao float8
    AXISWISE casts along dim -1 and dim 0, hp_tensor_to_float8_dynamic). A memory-bound
    kernel: time is these bytes at HBM bandwidth."""
    reads = _bf16_reads(recipe) * (layouts if recipe is Fp8Recipe.ROWWISE else 1)
    written = (fp8_copies_bytes(recipe, transpose_free=transpose_free) if layouts == 2
               else fp8_value_bytes(recipe))
    return elements * (reads * BYTES_16BIT + written)


def layout_copy_s(elements, *, elements_per_s: float):
    """Seconds of transposing copies that make an FP8 operand column-major (or its transpose
    row-major) for a GEMM that takes only the row-major x column-major layout: torch._scaled_mm
    on Hopper ("Only multiplication of row-major and column-major matrices is supported by
    cuBLASLt"), for which torchao's Float8 mm (float8_ops.py preprocess_addmm) calls
    .contiguous() on the weight gradient's two operands and the data gradient's weight.
    PyTorch's transposing copy is bound by elements, not bytes: measured at 1.48e11 FP8 and
    1.44e11 bf16 elements/s on an H200, 0.06 of HBM for FP8, where a plain copy reaches 0.8
    (bench/data/kernels_h200_fp8_rowwise.json, section fp8_transpose)."""
    return elements / elements_per_s


def _bf16_reads(recipe: Fp8Recipe) -> int:
    """Reads of the bf16 tensor a quantization makes: two with current scaling's amax pass
    (TE fp8_current_scaling.rst "Performance analysis"), one otherwise."""
    return 2 if _AMAX_PASS.get(recipe, False) else 1


def fp8_weight_bytes_per_param(recipe: Fp8Recipe, *, transpose_free: bool, caches: bool,
                               fp8_params: bool) -> float:
    """Bytes per linear-layer weight a rank keeps for its FP8 GEMMs, besides the fp32 master
    copy and the gradients (Megatron-LM + Transformer Engine):
    - the bf16 weight (2), unless the parameters themselves are FP8 (Megatron-LM
      --fp8-param-gather: "Casts FP32 master weights directly to FP8, eliminating BF16
      intermediate copy", megatron/core/transformer/moe/README.md; the FP8 parameter is then
      the first of the copies);
    - the quantized copies of both layouts (`fp8_copies_bytes`) where the framework keeps them
      across micro-batches (TE's weight workspaces, transformer_engine/pytorch/module/linear.py
      with is_first_microbatch); a framework that quantizes in every pass (torchao) keeps none.
    Hopper, per-tensor scaling: 2 + 2 = 4 bytes, or 2 with FP8 parameters.
    A framework that quantizes in every pass keeps no copies; with FP8 parameter gathering
    (torchtitan enable_fsdp_float8_all_gather: torchao casts each shard to FP8 before FSDP's
    all-gather, so the gathered parameter is a Float8 tensor) the weight it holds gathered is
    that FP8 value: 1 byte, beside the bf16 shard ZeRO counts.
    """
    if not caches:
        return fp8_value_bytes(recipe) if fp8_params else BYTES_16BIT
    kept = fp8_copies_bytes(recipe, transpose_free=transpose_free, weight=True)
    return (0.0 if fp8_params else BYTES_16BIT) + kept


def fp8_attention_fraction(*, flash_fraction: float, relative_efficiency: float) -> float:
    """Share of the FP8 peak a fused FP8 attention kernel reaches (Q K^T and softmax . V in
    FP8, forward and backward): the bf16 kernel's share of the bf16 peak (`flash_fraction`)
    times the FP8 kernel's efficiency relative to it (cluster data).

    Ref: Shah et al. 2024 (FlashAttention-3, arXiv:2407.08608), abstract and Sec. 4.1: on H100
    SXM5 the FP16 forward reaches up to 740 TFLOP/s (75% of the 989 TFLOP/s peak) and the FP8
    forward close to 1.2 PFLOP/s (Fig. 7, head dim 256, 16K tokens, no mask: FlashAttention-3
    1171, cuDNN 1139 TFLOP/s), i.e. 0.61 of the 1979 TFLOP/s FP8 peak: 0.81 of the bf16
    kernel's share. The paper times the forward only; Transformer Engine runs the backward in
    FP8 too (NVTE_FP8_DPA_BWD=1 by default, TE PR #768), at the same relative rate here.
    """
    return flash_fraction * relative_efficiency


def fp8_attention_value_bytes(recipe: Fp8Recipe) -> float:
    """Bytes of one Q, K or V value FP8 attention saves for its backward pass: 1 (E4M3 with a
    per-tensor scale), 1 + 1/32 where the linear layers run MXFP8 (the attention takes MXFP8
    too). NVFP4 linear layers run FP8 attention (Transformer Engine has no FP4 attention).

    Ref: NVIDIA/TransformerEngine transformer_engine/pytorch/attention/dot_product_attention/
    backends.py @d0067d0d, FusedAttnFunc.forward: with the backward in FP8 it saves q_fp8,
    k_fp8, v_fp8 (the bf16 Q, K and V are not kept); the output O stays bf16 under current
    scaling (NVTE_DPA_FP8CS_O_in_F16=1, the default) and MXFP8, FP8 under delayed scaling;
    dot_product_attention.py's recipe table: FP8DS/FP8CS/MXFP8 attention only.
    """
    if recipe is Fp8Recipe.MXFP8:
        return fp8_value_bytes(recipe)
    return float(BYTES_FP8)


def fp8_attention_quantize_bytes(elements, recipe: Fp8Recipe):
    """HBM bytes of casting `elements` bf16 values to FP8 at the attention's boundary (Q, K
    and V in the forward, dO in the backward: "cast BF16 input to FP8, FP8 DPA, cast output
    to BF16", TE PR #768): each read of the bf16 tensor (two with current scaling's amax
    pass), one FP8 copy written; no transposed copy (the fused kernel reads its layouts)."""
    reads = 1 if recipe is Fp8Recipe.NVFP4 else _bf16_reads(recipe)
    return elements * (reads * BYTES_16BIT + fp8_attention_value_bytes(recipe))
