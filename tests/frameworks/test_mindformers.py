"""MindFormers run YAMLs read as MindFormers runs them onto MindSpore: the parallel_config,
parallel and recompute_config blocks, the global batch of trainer/base_trainer.py, and what
MindFormers or MindSpore would refuse or silently change."""

from __future__ import annotations

import json

# The parallel part of mindspore-lab/mindformers research/llama3_1/llama3_1_8b/
# finetune_llama3_1_8b.yaml @fd4deebc (datasets, optimizer and callbacks left out).
LLAMA31_8B = """\
run_mode: 'train'
runner_config:
  epochs: 2
  batch_size: 1
  sink_mode: True
  sink_size: 1
use_parallel: True
parallel:
  parallel_mode: 1 # 0-data parallel, 1-semi-auto parallel, 2-auto parallel, 3-hybrid parallel
  gradients_mean: False
  enable_alltoall: False
  full_batch: True
  search_mode: "sharding_propagation"
  enable_parallel_optimizer: True
  strategy_ckpt_save_file: "./ckpt_strategy.ckpt"
  parallel_optimizer_config:
    gradient_accumulation_shard: False
    parallel_optimizer_threshold: 64
parallel_config:
  data_parallel: 8
  model_parallel: 1
  pipeline_stage: 1
  use_seq_parallel: False
  micro_batch_num: 1
  vocab_emb_dp: True
  gradient_aggregation_group: 4
micro_batch_interleave_num: 1
recompute_config:
  recompute: True
  select_recompute: False
  parallel_optimizer_comm_recompute: False
  mp_comm_recompute: True
  recompute_slice_activation: True
model:
  model_config:
    type: LlamaConfig
    batch_size: 1 # add for increase predict
    seq_length: 8192
    hidden_size: 4096
    num_layers: 32
    compute_dtype: "bfloat16"
    offset: 0
"""


def _validate(cli, write, text, *args, model="llama3-8b", name="run.yaml"):
    path = write(name, text)
    code, out, err = cli("validate", model, "ascend-910b", path, "--json", "--no-compare",
                         *args)
    assert out, err
    return code, json.loads(out)


def _rules(result) -> dict[str, tuple[str, str]]:
    return {v["rule"]: (v["message"], v["fix"]) for v in result["violations"]}


def test_the_llama3_1_8b_finetune_config_reads_as_mindformers_runs_it(cli, write):
    code, result = _validate(cli, write, LLAMA31_8B)
    s = result["strategy"]
    assert result["target"] == "mindformers" and result["num_gpus"] == 8
    assert (s["dp"], s["tp"], s["pp"], s["micro_batch"]) == (8, 1, 1, 1)
    # base_trainer.py, no pipeline: batch_size x data_parallel x interleave x accumulation
    # = 1 x 8 x 1 x 1.
    assert s["global_batch"] == 8
    assert (s["recompute"], s["zero_stage"], s["sequence_parallel"]) == ("full", 1, False)
    assert result["seq_len"] == 8192
    assert ("parallel.search_mode 'sharding_propagation' only works in auto_parallel; "
            "semi_auto_parallel ignores it") in result["notes"]
    # Nothing MindFormers or MindSpore refuses (the planner's memory estimate is its own).
    assert not [r for r in _rules(result) if r.startswith(("mindspore", "mindformers",
                                                            "gpu_count"))]


def test_a_planner_strategy_yaml_is_still_read_as_one(cli, write):
    code, result = _validate(cli, write, "dp: 8\nmicro_batch: 1\nzero_stage: 1\n",
                             name="strategy.yaml")
    assert result["target"] is None and result["strategy"]["dp"] == 8


