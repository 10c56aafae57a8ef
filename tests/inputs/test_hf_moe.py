"""Hugging Face configs of MoE families load, with the parameter counts their authors publish.

Totals are the exact counts of the HF checkpoints (main model). Active counts follow each
vendor's convention: Mixtral, Qwen and DeepSeek count every parameter a token uses
(embeddings included; DeepSeek-V3's 37B is 37.55B rounded down), gpt-oss counts the unembedding
but not the embedding (model card, Table 1 caption).
"""

from pathlib import Path

import pytest

from planner.errors import InputError
from planner.inputs.loader import load_model, make_problem

CONFIGS = Path(__file__).parent / "hf_configs"

# name: (exact total, published active, tolerance of the published active, embedding counted)
PUBLISHED = {
    # arXiv:2412.19437 Sec. 4.2: 671B total, 37B activated.
    "deepseek-v3": (671_026_419_200, 37e9, 0.6e9, True),
    # arXiv:2405.04434 Table 6: 15.7B total, 2.4B activated (without the embedding).
    "deepseek-v2-lite": (15_706_484_224, 2.4e9, 0.06e9, False),
    # HF model cards: 30.5B / 3.3B and 235B / 22B.
    "qwen3-30b-a3b": (30_532_122_624, 3.3e9, 0.06e9, True),
    "qwen3-235b-a22b": (235_093_634_560, 22e9, 0.5e9, True),
    # Qwen1.5-MoE-A2.7B model card: 14.3B total, 2.7B activated.
    "qwen1.5-moe-a2.7b": (14_315_784_192, 2.7e9, 0.05e9, True),
    # gpt-oss model card Table 1: 116.83B total, 5.13B active.
    "gpt-oss-120b": (116_829_156_672, 5.13e9, 0.005e9, False),
    # Mistral AI: 141B total, 39B active.
    "mixtral-8x22b": (140_620_634_112, 39e9, 0.5e9, True),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_moe_config_counts_match_published(name):
    model, _ = load_model(str(CONFIGS / f"{name}.json"))
    total, active, tolerance, with_embedding = PUBLISHED[name]
    assert model.num_params == total
    embedding = model.blocks[0].params().total
    counted = model.num_active_params - (0 if with_embedding else embedding)
    assert abs(counted - active) <= tolerance, f"{counted:,} vs {active:,.0f}"


def test_deepseek_v3_layers_and_mla():
    model, _ = load_model(str(CONFIGS / "deepseek-v3.json"))
    layers = [model.blocks[i] for i in model.layer_indices]
    assert [b.is_moe for b in layers[:4]] == [False, False, False, True]
    assert sum(b.is_moe for b in layers) == 58
    moe = layers[3]
    assert (moe.num_experts, moe.top_k, moe.expert_ffn, moe.shared_ffn_hidden) == (256, 8, 2048,
                                                                                   2048)
    assert moe.mla is not None and moe.tp_head_counts == (128,)
    # DeepSeek-V2 Eq. 9-19: per layer, q down 7168x1536 + norm, q up 1536x(128x192),
    # kv down 7168x576 + norm 512, kv up 512x(128x256), output (128x128)x7168.
    expected_attention = (7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512
                          + 512 * 128 * 256 + 128 * 128 * 7168)
    dense = layers[0].params()
    dense_mlp = 3 * 7168 * 18432
    assert dense.total - dense_mlp - 2 * 7168 == expected_attention


def test_gpt_oss_alternates_sliding_and_full_attention():
    model, _ = load_model(str(CONFIGS / "gpt-oss-120b.json"))
    windows = [model.blocks[i].sliding_window for i in model.layer_indices]
    assert windows[:4] == [128, None, 128, None] and windows.count(128) == 18
    # The experts' GLU input is clamped to swiglu_limit (config.json: 7.0).
    assert {model.blocks[i].glu_clamp for i in model.layer_indices} == {7.0}


def test_qwen2_moe_shared_expert_and_gate():
    model, _ = load_model(str(CONFIGS / "qwen1.5-moe-a2.7b.json"))
    layer = model.blocks[model.layer_indices[0]]
    assert (layer.num_experts, layer.top_k, layer.shared_ffn_hidden) == (60, 4, 5632)
    assert layer.shared_expert_gate and layer.qkv_bias


def test_mlp_only_layers_are_refused_with_the_key(tmp_path):
    import json

    from planner.errors import InputError
    config = json.loads((CONFIGS / "qwen3-30b-a3b.json").read_text())
    config["mlp_only_layers"] = [0, 1]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(InputError, match="mlp_only_layers"):
        load_model(str(path))


def test_deepseek_v3_multi_token_prediction_module():
    # num_nextn_predict_layers 1: one more MoE layer, a 2h x h projection and three norms,
    # sharing the embedding and output head (arXiv:2412.19437, Sec. 2.2). The HF checkpoint's
    # 685B (README) = 671B main + the module with its own embedding and head copies.
    model, _ = load_model(str(CONFIGS / "deepseek-v3.json"))
    mtp = model.blocks[-1]
    assert mtp.kind == "mtp"
    layer = model.blocks[model.layer_indices[-1]]
    assert model.num_mtp_params == layer.params().total + 2 * 7168**2 + 3 * 7168
    copies = 2 * 129280 * 7168
    assert abs(model.num_params + model.num_mtp_params + copies - 685e9) < 1e9


# name: (published total, relative tolerance, published active, tolerance, what the active
# count leaves out). The vendors publish rounded counts, so the tolerances are the rounding.
ROUNDED = {
    # GLM-4.5 report (arXiv:2508.06471) Table 1: 355B total, 32B activated; GLM-4.5-Air 106B
    # and 12B. Their totals leave the MTP layer out (Air: 106.9B without it, 109.2B with), their
    # activated counts the embedding and the output head (32.08B and 12.18B in the layers).
    "glm-4.5": (355e9, 0.01, 32e9, 0.2e9, "embedding and head"),
    "glm-4.5-air": (106e9, 0.01, 12e9, 0.2e9, "embedding and head"),
    # Kimi K2 model card (moonshotai/Kimi-K2-Instruct), "Model Summary": 1T total, 32B
    # activated (every parameter a token uses, as DeepSeek counts).
    "kimi-k2": (1e12, 0.03, 32e9, 1e9, "nothing"),
    # Muennighoff et al. 2024 (arXiv:2409.02060), OLMoE-1B-7B: 6.9B total, 1.3B active.
    "olmoe-1b-7b-0924": (6.9e9, 0.01, 1.3e9, 0.05e9, "nothing"),
    # MiniMax-M2 model card: 230B total, 10B active (228.7B in the 62 layers, embedding and
    # head; the 3 MTP modules the file names are not released; 10.4B active with the head).
    "minimax-m2": (230e9, 0.01, 10e9, 0.5e9, "embedding"),
    # dots.llm1 README and arXiv:2506.05767: 142B total, 14B activated (every parameter a token
    # uses, embedding included: 14.02B).
    "dots-llm1-inst": (142e9, 0.01, 14e9, 0.05e9, "nothing"),
    # Hunyuan-A13B README ("模型结构"): 80B total, 13B active (tied embedding counted once).
    "hunyuan-a13b-instruct": (80e9, 0.01, 13e9, 0.5e9, "nothing"),
    # transformers docs model_doc/ernie4_5_moe and Baidu's model cards: "21B total, 3B active"
    # and "300B total, 47B active"; the totals are truncated (21.83B, 299.5B without the MTP
    # layer), the 300B's active count leaves out the input embedding (47.08B).
    "ernie-4.5-21b-a3b": (21e9, 0.04, 3e9, 0.5e9, "nothing"),
    "ernie-4.5-300b-a47b": (300e9, 0.01, 47e9, 0.5e9, "embedding"),
    # Granite 3.0/3.1 model cards' table: 3B MoE, 3.3B total, 800M active (the layers: the
    # tied embedding left out, 807M).
    "granite-3.1-3b-a800m-instruct": (3.3e9, 0.01, 0.8e9, 0.01e9, "embedding"),
    # GLM-4.5V is GLM-4.5-Air's language model beside a 0.86B vision tower (zai-org card:
    # "106B parameters, 12B active"); its config.json (a public dump of the loaded config).
    "glm-4.5v": (106e9, 0.01, 12e9, 0.2e9, "embedding and head"),
    # Phi-3.5-MoE model card and SlimMoE (arXiv:2506.18349) abstract: 41.9B total, 6.6B
    # activated (every parameter a token uses; the 131K output-projection biases, not
    # modelled, are below the rounding).
    "phi-3.5-moe-instruct": (41.9e9, 0.0012, 6.6e9, 0.05e9, "nothing"),
    # inclusionAI/Ling-V2 README: Ling-mini-2.0 "1.43B activated of 16.26B total params",
    # "non-embedding 789M" activated (embedding and head left out).
    "ling-mini-2.0": (16.26e9, 0.0004, 0.789e9, 0.0005e9, "embedding and head"),
    # Ling-flash-2.0 model card: 100B total ("103B" on the HF collection), 6.1B activated,
    # 4.8B without the embedding and head.
    "ling-flash-2.0": (103e9, 0.005, 4.8e9, 0.1e9, "embedding and head"),
    # inclusionAI/Ling README: Ling-Lite 16.8B parameters, 2.75B activated.
    "ling-lite-1.5": (16.8e9, 0.003, 2.75e9, 0.005e9, "nothing"),
}


@pytest.mark.parametrize("name", sorted(ROUNDED))
def test_moe_config_counts_match_published_rounded(name):
    model, _ = load_model(str(CONFIGS / f"{name}.json"))
    total, relative, active, tolerance, left_out = ROUNDED[name]
    assert abs(model.num_params - total) <= relative * total, f"{model.num_params:,}"
    counted = model.num_active_params
    if left_out == "embedding and head":
        counted -= sum(b.params().total for b in model.blocks if b.kind in ("embedding", "output"))
    elif left_out == "embedding":
        counted -= model.blocks[0].params().total
    assert abs(counted - active) <= tolerance, f"{counted:,} vs {active:,.0f}"


@pytest.mark.parametrize(("name", "dense", "moe", "experts", "qk_norm"), [
    # arXiv:2508.06471 Table 1: dense layers, MoE layers, routed experts (+1 shared), QK-norm;
    # one MTP layer each.
    ("glm-4.5", 3, 89, 160, True),
    ("glm-4.5-air", 1, 45, 128, False),
])
def test_glm4_moe_layers(name, dense, moe, experts, qk_norm):
    model, _ = load_model(str(CONFIGS / f"{name}.json"))
    layers = [model.blocks[i] for i in model.layer_indices]
    assert [b.is_moe for b in layers] == [False] * dense + [True] * moe
    last = layers[-1]
    assert (last.num_experts, last.top_k, last.shared_ffn_hidden) == (experts, 8,
                                                                     last.moe_ffn_hidden)
    assert last.qkv_bias and not last.bias and last.qk_norm is qk_norm
    assert last.router_bias and last.load_balancing.value == "expert_bias"
    assert model.blocks[-1].kind == "mtp"


def test_kimi_k2_is_deepseek_v3_shaped_and_k25_reads_its_text_config(tmp_path):
    import json

    model, _ = load_model(str(CONFIGS / "kimi-k2.json"))
    layers = [model.blocks[i] for i in model.layer_indices]
    # Model card: 61 layers, 1 dense, 384 experts, 8 selected, 1 shared, MLA with 64 heads.
    assert len(layers) == 61 and sum(not b.is_moe for b in layers) == 1
    assert (layers[-1].num_experts, layers[-1].top_k) == (384, 8)
    assert layers[-1].mla is not None and layers[-1].num_heads == 64
    # Kimi K2.5 wraps the same language model in text_config beside a vision tower.
    text = json.loads((CONFIGS / "kimi-k2.json").read_text())
    wrapped = {"model_type": "kimi_k25", "architectures": ["KimiK25ForConditionalGeneration"],
               "text_config": text, "vision_config": {"vt_num_hidden_layers": 27}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(wrapped))
    problem = make_problem(str(path), "dgx-h100", gpus=8)
    assert problem.model.num_params == model.num_params
    assert problem.notes[0] == (f"{path}: only the kimi_k25 language model (text_config) is "
                                f"priced; the vision tower (vision_config) and its projector "
                                f"are not")


def test_qwen3_vl_reads_its_language_model(tmp_path):
    """Qwen3-VL's language models are the Qwen3 ones: Qwen3-VL-30B-A3B-Instruct's text_config
    (its config.json, fixture) has Qwen3-30B-A3B's shape, 30.5B / 3.3B (Qwen3 model card), and
    a Qwen3-VL dense config wraps a Qwen3 decoder the same way; the vision encoder is noted."""
    import json

    path = CONFIGS / "qwen3-vl-30b-a3b-instruct.json"
    problem = make_problem(str(path), "dgx-h100", gpus=8)
    text_only, _ = load_model(str(CONFIGS / "qwen3-30b-a3b.json"))
    assert problem.model.num_params == text_only.num_params == 30_532_122_624
    layers = [problem.model.blocks[i] for i in problem.model.layer_indices]
    assert len(layers) == 48 and all(b.is_moe and b.qk_norm for b in layers)
    assert (layers[0].num_experts, layers[0].top_k, layers[0].sliding_window) == (128, 8, None)
    assert problem.notes[0] == (f"{path}: only the qwen3_vl_moe language model (text_config) "
                                f"is priced; the vision encoder (vision_config), its patch "
                                f"merger and the DeepStack visual features added to the first "
                                f"layers are not")
    # A dense Qwen3-VL (Qwen3VLForConditionalGeneration) around Qwen3-8B's decoder.
    text = json.loads((CONFIGS / "qwen3-8b.json").read_text())
    text.pop("tie_word_embeddings", None)
    dense = tmp_path / "config.json"
    dense.write_text(json.dumps({"model_type": "qwen3_vl", "tie_word_embeddings": False,
                                 "text_config": text, "vision_config": {"depth": 27}}))
    dense_model, _ = load_model(str(dense))
    reference, _ = load_model(str(CONFIGS / "qwen3-8b.json"))
    assert dense_model.num_params == reference.num_params


@pytest.mark.parametrize(("name", "total", "relative", "moe_layers"), [
    # Meta's Llama 4 model cards: Scout 17B activated of 109B (the checkpoint holds its vision
    # encoder, which the planner leaves out: 107.8B in the language model), Maverick 17B of
    # 400B (400.7B).
    ("llama-4-scout-17b-16e", 109e9, 0.015, 48),
    ("llama-4-maverick-17b-128e", 400e9, 0.005, 24),
])
def test_llama4_counts_and_layers(name, total, relative, moe_layers):
    path = str(CONFIGS / f"{name}.json")
    model, _ = load_model(path)
    assert abs(model.num_params - total) <= relative * total, f"{model.num_params:,}"
    assert abs(model.num_active_params - 17e9) <= 0.5e9
    layers = [model.blocks[i] for i in model.layer_indices]
    assert sum(b.is_moe for b in layers) == moe_layers
    # Every fourth layer (no_rope_layers) attends to the whole context, the others in chunks
    # of attention_chunk_size.
    assert [b.attention_chunk for b in layers[:4]] == [8192, 8192, 8192, None]
    moe = next(b for b in layers if b.is_moe)
    assert (moe.top_k, moe.shared_ffn_hidden, moe.expert_ffn) == (1, 8192, 8192)
    assert next(b for b in layers if not b.is_moe).ffn == 16384 if moe_layers < 48 else True
    problem = make_problem(path, "dgx-h100", gpus=8)
    assert problem.notes[0].endswith("only the llama4 language model (text_config) is priced; "
                                     "the vision encoder (vision_config) and its projector are "
                                     "not")


def test_chunked_attention_is_refused_by_megatron_and_by_the_cp_ring(cli, tmp_path):
    path = str(CONFIGS / "llama-4-scout-17b-16e.json")
    code, _, err = cli("plan", path, "dgx-h100", "--gpus", "64", "--emit", "megatron",
                       "--out", str(tmp_path))
    assert code == 2
    assert "Megatron-LM has no chunked attention" in err
    # Context parallelism: the ring's causal halves do not describe a chunk mask (the rule of
    # sliding windows, `gate.cp_attention_variant_breaks`); all-to-all runs it.
    code, out, err = cli("plan", path, "dgx-h100", "--gpus", "64", "--seq-len", "16384",
                         "--cp", "2", "--cp-comm", "p2p", "--top", "1")
    assert code == 1, err
    code, out, err = cli("plan", path, "dgx-h100", "--gpus", "64", "--seq-len", "16384",
                         "--cp", "2", "--cp-comm", "a2a", "--top", "1", "--json")
    assert code == 0, err


def test_minimax_dots_hunyuan_and_ernie_layers(tmp_path):
    """What each mapper reads from its file, beside the counts above (modeling_<type>.py)."""
    import json

    minimax = [load_model(str(CONFIGS / "minimax-m2.json"))[0].blocks[i] for i in range(1, 63)]
    assert all(b.is_moe and b.qk_norm and b.router_bias and not b.shared_ffn_hidden
               for b in minimax)
    assert (minimax[0].num_experts, minimax[0].top_k, minimax[0].expert_ffn) == (256, 8, 1536)
    dots, _ = load_model(str(CONFIGS / "dots-llm1-inst.json"))
    layers = [dots.blocks[i] for i in dots.layer_indices]
    assert [b.is_moe for b in layers[:2]] == [False, True] and len(layers) == 62
    assert (layers[1].num_experts, layers[1].top_k, layers[1].shared_ffn_hidden) == (128, 6, 2816)
    assert layers[1].qk_norm and layers[1].load_balancing.value == "expert_bias"
    hunyuan, _ = load_model(str(CONFIGS / "hunyuan-a13b-instruct.json"))
    layer = hunyuan.blocks[hunyuan.layer_indices[0]]
    assert (layer.num_experts, layer.top_k, layer.expert_ffn, layer.shared_ffn_hidden) == (
        64, 8, 3072, 3072)
    assert layer.load_balancing.value == "aux_loss" and layer.qk_norm
    # Hunyuan's per-layer lists must agree layer to layer.
    config = json.loads((CONFIGS / "hunyuan-a13b-instruct.json").read_text())
    config["moe_topk"][5] = 4
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps(config))
    with pytest.raises(InputError, match=r"config.json: moe_topk: .*only one value for every "
                                         r"layer is modelled"):
        load_model(str(bad))
    # ERNIE 4.5: moe_layer_start_index dense layers first (21B: 1, 300B: 3), two shared
    # experts on the 21B, none on the 300B.
    for name, dense, moe, shared in (("ernie-4.5-21b-a3b", 1, 27, 3072),
                                     ("ernie-4.5-300b-a47b", 3, 51, 0)):
        model, _ = load_model(str(CONFIGS / f"{name}.json"))
        layers = [model.blocks[i] for i in model.layer_indices]
        assert sum(not b.is_moe for b in layers) == dense and sum(b.is_moe for b in layers) == moe
        assert not any(b.is_moe for b in layers[:dense])
        assert layers[-1].shared_ffn_hidden == shared and layers[-1].router_bias
    config = json.loads((CONFIGS / "ernie-4.5-21b-a3b.json").read_text())
    config["moe_layer_interval"] = 2
    bad.write_text(json.dumps(config))
    with pytest.raises(InputError, match=r"config.json: moe_layer_interval: 2: only every layer "
                                         r"from moe_layer_start_index to the last being MoE"):
        load_model(str(bad))


