"""Bad input: one line naming the file, the field and the problem, exit status 2."""

import json

import pytest

from tests.conftest import SMALL_CLUSTER, TINY_MODEL

STRATEGY = "tp: 2\npp: 2\nmicro_batch: 1\n"


def memory_args(model, cluster, strategy):
    return ("memory", model, cluster, strategy)


@pytest.mark.parametrize(("model_text", "message"), [
    (TINY_MODEL.replace("num_layers", "num_layer"),
     "model.yaml: num_layer: unknown field (did you mean 'num_layers'?)"),
    (TINY_MODEL.replace("hidden: 64", "hidden: 60"),
     "model.yaml: hidden (60) must be divisible by num_heads (8)"),
    (TINY_MODEL.replace("num_layers: 4", "num_layers: 0"),
     "model.yaml: num_layers: Input should be greater than 0 (got 0)"),
    (TINY_MODEL.replace("num_layers: 4", "num_layers: -3"),
     "model.yaml: num_layers: Input should be greater than 0 (got -3)"),
    (TINY_MODEL.replace("hidden: 64", "hidden: sixty-four"),
     "model.yaml: hidden: Input should be a valid integer, unable to parse string as an "
     "integer (got 'sixty-four')"),
    (TINY_MODEL.replace("mlp", "xx").replace("vocab_size: 512", "vocab_size: 512\nmlp: relu2"),
     "model.yaml: mlp: Input should be 'gelu', 'swiglu', 'geglu' or 'squared_relu' (got "
     "'relu2')"),
    (TINY_MODEL.replace("  precison", "").replace("precision: bf16", "precison: bf16"),
     "model.yaml: training.precison: unknown field (did you mean 'precision'?)"),
    (TINY_MODEL.replace("vocab_size: 512\n", ""),
     "model.yaml: vocab_size: required field is missing"),
    ("name: x\nnum_layers: [1\n",
     "model.yaml: line 3, column 1: YAML syntax error: expected ',' or ']', but got '<stream end>'"),
    ("- a\n- b\n", "model.yaml: expected a mapping of fields at the top level, got a list"),
    ("", "model.yaml: expected a mapping of fields at the top level, got an empty file"),
])
def test_model_file_errors(cli, write, small_cluster, model_text, message):
    model = write("model.yaml", model_text)
    strategy = write("strategy.yaml", STRATEGY)
    code, out, err = cli(*memory_args(model, small_cluster, strategy))
    assert (code, err.strip().splitlines()) == (2, [f"Error: {model[:-len('model.yaml')]}{message}"])


@pytest.mark.parametrize(("cluster_text", "message"), [
    (SMALL_CLUSTER.replace("gpus_per_node: 4", "gpus_per_node: 0"),
     "cluster.yaml: gpus_per_node: Input should be greater than 0 (got 0)"),
    (SMALL_CLUSTER.replace("hbm_gb_per_s", "hbm_gbps"),
     "cluster.yaml: gpu.hbm_gbps: unknown field (did you mean 'hbm_gb_per_s'?)"),
    (SMALL_CLUSTER.replace("memory_gib: 16", "memory_gib: -16"),
     "cluster.yaml: gpu.memory_gib: Input should be greater than 0 (got -16)"),
])
def test_cluster_file_errors(cli, write, tiny_model, cluster_text, message):
    cluster = write("cluster.yaml", cluster_text)
    strategy = write("strategy.yaml", STRATEGY)
    code, _, err = cli(*memory_args(tiny_model, cluster, strategy))
    assert (code, err.strip().splitlines()) == (2, [f"Error: {cluster[:-len('cluster.yaml')]}{message}"])


@pytest.mark.parametrize(("strategy_text", "message"), [
    ("tp: 2\npp: 3\n", "strategy.yaml: dp: cannot derive dp: tp * pp (6) does not divide the "
                       "8 GPUs; give dp or change tp and pp"),
    ("tp: 2\nrecompute: partial\n", "strategy.yaml: recompute: Input should be 'none', "
                                    "'selective' or 'full' (got 'partial')"),
    ("tp: 2\nzero_stage: 5\n", "strategy.yaml: zero_stage: Input should be 0, 1, 2 or 3 (got 5)"),
    ("tp: 2\nmicro_bach: 2\n", "strategy.yaml: micro_bach: unknown field (did you mean "
                               "'micro_batch'?)"),
])
def test_strategy_file_errors(cli, write, tiny_model, small_cluster, strategy_text, message):
    strategy = write("strategy.yaml", strategy_text)
    code, _, err = cli(*memory_args(tiny_model, small_cluster, strategy))
    assert (code, err.strip().splitlines()) == (2, [f"Error: {strategy[:-len('strategy.yaml')]}{message}"])


