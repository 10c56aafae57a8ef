"""Hugging Face configs of dense families (Gemma 2/3, Phi-3, Qwen2/2.5/3, Mistral) load, with
the parameter counts their authors publish.

Where the fixtures' field values come from (the HF config.json of each model, as vendored):
  gemma-2-2b-it, gemma-2-9b, gemma-2-27b, gemma-3-1b-it, phi-3.5-mini-instruct, qwen3-0.6b,
  mistral-7b-v0.1: mlc-ai/mlc-llm python/mlc_llm/model/model_preset.py @79d603f (MODEL_PRESETS;
  for Mistral without mlc-llm's own sliding_window_size / prefill_chunk_size /
  attention_sink_size, with the HF file's "sliding_window": 4096);
  phi-3-mini-4k-instruct: NVIDIA/TensorRT-LLM tests/unittest/_torch/modeling/test_modeling_phi3.py
  (PHI3_MINI_4K_CONFIG);
  phi-3-medium-4k-instruct: scaleapi/llm-engine model-engine/tests/unit/domain/test_llm_use_cases.py;
  gemma-3-27b-it: NVIDIA/TensorRT-LLM tests/unittest/_torch/modeling/test_modeling_gemma3.py
  (GEMMA3_27B_MINI_CONFIG with its two test edits undone: 62 layers, sliding_window 1024);
  qwen2-7b, qwen2.5-7b, qwen3-8b: https://huggingface.co/Qwen/<model>/blob/main/config.json;
  mistral-small-3.1-24b: mistralai/Mistral-Small-3.1-24B-Instruct-2503's config.json
  (transformers 4.57.1), as vendored by a public Mistral3 embedder (M3_CONFIG_JSON).
  granite-3.3-8b-instruct, smollm3-3b, starcoder2-15b, apertus-8b/70b-2509, afm-4.5b,
  command-r7b-12-2024, command-a-03-2025: the released configs' fields as public copies give
  them (SmolLM3-3B verbatim from a mirror of its repository, StarCoder2-15B from its HF page's
  refs/pr/7; the others from public test fixtures and ports; Apertus-70B's shape from its tech
  report summary), not a byte copy of each;
  ernie-4.5-0.3b, glm-4-9b-0414, glm-4-32b-0414, seed-oss-36b: the released configs' shape
  fields as public test fixtures and the model cards' architecture tables give them (ERNIE:
  PaddlePaddle/ERNIE pretraining model_config.json; GLM-4-32B: hidden 6144, 61 layers, 48/2
  heads; Seed-OSS: 64 layers, 80/8 heads of 128, hidden 5120, vocab 155K), not a byte copy.
  gemma-2b: google/gemma-2b's config.json (transformers 4.38.0.dev0) as a public copy gives it;
  gemma-7b: its shape fields as Megatron-Bridge's Gemma bridge test gives them
  (tests/unit_tests/models/gemma/test_gemma_bridge.py), the other keys as gemma-2b's.
  exaone-4.0-32b: NVIDIA/TensorRT-LLM tests/unittest/_torch/modeling/test_modeling_exaone4.py
  (the 32B config with its two test edits undone: 64 layers, sliding_window 4096) and the
  "LLLG" sliding_window_pattern the released file carries (transformers issue #39696);
  exaone-4.0-1.2b: the model card's shape (30 layers, 32/8 heads, 65,536 positions) with
  head_dim 64, hidden 2048, intermediate 4096, tied embeddings and no sliding window as ports
  give them (vllm-metal PR #459; the 1.07B / 1.28B counts hold only with these).
  command-r-v01, command-r-plus: the released files (gated) as public re-uploads that name them
  in _name_or_path give them (prince-canuma/c4ai-command-r-v01-4bit;
  FriendliAI/c4ai-command-r-plus-fp8, as alpindale's GPTQ and amd's FP8 copies);
  minitron-4b-base, minitron-8b-base: nvidia/Minitron-4B-Base @475785a and
  nvidia/Minitron-8B-Base @0959baf config.json as their Hugging Face pages show them.
  phi-2: microsoft/phi-2's config.json as a public dump of HF configs gives it (checked against
  transformers' convert_phi_weights_to_hf.py and a printed PhiForCausalLM module tree).
  qwen2.5-vl-7b-instruct: Qwen's original upload (top-level language-model keys), as
  NVIDIA/TensorRT-LLM tests/unittest/_torch/modeling/test_modeling_qwen2_5vl.py gives it with
  its two test cuts undone (28 layers, vision depth 32).
  llava-1.5-7b-hf: llava-hf/llava-1.5-7b-hf's config.json after 05ae2434 ("Update text config
  to Vicuna"), byte for byte (950 bytes, as the Hub lists it) as a public copy gives it;
  llava-v1.6-mistral-7b-hf: NVIDIA/TensorRT-LLM tests/unittest/_torch/modeling/
  test_modeling_llava_next.py @b93e14ca with its vision depth cut undone (24);
  paligemma-3b-pt-224: google/paligemma-3b-pt-224's architecture keys as a fine-tune saved from
  it carries them (hyacinthum/paligemma_vqav2).
Published figures are rounded: each test allows half the last printed digit, unless noted.
"""

