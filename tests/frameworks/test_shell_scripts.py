"""Launch scripts read as bash would run them (issue 24, item 5): the GPU count their launcher
starts, flags kept in strings, `$((...))`, the branch the script's own variables select, and
sourced files; and the published NVIDIA examples that use each (megatron_examples/, from
Megatron-LM @d98e8a64)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planner.errors import InputError
from planner.frameworks.launchers import launch_size
from planner.frameworks.shell import ShellScript

EXAMPLES = Path(__file__).parent / "megatron_examples"
GPT3 = ("--num-layers 96 --hidden-size 12288 --num-attention-heads 96 --micro-batch-size 1 "
        "--global-batch-size 1536 --seq-length 2048 --bf16")
"""gpt3-175b's shape: tp 8 x pp 8 = 64 GPUs per replica, and 1536 splits over dp 1, 2, 4."""


def _read(text: str, file: str = "s.sh") -> ShellScript:
    return ShellScript(text, file=file)


def _flags(script: ShellScript) -> dict[str, str | None]:
    return {f.name: f.value for f in script.flags()}


def _gpus(script: ShellScript) -> int | None:
    size = launch_size(script, file=script.file, gpus_per_node=8)
    return None if size is None else size.num_gpus


def _validate(cli, path, *args):
    code, out, err = cli("validate", "gpt3-175b", "dgx-h100", str(path), "--no-compare",
                         "--json", *args)
    return code, (json.loads(out) if out else None), err


# --------------------------------------------------------------------------- GPU count

@pytest.mark.parametrize(("text", "gpus"), [
    # sbatch.html: #SBATCH lines give the job's size; srun runs nodes x ntasks-per-node tasks.
    ("#!/bin/bash\n#SBATCH --nodes=8\n#SBATCH --ntasks-per-node=8 --gpus-per-node=8\n"
     "srun python pretrain_gpt.py --bf16\n", 64),
    ("#!/bin/bash\n#SBATCH -N 2\n#SBATCH --ntasks-per-node 4\nsrun python pretrain_gpt.py\n", 8),
    # srun's own options win over the job's.
    ("#SBATCH --nodes=8 --ntasks-per-node=8\nsrun -N 2 python pretrain_gpt.py\n", 16),
    ("srun --nodes=4 --ntasks=32 python pretrain_gpt.py\n", 32),
    # Without --ntasks-per-node srun starts one task per node.
    ("#SBATCH --nodes=4 --gres=gpu:8\nsrun python pretrain_gpt.py\n", 4),
    # A distributed-args string (NVIDIA's t5 example writes it so), underscores.
    ('A="--nproc_per_node 8 --nnodes 8 --node_rank $NODE_RANK"\ntorchrun $A pretrain_gpt.py\n', 64),
    # torchrun's default is one node, and one process per node.
    ("torchrun --nproc-per-node 8 pretrain_gpt.py\n", 8),
    ("torchrun --nnodes 2 pretrain_gpt.py\n", 2),
    ("torchrun --nnodes=1:4 --nproc-per-node=gpu pretrain_gpt.py\n", 32),
    ("python -m torch.distributed.run --nproc_per_node 8 --nnodes 2 pretrain_gpt.py\n", 16),
    ("python -m torch.distributed.launch --nproc_per_node=4 pretrain_gpt.py\n", 4),
    # Environment defaults, arrays, and Slurm's variables from #SBATCH.
    ("NNODES=${NNODES:-8}\nD=(--nnodes $NNODES --nproc-per-node 8)\ntorchrun ${D[@]} x.py\n", 64),
    ("#SBATCH -N 4\n#SBATCH --gpus-per-node=8\nsrun torchrun --nnodes $SLURM_NNODES "
     "--nproc-per-node $SLURM_GPUS_PER_NODE pretrain_gpt.py\n", 32),
    ("mpirun -np 16 python pretrain_gpt.py\n", 16),
    # An argument file, or a plain python run, has no launcher.
    ("--tensor-model-parallel-size 8\n", None),
    ("python pretrain_gpt.py --bf16\n", None),
])
def test_gpu_count_is_what_the_launcher_starts(text, gpus):
    assert _gpus(_read(text)) == gpus


