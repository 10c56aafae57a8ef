"""`planner validate` on users' own configs: what each framework would refuse or silently get
wrong, in one sentence with a fix, and exit codes (0 valid, 1 problems, 2 unreadable)."""

from __future__ import annotations

import json

import pytest

DS_BATCH = """{
  "train_batch_size": 512,
  "train_micro_batch_size_per_gpu": 2,
  "gradient_accumulation_steps": 16,
  "zero_optimisation": {"stage": 3},
  "bf16": {"enabled": true}
}
"""


def _validate(cli, write, name, text, *args, model="llama3-8b", cluster="dgx-h100"):
    path = write(name, text)
    code, out, err = cli("validate", model, cluster, path, "--json", "--no-compare", *args)
    return code, (json.loads(out) if out else None), err


def _rules(result) -> list[tuple[str, str, str]]:
    return [(v["rule"], v["message"], v["fix"]) for v in result["violations"]]


def test_deepspeed_misspelled_key_and_batch_disagreement(cli, write):
    code, result, _ = _validate(cli, write, "ds.json", DS_BATCH, "--gpus", "8")
    assert code == 1 and result["target"] == "deepspeed"
    assert _rules(result)[:2] == [
        ("deepspeed_unknown_key", "DeepSpeed silently ignores the unknown top-level key "
         "'zero_optimisation' (did you mean 'zero_optimization'?), so ZeRO stays at stage 0",
         "rename 'zero_optimisation' to 'zero_optimization'"),
        ("deepspeed_batch", "DeepSpeed stops: train_batch_size (512) is not equal to "
         "train_micro_batch_size_per_gpu (2) * gradient_accumulation_steps (16) * "
         "data-parallel world size (8)", "use gradient_accumulation_steps 32"),
    ]
    assert result["strategy"]["zero_stage"] == 0        # what DeepSpeed would actually run


def test_deepspeed_infers_its_world_size_from_the_batch_keys(cli, write):
    text = DS_BATCH.replace("zero_optimisation", "zero_optimization")
    code, result, _ = _validate(cli, write, "ds.json", text)
    assert result["num_gpus"] == 16 and result["strategy"]["dp"] == 16
    assert result["strategy"]["zero_stage"] == 3


def test_deepspeed_zero_key_and_precision(cli, write):
    text = ('{"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1, '
            '"zero_optimization": {"stage": 2, "overlap_com": true}, '
            '"fp16": {"enabled": true}, "bf16": {"enabled": true}}')
    code, result, _ = _validate(cli, write, "ds.json", text, "--gpus", "8")
    rules = _rules(result)
    assert ("deepspeed_zero_key", "DeepSpeed refuses zero_optimization.overlap_com: extra "
            "fields are not permitted (did you mean 'overlap_comm'?)",
            "fix or remove zero_optimization.overlap_com") in rules
    assert ("deepspeed_precision", "DeepSpeed stops: bfloat16 and fp16 modes cannot be "
            "simultaneously enabled", "enable one of fp16 and bf16") in rules


@pytest.mark.parametrize(("text", "message"), [
    ("{", "ds.json: line 1, column 2: JSON syntax error: Expecting property name enclosed "
          "in double quotes"),
    ('{"train_batch_size": 8, "train_batch_size": 16}',
     "ds.json: duplicate keys ['train_batch_size']: DeepSpeed refuses such a config"),
    ('{"train_batch_size": -8}', "ds.json: train_batch_size: must be a positive integer "
                                 "(got -8)"),
    ("[1, 2]", "ds.json: a DeepSpeed config is a JSON object at the top level"),
])
def test_unreadable_deepspeed_configs_exit_2(cli, write, text, message):
    path = write("ds.json", text)
    code, out, err = cli("validate", "llama3-8b", "dgx-h100", path, "--no-compare")
    assert (code, out) == (2, "")
    assert err.splitlines() == [f"Error: {path[:-len('ds.json')]}{message}"]


MEGATRON = """#!/bin/bash
TP=${TP:-16}
export CUDA_DEVICE_MAX_CONNECTIONS=1
torchrun --nnodes 4 --nproc-per-node 8 pretrain_gpt.py \\
    --num-layers 32 --hidden-size 4096 --num-attention-heads 32 \\
    --tensor-model-parallel-size $TP --pipeline-model-parallel-size 1 \\
    --micro-batch-size 1 --global-batch-size 512 --bf16 \\
    --recompute-granularity full --tensor-paralel-size 2
"""