import json
from pathlib import Path

import pytest

from planner.errors import InputError
from planner.inputs.loader import load_model, make_problem

CONFIGS = Path(__file__).parent / "hf_configs"

# name: (published total, half its last printed digit, where it is published)
PUBLISHED_TOTAL = {
    "gemma-2-2b-it": (2.61e9, 0.005e9, "HF model page google/gemma-2-2b-it: 2.61B params"),
    "gemma-2-9b": (9.24e9, 0.005e9, "HF model page google/gemma-2-9b: 9.24B params"),
    "gemma-2-27b": (27.2e9, 0.05e9, "HF model page google/gemma-2-27b: 27.2B params"),
    "gemma-3-1b-it": (999_885_952, 0, "HF safetensors count of google/gemma-3-1b-pt/-it"),
    "phi-3-mini-4k-instruct": (3.82e9, 0.005e9, "HF model page: 3.82B params"),
    "phi-3.5-mini-instruct": (3.82e9, 0.005e9, "HF model page: 3.82B params"),
    "phi-3-medium-4k-instruct": (13.96e9, 0.005e9, "HF model page: 13.96B params (card: 14B)"),
    "qwen2-7b": (7_615_616_512, 0, "HF num_parameters() of Qwen/Qwen2-7B"),
    "qwen3-0.6b": (0.6e9, 0.05e9, "Qwen/Qwen3-0.6B model card: 0.6B"),
    "qwen3-8b": (8.2e9, 0.05e9, "Qwen/Qwen3-8B model card: 8.2B"),
    "mistral-7b-v0.1": (7_241_732_096, 0, "HF num_parameters() of mistralai/Mistral-7B-v0.1"),
    "ernie-4.5-0.3b": (0.36e9, 0.005e9, "baidu/ERNIE-4.5-0.3B model card: 0.36B"),
    # "9B" and "32 billion parameters" (THUDM/GLM-4-0414 model cards) are rounded down from
    # 9.40B and 32.57B: half a billion either way.
    "glm-4-9b-0414": (9e9, 0.5e9, "THUDM/GLM-4-9B-0414 model card: 9B"),
    "glm-4-32b-0414": (32e9, 0.6e9, "THUDM/GLM-4-32B-0414 model card: 32 billion"),
    "seed-oss-36b": (36e9, 0.5e9, "ByteDance-Seed/Seed-OSS-36B model card: 36B"),
    # Granite 3.0/3.1 model cards' table: 8.1B for this shape (8.17B, truncated).
    "granite-3.3-8b-instruct": (8.1e9, 0.1e9, "ibm-granite model cards: 8.1B"),
    "smollm3-3b": (3e9, 0.1e9, "HuggingFaceTB/SmolLM3-3B model card: 3B"),
    # "a 15B parameter model" (bigcode/starcoder2-15b card): the nominal size; 15.96B counted.
    "starcoder2-15b": (15e9, 1e9, "bigcode/starcoder2-15b model card: 15B"),
    "apertus-8b-2509": (8e9, 0.1e9, "swiss-ai/Apertus model card: 8B"),
    "apertus-70b-2509": (70e9, 0.6e9, "swiss-ai/Apertus model card: 70B"),
    "afm-4.5b": (4.6e9, 0.05e9, "HF page arcee-ai/AFM-4.5B: 4.6B params"),
    "command-a-03-2025": (111e9, 0.5e9, "CohereLabs command-a-03-2025 card: 111 billion"),
    # keras-hub gemma_presets.py "params" (Google's Keras checkpoints of the same weights).
    "gemma-2b": (2_506_172_416, 0, "keras-hub gemma_presets.py gemma_2b_en: 2506172416"),
    "gemma-7b": (8_537_680_896, 0, "keras-hub gemma_presets.py gemma_7b_en: 8537680896"),
    "exaone-4.0-32b": (32.0e9, 0.05e9, "LG-AI-EXAONE/EXAONE-4.0 README: Model Size 32.0B"),
    "exaone-4.0-1.2b": (1.28e9, 0.005e9, "LG-AI-EXAONE/EXAONE-4.0 README: Model Size 1.28B"),
    # Leaderboard request files carry the Hub's safetensors count in billions, three decimals.
    # Command R+'s figure holds only with its per-head query and key norms (Qwen3's shared
    # ones would give 103.810).
    "command-r-v01": (34.981e9, 0.0005e9, "OALL/requests c4ai-command-r-v01: params 34.981"),
    "command-r-plus": (103.811e9, 0.0005e9,
                       "openlifescienceai/requests c4ai-command-r-plus: params 103.811"),
    "minitron-4b-base": (4.19e9, 0.005e9, "HF page mlx-community/Minitron-4B-Base: 4.19B"),
    # nvidia/Minitron-8B-Base card: "8B" (8.27B counted; its 16.5 GB of bf16 weights agree).
    "minitron-8b-base": (8e9, 0.5e9, "nvidia/Minitron-8B-Base model card: 8B"),
    # The Hub's safetensors count of microsoft/phi-2 (F16 2,779,683,840; card "2.7 billion").
    "phi-2": (2_779_683_840, 0, "HF safetensors metadata of microsoft/phi-2"),
}

