"""`planner validate` compares like with like: its best plan is searched at the config's own
global batch, seq_len, precision (and FP8 recipe) and GPU count, so it equals what `planner
plan` finds when given those settings on the command line (issue 24, item 4)."""

import json
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parent.parent / "frameworks" / "golden"

DEEPSPEED_FP16 = json.dumps({"train_batch_size": 1024, "train_micro_batch_size_per_gpu": 1,
                             "zero_optimization": {"stage": 3}, "fp16": {"enabled": True}})


def _megatron_fp8(tmp_path: Path) -> Path:
    """The emitted llama3-8b FP8 (delayed scaling) script at global batch 2048."""
    text = (GOLDEN / "llama3-8b-fp8-delayed.pretrain_gpt.sh").read_text()
    assert "--global-batch-size 512" in text
    path = tmp_path / "pretrain_gpt.sh"
    path.write_text(text.replace("--global-batch-size 512", "--global-batch-size 2048"))
    return path


def _torchtitan_small(tmp_path: Path) -> Path:
    """The emitted llama3-8b FSDP TOML at global batch 64 and seq_len 4096."""
    text = (GOLDEN / "llama3-8b-fsdp.torchtitan.toml").read_text()
    assert "global_batch_size = 512" in text and "seq_len = 8192" in text
    path = tmp_path / "torchtitan.toml"
    path.write_text(text.replace("global_batch_size = 512", "global_batch_size = 64")
                    .replace("seq_len = 8192", "seq_len = 4096"))
    return path


def _deepspeed(tmp_path: Path) -> Path:
    path = tmp_path / "ds_config.json"
    path.write_text(DEEPSPEED_FP16)
    return path


# (config writer, GPUs, the file's training settings, plan's flags for the same settings)
CASES = {
    "deepspeed": (_deepspeed, 8, dict(global_batch=1024, seq_len=8192, precision="fp16"),
                  ("--global-batch", "1024", "--precision", "fp16")),
    "megatron": (_megatron_fp8, 16,
                 dict(global_batch=2048, seq_len=8192, precision="fp8", fp8_recipe="delayed"),
                 ("--global-batch", "2048", "--precision", "fp8", "--fp8-recipe", "delayed")),
    "torchtitan": (_torchtitan_small, 8, dict(global_batch=64, seq_len=4096, precision="bf16"),
                   ("--global-batch", "64", "--seq-len", "4096")),
}


def _json(cli, *args):
    code, out, err = cli(*args, "--json")
    assert code in (0, 1), err
    return json.loads(out)


@pytest.mark.parametrize("target", list(CASES))
def test_best_plan_is_plans_best_at_the_files_settings(cli, tmp_path, target):
    write, gpus, settings, flags = CASES[target]
    config = str(write(tmp_path))
    review = _json(cli, "validate", "llama3-8b", "dgx-h100", config, "--gpus", str(gpus))
    assert review["target"] == target
    assert {k: review[k] for k in settings} == settings          # the head: the file's values
    assert review["num_gpus"] == gpus
    assert review["strategy"]["global_batch"] == settings["global_batch"]
    planned = _json(cli, "plan", "llama3-8b", "dgx-h100", "--gpus", str(gpus), *flags,
                    "--framework", target, "--top", "5")
    # validate's best is the fastest found; plan lists tied plans conventional first and
    # keeps the fastest found among them (search.ties).
    best = min(planned["plans"], key=lambda p: p["time"]["step_s"])
    assert review["best"]["strategy"]["global_batch"] == settings["global_batch"]
    assert review["best"]["time"]["step_s"] == pytest.approx(best["time"]["step_s"], rel=1e-9)
    assert review["speedup"] == pytest.approx(review["time"]["step_s"] / best["time"]["step_s"])


def test_text_heading_shows_the_files_batch_and_seq_len(cli, tmp_path):
    code, out, _ = cli("validate", "llama3-8b", "dgx-h100", str(_torchtitan_small(tmp_path)),
                       "--gpus", "8")
    assert "global batch 64 x 4096 tokens" in " ".join(out.split())


def test_command_line_wins_over_the_file_and_says_so(cli, tmp_path):
    config = str(_deepspeed(tmp_path))
    review = _json(cli, "validate", "llama3-8b", "dgx-h100", config, "--gpus", "8",
                   "--global-batch", "512", "--precision", "bf16")
    assert (review["global_batch"], review["precision"]) == (512, "bf16")
    assert review["strategy"]["global_batch"] == 512
    assert "--global-batch 512 replaces the file's global_batch 1024" in review["notes"]
    assert "--precision bf16 replaces the file's precision fp16" in review["notes"]
    planned = _json(cli, "plan", "llama3-8b", "dgx-h100", "--gpus", "8", "--global-batch",
                    "512", "--framework", "deepspeed", "--top", "5")
    assert review["best"]["time"]["step_s"] == pytest.approx(
        min(p["time"]["step_s"] for p in planned["plans"]), rel=1e-9)


def test_fp8_recipe_without_fp8_is_bad_input(cli, tmp_path):
    code, _, err = cli("validate", "llama3-8b", "dgx-h100", str(_deepspeed(tmp_path)),
                       "--gpus", "8", "--fp8-recipe", "delayed")
    assert code == 2
    assert err.strip().splitlines() == [
        f"Error: --fp8-recipe: {tmp_path / 'ds_config.json'} trains in fp16, not fp8; give "
        f"--precision fp8 too"]


def test_fp8_recipe_replaces_the_files(cli, tmp_path):
    """The model trains in bf16; --fp8-recipe alone applies to the file's FP8."""
    review = _json(cli, "validate", "llama3-8b", "dgx-h100", str(_megatron_fp8(tmp_path)),
                   "--gpus", "16", "--fp8-recipe", "tensorwise")
    assert (review["precision"], review["fp8_recipe"]) == ("fp8", "tensorwise")
    assert "--fp8-recipe tensorwise replaces the file's fp8_recipe delayed" in review["notes"]


def test_diff_json_head_shows_the_shared_batch(cli, tmp_path):
    config = str(_torchtitan_small(tmp_path))
    out = _json(cli, "diff", "llama3-8b", "dgx-h100", config, config, "--gpus", "8")
    assert (out["global_batch"], out["seq_len"]) == (64, 4096)


def test_batch_in_tokens_counts_sequences_of_the_files_seq_len(cli, tmp_path):
    config = str(_torchtitan_small(tmp_path))        # seq_len 4096; llama3-8b's is 8192
    code, out, err = cli("validate", "llama3-8b", "dgx-h100", config, "--gpus", "8",
                         "--global-batch-tokens", "1M", "--no-compare", "--json")
    review = json.loads(out)
    assert (review["global_batch"], review["seq_len"]) == (256, 4096)   # 2^20 / 4096
    assert review["strategy"]["global_batch"] == 256
    stated = ("--global-batch-tokens 1M: 256 sequences of 4096 tokens (1,048,576 tokens: M as "
              "2^20, the usual reading of a batch in tokens; 1000000 means 1,000,000)")
    assert stated in review["notes"] and f"note: {stated}" in err.splitlines()
    assert "8192" not in err