def test_megatron_script_with_tp_that_does_not_divide_the_heads(cli, write):
    code, result, _ = _validate(cli, write, "train.sh", MEGATRON.replace("${TP:-16}", "3"),
                                model="llama2-7b")
    assert code == 1 and result["num_gpus"] == 32 and result["strategy"]["tp"] == 3
    rules = _rules(result)
    assert ("tp_divides_heads", "tp (3) must divide num_heads (32): tensor parallelism splits "
            "attention by heads", "use tp 2 (dp 16)") in rules
    assert ("megatron_flag", "Megatron-LM stops: unrecognized arguments: --tensor-paralel-size "
            "(did you mean --tensor-model-parallel-size?)",
            "rename --tensor-paralel-size to --tensor-model-parallel-size") in rules
    assert ("megatron_flag", "Megatron-LM stops: --recompute-granularity full needs "
            "--recompute-method (uniform or block)",
            "add --recompute-method uniform --recompute-num-layers 1") in rules
    assert any(r[0] == "gpu_count" for r in rules)      # tp 3 does not divide 32 GPUs


SP_AT_TP_1 = ("sequence_parallel has no effect at tp 1: it splits activations over the "
              "tensor-parallel ranks (Megatron-LM turns it off, with a warning)")


def test_megatron_model_mismatch_and_silent_sequence_parallelism(cli, write):
    text = """--num-layers 40 --hidden-size 4096 --num-attention-heads 32
--tensor-model-parallel-size 1 --sequence-parallel --micro-batch-size 2
--global-batch-size 256 --bf16
"""
    code, result, _ = _validate(cli, write, "args.txt", text, "--gpus", "8",
                                model="llama2-7b")
    rules = _rules(result)
    assert ("megatron_model_mismatch", "--num-layers is 40 but llama2-7b has 32: the script "
            "trains another model than the one planned",
            "use --num-layers 32, or plan for the script's model") in rules
    assert SP_AT_TP_1 in result["notes"]


def test_megatron_head_size_and_rotary_share_mismatch(cli, write):
    # Minitron-8B: 48 heads of 128 on a 4096 residual, rotary on half of each head
    # (nvidia/Minitron-8B-Base config.json: head_dim 128, partial_rotary_factor 0.5).
    from pathlib import Path
    model = str(Path(__file__).parent.parent / "inputs" / "hf_configs" / "minitron-8b-base.json")
    text = """--num-layers 32 --hidden-size 4096 --num-attention-heads 48 --kv-channels 64
--position-embedding-type rope --rotary-percent 1.0 --squared-relu --normalization LayerNorm
--group-query-attention --num-query-groups 8 --micro-batch-size 1 --global-batch-size 64 --bf16
"""
    code, result, _ = _validate(cli, write, "args.txt", text, "--gpus", "8", model=model)
    rules = _rules(result)
    assert ("megatron_model_mismatch", "--kv-channels is 64 but minitron-8b-base has 128: the "
            "script trains another model than the one planned",
            "use --kv-channels 128, or plan for the script's model") in rules
    assert ("megatron_model_mismatch", "--rotary-percent is 1 but minitron-8b-base has 0.5: the "
            "script trains another model than the one planned",
            "use --rotary-percent 0.5, or plan for the script's model") in rules
    fixed = text.replace("--kv-channels 64", "--kv-channels 128").replace(
        "--rotary-percent 1.0", "--rotary-percent 0.5")
    code, result, _ = _validate(cli, write, "args.txt", fixed, "--gpus", "8", model=model)
    assert not [r for r in _rules(result) if r[0] == "megatron_model_mismatch"]


def test_megatron_needs_one_cuda_connection_with_tp(cli, write):
    text = MEGATRON.replace("export CUDA_DEVICE_MAX_CONNECTIONS=1\n", "").replace(
        "${TP:-16}", "8").replace(" --tensor-paralel-size 2", " --recompute-method uniform "
                                  "--recompute-num-layers 1")
    code, result, _ = _validate(cli, write, "train.sh", text, model="llama2-7b")
    assert _rules(result) == [
        ("megatron_environment", "Megatron-LM stops on pre-Blackwell GPUs: tensor parallelism "
         "needs CUDA_DEVICE_MAX_CONNECTIONS=1 in the environment",
         "add export CUDA_DEVICE_MAX_CONNECTIONS=1")]


