"""Megatron-DeepSpeed launch scripts (pretrain_gpt.py with --deepspeed) read as the DeepSpeed
runs they are, not as Megatron-LM ones: the fork's own flags, full recompute from
--checkpoint-activations, the pipeline engine's layer placement, bf16's ZeRO-1-like optimizer,
the engine at one stage too. The script under test is BLOOM-176B's own
(bigscience-workshop/bigscience train/tr11-176B-ml/tr11-176B-ml.slurm, data/)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.frameworks.shell import ShellScript
from planner.frameworks.megatron_reader import ENTRY

BLOOM = Path(__file__).parent / "data" / "tr11-176B-ml.slurm"

MDS = """\
#!/bin/bash
deepspeed --num_nodes 2 --num_gpus 8 pretrain_gpt.py \\
    --tensor-model-parallel-size 2 --pipeline-model-parallel-size {pp} \\
    --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 2048 \\
    --micro-batch-size 1 --global-batch-size 64 --bf16 {extra} \\
    --deepspeed --deepspeed_config {config} --zero-stage {zero}
"""


def _validate(cli, path, *args, model="bloom-176b", cluster="dgx-a100-80gb"):
    code, out, err = cli("validate", model, cluster, str(path), "--json", "--no-compare", *args)
    return code, (json.loads(out) if out else None), err


def test_bloom_launch_script_reads_as_the_run_bloom_reports(cli):
    """tr11-176B-ml.slurm: tp 4, pp 12, mb 2, global batch 2048 (its own variables), on 24
    nodes of 8 (#SBATCH --nodes=24, torch.distributed.run --nproc_per_node 8); recomputation
    of every layer (--checkpoint-activations); 70 layers + 2 embeddings placed 6 per stage,
    [5, 6 x 10, 5] (--pp-partition-method 'type:transformer|embedding'); ZeRO stage 0 in bf16,
    which "implements its own zero stage 1 equivalent" (the script's comment). No flag of its is
    refused: the helper `python load_ratios_meg_ds_format.py --dataset-ratios-path ...` lines
    are not pretrain_gpt.py's."""
    code, result, err = _validate(cli, BLOOM)
    assert code == 0, (result["violations"], err)
    assert result["target"] == "deepspeed" and result["framework"] == "deepspeed"
    assert result["num_gpus"] == 192
    assert (result["global_batch"], result["seq_len"]) == (2048, 2048)
    assert (result["precision"], result["attention"]) == ("bf16", "unfused")
    s = result["strategy"]
    assert (s["dp"], s["tp"], s["pp"], s["micro_batch"]) == (4, 4, 12, 2)
    assert (s["recompute"], s["zero_stage"], s["overlap_grad_reduce"]) == ("full", 1, False)
    assert s["layers_per_stage"] == [5] + [6] * 10 + [5]
    assert result["violations"] == [] and result["valid"]
    assert any("BF16_Optimizer" in n for n in result["notes"])
    # BLOOM trained with this script: it fits (the same layout on 384 GPUs is a calibration
    # row, bench/data/bloom_176b_tr11.yaml).
    assert result["memory"]["fits"]


def test_helper_commands_flags_are_not_the_trainers():
    """Only the words after pretrain_gpt.py are its flags: not the launcher's, not a helper
    script's, even when the helper runs first."""
    script = ShellScript(BLOOM.read_text(), file=str(BLOOM))
    flags = {f.name for f in script.entry_flags(ENTRY)}
    assert "--dataset-ratios-path" not in flags and "--nproc_per_node" not in flags
    assert {"--deepspeed", "--checkpoint-activations", "--tensor-model-parallel-size"} <= flags
    assert "--dataset-ratios-path" in {f.name for f in script.flags()}


def test_megatron_lm_script_skips_a_preprocessing_command(cli, write):
    path = write("run.sh", """\
        python tools/preprocess_data.py --input corpus.json --workers 32 --append-eod
        torchrun --nnodes 8 --nproc-per-node 8 pretrain_gpt.py --tensor-model-parallel-size 8 \\
            --pipeline-model-parallel-size 8 --num-layers 96 --hidden-size 12288 \\
            --num-attention-heads 96 --micro-batch-size 1 --global-batch-size 1536 \\
            --seq-length 2048 --bf16
        """)
    code, result, err = _validate(cli, path, model="gpt3-175b", cluster="dgx-h100")
    assert result["target"] == "megatron"
    assert not any("--input" in v["message"] or "--workers" in v["message"]
                   for v in result["violations"]), result["violations"]


def test_a_misspelt_flag_is_named_against_megatron_deepspeeds_own(cli, write):
    path = write("run.sh", MDS.format(pp=2, extra="--checkpoint-activation",
                                      config="ds.json", zero=1))
    code, result, err = _validate(cli, path, model="llama2-7b", cluster="dgx-a100-80gb")
    assert code == 1
    [finding] = [v for v in result["violations"] if v["rule"] == "megatron_flag"]
    assert finding["message"] == ("Megatron-DeepSpeed stops: unrecognized arguments: "
                                  "--checkpoint-activation (did you mean "
                                  "--checkpoint-activations?)")
    assert result["num_gpus"] == 16      # deepspeed --num_nodes 2 --num_gpus 8


def test_the_deepspeed_config_next_to_the_script_sets_the_stage(cli, write):
    """DeepSpeed runs the config's stage; pretrain_gpt.py reads --zero-stage only for
    deepspeed.zero.Init(enabled=args.zero_stage == 3): a mismatch across stage 3 builds the
    model wrongly partitioned (a finding), any other is a note."""
    write("ds.json", '{"train_batch_size": 64, "zero_optimization": {"stage": 1}, '
                     '"bf16": {"enabled": true}}')
    path = write("run.sh", MDS.format(pp=2, extra="", config="ds.json", zero=0))
    code, result, err = _validate(cli, path, model="llama2-7b", cluster="dgx-a100-80gb")
    assert result["strategy"]["zero_stage"] == 1
    assert not [v for v in result["violations"] if v["rule"] == "megatron_flag"]
    assert any(n.startswith("--zero-stage 0 differs from ds.json's stage 1")
               for n in result["notes"])
    path = write("run3.sh", MDS.format(pp=1, extra="", config="ds.json", zero=3))
    code, result, err = _validate(cli, path, model="llama2-7b", cluster="dgx-a100-80gb")
    [finding] = [v for v in result["violations"] if v["rule"] == "megatron_flag"]
    assert finding["message"].startswith("--zero-stage 3 but ds.json sets "
                                         "zero_optimization.stage 1")


@pytest.mark.parametrize("extra, single_stage_engine", [("", True),
                                                         ("--no-pipeline-parallel", False)])
def test_one_stage_runs_in_the_pipeline_engine_unless_told_not_to(cli, write, extra,
                                                                   single_stage_engine):
    """deepspeedai pretrain_gpt.py: GPTModelPipe `if args.deepspeed and not
    args.no_pipeline_parallel`; the engine's per-layer cost (the DeepSpeed profile's
    pipeline_layer_overhead_s) then shows at pp 1 too."""
    path = write("run.sh", MDS.format(pp=1, extra=extra, config="ds.json", zero=1))
    code, result, err = _validate(cli, path, model="llama2-7b", cluster="dgx-a100-80gb")
    assert (result["time"]["pipeline_engine_s"] > 0) is single_stage_engine


def test_no_pipeline_parallel_with_stages_stops(cli, write):
    path = write("run.sh", MDS.format(pp=2, extra="--no-pipeline-parallel", config="ds.json",
                                      zero=1))
    code, result, err = _validate(cli, path, model="llama2-7b", cluster="dgx-a100-80gb")
    assert any("pipeline_model_parallel_size must be 1 if pipeline parallel is disabled"
               in v["message"] for v in result["violations"])


def test_deepspeed_json_bf16_stage_0_with_a_pipeline_is_zero_1(cli, write):
    """DeepSpeed's engine (runtime/engine.py) wraps bf16 at stage 0 in its pipeline engine in
    BF16_Optimizer, which shards optimizer states like ZeRO-1; without a pipeline, stage 0
    stays 0."""
    for stages, stage in ((4, 1), (1, 0)):
        path = write(f"ds{stages}.json", json.dumps({
            "train_batch_size": 64, "train_micro_batch_size_per_gpu": 1,
            "zero_optimization": {"stage": 0}, "bf16": {"enabled": True},
            "pipeline": {"stages": stages}}))
        code, result, err = _validate(cli, path, "--gpus", "64", model="llama2-7b",
                                      cluster="dgx-a100-80gb")
        assert result["strategy"]["zero_stage"] == stage


def test_a_wrapper_passes_the_sizes_as_arguments(cli, write):
    """deepspeedai's curriculum_learning/ds_train.sh runs `bash ds_pretrain_gpt2.sh $CONFIG
    ... $MP_SIZE ...`, which reads them as $1 ... $7: the wrapper's values are the run's."""
    write("train.sh", MDS.replace("--tensor-model-parallel-size 2",
                                  "--tensor-model-parallel-size $1").format(
        pp="$2", extra="", config="ds.json", zero=1))
    path = write("wrapper.sh", "TP=4\nbash train.sh $TP 2\n")
    code, result, err = _validate(cli, path, model="llama2-7b", cluster="dgx-a100-80gb")
    assert (result["strategy"]["tp"], result["strategy"]["pp"]) == (4, 2), err
    assert result["num_gpus"] == 16


def test_the_deepspeed_launcher_without_the_engine_is_megatrons_own_loop(cli, write):
    """Megatron-DeepSpeed's pretrain_gpt.py without --deepspeed (rebase/
    ds_pretrain_gpt_1.3B_megatron_checkpointing.sh) trains in Megatron's loop: its own flags
    are still known, and no DeepSpeed engine is priced."""
    path = write("run.sh", MDS.replace("--deepspeed --deepspeed_config {config} ", "").format(
        pp=2, extra="--checkpoint-activations", zero=1))
    code, result, err = _validate(cli, path, model="llama2-7b", cluster="dgx-a100-80gb")
    assert result["target"] == "megatron" and result["framework"] == "megatron"
    assert not [v for v in result["violations"] if v["rule"] == "megatron_flag"]
    assert result["strategy"]["recompute"] == "full"
    assert any("without --deepspeed" in n for n in result["notes"])


def test_the_deepspeed_config_the_script_writes_is_read(cli, write):
    """BLOOM's script writes its DeepSpeed config with `cat <<EOT > $config_json` and passes
    it to --deepspeed_config: the here-document, its variables expanded as bash would, is the
    config; a key DeepSpeed ignores there is a finding, as in a JSON file."""
    script = ShellScript(BLOOM.read_text(), file=str(BLOOM))
    [(path, text)] = script.written.items()
    assert path == "./ds_config.$SLURM_JOB_ID.json"
    assert json.loads(text)["train_micro_batch_size_per_gpu"] == 2
    assert json.loads(text)["zero_optimization"] == {"stage": 0}
    body = ('cat <<EOT > $CONFIG\n{"train_batch_size": $GBS, "zero_optimisation": '
            '{"stage": 1}, "bf16": {"enabled": true}}\nEOT\n')
    path = write("run.sh", "CONFIG=ds.json\nGBS=64\n" + body
                 + MDS.format(pp=2, extra="", config="$CONFIG", zero=1))
    code, result, err = _validate(cli, path, model="llama2-7b", cluster="dgx-a100-80gb")
    assert any("zero_optimisation" in v["message"] for v in result["violations"]), result
    # DeepSpeed reads no zero_optimization there: stage 0, which --zero-stage 1 contradicts
    assert any(n.startswith("--zero-stage 1 differs from ds.json's stage 0")
               for n in result["notes"])
