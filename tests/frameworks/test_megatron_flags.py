"""What Megatron-LM's argument parser stops on, reported as it reports it, and which files are
read as Megatron-LM at all (planner/frameworks/megatron_flags.py, read_config)."""

from __future__ import annotations

import json

import pytest

from planner.frameworks import megatron_flags
from planner.frameworks.megatron_flags import is_launch_text

ARGS = ("--num-layers 32 --hidden-size 4096 --num-attention-heads 32 "
        "--tensor-model-parallel-size 8 --sequence-parallel --use-distributed-optimizer "
        "--micro-batch-size 1 --global-batch-size 64 --bf16")
"""llama3-8b at tp 8 on 8 H100s: fits, breaks no rule."""


def _validate(cli, path, *args):
    code, out, err = cli("validate", "llama3-8b", "dgx-h100", path, "--gpus", "8",
                         "--no-compare", *args)
    return code, out, err


def _flag_findings(out: str) -> list[tuple[str, str]]:
    return [(v["message"], v["fix"]) for v in json.loads(out)["violations"]
            if v["rule"] == "megatron_flag"]


@pytest.mark.parametrize(("extra", "findings"), [
    # argparse (allow_abbrev=False, parse_args) stops on a flag it does not know at all...
    ("--frobnicate-everything 3",
     [("Megatron-LM stops: unrecognized arguments: --frobnicate-everything",
       "remove --frobnicate-everything: pretrain_gpt.py @d98e8a64 has no such flag")]),
    ("--zzz",
     [("Megatron-LM stops: unrecognized arguments: --zzz",
       "remove --zzz: pretrain_gpt.py @d98e8a64 has no such flag")]),
    # ...as on a misspelled one, which also gets the flag it is closest to.
    ("--micro-batch-sizes 2",
     [("Megatron-LM stops: unrecognized arguments: --micro-batch-sizes (did you mean "
       "--micro-batch-size?)", "rename --micro-batch-sizes to --micro-batch-size")]),
    # The launcher's own options are not Megatron-LM's to refuse.
    ("--rdzv-conf timeout=900 --tee 3 --local-ranks-filter 0 --use_env", []),
])
def test_unknown_flags_are_findings_as_megatron_reports_them(cli, write, extra, findings):
    path = write("args.txt", f"{ARGS} {extra}\n")
    code, out, err = _validate(cli, path, "--json")
    assert _flag_findings(out) == findings
    assert code == (1 if findings else 0), err


def test_unknown_flag_in_the_text_report(cli, write):
    path = write("args.txt", f"{ARGS} --frobnicate-everything\n")
    code, out, err = _validate(cli, path)
    assert code == 1 and err == ""
    assert ("- megatron_flag: Megatron-LM stops: unrecognized arguments: "
            "--frobnicate-everything; fix: remove --frobnicate-everything: pretrain_gpt.py "
            "@d98e8a64 has no such flag") in " ".join(out.split())


def test_deepspeed_launcher_options_are_skipped(cli, write):
    path = write("train.sh", f"export CUDA_DEVICE_MAX_CONNECTIONS=1\n"
                             f"deepspeed --num_gpus 8 --hostfile hosts pretrain_gpt.py {ARGS}\n")
    code, out, err = _validate(cli, path, "--json")
    assert (code, _flag_findings(out)) == (0, []), err


@pytest.mark.parametrize(("text", "launch"), [
    ("torchrun --nproc-per-node 8 pretrain_gpt.py $ARGS", True),
    ("python -m torch.distributed.run --nproc_per_node 8 train.py", True),
    ("python -m torch.distributed.launch --nproc_per_node 8 --use_env train.py", True),
    ("deepspeed --num_gpus 8 train.py", True),
    ("srun --ntasks-per-node 8 python train.py", True),
    ("python pretrain_gpt.py --foo", True),
    ("--num-layers 32\n--hidden-size 4096\n", True),         # an argument file
    ("--num-layers=32", True),
    ("tp: 2\npp: 1\n", False),
    ("[parallelism]\ntensor_parallel_degree = 2\n", False),
    ("--frobnicate 3", False),                                 # no flag Megatron-LM knows
    ("mydeepspeed_notes and srun_log", False),
])
def test_is_launch_text(text, launch):
    assert is_launch_text(text) is launch


