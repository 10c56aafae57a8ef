"""NVIDIA's published Megatron-LM example scripts (megatron_examples/, from Megatron-LM
@d98e8a64) through `planner validate`, and the reader's handling of what they contain: the
generated flag list, shell defaults, the settings that change memory and time, and the
argument checks of Megatron-LM's validate_args."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cost_models.enums import Optimizer, Precision
from cost_models.memory import state_bytes_per_param
from planner.frameworks import megatron
from planner.frameworks.shell import ShellScript

EXAMPLES = Path(__file__).parent / "megatron_examples"
GOLDEN = Path(__file__).parent / "golden"
GIB = 2**30


def _validate(cli, path, *args, model="llama3-8b"):
    code, out, err = cli("validate", model, "dgx-h100", str(path), "--no-compare", "--json",
                         *args)
    return code, (json.loads(out) if out else None), err


def _rules(result) -> list[tuple[str, str]]:
    return [(v["rule"], v["message"]) for v in result["violations"]]


# (script, model, GPUs it is written for, the findings Megatron-LM @d98e8a64 itself gives it)
SILENT_SP = ("sequence_parallel has no effect at tp 1: it splits activations over the "
             "tensor-parallel ranks (Megatron-LM turns it off, with a warning)")
PUBLISHED = [
    # Their --sequence-parallel at tp 1 is a Megatron-LM warning: a note, exit 0.
    ("train_llama3_8b_h100_fp8.sh", "llama3-8b", 8, []),
    ("train_llama3_8b_fsdp_h100_fp8.sh", "llama3-8b", 8, []),
    ("train_mixtral_8x7b_distributed.sh", "mixtral-8x7b", 32, []),
    # arguments.py @d98e8a64 raises ValueError('Cannot specify both --step-batch-size-schedule
    # and --global-batch-size'); the example sets both.
    ("train_gpt3_175b_distributed.sh", "gpt3-175b", 128, [
        ("megatron_flag", "Megatron-LM stops: cannot specify both --step-batch-size-schedule "
                          "and --global-batch-size")]),
]


@pytest.mark.parametrize(("script", "model", "gpus", "findings"), PUBLISHED)
def test_published_examples_get_only_what_megatron_itself_says_and_fit(cli, script, model, gpus,
                                                                        findings):
    nodes = str(max(1, gpus // 8))
    code, result, err = _validate(cli, EXAMPLES / script, "--gpus", str(gpus), "--nodes", nodes,
                                  model=model)
    assert code == (1 if findings else 0), err
    assert _rules(result) == findings
    if "llama3" in script or "mixtral" in script:
        assert SILENT_SP in result["notes"]
    assert result["memory"]["fits"], result["memory"]["peak_bytes"] / GIB


def test_llama3_8b_fp8_example_reads_fp8_bf16_gradients_and_fits_an_h100(cli):
    """NVIDIA ships it for 8 x H100 80GB: FP8 (hybrid, delayed scaling, FP8 parameters), the
    distributed optimizer, bf16 gradient reduction, seq 8192, mb 1, no recompute."""
    code, result, err = _validate(cli, EXAMPLES / "train_llama3_8b_h100_fp8.sh", "--gpus", "8")
    assert result["precision"] == "fp8" and result["fp8_recipe"] == "delayed", err
    s = result["strategy"]
    assert (s["zero_stage"], s["fp8_param_gather"], s["micro_batch"], s["recompute"]) == \
        (1, True, 1, "none")
    stage = result["memory"]["stages"][0]
    # --grad-reduce-in-bf16: the gradient buffer is bf16, as large as the bf16 weights.
    assert stage["gradients_bytes"] == pytest.approx(stage["weights_bytes"], rel=1e-9)
    assert result["memory"]["fits"]


def test_gpt3_example_attention_backend_auto_is_priced_as_flash(cli, write, tmp_path):
    text = (EXAMPLES / "train_gpt3_175b_distributed.sh").read_text()
    unfused = write("unfused.sh", text.replace("--attention-backend auto",
                                               "--attention-backend unfused"))
    args = ("--gpus", "128", "--nodes", "16")
    _, auto, _ = _validate(cli, EXAMPLES / "train_gpt3_175b_distributed.sh", *args,
                           model="gpt3-175b")
    _, plain, _ = _validate(cli, unfused, *args, model="gpt3-175b")
    # auto: Transformer Engine's fastest fused kernel (cuDNN on Hopper), the planner's flash.
    assert (auto["attention"], plain["attention"]) == ("flash", "unfused")
    flash2 = write("flash2.sh", text.replace("--attention-backend auto",
                                             "--attention-backend flash"))
    _, fa2, _ = _validate(cli, flash2, *args, model="gpt3-175b")
    assert fa2["attention"] == "flash2"
    assert any("--attention-backend flash: priced as FlashAttention-2" in n for n in fa2["notes"])
    assert fa2["time"]["step_s"] > auto["time"]["step_s"]          # 0.6x the rate on Hopper
    # Flash keeps no s x s scores: less activation memory than the unfused kernel.
    first = [r["memory"]["stages"][0]["activations_bytes"] for r in (auto, plain)]
    assert first[0] < first[1]


def test_every_flag_the_emitter_writes_is_in_the_generated_list():
    flags = set()
    for path in GOLDEN.glob("*.pretrain_*.sh"):
        flags |= {f.name for f in ShellScript(path.read_text(), file=str(path)).flags()}
    flags -= megatron.TORCHRUN_FLAGS
    assert flags and flags <= megatron.KNOWN_FLAGS, sorted(flags - megatron.KNOWN_FLAGS)


def test_generated_list_names_its_commit_and_holds_dataclass_flags():
    # Flags ArgumentGroupFactory builds from TransformerConfig (a metadata name, a bool that
    # defaults to True, an Enum) and from TrainingConfig, and explicit add_argument ones.
    assert megatron.MEGATRON_COMMIT == "d98e8a64"
    assert {"--fp8-format", "--tensor-model-parallel-size", "--lr-decay-samples",
            "--lr-warmup-samples", "--fp8-param-gather", "--grad-reduce-in-bf16",
            "--rampup-batch-size", "--step-batch-size-schedule"} <= megatron.KNOWN_FLAGS
    assert megatron.CHOICES["--attention-backend"] == ("flash", "fused", "unfused", "local",
                                                       "auto")
    assert megatron.CHOICES["--fp8-recipe"] == ("tensorwise", "delayed", "mxfp8", "blockwise",
                                                "custom")


def test_bf16_gradients_state_bytes():
    # Megatron-LM docs/user-guide/features/dist_optimizer.md: bf16 params + fp32 grads = 18
    # bytes per parameter (6 + 12/d distributed); bf16 gradients take 2 bytes, not 4: 16.
    per = state_bytes_per_param(Precision.BF16, Optimizer.ADAM, gradients_16bit=True)
    assert (per.weights, per.gradients, per.optimizer) == (2, 2, 12)
    assert state_bytes_per_param(Precision.BF16, Optimizer.ADAM).total == 18


def test_bf16_moments_state_bytes_and_flags(cli, write, tmp_path):
    # Megatron-LM --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16
    # (Megatron-Bridge's DeepSeek recipes, perf_recipes/deepseek/common.py): Adam's moments take
    # 2 bytes each beside the fp32 master weights, 8 optimizer bytes per parameter, not 12.
    per = state_bytes_per_param(Precision.BF16, Optimizer.ADAM, moments_16bit=True)
    assert (per.weights, per.gradients, per.optimizer, per.master) == (2, 4, 8, 4)
    # Written and read back; and a config that keeps fp32 moments reads as such.
    zoo = (Path(__file__).resolve().parents[2] / "model_zoo" / "llama2-7b.yaml").read_text()
    model = write("m.yaml", zoo.replace("training:\n", "training:\n  bf16_moments: true\n", 1))
    code, _, err = cli("plan", model, "dgx-h100", "--gpus", "8", "--top", "1", "--zero", "1",
                       "--emit", "megatron", "--out", str(tmp_path))
    assert code == 0, err
    script = (tmp_path / "pretrain_gpt.sh").read_text()
    assert script.count("--use-precision-aware-optimizer") == 1
    assert "--exp-avg-dtype bf16" in script and "--exp-avg-sq-dtype bf16" in script
    code, out, err = cli("validate", model, "dgx-h100", str(tmp_path / "pretrain_gpt.sh"),
                         "--gpus", "8", "--no-compare", "--json")
    assert code == 0, err
    bf16 = json.loads(out)["memory"]["stages"][0]["optimizer_bytes"]
    fp32_script = write("fp32.sh", script.replace("--exp-avg-sq-dtype bf16",
                                                  "--exp-avg-sq-dtype fp32"))
    code, out, err = cli("validate", "llama2-7b", "dgx-h100", fp32_script, "--gpus", "8",
                         "--no-compare", "--json")
    assert code == 0, err
    assert json.loads(out)["memory"]["stages"][0]["optimizer_bytes"] == pytest.approx(
        bf16 * 12 / 8, rel=1e-9)


# --------------------------------------------------------------------------- shell

def test_shell_positional_defaults_and_quoted_flag_words():
    script = ShellScript('TOK=${3:-"MOCK"}\nA=${1:-x}\nARGS=("--vocab-size 128256" '
                         '"--tokenizer-model $TOK" "--split \'99,1,0\'")\n'
                         'python pretrain_gpt.py ${ARGS[@]} --lr $1 --seed ${2:-7}\n', file="s")
    flags = {f.name: f for f in script.flags()}
    assert flags["--vocab-size"].value == "128256"
    assert flags["--tokenizer-model"].value == "MOCK"
    assert flags["--seed"].value == "7"
    assert flags["--lr"].value is None and flags["--lr"].unresolved == "$1"


def test_options_of_other_programs_are_not_megatron_flags():
    script = ShellScript("CMD=(nsys profile --sample=none --cuda-graph-trace=node)\n"
                         "${CMD[@]} torchrun --nproc_per_node 8 pretrain_gpt.py --bf16\n",
                         file="s")
    assert [f.name for f in script.flags()] == ["--nproc_per_node", "--bf16"]


BASE = "--num-layers 32 --micro-batch-size 1 --global-batch-size 64 --bf16 "


@pytest.mark.parametrize(("flags", "message"), [
    ("--tensor-model-parallel-size $TP", "--tensor-model-parallel-size $TP: the script never "
                                         "sets TP; give a number, or set it in the script"),
    ("--tensor-model-parallel-size $7", "--tensor-model-parallel-size $7: $7 is an argument of "
                                        "the script, which the planner reads as run without "
                                        "arguments; give a number, or set it in the script"),
    ("--tensor-model-parallel-size $(nvidia-smi -L | wc -l)",
     "--tensor-model-parallel-size $(nvidia-smi -L | wc -l): $(nvidia-smi -L | wc -l) is the "
     "output of a command, which the planner does not run; give a number, or set it in the "
     "script"),
    ("--tensor-model-parallel-size", "--tensor-model-parallel-size: expects a value "
                                     "(Megatron-LM stops: expected one argument)"),
    ("--tensor-model-parallel-size -inf", "--tensor-model-parallel-size -inf: expected an "
                                          "integer"),
    ("--tensor-model-parallel-size 0", "--tensor-model-parallel-size 0: must be at least 1"),
    ("--micro-batch-size 99999999999999999999999", "--micro-batch-size "
     "99999999999999999999999: too large (at most 2147483647)"),
    ("--optimizer-cpu-offload --use-precision-aware-optimizer --use-distributed-optimizer "
     "--optimizer-offload-fraction nan", "--optimizer-offload-fraction nan: expected a finite "
                                         "number"),
])
def test_unreadable_values_give_one_line_naming_file_and_flag(cli, write, flags, message):
    path = write("train.sh", BASE + flags + "\n")
    code, _, err = _validate(cli, path, "--gpus", "8")
    assert code == 2
    assert err.splitlines() == [f"Error: {path}: {message}"]


# --------------------------------------------------------------------------- validate_args

@pytest.mark.parametrize(("flags", "rule", "finding"), [
    # arguments.py: 'recompute method is not yet supported for selective recomputing
    # granularity'.
    ("--recompute-granularity selective --recompute-method uniform", "megatron_flag",
     "Megatron-LM stops: recompute method is not yet supported for selective recomputing "
     "granularity"),
    # arguments.py iteration-based training: 'expected iteration-based learning rate decay'.
    ("--train-iters 1000 --lr-decay-samples 10", "megatron_flag",
     "Megatron-LM stops: expected iteration-based training, but --lr-decay-samples is set"),
    # arguments.py sample-based training: 'expected sample-based training'.
    ("--train-samples 1000 --train-iters 10", "megatron_flag",
     "Megatron-LM stops: expected sample-based training, but --train-iters is set"),
    # arguments.py: 'can only specify one of lr-warmup-fraction and lr-warmup-iters'.
    ("--train-iters 1000 --lr-warmup-fraction 0.01 --lr-warmup-iters 10", "megatron_flag",
     "Megatron-LM stops: can only specify one of --lr-warmup-fraction and --lr-warmup-iters"),
    # arguments.py: 'assert not args.bf16' under args.fp16.
    ("--fp16", "megatron_flag", "Megatron-LM stops: --fp16 and --bf16 cannot both be set"),
    # arguments.py: ValueError('Cannot specify both --step-batch-size-schedule and
    # --global-batch-size').
    ("--step-batch-size-schedule '0:16 100:64'", "megatron_flag",
     "Megatron-LM stops: cannot specify both --step-batch-size-schedule and "
     "--global-batch-size"),
    # core/num_microbatches_calculator.py @d98e8a64: deprecated, warned and dropped; @000c4ac2
    # arguments.py: 'expected no batch-size rampup for iteration-based training'.
    # arguments.py: '--attention-backend local is only supported with --spec local'.
    ("--attention-backend local", "megatron_flag",
     "Megatron-LM stops: --attention-backend local is only supported with --spec local"),
    # arguments.py: 'can distribute recomputed activations only across tensor model parallel
    # groups'.
    ("--distribute-saved-activations --recompute-granularity full --recompute-method uniform",
     "megatron_flag", "Megatron-LM stops: --distribute-saved-activations needs tensor "
                      "parallelism and --recompute-granularity full"),
    ("--attention-backend flashy", "megatron_flag",
     "Megatron-LM stops: --attention-backend flashy is not one of flash, fused, unfused, "
     "local, auto"),
    ("--recompute-granularity full --recompute-method block --recompute-num-layers 2",
     "megatron_unpriced", "--recompute-method block --recompute-num-layers 2: only 2 of the 32 "
                          "layers per stage are recomputed; priced as full recompute of every "
                          "layer, so memory is underestimated"),
    # transformer_config.py __post_init__ @d98e8a64: "Invalid choices for recompute_modules".
    ("--recompute-granularity selective --recompute-modules core_attn mlpp", "megatron_flag",
     "Megatron-Core stops: invalid choices for recompute_modules: mlpp"),
    ("--recompute-granularity selective --recompute-modules core_attn mhc", "megatron_unpriced",
     "--recompute-modules mhc: modules of layer kinds the planner does not model; priced "
     "without them, so memory is overestimated"),
    ("--optimizer muon", "megatron_unpriced",
     "--optimizer muon: the planner prices Adam or SGD states; priced as adam"),
])
def test_megatron_argument_checks(cli, write, flags, rule, finding):
    path = write("args.txt", BASE + "--tensor-model-parallel-size 1 " + flags + "\n")
    code, result, err = _validate(cli, path, "--gpus", "8")
    assert code == 1, err
    assert (rule, finding) in _rules(result)


def test_lr_samples_flags_are_not_called_unrecognized(cli, write):
    path = write("args.txt", BASE + "--train-samples 1000 --lr-decay-samples 900 "
                                    "--lr-warmup-samples 10 --vocab-size 128256\n")
    code, result, err = _validate(cli, path, "--gpus", "8")
    assert not [m for _, m in _rules(result) if re.search("unrecognized", m)], err


def test_rampup_batch_size_is_a_note_megatron_warns_and_ignores_it(cli, write):
    # core/num_microbatches_calculator.py @d98e8a64: deprecated, warned and dropped; @000c4ac2
    # arguments.py: 'expected no batch-size rampup for iteration-based training'.
    path = write("args.txt", BASE + "--tensor-model-parallel-size 1 --train-iters 100 "
                                    "--rampup-batch-size 16 16 1000\n")
    code, result, err = _validate(cli, path, "--gpus", "8")
    assert ("Megatron-LM ignores --rampup-batch-size (deprecated, a warning): the batch stays at "
            "--global-batch-size (releases before 2026-04 stop: expected no batch-size rampup "
            "for iteration-based training); use --step-batch-size-schedule with "
            "--train-samples") in result["notes"]
    assert not [r for r, _ in _rules(result) if r == "megatron_silent"]