# name: (published count without the embedding and output matrices, half its last digit)
PUBLISHED_NON_EMBEDDING = {
    # Gemma Team 2024, arXiv:2408.00118, Table 2 (exact; the final norm included).
    "gemma-2-2b-it": (2_024_517_888, 0),
    "gemma-2-9b": (8_324_201_984, 0),
    "gemma-2-27b": (26_047_480_320, 0),
    # Gemma Team 2025, arXiv:2503.19786, Table 1: 698M and 25,600M.
    "gemma-3-1b-it": (698e6, 0.5e6),
    "gemma-3-27b-it": (25_600e6, 0.5e6),
    # Model cards ("Number of Parameters (Non-Embedding)").
    "qwen2.5-7b": (6.53e9, 0.005e9),
    "qwen3-0.6b": (0.44e9, 0.005e9),
    "qwen3-8b": (6.95e9, 0.005e9),
    # CohereLabs c4ai-command-r7b-12-2024 card: "7 billion parameters", the layers without
    # the tied 256,000-row embedding (8.03B with it).
    "command-r7b-12-2024": (7e9, 0.05e9),
    # LGAI-EXAONE model cards: "Number of Parameters (without embeddings)".
    "exaone-4.0-32b": (30.95e9, 0.005e9),
    "exaone-4.0-1.2b": (1.07e9, 0.005e9),
}


def _load(name):
    return load_model(str(CONFIGS / f"{name}.json"))[0]


def _embedding_and_output(model) -> int:
    return sum(b.params().total for b in model.blocks if b.kind in ("embedding", "output"))


def _layers(model):
    return [model.blocks[i] for i in model.layer_indices]


@pytest.mark.parametrize("name", sorted(PUBLISHED_TOTAL))
def test_dense_config_total_matches_published(name):
    published, rounding, _ = PUBLISHED_TOTAL[name]
    total = _load(name).num_params
    assert abs(total - published) <= rounding, f"{total:,} vs {published:,.0f}"


@pytest.mark.parametrize("name", sorted(PUBLISHED_NON_EMBEDDING))
def test_dense_config_non_embedding_matches_published(name):
    published, rounding = PUBLISHED_NON_EMBEDDING[name]
    model = _load(name)
    counted = model.num_params - _embedding_and_output(model)
    assert abs(counted - published) <= rounding, f"{counted:,} vs {published:,.0f}"


def test_qwen2_5_7b_total_as_the_card_truncates_it():
    # The Qwen2.5-7B card prints 7.61B for the same shapes as Qwen2-7B's 7,615,616,512: the
    # figure is truncated to two decimals, not rounded.
    total = _load("qwen2.5-7b").num_params
    assert 7.61e9 <= total < 7.62e9