def test_sbatch_directives_stop_at_the_first_command():
    # sbatch.html: "before any executable commands"; a later #SBATCH line is a comment.
    script = _read("#SBATCH -N 2\necho hi\n#SBATCH -N 64\nsrun --ntasks-per-node 8 python x.py\n")
    assert _gpus(script) == 16


def test_launcher_count_from_an_unset_variable_is_unknown_with_a_note():
    script = _read("torchrun --nnodes $NNODES --nproc-per-node 8 pretrain_gpt.py\n")
    size = launch_size(script, file="s.sh", gpus_per_node=8)
    assert size.num_gpus is None
    assert size.notes == ("s.sh: torchrun --nnodes $NNODES: the script never sets NNODES, so "
                          "the GPU count it launches is not known",)


@pytest.mark.parametrize(("launch", "gpus", "note"), [
    ("#SBATCH --nodes=8\n#SBATCH --ntasks-per-node=8\nsrun python pretrain_gpt.py", 64, None),
    ('DISTRIBUTED_ARGS="--nproc_per_node 8 --nnodes 8 --node_rank $NODE_RANK"\n'
     "torchrun $DISTRIBUTED_ARGS pretrain_gpt.py", 64, None),
    ("torchrun --nproc-per-node 8 pretrain_gpt.py", 8,
     "torchrun without --nnodes launches one node (its default)"),
])
def test_validate_prices_the_gpus_the_script_launches(cli, write, launch, gpus, note):
    """The reported bug: these were priced on all 4,608 GPUs of dgx-h100, with a bogus
    batch_divisible problem and no note."""
    path = write("train.sh", f"{launch} --tensor-model-parallel-size 8 "
                             f"--pipeline-model-parallel-size {gpus // 8} {GPT3}\n")
    code, result, err = _validate(cli, path)
    assert result["num_gpus"] == gpus, err
    assert "batch_divisible" not in [v["rule"] for v in result["violations"]]
    assert result["strategy"]["dp"] == 1
    if note:
        assert f"{path}: {note}" in result["notes"]


def test_gpu_count_from_the_cluster_says_so(cli, write):
    path = write("train.sh", f"python pretrain_gpt.py --tensor-model-parallel-size 8 {GPT3}\n")
    _, result, _ = _validate(cli, path)
    assert result["num_gpus"] == 4608
    assert (f"{path}: no launcher says how many GPUs it runs on (torchrun "
            f"--nnodes/--nproc-per-node, srun or #SBATCH --nodes, mpirun -np); priced on the "
            f"whole dgx-h100 cluster (4608 GPUs; pass --gpus to price fewer)") in result["notes"]
    _, result, _ = _validate(cli, path, "--gpus", "64")
    assert result["num_gpus"] == 64
    assert any("priced on --gpus 64" in n for n in result["notes"])


def test_gpus_option_wins_over_the_script_and_says_so(cli, write):
    path = write("train.sh", "torchrun --nproc-per-node 8 --nnodes 8 pretrain_gpt.py "
                             f"--tensor-model-parallel-size 8 --pipeline-model-parallel-size 8 "
                             f"{GPT3}\n")
    _, result, _ = _validate(cli, path, "--gpus", "128")
    assert result["num_gpus"] == 128
    assert (f"--gpus 128 overrides the 64 GPUs {path} launches (torchrun --nnodes 8 "
            f"--nproc-per-node 8): priced on 128") in result["notes"]
    _, same, _ = _validate(cli, path, "--gpus", "64")
    assert not any("overrides" in n for n in same["notes"])


# --------------------------------------------------------------------------- words

