"""Micro-batch groups of the interleaved schedule end to end: the search uses them where
Megatron-LM runs them, the emitter writes the flag, the reader reads it back, and a script
that leaves it at Megatron-LM's default (pp) is told what to set."""

from __future__ import annotations

import json

from planner.costing.evaluate import evaluate_strategy
from planner.inputs.loader import make_problem
from planner.rules.validate import validate
from planner.schemas.strategy import Strategy

# GPT-3 175B on 8,192 A100 at its batch of 1,536: dp 64 leaves 24 micro-batches for pp 16.
GPT3_8K = ("plan", "gpt3-175b", "dgx-a100-80gb", "--gpus", "8192")
LAYOUT = dict(dp=64, tp=8, pp=16, vpp=6, micro_batch=1, sequence_parallel=True,
              zero_stage=1, global_batch=1536)
BASE = ("--num-layers 96 --hidden-size 12288 --num-attention-heads 96 --seq-length 2048 "
        "--max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 1536 "
        "--tensor-model-parallel-size 8 --pipeline-model-parallel-size 16 "
        "--num-virtual-stages-per-pipeline-rank 6 --sequence-parallel --bf16 "
        "--use-distributed-optimizer ")


def test_megatron_runs_24_micro_batches_on_16_stages_interleaved():
    problem = make_problem("gpt3-175b", "dgx-a100-80gb", gpus=8192)
    report = evaluate_strategy(problem, Strategy(**LAYOUT))
    assert report.strategy.microbatch_group == 24          # one group of every micro-batch
    assert not validate(problem, Strategy(**LAYOUT)).violations
    # pinned to Megatron-LM's default, pp, it cannot run (schedules.py RuntimeError)
    pinned = validate(problem, Strategy(**LAYOUT, microbatch_group=16)).violations
    assert [v.rule for v in pinned] == ["interleaved_schedule"]


def test_torchtitan_runs_equal_rounds_only():
    # 13 micro-batches on pp 4: Megatron-LM runs groups of 7 and 6; PyTorch's 3 rounds do not
    # divide 13 (ScheduleInterleaved1F1B raises ValueError). 24 on pp 16: one round of 24.
    thirteen = dict(dp=16, tp=8, pp=4, vpp=2, micro_batch=1, global_batch=13 * 16)
    for framework, broken in (("megatron", False), ("torchtitan", True)):
        problem = make_problem("gpt3-175b", "dgx-a100-80gb", gpus=512, framework=framework)
        found = {v.rule: v for v in validate(problem, Strategy(**thirteen)).violations}
        assert ("interleaved_schedule" in found) is broken, framework
    assert found["interleaved_schedule"].message == (
        "the interleaved schedule runs the micro-batches in 3 equal rounds (micro-batches // "
        "pp), which must divide the 13 micro-batches (torch.distributed.pipelining)")
    problem = make_problem("gpt3-175b", "dgx-a100-80gb", gpus=8192, framework="torchtitan")
    assert "interleaved_schedule" not in [v.rule for v in
                                          validate(problem, Strategy(**LAYOUT)).violations]


def test_the_search_interleaves_where_groups_allow(cli):
    code, out, err = cli(*GPT3_8K, "--json", "--top", "1")
    assert code == 0, err
    best = json.loads(out)["plans"][0]["strategy"]
    m = best["global_batch"] // (best["dp"] * best["micro_batch"])
    # Without groups this batch leaves pp 16 only 1F1B (62% bubble); the plan interleaves.
    assert best["vpp"] > 1 and m % best["pp"] != 0
    assert best["microbatch_group"] >= best["pp"]


def test_emitted_flag_reads_back(cli, tmp_path):
    code, _, err = cli(*GPT3_8K, "--emit", "megatron", "--out", str(tmp_path))
    assert code == 0, err
    script = (tmp_path / "pretrain_gpt.sh").read_text()
    assert "--microbatch-group-size-per-virtual-pipeline-stage 24" in script
    code, out, err = cli("validate", "gpt3-175b", "dgx-a100-80gb",
                         str(tmp_path / "pretrain_gpt.sh"), "--gpus", "8192", "--no-compare",
                         "--json")
    assert code == 0, err
    result = json.loads(out)
    assert not result["violations"]


def test_script_without_the_flag_is_told_the_group(cli, write):
    path = write("args.txt", BASE + "\n")
    code, out, err = cli("validate", "gpt3-175b", "dgx-a100-80gb", path, "--gpus", "8192",
                         "--no-compare", "--json")
    assert code == 1, err
    (violation,) = json.loads(out)["violations"]
    assert violation["rule"] == "interleaved_schedule"
    assert "--microbatch-group-size-per-virtual-pipeline-stage 24" in violation["fix"]
    path = write("fixed.txt", BASE + "--microbatch-group-size-per-virtual-pipeline-stage 24\n")
    code, out, err = cli("validate", "gpt3-175b", "dgx-a100-80gb", path, "--gpus", "8192",
                         "--no-compare", "--json")
    assert code == 0, (out, err)


def test_the_flag_without_interleaving_is_a_note(cli, write):
    flags = BASE.replace("--num-virtual-stages-per-pipeline-rank 6 ", "")
    path = write("args.txt", flags + "--microbatch-group-size-per-virtual-pipeline-stage 24\n")
    code, out, err = cli("validate", "gpt3-175b", "dgx-a100-80gb", path, "--gpus", "8192",
                         "--no-compare", "--json")
    assert code == 0, (out, err)
    assert ("microbatch_group 24 has no effect at vpp 1: only the interleaved schedule runs "
            "its micro-batches in groups") in json.loads(out)["notes"]