def test_gemma3_27b_embedding_row_counts_the_vision_projector():
    # Gemma 3 report Table 1 gives 27B 1,416M embedding parameters: the 262,208 x 5376 word
    # embedding (Gemma3TextConfig's default vocab_size, absent from the file) plus the image
    # projector of the vision model (1152 x 5376 and an RMSNorm of 1152,
    # Gemma3MultiModalProjector), which we leave out of the language model.
    model = _load("gemma-3-27b-it")
    projector = 1152 * 5376 + 1152
    assert abs(model.blocks[0].params().total + projector - 1_416e6) <= 0.5e6


def test_gemma2_layer_shape_and_alternating_windows():
    model = _load("gemma-2-9b")
    layers = _layers(model)
    layer = layers[0]
    # gemma-2-9b: 16 heads of 256 on a 3584 residual (head_dim is its own), 8 KV heads,
    # GeGLU, four RMSNorms, tied embeddings (arXiv:2408.00118, Table 1).
    assert (layer.hidden, layer.num_heads, layer.dim_per_head, layer.kv_heads) == (3584, 16, 256, 8)
    assert (layer.mlp.value, layer.norms_per_layer, layer.qk_norm) == ("geglu", 4, False)
    assert model.blocks[-1].tied
    # Local (4096) and global layers alternate, the first local (Sec. 2).
    windows = [b.sliding_window for b in layers]
    assert windows[:4] == [4096, None, 4096, None] and windows.count(4096) == 21


def test_gemma3_five_local_layers_to_one_global():
    layers = _layers(_load("gemma-3-1b-it"))
    windows = [b.sliding_window for b in layers]
    # sliding_window_pattern 6: layers 6, 12, 18, 24 (counting from 1) attend globally.
    assert [i for i, w in enumerate(windows) if w is None] == [5, 11, 17, 23]
    assert set(windows) - {None} == {512}
    assert layers[0].qk_norm and layers[0].norms_per_layer == 4


def test_gemma3_layer_types_list_gives_the_same_pattern(tmp_path):
    # transformers >= 4.53 writes layer_types instead of sliding_window_pattern.
    config = json.loads((CONFIGS / "gemma-3-1b-it.json").read_text())
    del config["sliding_window_pattern"]
    config["layer_types"] = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention"
                             for i in range(26)]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    layers = _layers(load_model(str(path))[0])
    assert [b.sliding_window for b in layers] == [b.sliding_window
                                                  for b in _layers(_load("gemma-3-1b-it"))]


def test_gemma3_window_pattern_of_one_is_every_layer_global(tmp_path):
    # Gemma3TextConfig: "sliding_attention" if (i + 1) % pattern else "full_attention", so a
    # pattern of 1 makes no layer local (the model file's pattern 1 would make all local).
    config = json.loads((CONFIGS / "gemma-3-1b-it.json").read_text())
    config["sliding_window_pattern"] = 1
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert {b.sliding_window for b in _layers(load_model(str(path))[0])} == {None}


def test_irregular_layer_types_are_refused_naming_the_key(tmp_path):
    config = json.loads((CONFIGS / "gemma-3-27b-it.json").read_text())
    config["text_config"]["layer_types"] = ["sliding_attention", "full_attention",
                                            "full_attention"] + ["sliding_attention"] * 59
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(InputError, match=r"config.json: text_config.layer_types: only a repeating"):
        load_model(str(path))


def test_gemma3_multimodal_prices_the_language_model_and_says_so():
    path = str(CONFIGS / "gemma-3-27b-it.json")
    model = _load("gemma-3-27b-it")
    layers = _layers(model)
    assert len(layers) == 62 and layers[0].dim_per_head == 128
    # Defaults of Gemma3TextConfig fill what text_config leaves out: 131,072 positions.
    assert model.max_context == 131_072
    assert sum(b.sliding_window == 1024 for b in layers) == 52
    problem = make_problem(path, "dgx-h100", gpus=8)
    assert problem.notes[0] == (f"{path}: only the gemma3 language model (text_config) is "
                                f"priced; the vision encoder (vision_config) and its projector "
                                f"are not")