def test_flag_strings_that_start_with_a_newline_split_into_flags():
    # NVIDIA's t5, sc21, mamba and rl examples keep their flags so.
    script = _read('ARGS="\n    --tensor-model-parallel-size 8 \\\n    --bf16\n"\n'
                   "torchrun x.py $ARGS\n")
    assert _flags(script) == {"--tensor-model-parallel-size": "8", "--bf16": None}


def test_quoted_expansions_do_not_split_and_single_quotes_do_not_expand():
    script = _read("A='x y'\nB=$A\npython x.py --a \"$A\" --b '$A' --c $B\n")
    assert [c.words for c in script.commands] == [
        ("python", "x.py", "--a", "x y", "--b", "$A", "--c", "x", "y")]


def test_an_unknown_command_output_stays_one_word_when_split():
    # deepspeedai/Megatron-DeepSpeed examples_deepspeed/rebase/ds_pretrain_gpt_13B.sh: the GPU
    # count comes from `nvidia-smi --query-gpu=name --format=csv,noheader | wc -l` and ends up
    # in a path passed unquoted; bash splits the number it prints, not the command's text.
    script = _read('N=$(($(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)-2))\n'
                   'OPTS=" --save /ckpt/g${N} --bf16"\npython x.py ${OPTS}\n')
    flags = {f.name: f for f in script.flags()}
    assert list(flags) == ["--save", "--bf16"]
    assert flags["--save"].value is None and "nvidia-smi" in flags["--save"].unresolved


@pytest.mark.parametrize(("expression", "value"), [
    ("$GPUS*$NODES", "64"), ("GPUS * NODES", "64"), ("(NODES + 1) / 2", "4"),
    ("-7 / 2", "-3"), ("-7 % 2", "-1"), ("2 ** 10", "1024"), ("NODES > 4 && GPUS == 8", "1"),
    ("010 + 0x10", "24"),
])
def test_arithmetic_over_the_scripts_variables(expression, value):
    # bash: C integer division truncates toward zero; a leading 0 is octal.
    script = _read(f"GPUS=8\nNODES=8\nX=$(({expression}))\n")
    assert script.variables["X"] == value


def test_arithmetic_over_an_unset_variable_leaves_the_flag_unresolved():
    script = _read("PP=$((WORLD / 8))\npython x.py --pipeline-model-parallel-size $PP\n")
    flag = script.flags()[0]
    assert flag.value is None and "WORLD" in flag.unresolved


def test_validate_reads_arithmetic_flags(cli, write):
    path = write("train.sh", "N=8\nG=8\ntorchrun --nnodes $N --nproc-per-node $G pretrain_gpt.py "
                             "--tensor-model-parallel-size $((G)) "
                             f"--pipeline-model-parallel-size $((N*G/8)) {GPT3}\n")
    code, result, err = _validate(cli, path)
    assert (result["strategy"]["tp"], result["strategy"]["pp"]) == (8, 8), err


# --------------------------------------------------------------------------- branches

@pytest.mark.parametrize(("test", "tp"), [
    ('[ "$MODE" == "big" ]', "8"), ('[ "$MODE" = small ]', "2"), ("[[ $MODE == b* ]]", "8"),
    ("[ $N -eq 8 ]", "8"), ("[ $N -gt 8 ]", "2"), ("[ -z \"$MODE\" ]", "2"),
    ("[ -n \"$MODE\" ] && [ $N -ge 8 ]", "8"), ("! [ $N -lt 8 ]", "8"), ("test $N -ne 8", "2"),
])
def test_if_takes_the_branch_the_scripts_variables_select(test, tp):
    script = _read(f"MODE=big\nN=8\nif {test}; then\n  TP=8\nelse\n  TP=2\nfi\n")
    assert script.variables["TP"] == tp
    assert script.notes == []