def test_megatron_uneven_first_and_last_stages_are_read(cli, write):
    # Megatron-LM's --decoder-first/last-pipeline-num-layers: 126 layers on 16 stages with
    # one layer fewer on the first and the last (Llama 3 405B).
    text = ("--num-layers 126 --tensor-model-parallel-size 8 --pipeline-model-parallel-size 16 "
            "--decoder-first-pipeline-num-layers 7 --decoder-last-pipeline-num-layers 7 "
            "--micro-batch-size 1 --global-batch-size 2048 --bf16 --use-distributed-optimizer")
    code, result, _ = _validate(cli, write, "args.txt", text, "--gpus", "8192",
                                "--nodes", "1024", model="llama3-405b")
    assert result["strategy"]["layers_per_stage"] == [7] + [8] * 14 + [7]
    assert result["memory"] is not None


TITAN = """[training]
local_batch_size = 2
seq_len = 8192
[parallelism]
data_parallel_shard_degree = 4
tensor_parallel_degree = 8
pipeline_parallel_degree = 1
tensor_paralel_degree = 4
[activation_checkpoint]
mode = "full"
"""


def test_torchtitan_degrees_that_do_not_multiply_to_the_gpus(cli, write):
    code, result, _ = _validate(cli, write, "job.toml", TITAN, "--gpus", "64")
    rules = _rules(result)
    assert ("gpu_count", "dp * tp * pp (4 * 8 * 1 = 32) must equal the number of GPUs (64)",
            "use dp 8") in rules
    assert ("torchtitan_unknown_key", "torchtitan refuses parallelism.tensor_paralel_degree: "
            "no such field (did you mean 'tensor_parallel_degree'?)",
            "fix or remove parallelism.tensor_paralel_degree") in rules
    assert result["strategy"]["global_batch"] == 8          # local 2 x dp 4, no accumulation


def test_torchtitan_shard_degree_minus_one_takes_the_leftover_gpus(cli, write):
    text = TITAN.replace("data_parallel_shard_degree = 4", "data_parallel_shard_degree = -1") \
        .replace("tensor_paralel_degree = 4\n", "")
    code, result, _ = _validate(cli, write, "job.toml", text, "--gpus", "64")
    assert code == 0, result["violations"]
    assert result["strategy"]["dp"] == 8 and result["strategy"]["zero_stage"] == 3


COMPILE_CASES = [   # [compile] section: the model compiled, the loss eager
    ("", False, True),                                              # torchtitan's default
    ("[compile]\nenable = true\ncomponents = [\"model\", \"loss\"]\n", True, False),
    ("[compile]\nenable = true\n", True, False),                   # the default components
    ("[compile]\nenable = true\ncomponents = [\"model\"]\n", True, True),  # the loss left eager
    ("[compile]\nenable = true\ncomponents = [\"loss\"]\n", False, False),  # the model not
    ("[compile]\nenable = false\n", False, True),
]


@pytest.mark.parametrize(("section", "compiled", "eager_loss"), COMPILE_CASES)
def test_torchtitan_compile_section_sets_eager_pricing(cli, write, section, compiled,
                                                       eager_loss):
    text = (TITAN.replace("tensor_paralel_degree = 4\n", "")
            .replace("data_parallel_shard_degree = 4", "data_parallel_shard_degree = 8")
            + section)
    code, result, _ = _validate(cli, write, "job.toml", text, "--gpus", "64")
    assert result["eager"] is (not compiled)
    assert result["eager_loss"] is eager_loss
    notes = " ".join(result["notes"])
    assert ("compile is off" in notes) is (not compiled)


def test_torchtitan_2024_training_compile_flag(cli, write):
    text = (TITAN.replace("tensor_paralel_degree = 4\n", "")
            .replace("data_parallel_shard_degree = 4", "data_parallel_shard_degree = 8")
            .replace("seq_len = 8192", "seq_len = 8192\ncompile = true"))
    code, result, _ = _validate(cli, write, "job.toml", text, "--gpus", "64")
    assert result["eager"] is False
    # torchtitan of 2024 compiled the model only: its loss ran eager (train.py @9dec370).
    assert result["eager_loss"] is True
    assert "the loss is not compiled" in " ".join(result["notes"])



@pytest.mark.parametrize(("flag", "eager_loss"), [("--compile-loss", False),
                                                  ("--no-compile-loss", True)])
def test_command_line_compile_loss_wins_over_the_file(cli, write, flag, eager_loss):
    text = (TITAN.replace("tensor_paralel_degree = 4\n", "")
            .replace("data_parallel_shard_degree = 4", "data_parallel_shard_degree = 8")
            + "[compile]\nenable = true\ncomponents = [\"model\"]\n")
    code, result, _ = _validate(cli, write, "job.toml", text, "--gpus", "64", flag)
    assert result["eager_loss"] is eager_loss
    # The file's framework (torchtitan) takes the flags: no note that they do nothing on the
    # default framework the command started from.
    assert not any("has no effect with megatron" in n for n in result["notes"])