def test_mistral3_prices_its_mistral_language_model_and_says_so(tmp_path):
    """Mistral Small 3.1: "24B parameters" (Mistral AI's announcement and model card), the
    Pixtral encoder (about 0.4B) included; the language model alone is 23.57B."""
    path = str(CONFIGS / "mistral-small-3.1-24b.json")
    problem = make_problem(path, "dgx-h100", gpus=8)
    layers = _layers(problem.model)
    assert len(layers) == 40 and {b.sliding_window for b in layers} == {None}
    assert abs(problem.model.num_params - 24e9) <= 0.02 * 24e9
    assert problem.model.num_params == 23_572_403_200
    assert problem.notes[0] == (f"{path}: only the mistral3 language model (text_config) is "
                                f"priced; the Pixtral vision encoder (vision_config) and its "
                                f"projector are not")
    config = json.loads((CONFIGS / "mistral-small-3.1-24b.json").read_text())
    config["text_config"]["model_type"] = "mistral4"
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps(config))
    with pytest.raises(InputError, match=r"config.json: text_config.model_type: 'mistral4' is "
                                         r"not supported \(did you mean 'mistral'\?\); a "
                                         r"mistral3 config's language model is one of: "
                                         r"llama, mistral$"):
        load_model(str(bad))


def test_phi3_and_mistral_windows_on_every_layer():
    # Phi3Attention and MistralAttention pass config.sliding_window to every layer.
    assert {b.sliding_window for b in _layers(_load("phi-3-mini-4k-instruct"))} == {2047}
    assert {b.sliding_window for b in _layers(_load("mistral-7b-v0.1"))} == {4096}
    # Phi-3.5-mini's 262,144 is longer than its 131,072 positions: it never binds.
    assert {b.sliding_window for b in _layers(_load("phi-3.5-mini-instruct"))} == {None}


def test_gemma2_without_head_dim_is_one_line_exit_2(cli, write, small_cluster):
    config = json.loads((CONFIGS / "gemma-2-9b.json").read_text())
    del config["head_dim"]
    path = write("config.json", json.dumps(config))
    strategy = write("strategy.yaml", "tp: 1\npp: 1\nmicro_batch: 1\n")
    code, _, err = cli("memory", path, small_cluster, strategy)
    assert (code, err.strip()) == (2, f"Error: {path}: head_dim: required key is missing")


def test_gemma3_without_text_config_names_it(tmp_path):
    config = json.loads((CONFIGS / "gemma-3-27b-it.json").read_text())
    del config["text_config"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(InputError, match=r"config.json: text_config: required mapping is missing"):
        load_model(str(path))


def test_megatron_refuses_gemma_it_cannot_describe(cli, tmp_path):
    path = str(CONFIGS / "gemma-2-2b-it.json")
    code, _, err = cli("plan", path, "dgx-h100", "--gpus", "8", "--emit", "megatron",
                       "--out", str(tmp_path))
    assert (code, err.strip().splitlines()[-1]) == (
        2, "Error: --emit megatron: gemma-2-2b-it has a GeGLU MLP and norms after its attention "
           "and MLP (four a layer) (as Gemma 2/3 and GLM-4 do); pretrain_gpt.py has no flag for "
           "it (Megatron-Bridge builds such models from its own layer spec)")
    code, _, err = cli("plan", str(CONFIGS / "glm-4-9b-0414.json"), "dgx-h100", "--gpus", "8",
                       "--emit", "megatron", "--out", str(tmp_path))
    assert (code, err.strip().splitlines()[-1]) == (
        2, "Error: --emit megatron: glm-4-9b-0414 has norms after its attention and MLP (four a "
           "layer) (as Gemma 2/3 and GLM-4 do); pretrain_gpt.py has no flag for it "
           "(Megatron-Bridge builds such models from its own layer spec)")


def test_megatron_refuses_side_by_side_layers(cli, tmp_path):
    for name in ("phi-2", "command-r-v01"):
        code, _, err = cli("plan", str(CONFIGS / f"{name}.json"), "dgx-h100", "--gpus", "64",
                           "--emit", "megatron", "--out", str(tmp_path))
        assert (code, err.strip().splitlines()[-1]) == (
            2, f"Error: --emit megatron: {name} runs attention and its MLP side by side on one "
               f"norm (as Falcon, Command R and Phi-2 do); pretrain_gpt.py has no flag for it, "
               f"and its flags would build a sequential layer")


def test_partial_rotary_is_read_and_emitted(cli, tmp_path):
    # partial_rotary_factor: GLM-4.5 0.5 (Glm4MoeConfig), Minitron 0.5, Phi-2 0.4; MiniMax-M2's
    # rotary_dim 64 of head_dim 128; Pythia's rotary_pct (GPTNeoXConfig default 0.25).
    for name, share in (("minitron-8b-base", 0.5), ("phi-2", 0.4), ("minimax-m2", 0.5),
                        ("qwen3-8b", 1.0)):
        assert _layers(_load(name))[0].partial_rotary == share, name
    pythia = {"model_type": "gpt_neox", "hidden_size": 512, "num_hidden_layers": 6,
              "num_attention_heads": 8, "intermediate_size": 2048, "vocab_size": 50304}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(pythia))
    assert _layers(load_model(str(path))[0])[0].partial_rotary == 0.25
    path.write_text(json.dumps({**pythia, "rotary_pct": 1.5}))
    with pytest.raises(InputError, match=r"config.json: rotary_pct: must be a number in \(0, 1\] "
                                         r"\(got 1.5\)"):
        load_model(str(path))
    out = tmp_path / "emit"
    code, _, err = cli("plan", str(CONFIGS / "minitron-8b-base.json"), "dgx-h100", "--gpus", "16",
                       "--emit", "megatron", "--out", str(out))
    assert code == 0, err
    script = (out / "pretrain_gpt.sh").read_text()
    assert "--rotary-percent 0.5" in script and "--squared-relu" in script