def test_elif_chain_and_case_pick_one_branch():
    script = _read("S=13B\nif [ $S == 7B ]; then TP=1\nelif [ $S == 13B ]; then TP=2\n"
                   "elif [ $S == 13B ]; then TP=3\nelse TP=4\nfi\n"
                   'case "$S" in\n  7B|8B) PP=1 ;;\n  1*) PP=2 ;;\n  *) PP=3 ;;\nesac\n')
    assert (script.variables["TP"], script.variables["PP"]) == ("2", "2")


def test_a_branch_on_an_unset_variable_reads_the_first_branch_with_a_note():
    script = _read("if [ \"$CKPT\" == x ]; then\n  TP=8\nelse\n  TP=2\nfi\n")
    assert script.variables["TP"] == "8"
    assert script.notes == ["s.sh line 1: the branch bash takes depends on $CKPT (not set in "
                            "the script); read the branch at line 2"]


def test_an_unknown_branch_that_exits_is_passed_over_for_one_that_does_not():
    script = _read('if [ -z "$1" ]; then\n  echo usage\n  exit 1\nfi\nTP=8\n'
                   "case $MODEL in\n  *) exit 1 ;;\n  7B) PP=2 ;;\nesac\n")
    assert (script.variables["TP"], script.variables["PP"]) == ("8", "2")
    assert script.notes == [
        "s.sh line 1: the branch bash takes depends on $1 (not set in the script); read no "
        "branch",
        "s.sh line 6: the branch bash takes depends on $MODEL (not set in the script); read "
        "the arm 7B) (line 8)"]


def test_a_file_test_or_a_command_is_ambiguous_too():
    script = _read("if [ -f ckpt/latest ]; then A=1; fi\nif grep -q x y; then B=1; else B=2; fi\n")
    assert (script.variables["A"], script.variables["B"]) == ("1", "1")
    assert len(script.notes) == 2 and "the result of a command" in script.notes[1]


def test_a_known_exit_before_any_launch_is_an_error():
    with pytest.raises(InputError, match=r"s.sh: line 3: the script stops here \(exit 1\)"):
        _read('MODEL=70B\ncase $MODEL in 7B) TP=1 ;;\n  *) echo bad; exit 1 ;;\nesac\n')


def test_and_or_lists_and_functions_and_loops():
    script = _read('N=""\n[ -z "$N" ] && N=4\n[ -n "$N" ] || N=9\n'
                   'args() { echo "--tp $1"; X="--pp $1"; }\nargs 2\n'
                   "L=\nfor n in 1 2 3; do L=$L$n; done\n")
    assert (script.variables["N"], script.variables["X"], script.variables["L"]) == \
        ("4", "--pp 2", "123")


# --------------------------------------------------------------------------- sourced files

def test_sourced_files_are_read_next_to_the_script(tmp_path):
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "flags.sh").write_text("TP=8\n. $(dirname ${BASH_SOURCE[0]})/pp.sh\n")
    (tmp_path / "conf" / "pp.sh").write_text("PP=4\n")
    script_path = tmp_path / "train.sh"
    script = ShellScript("source conf/flags.sh\npython x.py --tp $TP --pp $PP\n",
                         file=str(script_path))
    assert _flags(script) == {"--tp": "8", "--pp": "4"}
    assert script.notes == []


def test_a_missing_sourced_file_is_named_in_a_note(cli, write):
    path = write("train.sh", "source flags.env\ntorchrun --nnodes 8 --nproc-per-node 8 "
                             f"pretrain_gpt.py $PARALLEL {GPT3}\n")
    code, result, err = _validate(cli, path)
    missing = str(Path(path).parent / "flags.env")
    assert f"{path} line 1: `source {missing}`: not found; the settings it holds are not read" \
        in result["notes"], result["notes"]


def test_a_source_through_an_unset_variable_says_so():
    script = _read("source $CONF_DIR/flags.sh\n")
    assert script.notes == ["s.sh line 1: cannot tell which file `source $CONF_DIR/flags.sh` "
                            "reads ($CONF_DIR not set in the script); the settings it holds "
                            "are not read"]


