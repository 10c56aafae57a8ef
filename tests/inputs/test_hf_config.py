"""Hugging Face config.json files of each supported family load, and their parameter counts
match the published (num_parameters()) counts of the real checkpoints."""

import json

import pytest

from planner.inputs.loader import load_model

CONFIGS = {
    # meta-llama/Llama-2-7b-hf
    "llama": ({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
               "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
               "vocab_size": 32000, "max_position_embeddings": 4096,
               "tie_word_embeddings": False}, 6_738_415_616),
    # mistralai/Mistral-7B-v0.1 (7.24B)
    "mistral": ({"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
                 "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
                 "vocab_size": 32000, "max_position_embeddings": 32768}, 7_241_732_096),
    # mistralai/Mixtral-8x7B-v0.1
    "mixtral": ({"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
                 "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
                 "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000,
                 "max_position_embeddings": 32768}, 46_702_792_704),
    # Qwen/Qwen2-7B (biases on q, k, v)
    "qwen2": ({"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944,
               "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
               "vocab_size": 152064, "max_position_embeddings": 131072,
               "tie_word_embeddings": False}, 7_615_616_512),
    # openai-community/gpt2 (124M)
    "gpt2": ({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
              "n_positions": 1024, "vocab_size": 50257}, 124_439_808),
    # EleutherAI/gpt-neox-20b (model card)
    "gpt_neox": ({"model_type": "gpt_neox", "hidden_size": 6144, "intermediate_size": 24576,
                  "num_attention_heads": 64, "num_hidden_layers": 44, "vocab_size": 50432,
                  "max_position_embeddings": 2048, "tie_word_embeddings": False},
                 20_554_567_680),
    # bigscience/bloom (legacy n_embed key)
    "bloom": ({"model_type": "bloom", "n_embed": 14336, "n_layer": 70, "n_head": 112,
               "vocab_size": 250880}, 176_247_271_424),
    # facebook/opt-125m (learned positions with 2 extra rows)
    "opt": ({"model_type": "opt", "hidden_size": 768, "ffn_dim": 3072, "num_attention_heads": 12,
             "num_hidden_layers": 12, "vocab_size": 50272, "max_position_embeddings": 2048,
             "word_embed_proj_dim": 768, "do_layer_norm_before": True}, 125_239_296),
    # tiiuae/falcon-7b (multi-query, parallel attention with one LayerNorm)
    "falcon": ({"model_type": "falcon", "hidden_size": 4544, "num_attention_heads": 71,
                "num_hidden_layers": 32, "vocab_size": 65024, "multi_query": True,
                "parallel_attn": True, "new_decoder_architecture": False, "bias": False},
               6_921_720_704),
    # google-bert/bert-large-uncased as BertForMaskedLM
    "bert": ({"model_type": "bert", "hidden_size": 1024, "intermediate_size": 4096,
              "num_attention_heads": 16, "num_hidden_layers": 24, "vocab_size": 30522,
              "max_position_embeddings": 512, "type_vocab_size": 2}, 335_174_458),
}


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_hf_config_parameter_count(tmp_path, family):
    config, expected = CONFIGS[family]
    path = tmp_path / family / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config))
    model, training = load_model(str(path))
    assert model.num_params == expected
    assert model.name == family
    assert training.seq_len <= 4096


def test_hf_config_defaults_batch_to_four_million_tokens(tmp_path):
    # No batch in a config.json: about 4M tokens (Llama 2/3 pretraining) at the run's seq_len,
    # so a longer context means fewer sequences, not 1024 sequences of 131K tokens.
    from planner.inputs.loader import make_problem

    config, _ = CONFIGS["llama"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    _, training = load_model(str(path))
    assert (training.seq_len, training.global_batch) == (4096, None)
    problem = make_problem(str(path), "dgx-h100", gpus=64)
    assert problem.training.global_batch == 1024
    long = make_problem(str(path), "dgx-h100", gpus=64, seq_len=131072)
    assert long.training.global_batch == 32
    # Llama 2's max_position_embeddings is 4096: say so, plan anyway.
    assert long.notes == (f"seq_len 131072 exceeds the 4096 positions {long.model.name} was "
                          f"built for (extend its context first)",)