@pytest.mark.parametrize(("args", "message"), [
    (("memory", "llama2-70", "dgx-a100-80gb", "s.yaml"),
     "Error: no model named 'llama2-70' in the zoo (did you mean 'llama2-70b'?); see `planner "
     "zoo`, or give a path to a model.yaml or config.json"),
    (("memory", "llama2-70b", "dgx-a100-80", "s.yaml"),
     "Error: no cluster preset named 'dgx-a100-80' (did you mean 'dgx-a100-80gb'?); presets: "
     "amd-mi300x, amd-mi325x, amd-mi355x, ascend-910b, dgx-a100-40gb, dgx-a100-80gb, dgx-b200, "
     "dgx-b300, dgx-h100, dgx-h200, dgx-h800, gb200-nvl72, gb300-nvl72"),
    (("memory", "missing/model.yaml", "dgx-a100-80gb", "s.yaml"),
     "Error: missing/model.yaml: file not found"),
    (("memory", "llama2-70b", "dgx-a100-80gb", "s.yaml", "--gpus", "99999", "--nodes", "10"),
     "Error: --gpus: 99999 exceeds the 80 GPUs of dgx-a100-80gb (10 nodes x 8); pass --nodes "
     "to describe a larger cluster"),
    (("memory", "llama2-70b", "dgx-a100-80gb", "s.yaml", "--gpus", "0"),
     "Error: --gpus: must be at least 1 (got 0)"),
    (("memory", "llama2-70b", "dgx-a100-80gb", "s.yaml", "--seq-len", "-1"),
     "Error: --seq-len: must be at least 1 (got -1)"),
    (("memory", "llama2-70b"),
     "Error: Missing argument 'CLUSTER'. (see 'planner memory --help')"),
])
def test_command_line_errors(cli, args, message):
    code, _, err = cli(*args)
    assert (code, err.strip().splitlines()) == (2, [message])


def test_layers_file_repeat_error(cli, write, small_cluster):
    model = write("model.yaml", "name: x\nlayers:\n  - kind: transformer\n    hidden: 64\n"
                                "    num_heads: 8\n    repeat: 0\n")
    strategy = write("strategy.yaml", STRATEGY)
    code, _, err = cli(*memory_args(model, small_cluster, strategy))
    assert code == 2
    assert err.strip() == f"Error: {model}: layers[0].repeat: must be a positive integer (got 0)"


def test_layers_file_typo_inside_a_block(cli, write, small_cluster):
    model = write("model.yaml", "name: x\nlayers:\n  - kind: transformer\n    hiden: 64\n"
                                "    num_heads: 8\n")
    strategy = write("strategy.yaml", STRATEGY)
    code, _, err = cli(*memory_args(model, small_cluster, strategy))
    assert code == 2
    assert err.strip().startswith(f"Error: {model}: layers[0].")
    assert "did you mean 'hidden'?" in err


def test_unknown_hf_model_type(cli, write, small_cluster):
    config = write("config.json", json.dumps({"model_type": "lama", "hidden_size": 8}))
    strategy = write("strategy.yaml", STRATEGY)
    code, _, err = cli(*memory_args(config, small_cluster, strategy))
    assert code == 2
    assert err.strip() == (f"Error: {config}: model_type: 'lama' is not supported "
                           f"(did you mean 'llama'?); supported: RefinedWeb, RefinedWebModel, "
                           f"apertus, arcee, bailing_moe, bailing_moe_v2, bert, bloom, cohere, "
                           f"cohere2, deepseek_v2, deepseek_v3, dots1, ernie4_5, ernie4_5_moe, "
                           f"exaone4, falcon, gemma, gemma2, gemma3, gemma3_text, glm4, glm4_moe,"
                           f" glm4v_moe, gpt2, gpt_neox, gpt_oss, granite, granitemoe, "
                           f"hunyuan_v1_moe, internvl, kimi_k2, kimi_k25, llama, llama4, "
                           f"llama4_text, llava, llava_next, llava_onevision, minimax_m2, "
                           f"mistral, mistral3, mixtral, nemotron, olmo2, olmo3, olmoe, opt, "
                           f"paligemma, phi, phi3, phimoe, qwen2, qwen2_5_vl, qwen2_moe, "
                           f"qwen2_vl, qwen3, qwen3_moe, qwen3_vl, qwen3_vl_moe, seed_oss, "
                           f"smollm3, starcoder2")


@pytest.mark.parametrize(("kind", "why"), [
    ("nemotron_h", "its layers mix attention with state-space (Mamba) or linear-attention"),
    ("qwen3_next", "its layers mix attention with state-space (Mamba) or linear-attention"),
    ("deepseek_v32", "DeepSeek Sparse Attention (a lightning indexer choosing 2,048 keys"),
    ("gemma3n", "Gemma 3n's per-layer embeddings, AltUp and MatFormer layers")])
def test_hf_types_known_and_not_modelled_say_why(cli, write, small_cluster, kind, why):
    # Close to supported names (nemotron, qwen3, deepseek_v3, gemma3): no "did you mean",
    # which would invite pricing another architecture under their shapes.
    config = write("config.json", json.dumps({"model_type": kind, "hidden_size": 8}))
    code, _, err = cli(*memory_args(config, small_cluster, write("strategy.yaml", STRATEGY)))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith(f"Error: {config}: model_type: '{kind}' is not supported: {why}")
    assert err.strip().endswith("no supported type stands in for it")
    assert "did you mean" not in err


def test_hf_missing_key(cli, write, small_cluster):
    config = write("config.json", json.dumps({"model_type": "llama", "hidden_size": 64}))
    strategy = write("strategy.yaml", STRATEGY)
    code, _, err = cli(*memory_args(config, small_cluster, strategy))
    assert (code, err.strip()) == (2, f"Error: {config}: num_hidden_layers: required key is missing")