def test_unknown_keys_stop_mindformers_with_did_you_mean(cli, write):
    text = LLAMA31_8B.replace("  model_parallel: 1\n", "  model_paralel: 1\n").replace(
        "  recompute: True\n  select", "  recompute: True\n  selec_recompute: True\n  select")
    code, result = _validate(cli, write, text)
    assert code == 1
    messages = [v["message"] for v in result["violations"]]
    assert ("MindFormers stops: TransformerOpParallelConfig got an unexpected keyword argument "
            "'model_paralel' (parallel_config.model_paralel) (did you mean 'model_parallel'?)"
            in messages)
    assert ("MindFormers stops: TransformerRecomputeConfig got an unexpected keyword argument "
            "'selec_recompute' (recompute_config.selec_recompute) (did you mean "
            "'select_recompute'?)" in messages)


def test_recompute_in_parallel_config_clashes(cli, write):
    # core/parallel_config.py passes recompute=config.recompute_config next to
    # **config.parallel_config.
    text = LLAMA31_8B.replace("  vocab_emb_dp: True\n", "  vocab_emb_dp: True\n  recompute: True\n")
    code, result = _validate(cli, write, text)
    assert _rules(result)["mindformers_unknown_key"] == (
        "MindFormers stops: parallel_config.recompute clashes with the recompute_config it "
        "passes to TransformerOpParallelConfig (\"got multiple values for keyword argument "
        "'recompute'\")", "move recompute to recompute_config")


def test_parallel_mode_names_are_upper_case(cli, write):
    # tools/utils.py PARALLEL_MODE: 0-3 or DATA_PARALLEL, SEMI_AUTO_PARALLEL, ...
    text = LLAMA31_8B.replace("parallel_mode: 1 ", "parallel_mode: semi_auto_parallel ")
    code, result = _validate(cli, write, text)
    message, fix = _rules(result)["mindspore_mode"]
    assert message.startswith("MindFormers stops: parallel.parallel_mode 'semi_auto_parallel' "
                              "is not one of 0, 1, 2, 3, DATA_PARALLEL")
    assert message.endswith("(did you mean 'SEMI_AUTO_PARALLEL'?)")


def test_without_a_parallel_mode_model_parallel_is_dropped(cli, write):
    # validators.py: parallel_mode defaults to 0 (data parallel); base_trainer.py then resets
    # model_parallel to 1.
    text = LLAMA31_8B.replace("  parallel_mode: 1 # 0-data parallel, 1-semi-auto parallel, "
                              "2-auto parallel, 3-hybrid parallel\n", "").replace(
        "data_parallel: 8", "data_parallel: 2").replace("model_parallel: 1", "model_parallel: 4")
    code, result = _validate(cli, write, text)
    assert _rules(result)["mindspore_mode"] == (
        "parallel.parallel_mode data_parallel: MindFormers resets model_parallel and "
        "context_parallel to 1 and runs data parallelism only",
        "use parallel_mode: 1 (semi_auto_parallel)")


def test_optimizer_shard_has_no_effect(cli, write):
    # transformer.py: "optimizer_shard is deprecated from MindFormers r0.7. It will not have
    # any effect."
    text = LLAMA31_8B.replace("enable_parallel_optimizer: True", "enable_parallel_optimizer: "
                              "False").replace("  vocab_emb_dp: True\n",
                                               "  vocab_emb_dp: True\n  optimizer_shard: True\n")
    code, result = _validate(cli, write, text)
    assert result["strategy"]["zero_stage"] == 0
    assert _rules(result)["mindformers_optimizer_shard"][1] == (
        "set parallel.enable_parallel_optimizer: true")


PIPELINE = LLAMA31_8B.replace("data_parallel: 8", "data_parallel: 2").replace(
    "model_parallel: 1", "model_parallel: 2").replace("pipeline_stage: 1", "pipeline_stage: 4")


def test_a_pipeline_needs_as_many_micro_batches_as_stages(cli, write):
    # transformer.py TransformerOpParallelConfig: "The micro_batch_num must be greater than or
    # equal to pipeline_stage when training."
    code, result = _validate(cli, write, PIPELINE)
    assert result["num_gpus"] == 16 and result["strategy"]["pp"] == 4
    assert _rules(result)["mindspore_micro_batches"][0] == (
        "micro_batch_num (1) must be at least pipeline_stage (4) for MindSpore")
    assert ("vocab_emb_dp: MindFormers resets it to false with pipeline_stage > 1 "
            "(core/parallel_config.py)") in result["notes"]