def test_glm4v_moe_prices_its_language_model_and_says_so():
    path = CONFIGS / "glm-4.5v.json"
    problem = make_problem(str(path), "dgx-h100", gpus=8)
    layers = [problem.model.blocks[i] for i in problem.model.layer_indices]
    assert sum(not b.is_moe for b in layers) == 1 and len(layers) == 46
    assert layers[-1].dim_per_head == 128 and layers[-1].num_heads == 96
    assert problem.notes[0] == (f"{path}: only the glm4v_moe language model (text_config) is "
                                f"priced; the vision tower (vision_config) and its merger are "
                                f"not")


def test_ling_flash_is_the_hub_count_and_ling_generations_split_by_architecture(tmp_path):
    import json
    flash, _ = load_model(str(CONFIGS / "ling-flash-2.0.json"))
    # The Hub's safetensors metadata of inclusionAI/Ling-flash-2.0: BF16 102,889,697,280 and
    # F32 7,936 (the expert-bias buffers, 31 MoE layers x 256).
    assert flash.num_params == 102_889_697_280 + 7_936
    layers = [flash.blocks[i] for i in flash.layer_indices]
    assert not layers[0].is_moe and layers[1].is_moe and layers[1].qk_norm
    assert (layers[1].router_groups, layers[1].router_group_topk) == (8, 4)
    lite = [b for b in load_model(str(CONFIGS / "ling-lite-1.5.json"))[0].blocks
            if b.kind == "transformer"]
    assert lite[0].is_moe and not lite[0].qk_norm and lite[0].load_balancing.value == "aux_loss"
    # Without architectures, Ling 2.0's own keys (use_qk_norm, n_group, ...) tell it apart.
    mini = json.loads((CONFIGS / "ling-mini-2.0.json").read_text())
    del mini["architectures"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(mini))
    assert load_model(str(path))[0].num_params == load_model(
        str(CONFIGS / "ling-mini-2.0.json"))[0].num_params
    config = json.loads((CONFIGS / "ling-lite-1.5.json").read_text())
    config["architectures"] = ["BailingForCausalLM"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(InputError, match=r"config.json: architectures: \['BailingForCausalLM'\]: "
                                         r"bailing_moe is read as BailingMoeForCausalLM"):
        load_model(str(path))


def test_phi_tiny_moe_heads_of_their_own_width():
    # microsoft/Phi-tiny-MoE-instruct: 16 heads of 128 on a 4096 residual (head_dim given), a
    # 2047-token window on every layer, LayerNorms; 3.8B total (SlimMoE abstract).
    model, _ = load_model(str(CONFIGS / "phi-tiny-moe-instruct.json"))
    layer = model.blocks[model.layer_indices[0]]
    assert (layer.num_heads, layer.dim_per_head, layer.kv_heads) == (16, 128, 4)
    assert (layer.sliding_window, layer.norm.value, layer.num_experts) == (2047, "layernorm", 16)
    assert abs(model.num_params - 3.8e9) <= 0.05e9 and model.blocks[-1].params().total == (
        32064 * 4096 + 32064)
