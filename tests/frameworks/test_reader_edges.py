"""Inputs a review found to crash or mislead: each now gives one line (exit 2) or a finding
with the framework's own words."""

from __future__ import annotations

import json

import pytest


def _validate(cli, write, name, text, *args, model="llama3-8b", cluster="dgx-h100"):
    path = write(name, text)
    code, out, err = cli("validate", model, cluster, path, "--no-compare", "--json", *args)
    return code, (json.loads(out) if out else None), err, path


@pytest.mark.parametrize(("name", "text", "cluster", "message"), [
    ("ds.json", '{"train_batch_size": 64, "pipeline": {"stages": 2, '
                '"activation_checkpoint_interval": "1"}}', "dgx-h100",
     "pipeline.activation_checkpoint_interval: must be a non-negative integer (got '1')"),
    ("ds.json", '{"train_batch_size": 64, "optimizer": {"type": "Adam", "params": [1]}}',
     "dgx-h100", "optimizer.params: must be an object of arguments (got [1])"),
    ("job.toml", "parallelism = 3\n", "dgx-h100", "parallelism: must be a table of settings "
                                                  "(got 3)"),
    ("job.toml", '[parallelism]\npipeline_parallel_degree = 2\n'
                 'module_fqns_per_model_part = ["tok_embeddings", "layers.0"]\n', "dgx-h100",
     "module_fqns_per_model_part: expected a list of lists of module names, one list per "
     "model part"),
    ("setup.py", "import mindspore as ms\nms.set_auto_parallel_context(device_num=8)\n"
                 "runner_config = dict(batch_size=BS)\n", "ascend-910b",
     "batch_size: computed when the file runs (BS); planner validate needs a number there"),
    ("setup.py", "from mindformers.modules.transformer import TransformerOpParallelConfig\n"
                 "parallel_config = TransformerOpParallelConfig(data_parallel=4, "
                 "pipeline_stage=2, micro_batch_num=4)\nmodel_config = dict(offset=['1', -1])\n",
     "ascend-910b", "model_config.offset: expected 2 integers, one per pipeline stage "
                    "(got ['1', -1])"),
    ("train.sh", "--num-layers 32 --pipeline-model-parallel-size 4 "
                 "--pipeline-model-parallel-layout 'E||t*16|t*16L'\n", "dgx-h100",
     "--pipeline-model-parallel-layout E||t*16|t*16L: virtual stage 0 holds no decoder layer; "
     "Megatron-LM allows it, the planner needs a layer in every stage"),
])
def test_unreadable_configs_give_one_line(cli, write, name, text, cluster, message):
    code, _, err, path = _validate(cli, write, name, text, "--gpus", "8", cluster=cluster)
    assert code == 2
    assert err.splitlines() == [f"Error: {path}: {message}"]


def _megatron_findings(result) -> list[str]:
    return [v["message"] for v in result["violations"] if v["rule"] == "megatron_flag"]


@pytest.mark.parametrize(("flags", "finding"), [
    ("--pipeline-model-parallel-layout 't*8|Et*8|t*8|t*8L'",
     "Megatron-LM stops: the first layer of --pipeline-model-parallel-layout must be "
     "embedding (E)"),
    ("--pipeline-model-parallel-layout 'Et*8|t*8|t*8|t*7L'",
     "Megatron-LM stops: number of decoder layers (31) must match num_layers (32)"),
    ("--pipeline-model-parallel-layout 'Et*8|t*8|t*8|t*8L' --num-virtual-stages-per-pipeline-"
     "rank 2", "Megatron-LM stops: no more than one of --num-virtual-stages-per-pipeline-rank, "
               "--pipeline-model-parallel-layout can be set at the same time"),
    ("--decoder-first-pipeline-num-layers 7",
     "Megatron-LM stops: number of layers at middle stage: 25 must be divisible by the middle "
     "pipeline model parallel size 3"),
    ("--num-virtual-stages-per-pipeline-rank 2 --decoder-first-pipeline-num-layers 7 "
     "--decoder-last-pipeline-num-layers 7",
     "Megatron-LM stops: number of layers at first stage: 7 must be divisible by virtual "
     "pipeline parallel degree 2"),
    ("--num-layers-per-virtual-pipeline-stage 3",
     "Megatron-LM stops: number of layers per pipeline stage (8) must be divisible by number "
     "of layers per virtual pipeline stage (3)"),
])
def test_megatron_pipeline_layouts_it_refuses(cli, write, flags, finding):
    text = (f"--num-layers 32 --tensor-model-parallel-size 1 --pipeline-model-parallel-size 4 "
            f"--micro-batch-size 1 --global-batch-size 64 --bf16 {flags}\n")
    code, result, err, _ = _validate(cli, write, "args.txt", text, "--gpus", "8")
    assert code == 1, err
    assert finding in _megatron_findings(result)