NOT_A_CONFIG = ("not a launch config: the planner reads .yaml/.yml (strategy, MindFormers), "
                ".json (DeepSpeed), .toml (torchtitan), .py (torchtitan recipe, MindSpore), "
                ".sh/.bash (Megatron-LM, torchrun), or a Megatron-LM argument file or launch "
                "line of any other suffix")


@pytest.mark.parametrize("name", ["strategy.cfg", "notes.txt", "README"])
def test_unknown_suffix_without_a_launch_line_is_refused(cli, write, name):
    path = write(name, "tp: 2\npp: 1\nmicro_batch: 1\n")
    code, out, err = _validate(cli, path)
    assert (code, out) == (2, "")
    assert err.splitlines() == [f"Error: {path}: {NOT_A_CONFIG}"]


@pytest.mark.parametrize(("name", "text"), [
    ("args.txt", ARGS + "\n"),                                             # argument file
    ("job.slurm", f"export CUDA_DEVICE_MAX_CONNECTIONS=1\n"
                  f"srun torchrun --nproc-per-node 8 pretrain_gpt.py {ARGS}\n"),
    ("launch", f"CUDA_DEVICE_MAX_CONNECTIONS=1\n"                         # no suffix
               f"torchrun --nproc-per-node 8 pretrain_gpt.py {ARGS}\n"),
])
def test_unknown_suffix_with_a_launch_line_is_read_as_megatron(cli, write, name, text):
    path = write(name, text)
    code, out, err = _validate(cli, path, "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["target"] == "megatron" and result["strategy"]["tp"] == 8


def test_shell_scripts_are_read_whatever_they_hold(cli, write):
    # A .sh is a launch script by its suffix: a torchrun launcher alone carries a world size.
    path = write("launch.sh", "torchrun --nnodes 1 --nproc-per-node 8 train.py\n")
    code, out, err = _validate(cli, path)
    assert code == 2 and "a torchrun launcher carries only its world size" in err


def test_flag_lists_are_data():
    assert "--tensor-model-parallel-size" in megatron_flags.KNOWN_FLAGS
    assert {"--nproc-per-node", "--nproc_per_node", "--rdzv-conf", "--use_env"} \
        <= megatron_flags.TORCHRUN_FLAGS
    assert not megatron_flags.TORCHRUN_FLAGS & megatron_flags.KNOWN_FLAGS


@pytest.mark.parametrize(("backend", "stops"), [("flash", True), ("fused", False),
                                                ("auto", False)])
def test_attention_sinks_leave_no_flash_kernel(cli, write, backend, stops):
    # Transformer Engine disables FlashAttention for softmax_type learnable (TE
    # dot_product_attention/utils.py @252a4742); --attention-backend flash turns the others off.
    path = write("args.txt", f"{ARGS} --attention-backend {backend} --softmax-type learnable")
    code, out, err = _validate(cli, path, "--json")
    found = [m for m, _ in _flag_findings(out) if "no attention backend is left" in m]
    assert found == ([
        "Transformer Engine stops: --softmax-type learnable disables FlashAttention, and "
        "--attention-backend flash turns the fused and unfused kernels off, so no attention "
        "backend is left"] if stops else [])


def test_gpt_oss_is_emitted_with_the_fused_kernel():
    from planner.frameworks import emit_files
    from tests.frameworks.cases import CASES

    case = next(c for c in CASES if c.name == "gpt-oss-120b-ep")
    (text,) = emit_files([case.target], case.plan()).values()
    # auto: Transformer Engine filters FlashAttention out for learnable softmax and keeps
    # cuDNN's FusedAttention; "flash" would leave no kernel.
    assert "--softmax-type learnable" in text and "--attention-backend auto" in text
