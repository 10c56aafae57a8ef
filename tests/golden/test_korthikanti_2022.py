"""Korthikanti et al. 2022 (arXiv:2205.05198): Table 2 closed forms and the analytic Figure 1
values for the 175B configuration (TP 8, PP 8, 3 interleaved chunks, micro-batch 1)."""

import pytest

from cost_models.enums import AttentionKind, MlpKind, Optimizer, Precision, Recompute
from cost_models.memory import state_bytes_per_param, transformer_layer_activation_bytes
from cost_models.pipeline import in_flight_chunk_micro_batches, interleaved_memory_factor
from cost_models.units import GiB


def gpt_layer(s, b, h, a, t, sp, rc):
    """The paper's assumptions: MHA, ffn = 4h, GeLU, dropout, two LayerNorms."""
    return transformer_layer_activation_bytes(
        seq_len=s, micro_batch=b, hidden=h, num_heads=a, num_kv_heads=a, head_dim=h // a,
        ffn_hidden=4 * h, mlp=MlpKind.GELU, attention=AttentionKind.UNFUSED, dropout=True,
        tp=t, sequence_parallel=sp, recompute=rc)


# Table 2, restated closed forms: rel=1e-9.
TABLE2 = [
    (False, Recompute.NONE, lambda s, b, h, a, t: s * b * h * (10 + 24 / t + 5 * a * s / (h * t))),
    (True, Recompute.NONE, lambda s, b, h, a, t: s * b * h / t * (34 + 5 * a * s / h)),
    (False, Recompute.SELECTIVE, lambda s, b, h, a, t: s * b * h * (10 + 24 / t)),
    (True, Recompute.SELECTIVE, lambda s, b, h, a, t: 34 * s * b * h / t),
    (False, Recompute.FULL, lambda s, b, h, a, t: 2 * s * b * h),
]


@pytest.mark.parametrize(("sp", "rc", "form"), TABLE2)
@pytest.mark.parametrize("shape", [(2048, 1, 12288, 96, 8), (4096, 2, 8192, 64, 4),
                                   (1024, 4, 2304, 24, 1)])
def test_korthikanti2022_table2(sp, rc, form, shape):
    assert gpt_layer(*shape, sp, rc) == pytest.approx(form(*shape), rel=1e-9)


def test_korthikanti2022_table2_no_parallelism():
    s, b, h, a = 2048, 1, 12288, 96
    expected = s * b * h * (34 + 5 * a * s / h)
    assert gpt_layer(s, b, h, a, 1, False, Recompute.NONE) == pytest.approx(expected, rel=1e-9)


L, P, V3 = 96, 8, 3


def test_korthikanti2022_figure1_weights_and_optimizer():
    # 18 bytes per parameter (bf16 weights, fp32 gradients, Adam) on the 12 h^2 L layer weights
    # of one TP x PP rank.
    per_param = state_bytes_per_param(Precision.BF16, Optimizer.ADAM).total
    params = 12 * 12288**2 * L / (8 * P)
    assert per_param * params / GiB == pytest.approx(45.5625, rel=1e-12)


@pytest.mark.parametrize(("sp", "rc", "expected_gib"), [
    (False, Recompute.NONE, 66.84375),            # TP only
    (True, Recompute.SELECTIVE, 12.3515625),      # SP + selective recompute
])
def test_korthikanti2022_figure1_activations(sp, rc, expected_gib):
    per_layer = gpt_layer(2048, 1, 12288, 96, 8, sp, rc)
    total = per_layer * L * interleaved_memory_factor(pp=P, vpp=V3)
    assert total / GiB == pytest.approx(expected_gib, rel=1e-12)
    # The same by counting the first stage's in-flight chunks: p(v + 1) - 1 chunks of L/(p v).
    chunks = in_flight_chunk_micro_batches(stage=0, pp=P, vpp=V3, num_micro_batches=64)
    assert per_layer * chunks * L / (P * V3) / GiB == pytest.approx(expected_gib, rel=1e-12)