def test_torchtitan_layers_per_stage_that_does_not_split_over_the_ranks(cli, write):
    text = ("[parallelism]\npipeline_parallel_degree = 4\npipeline_parallel_layers_per_stage = 4"
            "\npipeline_parallel_schedule = 'Interleaved1F1B'\n[training]\nlocal_batch_size = 8\n")
    code, result, _, _ = _validate(cli, write, "job.toml", text, "--gpus", "8")
    assert "torchtitan stops: number of virtual stages (9) must be divisible by pipeline " \
           "parallel size (4)" in [v["message"] for v in result["violations"]]


def test_torchtitan_default_split_gives_the_ends_fewer_layers(cli, write):
    # 32 layers + the embedding's and output's weight of one layer each, on 4 stages:
    # 34 effective layers, 9 9 8 8, less one on the first and the last stage.
    text = "[parallelism]\npipeline_parallel_degree = 4\n[training]\nlocal_batch_size = 8\n"
    code, result, err, _ = _validate(cli, write, "job.toml", text, "--gpus", "8")
    assert result["strategy"]["layers_per_stage"] == [8, 9, 8, 7]


def test_a_model_with_a_norm_between_layer_stacks_plans_and_validates(cli, write, tmp_path):
    model = write("mixed.yaml", """\
name: mixed
layers:
  - {kind: embedding, vocab_size: 32000, hidden: 2048}
  - {kind: transformer, hidden: 2048, num_heads: 16, repeat: 12}
  - {kind: norm, hidden: 2048}
  - {kind: transformer, hidden: 2048, num_heads: 16, ffn_hidden: 16384, repeat: 12}
  - {kind: norm, hidden: 2048}
  - {kind: output, vocab_size: 32000, hidden: 2048}
training: {seq_len: 2048, global_batch: 64}
""")
    code, out, err = cli("plan", model, "dgx-a100-40gb", "--gpus", "16", "--pp", "8", "--json")
    assert code == 0, err
    for plan in json.loads(out)["plans"]:
        assert sum(plan["strategy"]["layers_per_stage"]) == 24


def test_launch_scripts_spread_gpus_evenly_over_nodes(cli, tmp_path):
    code, _, err = cli("plan", "llama3-8b", "dgx-h100", "--gpus", "12", "--global-batch", "96",
                       "--emit", "torchrun", "--out", str(tmp_path), "--top", "1")
    assert code == 0, err
    script = (tmp_path / "torchrun.sh").read_text()
    assert "NNODES=${NNODES:-2}            # 12 GPUs = 2 x 6" in script
    assert "NPROC_PER_NODE=${NPROC_PER_NODE:-6}" in script
    code, _, err = cli("plan", "llama3-8b", "dgx-h100", "--gpus", "13", "--global-batch", "104",
                       "--emit", "torchrun", "--out", str(tmp_path / "13"), "--top", "1")
    assert code == 2 and err.splitlines() == [
        "Error: --emit: 13 GPUs cannot be spread evenly over nodes of 8 (torchrun starts as "
        "many processes on every node); use a GPU count that 2 nodes share equally"]