def test_pipeline_global_batch_and_uneven_offsets(cli, write):
    text = PIPELINE.replace("micro_batch_num: 1", "micro_batch_num: 8").replace(
        "micro_batch_interleave_num: 1", "micro_batch_interleave_num: 2").replace(
        "offset: 0", "offset: [0, 1, 1, -2]")
    code, result = _validate(cli, write, text)
    s = result["strategy"]
    # base_trainer.py with a pipeline: batch_size x data_parallel x micro_batch_num x
    # micro_batch_interleave_num = 1 x 2 x 8 x 2.
    assert s["global_batch"] == 32 and s["micro_batch"] == 2
    assert s["layers_per_stage"] == [8, 9, 9, 6]
    assert any(n.startswith("micro_batch_interleave_num 2: each micro-batch of 2 samples")
               for n in result["notes"])


def test_data_parallel_times_model_parallel_times_stages_must_be_the_devices(cli, write):
    # tools/check_rules.py _check_parallel (semi_auto_parallel): dp * mp * cp * pp must equal
    # device_num.
    code, result = _validate(cli, write, PIPELINE.replace("micro_batch_num: 1",
                                                          "micro_batch_num: 4"), "--gpus", "32")
    assert code == 1 and "gpu_count" in _rules(result)


def test_a_config_for_another_model(cli, write):
    code, result = _validate(cli, write, LLAMA31_8B, model="llama2-13b")
    mismatches = [(v["message"], v["fix"]) for v in result["violations"]
                  if v["rule"] == "mindformers_model_mismatch"]
    assert mismatches == [
        ("model_config.num_layers is 32 but llama2-13b has 40: the config trains another model "
         "than the one planned", "use num_layers 40, or plan for the config's model"),
        ("model_config.hidden_size is 4096 but llama2-13b has 5120: the config trains another "
         "model than the one planned", "use hidden_size 5120, or plan for the config's model")]


def test_use_flash_attention_sets_the_runs_attention_kernel(cli, write):
    # The finetune config leaves model_config.use_flash_attention unset: priced with the run's
    # kernel (flash), with a note that LlamaConfig's own default is False.
    _, unset = _validate(cli, write, LLAMA31_8B)
    assert unset["attention"] == "flash"
    assert any(n.startswith("model.model_config.use_flash_attention not set")
               for n in unset["notes"])
    _, result = _validate(cli, write, LLAMA31_8B + "    use_flash_attention: True\n")
    assert result["attention"] == "flash"
    _, unfused = _validate(cli, write, LLAMA31_8B + "    use_flash_attention: False\n")
    assert unfused["attention"] == "unfused"
    first = [r["memory"]["stages"][0]["activations_bytes"] for r in (result, unfused)]
    assert first[0] < first[1]
    # The command line wins over the file, and says so.
    _, given = _validate(cli, write, LLAMA31_8B + "    use_flash_attention: False\n",
                         "--attention", "flash")
    assert given["attention"] == "flash"
    assert "--attention flash replaces the file's attention unfused" in given["notes"]


def test_auto_parallel_says_the_search_may_change_the_degrees(cli, write):
    # parallel_mode 2: MindSpore searches the shards at compile time (sharding_propagation
    # from the strategies parallel_config seeds); before, the fixed dp/tp were priced silently.
    text = LLAMA31_8B.replace("parallel_mode: 1 ", "parallel_mode: 2 ")
    code, out, err = cli("validate", "llama3-8b", "ascend-910b", write("run.yaml", text),
                         "--json", "--no-compare")
    notes = json.loads(out)["notes"]
    assert ("parallel.parallel_mode 2 (auto_parallel): MindSpore's sharding_propagation search "
            "picks the operator shards when it compiles the graph, from the ones "
            "parallel_config sets; priced as parallel_config's fixed data_parallel 8, "
            "model_parallel 1, which the search may change") in notes
