"""The global batch from tokens or from a changed seq_len (inputs.batch; issue 27 point 10)."""

from __future__ import annotations

import json

import pytest

from planner.inputs.batch import parse_count, sequences_for_seq_len, sequences_for_tokens


@pytest.mark.parametrize(("text", "value", "binary"), [
    ("4M", 4e6, 4 * 2**20), ("1.5m", 1.5e6, 1.5 * 2**20), ("300B", 3e11, 300 * 2**30),
    ("2k", 2e3, 2048), ("4Mi", 4 * 2**20, None), ("1Ki", 1024, None), ("2Ti", 2 * 2**40, None),
    ("4e6", 4e6, None), ("4194304", 4194304, None),
])
def test_counts_and_their_binary_reading(text, value, binary):
    count = parse_count(text)
    assert (float(count), count.binary, count.text) == (value, binary, text)


@pytest.mark.parametrize("text", ["", "M", "Mi", "4X", "four", "4 M i"])
def test_what_is_not_a_count(text):
    with pytest.raises(ValueError):
        parse_count(text)


@pytest.mark.parametrize(("text", "seq_len", "sequences", "noted"), [
    ("4M", 8192, 512, True),       # 4 x 2^20 = 512 x 8192, the Llama 3 batch
    ("4M", 4096, 1024, True),      # Llama 2's
    ("4Mi", 8192, 512, False),     # binary as written: nothing to say
    ("4194304", 8192, 512, False),
    ("4M", 2000, 2000, False),     # 2^22 / 2000 is no whole number; 4e6 / 2000 is
    ("4M", 3000, 1333, True),      # neither is: the nearest to 4,000,000
    ("4e6", 8192, 488, True),      # decimal as written: 488.3 -> 488
])
def test_batch_tokens_in_sequences(text, seq_len, sequences, noted):
    got, note = sequences_for_tokens(parse_count(text), seq_len)
    assert got == sequences and (note is not None) == noted
    if note:
        assert note.startswith(f"--global-batch-tokens {text}: {sequences} sequences of "
                               f"{seq_len} tokens ({sequences * seq_len:,} tokens")


@pytest.mark.parametrize(("batch", "seq_len", "new", "sequences"), [
    (512, 8192, 131072, 32),        # 4,194,304 tokens per step kept exactly
    (512, 8192, 4096, 1024),
    (1536, 2048, 3000, 1024),       # 1048.6 -> the nearest power of two
    (1536, 2048, 4200, 512),        # 748.9: 512 is nearer than 1024
    (32, 128, 1 << 20, 1),          # less than one sequence: one
])
def test_a_new_seq_len_keeps_the_tokens_per_step(batch, seq_len, new, sequences):
    got, note = sequences_for_seq_len(batch, seq_len, new, "m")
    assert got == sequences
    assert note.startswith(f"--seq-len {new}: global batch {sequences} sequence")
    assert note.endswith("; pass --global-batch to set it")


def test_seq_len_on_the_command_line(cli):
    code, out, err = cli("plan", "llama3-8b", "dgx-h100", "--gpus", "64", "--top", "1",
                         "--json", "--seq-len", "131072")
    assert code == 0, err
    result = json.loads(out)
    # 32 x 131,072 = 4,194,304 tokens per step, as the zoo's 512 x 8192: not 67M.
    assert (result["global_batch"], result["seq_len"]) == (32, 131072)
    note = ("--seq-len 131072: global batch 32 sequences, keeping the 4,194,304 tokens per step "
            "of llama3-8b's 512 x 8192; pass --global-batch to set it")
    assert note in result["notes"] and f"note: {note}" in err.splitlines()
    # A batch given, in sequences or tokens, is the batch: no rescaling, no note.
    for flags, batch in ((("--global-batch", "512"), 512),
                         (("--global-batch-tokens", "4Mi"), 32)):
        code, out, err = cli("plan", "llama3-8b", "dgx-h100", "--gpus", "64", "--top", "1",
                             "--json", "--seq-len", "131072", *flags)
        assert json.loads(out)["global_batch"] == batch and "--seq-len" not in err


def test_a_files_own_batch_wins_over_the_kept_tokens(cli, write):
    # A DeepSpeed config states its batch: the model's, kept in tokens, is not used.
    config = write("ds.json", json.dumps({"train_batch_size": 64,
                                          "train_micro_batch_size_per_gpu": 1,
                                          "gradient_accumulation_steps": 8,
                                          "zero_optimization": {"stage": 1},
                                          "bf16": {"enabled": True}}))
    code, out, err = cli("validate", "llama3-8b", "dgx-h100", config, "--gpus", "8",
                         "--seq-len", "16384", "--no-compare", "--json")
    review = json.loads(out)
    assert (review["global_batch"], review["seq_len"]) == (64, 16384), err
    assert "--seq-len" not in err and not any("--seq-len" in n for n in review["notes"])