def test_partial_rotary_needs_rotary_positions():
    from planner.schemas.model import TransformerBlock
    with pytest.raises(ValueError, match=r"partial_rotary \(0.5\) turns part of each head with "
                                         r"rotary positions: it needs position rotary \(got "
                                         r"learned\)"):
        TransformerBlock(hidden=64, num_heads=4, partial_rotary=0.5)


def test_olmo2_and_olmo3_layers(tmp_path):
    # OLMo 2 model card (allenai/OLMo-2-1124-7B): 32 layers, hidden 4096, 32 heads, 4096
    # context; "OLMo 2 7B" (7.30B in the checkpoint's shapes).
    model = _load("olmo-2-1124-7b")
    layers = _layers(model)
    assert len(layers) == 32 and layers[0].hidden == 4096 and layers[0].num_heads == 32
    assert layers[0].qk_norm and not layers[0].bias and layers[0].sliding_window is None
    assert abs(model.num_params - 7e9) <= 0.05 * 7e9
    # OLMo 3: Olmo3Config's default layer_types, three sliding-window layers (4096) then one
    # full-attention layer.
    import json
    config = json.loads((CONFIGS / "olmo-2-1124-7b.json").read_text())
    config.update(model_type="olmo3", architectures=["Olmo3ForCausalLM"], sliding_window=4096)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    windows = [b.sliding_window for b in _layers(load_model(str(path))[0])]
    assert windows[:8] == [4096, 4096, 4096, None] * 2 and windows.count(None) == 8


def test_glm4_four_norms_and_qkv_biases_seed_oss_qkv_biases(tmp_path):
    """GLM-4-0414 (modeling_glm4.py): four RMSNorms a layer, biases on Q, K, V only;
    Seed-OSS: biases on Q, K, V only, and other bias settings refused naming the key."""
    glm = _layers(_load("glm-4-9b-0414"))[0]
    assert glm.norms_per_layer == 4 and glm.qkv_bias and not glm.bias
    seed = _layers(_load("seed-oss-36b"))[0]
    assert seed.qkv_bias and not seed.bias and seed.dim_per_head == 128
    config = json.loads((CONFIGS / "seed-oss-36b.json").read_text())
    config["mlp_bias"] = True
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps(config))
    with pytest.raises(InputError, match=r"config.json: mlp_bias: true: only biases on Q, K and "
                                         r"V \(attention_bias\) are modelled for seed_oss"):
        load_model(str(bad))


def test_granite_smollm3_starcoder2_apertus_arcee_cohere2_layers():
    """What each mapper reads (modeling_<type>.py), beside the counts above."""
    assert _load("granite-3.3-8b-instruct").blocks[-1].tied        # tie_word_embeddings true
    smol = _load("smollm3-3b")
    assert smol.blocks[-1].tied and {b.sliding_window for b in _layers(smol)} == {None}
    star = _layers(_load("starcoder2-15b"))[0]
    assert (star.mlp.value, star.norm.value, star.bias, star.sliding_window) == (
        "gelu", "layernorm", True, 4096)
    apertus = _layers(_load("apertus-8b-2509"))[0]
    assert apertus.mlp.value == "gelu" and apertus.qk_norm and not apertus.bias
    assert _layers(_load("afm-4.5b"))[0].mlp.value == "squared_relu"
    command = _layers(_load("command-r7b-12-2024"))
    # One LayerNorm feeds attention and MLP side by side; three sliding layers to one global.
    assert command[0].norms_per_layer == 1 and command[0].mlp.value == "swiglu"
    assert [b.sliding_window for b in command[:4]] == [4096, 4096, 4096, None]