def test_solver_options_that_cannot_work(cli, tmp_path):
    code, _, err = cli("plan", "llama3-8b", "dgx-h100", "--gpus", "8", "--time-limit", "0.0001")
    assert code == 1 and err.startswith("Error: CP-SAT found no plan within the 0.0001 s wall-clock safety net (--time-limit)")
    code, _, err = cli("plan", "llama3-8b", "dgx-h100", "--gpus", "8", "--export-model",
                       str(tmp_path / "missing" / "model.pb"))
    assert code == 2 and "cannot write the model there" in err
    code, _, _ = cli("plan", "llama3-8b", "dgx-h100", "--gpus", "8", "--export-model",
                     str(tmp_path / "model.pb"), "--top", "1")
    assert code == 0 and (tmp_path / "model.pb").stat().st_size > 0
    code, _, err = cli("plan", "llama3-8b", "dgx-h100", "--tokens", "inf")
    assert code == 2 and "must be a positive number (got inf)" in err


def test_emit_needs_an_embedding_and_an_output_layer(cli, write, tmp_path):
    model = write("stack.yaml", """\
name: stack
layers:
  - {kind: transformer, hidden: 2048, num_heads: 16, repeat: 24}
training: {seq_len: 2048, global_batch: 64}
""")
    code, _, err = cli("plan", model, "dgx-a100-40gb", "--gpus", "8", "--emit", "megatron",
                       "--out", str(tmp_path / "out"))
    # dgx-a100-40gb's efficiencies are assumed: a note says so before the error.
    errors = [line for line in err.splitlines() if not line.startswith("note: ")]
    assert code == 2 and errors == [
        "Error: --emit megatron: stack has no embedding; megatron launch configs describe a "
        "language model with an embedding and an output layer"]


@pytest.mark.parametrize(("flags", "finding"), [
    # arguments.py: --fp8-param-gather needs the distributed optimizer (or FSDP).
    ("--fp8-format hybrid --fp8-recipe tensorwise --fp8-param-gather",
     "Megatron-LM stops: --fp8-param-gather needs --use-distributed-optimizer (or "
     "Megatron-FSDP)"),
])
def test_megatron_fp8_settings_it_refuses(cli, write, flags, finding):
    text = (f"--num-layers 32 --tensor-model-parallel-size 4 --pipeline-model-parallel-size 2 "
            f"--micro-batch-size 1 --global-batch-size 64 --bf16 {flags}\n")
    code, result, err, _ = _validate(cli, write, "args.txt", text, "--gpus", "8")
    assert code == 1, err
    assert finding in _megatron_findings(result)


def test_megatron_fp8_flags_set_the_precision_and_recipe(cli, write):
    text = ("--num-layers 32 --tensor-model-parallel-size 4 --pipeline-model-parallel-size 2 "
            "--micro-batch-size 1 --global-batch-size 64 --bf16 --fp8-format e4m3 "
            "--fp8-recipe blockwise --use-distributed-optimizer --fp8-param-gather\n")
    code, result, err, _ = _validate(cli, write, "args.txt", text, "--gpus", "8")
    assert result["precision"] == "fp8" and result["fp8_recipe"] == "blockwise", err
    assert result["strategy"]["fp8_param_gather"] is True


def _torchtitan_pipeline(schedule, *, pp=4, per_stage=None, local_batch=8):
    lines = [f"pipeline_parallel_degree = {pp}", f"pipeline_parallel_schedule = '{schedule}'"]
    if per_stage is not None:
        lines.append(f"pipeline_parallel_layers_per_stage = {per_stage}")
    return ("[parallelism]\n" + "\n".join(lines)
            + f"\n[training]\nlocal_batch_size = {local_batch}\n")


