"""What each of Megatron-Core's --recompute-modules stops keeping (cost_models.memory).

Hand-derived on a tiny layer, every tensor counted as the docstrings of
`transformer_layer_activation_bytes` and `moe_activation_bytes` name them (Korthikanti et al.
2022, Table 2 terms; Megatron-Core @d98e8a64 for which checkpoint drops which tensor).
"""

from __future__ import annotations

import itertools

import pytest

from cost_models.compute import MlaDims
from cost_models.enums import AttentionKind, MlpKind, Recompute, RecomputeModule
from cost_models.memory import moe_activation_bytes, transformer_layer_activation_bytes

M = RecomputeModule
# s 4, b 1, h 8, 2 heads of 4, 2 KV heads, SwiGLU with f 16, no dropout, flash attention,
# 16-bit values, tp 1: s b h = 32.
LAYER = dict(seq_len=4, micro_batch=1, hidden=8, num_heads=2, num_kv_heads=2, head_dim=4,
             ffn_hidden=16, mlp=MlpKind.SWIGLU, attention=AttentionKind.FLASH, dropout=False,
             tp=1, sequence_parallel=False)
NORM_INPUTS = 2 * 2 * 32               # two norms' inputs, 2 bytes each: 128
NORM_OUTPUTS = 2 * 2 * 32              # the QKV input and the MLP input: 128
ATTENTION = 2 * 32 + 2 * 2 * 32 + 2 * 32   # Q, K and V, the output (Wo's input): 256
MLP = (2 + 2 + 2) * 4 * 16             # gate, up, their product: 384
LSE = 4 * 2 * 4                        # fp32 softmax log-sum-exp per head and token: 32


def kept(modules, **extra):
    return transformer_layer_activation_bytes(**LAYER, recompute=Recompute.SELECTIVE,
                                              recompute_modules=frozenset(modules), **extra)


@pytest.mark.parametrize("modules, expected", [
    ({M.CORE_ATTN}, NORM_INPUTS + NORM_OUTPUTS + ATTENTION + MLP),              # 896
    ({M.LAYERNORM}, NORM_INPUTS + ATTENTION + MLP + LSE),                       # 800
    ({M.MLP}, NORM_INPUTS + NORM_OUTPUTS + ATTENTION + LSE),                    # 544
    ({M.LAYERNORM, M.MLP, M.CORE_ATTN}, NORM_INPUTS + ATTENTION),               # 384
    ({M.MOE_ACT}, NORM_INPUTS + NORM_OUTPUTS + ATTENTION + MLP + LSE),          # 928: no MoE
])
def test_dense_layer_bytes_by_module(modules, expected):
    assert kept(modules) == expected
    # No recompute keeps everything: the same as a module set that drops nothing here.
    assert transformer_layer_activation_bytes(**LAYER, recompute=Recompute.NONE) == 928


def test_mlp_module_is_the_dense_mlp_and_shared_experts_the_moe_layers():
    # transformer_layer.py: "mlp" only where the layer is not an MoE layer; an MoE layer's
    # shared experts (the tensor-parallel MLP there) go with "shared_experts" or "moe".
    assert kept({M.MLP}, moe_layer=True) == 928
    assert kept({M.SHARED_EXPERTS}, moe_layer=True) == 928 - MLP
    assert kept({M.MOE}, moe_layer=True) == 928 - MLP
    assert kept({M.SHARED_EXPERTS}) == 928


def test_mla_up_proj_drops_q_k_v():
    # 2 heads, d_nope 4, d_rope 2, d_v 4: Q and K 2 x 6 columns each, V 2 x 4: 32 columns of
    # 4 tokens at 2 bytes = 256 bytes; the output (Wo's input) and the latents stay.
    mla = MlaDims(q_lora_rank=4, kv_lora_rank=4, qk_rope_head_dim=2, v_head_dim=4)
    base = kept({M.CORE_ATTN}, mla=mla)
    assert base - kept({M.CORE_ATTN, M.MLA_UP_PROJ}, mla=mla) == 2 * 4 * (2 * 12 + 2 * 4)


MOE = dict(pairs=8, tokens_per_rank=4, hidden=8, expert_ffn_hidden=6, num_experts=4,
           mlp=MlpKind.SWIGLU)


def test_moe_bytes_by_module():
    router = 4 * 4 * 4                 # fp32 scores, tokens x experts: 64
    permuted = 2 * 8 * 8               # the expert input per pair (no expert output): 128
    internals = (2 + 2 + 2) * 8 * 6    # gate, up, product per pair: 288
    assert moe_activation_bytes(**MOE) == router + permuted + internals
    # moe_act: the activation's output (the second GEMM's input) is recomputed.
    assert moe_activation_bytes(**MOE, recompute_modules=frozenset({M.MOE_ACT})) == (
        router + permuted + internals - 2 * 8 * 6)
    # moe: the layer is checkpointed on its input; nothing of it is kept.
    assert moe_activation_bytes(**MOE, recompute_modules=frozenset({M.MOE})) == 0


@pytest.mark.parametrize("fewer", [frozenset(c) for n in range(4) for c in
                                   itertools.combinations(list(M), n)])
def test_more_modules_never_keep_more(fewer):
    # Monotone in the set: adding any module drops bytes or changes nothing.
    mla = MlaDims(q_lora_rank=4, kv_lora_rank=4, qk_rope_head_dim=2, v_head_dim=4)
    for extra in M:
        more = fewer | {extra}
        for moe_layer in (False, True):
            assert kept(more, mla=mla, moe_layer=moe_layer) <= kept(fewer, mla=mla,
                                                                   moe_layer=moe_layer)
        assert (moe_activation_bytes(**MOE, recompute_modules=more)
                <= moe_activation_bytes(**MOE, recompute_modules=fewer))


def test_modules_count_only_under_selective_recompute():
    none = transformer_layer_activation_bytes(**LAYER, recompute=Recompute.NONE,
                                              recompute_modules=frozenset(M))
    assert none == 928
