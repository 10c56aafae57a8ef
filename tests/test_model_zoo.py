"""Every zoo model loads, and its parameter count matches its published count."""

import pytest

import model_zoo
from cost_models.references import REFERENCES
from planner.inputs.loader import load_model

EXPECTED = {
    "gpt3-175b", "bert-large", "gpt2-xl", "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b",
    "llama3-70b", "llama3-405b", "mixtral-8x7b", "bloom-176b", "alphafold2-evoformer",
    "gpt-1.7b", "gpt-3.6b", "gpt-7.5b", "gpt-18.4b", "gpt-39.1b", "gpt-76.1b", "gpt-145.6b",
    "gpt-310.1b", "gpt-529.6b", "gpt-1t",
}


def test_zoo_has_the_models_the_issue_lists():
    assert EXPECTED <= set(model_zoo.names())


@pytest.mark.parametrize("name", model_zoo.names())
def test_zoo_parameter_count_matches_published(name):
    model, _ = load_model(name)
    source = model.source
    assert source is not None and source.reference in REFERENCES
    tolerance = source.published_rounding
    assert abs(model.num_params - source.published_num_params) <= tolerance, (
        f"{name}: {model.num_params:,} vs published {source.published_num_params:,.0f}")


def test_llama2_7b_by_hand():
    # 32 x (4 * 4096^2 + 3 * 4096 * 11008 + 2 * 4096) + 4096 + 2 * 32000 * 4096
    model, _ = load_model("llama2-7b")
    assert model.num_params == 32 * (4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096) + 4096 \
        + 2 * 32000 * 4096 == 6_738_415_616


def test_mixtral_active_parameters():
    # Jiang et al. 2024: 12.9B active of 46.7B (two of eight experts per token).
    model, _ = load_model("mixtral-8x7b")
    assert model.num_active_params == pytest.approx(12.9e9, abs=0.05e9)


def test_evoformer_caps_tensor_parallelism_at_four_heads():
    model, _ = load_model("alphafold2-evoformer")
    assert model.tp_head_counts == (4, 8)
    assert model.num_layers == 48
