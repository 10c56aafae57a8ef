"""Megatron-LM docs/source/api-guide/dist_optimizer.md: bytes per parameter, by dtype, without
and with the distributed optimizer (ZeRO-1 over d data-parallel ranks)."""

import pytest

from cost_models.enums import Optimizer, Precision, ZeroStage
from cost_models.memory import model_state_bytes, state_bytes_per_param


@pytest.mark.parametrize(("precision", "plain", "fixed", "sharded"), [
    (Precision.FP16, 20, 4, 16),   # fp16 params + fp16 grads: 20 -> 4 + 16/d
    (Precision.BF16, 18, 6, 12),   # bf16 params + fp32 grads: 18 -> 6 + 12/d
    (Precision.FP32, 16, 8, 8),    # fp32 params + fp32 grads: 16 -> 8 + 8/d
])
def test_megatron_distributed_optimizer_table(precision, plain, fixed, sharded):
    per_param = state_bytes_per_param(precision, Optimizer.ADAM)
    assert per_param.total == plain
    for d in (1, 2, 8, 64):
        got = model_state_bytes(num_params=1, dp=d, zero_stage=ZeroStage.OPTIMIZER_STATES,
                                per_param=per_param).total
        assert got == pytest.approx(fixed + sharded / d, rel=1e-12)


def test_sgd_state_bytes():
    # Plain SGD keeps no state; momentum one fp32 buffer; both keep fp32 master weights in bf16.
    assert state_bytes_per_param(Precision.BF16, Optimizer.SGD).optimizer == 4
    assert state_bytes_per_param(Precision.BF16, Optimizer.SGD_MOMENTUM).optimizer == 8
    assert state_bytes_per_param(Precision.FP32, Optimizer.SGD).total == 8