@pytest.mark.parametrize(("schedule", "per_stage", "local_batch", "finding"), [
    # torch.distributed.pipelining schedules.py get_schedule_class: an unknown name is a
    # ValueError; the base classes run only a CSV schedule (torchtitan pipeline_parallel.py).
    ("DualPipe", None, 8, "torchtitan stops: unknown pipeline schedule 'DualPipe' (did you "
                          "mean 'DualPipeV'?)"),
    ("PipelineScheduleMulti", None, 8, "torchtitan stops: PipelineScheduleMulti is an abstract "
                                       "base class that runs only a schedule read from "
                                       "pipeline_parallel_schedule_csv"),
    # ScheduleZBVZeroBubble / ScheduleDualPipeV: "ZBV requires exactly 2 stages per rank";
    # 34 effective layers at 3 a stage: 12 stages, 3 a rank. The planner's pipeline_schedule
    # rule (the one gate of search and validate) says so.
    ("ZBVZeroBubble", 3, 8, "pipeline_schedule zbv places exactly 2 stages on each rank (a V), "
                            "and vpp is 3 (torch.distributed.pipelining)"),
    # ScheduleDualPipeV: "DualPipeV requires at least as many microbatches as stages".
    ("DualPipeV", None, 4, "pipeline_schedule dualpipev needs at least as many micro-batches "
                           "as stages (2 * pp = 8), and a step has 4"),
])
def test_torchtitan_pipeline_schedules_it_refuses(cli, write, schedule, per_stage, local_batch,
                                                  finding):
    text = _torchtitan_pipeline(schedule, per_stage=per_stage, local_batch=local_batch)
    code, result, err, _ = _validate(cli, write, "job.toml", text, "--gpus", "8")
    assert code == 1, err
    assert finding in [v["message"] for v in result["violations"]]


@pytest.mark.parametrize(("schedule", "says"), [
    ("LoopedBFS", "pipeline_parallel_schedule LoopedBFS runs each local stage's forwards"),
    ("GPipe", "its memory is a lower bound"),
])
def test_torchtitan_schedules_priced_as_another_say_so(cli, write, schedule, says):
    code, result, err, _ = _validate(cli, write, "job.toml", _torchtitan_pipeline(schedule),
                                     "--gpus", "8")
    assert code == 0, err
    assert [n for n in result["notes"] if "pipeline_parallel_schedule" in n and says in n]


@pytest.mark.parametrize(("schedule", "priced", "placement"), [
    ("DualPipeV", "dualpipev", True),
    ("zbvzerobubble", "zbv", True),                 # names match without case
    ("InterleavedZeroBubble", "zero_bubble", False),
])
def test_torchtitan_zero_bubble_schedules_are_priced_as_themselves(cli, write, schedule, priced,
                                                                   placement):
    code, result, err, _ = _validate(cli, write, "job.toml", _torchtitan_pipeline(schedule),
                                     "--gpus", "8")
    assert code == 0, err
    assert result["strategy"]["pipeline_schedule"] == priced
    v_note = [n for n in result["notes"] if "rank r holds stages r and 2 pp - 1 - r" in n]
    assert bool(v_note) is placement


def test_torchtitan_schedule_without_a_pipeline_has_no_effect(cli, write):
    text = _torchtitan_pipeline("DualPipeV", pp=1, local_batch=1)
    code, result, err, _ = _validate(cli, write, "job.toml", text, "--gpus", "8")
    assert code == 0, err
    assert "parallelism.pipeline_parallel_schedule has no effect at pipeline_parallel_degree " \
           "1 (no pipeline)" in result["notes"]


@pytest.mark.parametrize(("schedule", "vpp", "name"), [("zbv", 2, "ZBVZeroBubble"),
                                                       ("zero_bubble", 2, "InterleavedZeroBubble"),
                                                       ("dualpipev", 2, "DualPipeV")])
def test_torchtitan_zero_bubble_schedule_round_trip(cli, write, tmp_path, schedule, vpp, name):
    strategy = write("strategy.yaml", f"tp: 8\npp: 4\nvpp: {vpp}\ndp: 2\nmicro_batch: 1\n"
                                      f"sequence_parallel: true\nrecompute: full\nzero_stage: 3\n"
                                      f"global_batch: 64\npipeline_schedule: {schedule}\n")
    out = tmp_path / "out"
    code, _, err = cli("emit", "llama3-70b", "dgx-h100", strategy, "--gpus", "64", "--target",
                       "torchtitan", "--out", str(out))
    assert code == 0, err
    toml = (out / "torchtitan.toml").read_text()
    assert f'pipeline_parallel_schedule = "{name}"' in toml
    code, read, err = cli("validate", "llama3-70b", "dgx-h100", str(out / "torchtitan.toml"),
                          "--gpus", "64", "--no-compare", "--json")
    assert code == 0, err
    assert json.loads(read)["strategy"]["pipeline_schedule"] == schedule
