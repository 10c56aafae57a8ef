"""GeGLU (Gemma) and SwiGLU differ only in the gate's activation: Shazeer 2020
(arXiv:2002.05202, Eq. 6 and 5) gives both as (act(x W) * x V) W2, three matrices of the
same shapes, so every cost the planner prices is the same for the two."""

import pytest

from cost_models.compute import (transformer_layer_elementwise_bytes, transformer_layer_gemms)
from cost_models.enums import AttentionKind, MlpKind, PositionKind, Recompute
from cost_models.memory import transformer_layer_activation_bytes
from cost_models.parameters import mlp_params

SHAPE = dict(seq_len=4096, micro_batch=1, hidden=2304, num_heads=8, num_kv_heads=4,
             head_dim=256, ffn_hidden=9216)


def test_geglu_is_gated_and_gelu_is_not():
    assert MlpKind.GEGLU.gated and MlpKind.SWIGLU.gated and not MlpKind.GELU.gated


def test_geglu_has_three_matrices():
    # gemma-2-2b's MLP: gate_proj and up_proj 2304 x 9216, down_proj 9216 x 2304.
    assert mlp_params(hidden=2304, ffn_hidden=9216, mlp=MlpKind.GEGLU, bias=False).total == \
        3 * 2304 * 9216


@pytest.mark.parametrize("recompute", list(Recompute))
def test_geglu_costs_what_swiglu_costs(recompute):
    def costs(mlp):
        common = dict(SHAPE, mlp=mlp, tp=2)
        return (transformer_layer_gemms(**common),
                transformer_layer_elementwise_bytes(
                    **common, attention=AttentionKind.FLASH, position=PositionKind.ROTARY,
                    dropout=False, norms_per_layer=4, sequence_parallel=True),
                transformer_layer_activation_bytes(
                    **common, attention=AttentionKind.FLASH, dropout=False, norms_per_layer=4,
                    sequence_parallel=True, recompute=recompute))

    assert costs(MlpKind.GEGLU) == costs(MlpKind.SWIGLU)
    assert costs(MlpKind.GEGLU) != costs(MlpKind.GELU)