# --------------------------------------------------------------------------- published examples

def test_sc21_table1_reads_its_config_the_sbatch_job_and_the_srun_command():
    """run_table_1.sh picks MODEL_SIZE=1.7B by an if/elif chain, sources CONFIG.sh (flags in a
    string that starts with a blank) and SBATCH.sh, which submits SRUN.sh with --nodes=4 under
    its #SBATCH --ntasks-per-node=8; SRUN.sh runs `srun ... sh -c "python pretrain_gpt.py
    ${MEGATRON_PARAMS}"`: 4 x 8 = 32 GPUs."""
    path = EXAMPLES / "sc21" / "run_table_1.sh"
    script = ShellScript(path.read_text(), file=str(path))
    flags = _flags(script)
    assert _gpus(script) == 32
    assert (flags["--tensor-model-parallel-size"], flags["--pipeline-model-parallel-size"],
            flags["--num-layers"], flags["--hidden-size"], flags["--global-batch-size"]) == \
        ("1", "1", "24", "2304", "512")
    assert script.notes == []


def test_t5_example_distributed_args_string():
    path = EXAMPLES / "t5" / "train_t5_220m_distributed.sh"
    script = ShellScript(path.read_text(), file=str(path))
    flags = _flags(script)
    assert _gpus(script) == 8                   # GPUS_PER_NODE=8 x NUM_NODES=1
    assert (flags["--encoder-num-layers"], flags["--micro-batch-size"],
            flags["--tensor-model-parallel-size"]) == ("12", "64", "1")


def test_mamba_example_case_picks_the_800m_arm():
    path = EXAMPLES / "mamba" / "train.sh"
    script = ShellScript(path.read_text(), file=str(path))
    flags = _flags(script)
    assert (flags["--hidden-size"], flags["--global-batch-size"],
            flags["--tensor-model-parallel-size"]) == ("1024", "32", "1")
    assert _gpus(script) == 8
    assert script.notes == []


def test_rl_model_config_sources_common_through_its_own_path():
    """qwen3_8b.sh: `source $(dirname $SCRIPT_PATH)/common.sh`, SCRIPT_PATH="${BASH_SOURCE[0]}";
    common.sh's branches on ${LOWER_PRECISION:-false} and ${ENABLE_CUDA_GRAPH:-true}."""
    path = EXAMPLES / "rl" / "model_configs" / "qwen3_8b.sh"
    script = ShellScript(path.read_text(), file=str(path))
    common = script.variables["COMMON_OPTIONS"].split()
    assert common[:4] == ["--tensor-model-parallel-size", "1", "--pipeline-model-parallel-size",
                          "1"]
    assert "--cuda-graph-impl=local" in common and "--no-gradient-accumulation-fusion" \
        not in common
    assert script.variables["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    assert script.notes == []


def test_here_documents_are_kept_as_the_files_they_write():
    """`cat <<EOF > $F` writes its body, expanded as bash expands a here-document (variables,
    ${...} operators, arithmetic; quotes kept; nothing with a quoted delimiter) to the file
    the redirection names, quoted or not."""
    script = _read('F=ds.json\n'
                   'cat <<EOF > "$F"\n{"stage": $((1 + 1))}\nEOF\n'
                   "cat <<'EOF' > '/tmp/x y.json'\n{\"b\": $HOME}\nEOF\n"
                   'cat <<EOF >> "${F%.json}.bak"\nx ${UNSET:-3} "q"\nEOF\n'
                   'cat <<EOF\nnot written anywhere\nEOF\n'
                   'python x.py --deepspeed_config "$F"\n')
    assert script.written == {"ds.json": '{"stage": 2}\n', "/tmp/x y.json": '{"b": $HOME}\n',
                              "ds.bak": 'x 3 "q"\n'}
    assert _flags(script) == {"--deepspeed_config": "ds.json"}