def test_gemma1_reads_head_dim_and_ties_by_default():
    # gemma-7b: 16 heads of 256 on a 3072 residual (Gemma report arXiv:2403.08295, Table 1);
    # gemma-2b: one key-value head. Neither file says tie_word_embeddings: GemmaConfig ties.
    big = _load("gemma-7b")
    layer = _layers(big)[0]
    assert (layer.hidden, layer.num_heads, layer.dim_per_head, layer.kv_heads) == (
        3072, 16, 256, 16)
    assert (layer.mlp.value, layer.norms_per_layer, layer.bias) == ("geglu", 2, False)
    assert big.blocks[-1].tied and _layers(_load("gemma-2b"))[0].kv_heads == 1


def test_exaone4_windows_and_norms(tmp_path):
    layers = _layers(_load("exaone-4.0-32b"))
    # "LLLG": three sliding layers of 4096 to one global, 16 of 64 global.
    assert [b.sliding_window for b in layers[:4]] == [4096, 4096, 4096, None]
    assert sum(b.sliding_window is None for b in layers) == 16
    assert layers[0].qk_norm and layers[0].norms_per_layer == 2 and not layers[0].bias
    assert {b.sliding_window for b in _layers(_load("exaone-4.0-1.2b"))} == {None}
    # transformers >= 4.54 writes layer_types: the same layers.
    config = json.loads((CONFIGS / "exaone-4.0-32b.json").read_text())
    config["layer_types"] = ["full_attention" if (i + 1) % 4 == 0 else "sliding_attention"
                             for i in range(64)]
    del config["sliding_window_pattern"]
    typed = tmp_path / "config.json"
    typed.write_text(json.dumps(config))
    assert [b.sliding_window for b in _layers(load_model(str(typed))[0])] == [
        b.sliding_window for b in layers]
    config["sliding_window_pattern"], config["layer_types"] = "LGLL", None
    typed.write_text(json.dumps(config))
    with pytest.raises(InputError, match=r"config.json: sliding_window_pattern: 'LGLL': only a "
                                         r"run of 'L' \(sliding\) layers closed by one 'G'"):
        load_model(str(typed))


def test_cohere_and_nemotron_layers():
    plus = _layers(_load("command-r-plus"))[0]
    # One LayerNorm feeds attention and MLP side by side; R+ normalises queries and keys with
    # a weight per head (CohereLayerNorm of (96, 128) and (8, 128)).
    assert (plus.norms_per_layer, plus.mlp.value, plus.qk_norm, plus.qk_norm_per_head) == (
        1, "swiglu", True, True)
    shared = plus.model_copy(update={"qk_norm_per_head": False, "qk_norm": False})
    assert plus.params().sharded - shared.params().sharded == (96 + 8) * 128
    assert not _layers(_load("command-r-v01"))[0].qk_norm and _load("command-r-v01").blocks[-1].tied
    mini = _load("minitron-8b-base")
    layer = _layers(mini)[0]
    # Minitron-8B: 48 heads of 128 on a 4096 residual (head_dim given), ReLU^2, LayerNorms.
    assert (layer.num_heads, layer.dim_per_head, layer.kv_heads) == (48, 128, 8)
    assert (layer.mlp.value, layer.norm.value, layer.bias) == ("squared_relu", "layernorm", False)
    assert not mini.blocks[-1].tied


def test_nemotron_older_keys_and_what_it_refuses(tmp_path):
    config = json.loads((CONFIGS / "minitron-8b-base.json").read_text())
    # Nemotron-Mini-4B-Instruct's first files name the head size kv_channels.
    config["kv_channels"] = config.pop("head_dim")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert load_model(str(path))[0].num_params == _load("minitron-8b-base").num_params
    config["hidden_act"] = "silu"
    path.write_text(json.dumps(config))
    with pytest.raises(InputError, match=r"config.json: hidden_act: 'silu': only relu2"):
        load_model(str(path))


