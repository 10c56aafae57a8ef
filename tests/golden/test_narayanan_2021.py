"""Narayanan et al. 2021, SC21 (arXiv:2104.04473): parameter count (Sec. 5.1), FLOPs per
iteration (Eq. 3), the end-to-end training-time estimates (Sec. 5.1) and the Table 1 sizes."""

import pytest

import model_zoo
from cost_models.compute import megatron_flops_per_iteration, training_time_s
from cost_models.parameters import megatron_gpt_params
from cost_models.units import SECONDS_PER_DAY
from planner.costing.evaluate import step_flops_per_sequence
from planner.inputs.loader import load_model

SC21 = [n for n in model_zoo.names() if n.startswith("gpt-") and n[4].isdigit()]


@pytest.mark.parametrize("name", SC21)
def test_narayanan2021_parameter_formula_matches_block_count(name):
    # Our per-block count is the closed form plus the final LayerNorm (2h) it leaves out.
    model, training = load_model(name)
    layer = model.blocks[1]
    closed = megatron_gpt_params(num_layers=model.num_layers, hidden=layer.hidden,
                                 vocab_size=model.blocks[0].vocab_size, seq_len=training.seq_len)
    assert model.num_params - 2 * layer.hidden == pytest.approx(closed, rel=1e-12)


@pytest.mark.parametrize("name", SC21)
@pytest.mark.parametrize("full", [True, False])
def test_narayanan2021_eq3_matches_bottom_up_flops(name, full):
    # Bottom-up GEMM FLOPs (3x forward, + 1x layer forward with full recompute) must equal
    # Eq. 3 (96 ...) and Korthikanti's model FLOPs (72 ...) exactly.
    model, training = load_model(name)
    s, h = training.seq_len, model.blocks[1].hidden
    model_flops, layer_forward, _ = step_flops_per_sequence(model, s)
    got = model_flops + (layer_forward if full else 0)
    expected = megatron_flops_per_iteration(global_batch=1, seq_len=s, num_layers=model.num_layers,
                                            hidden=h, vocab_size=model.blocks[0].vocab_size,
                                            full_recompute=full)
    assert got == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(("tokens", "batch", "layers", "hidden", "gpus", "flops", "days"), [
    (300e9, 1536, 96, 12288, 1024, 140e12, 34),     # GPT-3 175B on 300B tokens
    (450e9, 3072, 128, 25600, 3072, 163e12, 84),    # the 1T model on 450B tokens
])
def test_narayanan2021_training_days(tokens, batch, layers, hidden, gpus, flops, days):
    # Sec. 5.1: steps of Eq. 3's FLOPs (full recompute; s 2048, V 51200) at the achieved
    # TFLOP/s per GPU. The paper rounds to 8 T P / (n X), dropping Eq. 3's s/(6h) and
    # V/(16 l h) terms (+3.1% for GPT-3, +1.4% for 1T) and rounding P: hence rel=0.03.
    s = 2048
    step_s = megatron_flops_per_iteration(global_batch=batch, seq_len=s, num_layers=layers,
                                          hidden=hidden, vocab_size=51200,
                                          full_recompute=True) / (gpus * flops)
    got = training_time_s(num_tokens=tokens, tokens_per_step=batch * s, step_s=step_s)
    assert got / SECONDS_PER_DAY == pytest.approx(days, rel=0.03)