MINDSPORE = """import mindspore as ms
from mindformers.modules.transformer import TransformerOpParallelConfig
ms.set_auto_parallel_context(parallel_mode="semi_auto_parallel", device_num=64,
                             pipeline_stages=2, enable_paralel_optimizer=True)
parallel_config = TransformerOpParallelConfig(data_parallel=8, model_parallel=4,
                                              pipeline_stage=2, micro_batch_num=1)
runner_config = dict(batch_size=2)
"""


def test_mindspore_unknown_keyword_and_too_few_micro_batches(cli, write):
    code, result, _ = _validate(cli, write, "parallel.py", MINDSPORE, model="llama2-7b",
                                cluster="ascend-910b")
    rules = _rules(result)
    assert result["num_gpus"] == 64 and result["strategy"]["global_batch"] == 16
    assert ("mindspore_unknown_key", "MindSpore stops: set_auto_parallel_context does not know "
            "'enable_paralel_optimizer' (did you mean 'enable_parallel_optimizer'?)",
            "fix or remove enable_paralel_optimizer") in rules
    assert ("mindspore_micro_batches", "micro_batch_num (1) must be at least pipeline_stage (2) "
            "for MindSpore", "use micro_batch 1 or fewer stages") in rules


def test_a_torchrun_launcher_alone_carries_no_strategy(cli, write):
    path = write("run.sh", "torchrun --nnodes 2 --nproc-per-node 8 train.py\n")
    code, out, err = cli("validate", "llama3-8b", "dgx-h100", path)
    assert code == 2
    assert err.strip().endswith("run.sh: a torchrun launcher carries only its world size (16 "
                                "GPUs), not a strategy; validate the training config it launches")


def test_validate_compares_with_the_best_plan(cli, write):
    path = write("s.yaml", "tp: 8\npp: 1\nmicro_batch: 1\nrecompute: full\nzero_stage: 1\n")
    code, out, err = cli("validate", "llama3-8b", "dgx-h100", path, "--gpus", "16")
    assert code == 0, err
    line = [l for l in out.splitlines() if l.startswith("your strategy")]
    assert line and "x faster" in " ".join(out.split())


def test_a_strategy_that_does_not_fit_exits_1(cli, write):
    path = write("s.yaml", "tp: 1\npp: 1\n")
    code, out, err = cli("validate", "llama2-70b", "dgx-h100", path, "--gpus", "8", "--json",
                         "--no-compare")
    result = json.loads(out)
    assert code == 1 and result["valid"] is False and result["memory"]["fits"] is False
    assert [v["rule"] for v in result["violations"]] == ["memory_fits"]


def test_emit_refuses_to_overwrite_without_force(cli, tmp_path):
    args = ("plan", "llama3-8b", "dgx-h100", "--gpus", "8", "--emit", "deepspeed",
            "--out", str(tmp_path), "--top", "1")
    assert cli(*args)[0] == 0
    before = (tmp_path / "ds_config.json").read_text()
    code, out, err = cli(*args)
    assert code == 2
    assert err.splitlines() == [f"Error: --out: {tmp_path / 'ds_config.json'} exists; pass "
                                f"--force to overwrite it"]
    assert (tmp_path / "ds_config.json").read_text() == before
    assert cli(*args, "--force")[0] == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds_config.json"]   # no temp files


def test_emit_converts_a_config_between_frameworks(cli, write, tmp_path):
    text = (DS_BATCH.replace("zero_optimisation", "zero_optimization")
            .replace('"gradient_accumulation_steps": 16', '"gradient_accumulation_steps": 32')
            .replace('"bf16"', '"activation_checkpointing": {}, "bf16"'))
    path = write("ds.json", text)
    code, _, err = cli("emit", "llama3-8b", "dgx-h100", path, "--gpus", "8", "--target",
                       "megatron", "--out", str(tmp_path / "out"))
    assert code == 0, err
    script = (tmp_path / "out" / "pretrain_gpt.sh").read_text()
    assert "--data-parallel-sharding-strategy optim_grads_params" in script
    assert "--recompute-granularity full" in script
    assert "--micro-batch-size 2" in script and "--global-batch-size 512" in script


def test_emit_refuses_a_broken_config(cli, write, tmp_path):
    code, _, err = cli("emit", "llama3-8b", "dgx-h100", write("ds.json", DS_BATCH), "--gpus",
                       "8", "--target", "megatron", "--out", str(tmp_path / "out"))
    assert code == 1 and "not written: fix the problems above first" in err
    assert not (tmp_path / "out").exists()