def test_per_head_qk_norm_needs_qk_norm(tmp_path):
    from planner.schemas.model import TransformerBlock
    with pytest.raises(ValueError, match="qk_norm_per_head describes the query and key norms"):
        TransformerBlock(hidden=64, num_heads=4, qk_norm_per_head=True)


def test_phi2_parallel_block_with_biases():
    layer = _layers(_load("phi-2"))[0]
    # One LayerNorm feeds attention and a two-matrix GeLU MLP; biases everywhere, a biased head.
    assert (layer.norms_per_layer, layer.mlp.value, layer.norm.value, layer.bias) == (
        1, "gelu", "layernorm", True)
    assert _load("phi-2").blocks[-1].params().total == 51200 * 2560 + 51200


def test_qwen2_5_vl_prices_the_qwen2_decoder_from_either_layout(tmp_path):
    model, _ = load_model(str(CONFIGS / "qwen2.5-vl-7b-instruct.json"))
    # The language model is Qwen2-7B's shape: HF num_parameters() of Qwen/Qwen2-7B.
    assert model.num_params == 7_615_616_512
    assert any("vision encoder (vision_config)" in n for n in model.notes)
    # transformers >= 4.50 saves the decoder's keys under text_config (v5: only there).
    config = json.loads((CONFIGS / "qwen2.5-vl-7b-instruct.json").read_text())
    text = {key: config.pop(key) for key in ("hidden_size", "intermediate_size",
                                              "num_hidden_layers", "num_attention_heads",
                                              "num_key_value_heads", "vocab_size",
                                              "max_position_embeddings", "rms_norm_eps")}
    config["text_config"] = {"model_type": "qwen2_5_vl_text", **text}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    nested, _ = load_model(str(path))
    assert nested.num_params == model.num_params and not nested.blocks[-1].tied



# name: (the published count of the language model the wrapper's text_config describes, the
# rows its vocabulary adds, whether the head shares them, where the count is published)
WRAPPED_LANGUAGE_MODELS = {
    # Vicuna-7B v1.5 is Llama 2 7B's shape: 6,738,415,616 (HF num_parameters() of
    # meta-llama/Llama-2-7b-hf); LLaVA adds 64 rows (<image>, <pad> and padding) to 32,064.
    "llava-1.5-7b-hf": (6_738_415_616, 64, False),
    # Mistral-7B-Instruct-v0.2 is Mistral 7B's shape (7,241,732,096, HF num_parameters() of
    # mistralai/Mistral-7B-v0.1), its window off (sliding_window: null in the text config).
    "llava-v1.6-mistral-7b-hf": (7_241_732_096, 64, False),
    # PaliGemma's decoder is Gemma 2B (2,506,172,416, keras-hub gemma_2b_en) with 1,216 more
    # rows (257,216: the 1,024 location and 128 segmentation tokens, and padding), tied.
    "paligemma-3b-pt-224": (2_506_172_416, 1216, True),
}


@pytest.mark.parametrize("name", sorted(WRAPPED_LANGUAGE_MODELS))
def test_vision_language_wrappers_price_their_language_model(name):
    published, rows, tied = WRAPPED_LANGUAGE_MODELS[name]
    model = _load(name)
    hidden = _layers(model)[0].hidden
    assert model.num_params == published + rows * hidden * (1 if tied else 2)
    assert model.blocks[-1].tied is tied
    assert any("vision tower (vision_config) and its projector are not" in n
               for n in model.notes)


def test_vision_language_wrapper_text_types(tmp_path):
    mistral = _layers(_load("llava-v1.6-mistral-7b-hf"))[0]
    assert mistral.sliding_window is None and mistral.kv_heads == 8
    # InternVL3 names its qwen2 decoder; without a model_type the wrapper's default (qwen2)
    # is read; a text model the planner has no defaults for is refused by name.
    config = {"model_type": "internvl", "text_config": {"hidden_size": 3584,
              "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
              "num_key_value_heads": 4, "vocab_size": 151674}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    layer = _layers(load_model(str(path))[0])[0]
    assert layer.qkv_bias and (layer.hidden, layer.kv_heads) == (3584, 4)
    config["text_config"]["model_type"] = "phi3"
    path.write_text(json.dumps(config))
    with pytest.raises(InputError, match=r"config.json: text_config.model_type: 'phi3': "
                                         r"internvl's language model is read as one of llama, "):
        load_model(str(path))
