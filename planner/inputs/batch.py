"""The global batch in sequences, from a batch in tokens or a changed sequence length.

Two readings need a rule, each stated once here and in `--help`:

* `--global-batch-tokens 4M`. "A 4M-token batch" in LLM pretraining means 4 x 2^20 =
  4,194,304 tokens: 1,024 sequences of 4,096 for Llama 2, 512 of 8,192 for Llama 3 (Touvron et
  al. 2023 Sec. 2.2; Dubey et al. 2024 Sec. 3.4). So a K/M/G/T suffix counts in powers of 1024
  where that makes a whole number of sequences, else in powers of 1000 where that does, else
  the nearest whole number of sequences to the decimal value; every reading but an exact
  decimal one is stated in a note. `4Mi` is always binary; a plain number (4000000, 4e6) is
  taken as written.
* `--seq-len` without a batch. The model's batch is a number of sequences at its own seq_len;
  at 16x the length the same count would be 16x the tokens per step (512 x 131,072 = 67M for
  Llama 3 8B). Long-context recipes keep the tokens per step instead, so the planner does: the
  same tokens in sequences of the new length, a power of two of them where the division is not
  whole (a batch the data-parallel sizes divide), with a note either way. `--global-batch` or
  `--global-batch-tokens` sets the batch as given.
"""

from __future__ import annotations

import math

DECIMAL = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
BINARY_POWER = {"k": 10, "m": 20, "b": 30, "g": 30, "t": 40}
"""Suffixes: K/M/G (or B)/T in powers of 1000, and with an i (Ki, Mi, Gi, Ti) of 1024."""


class TokenCount(float):
    """A count as the command line wrote it: its value (decimal for a K/M/G/T suffix), the
    text, and for such a suffix its binary reading and the power of two it names."""

    text: str
    binary: float | None
    """The same digits in powers of 1024 (4M: 4,194,304); None without a decimal suffix."""
    power: int | None
    """20 for M: the binary reading is digits x 2^power."""

    def __new__(cls, value: float, text: str, binary: float | None = None,
                power: int | None = None) -> TokenCount:
        count = super().__new__(cls, value)
        count.text, count.binary, count.power = text, binary, power
        return count


def parse_count(text: str) -> TokenCount:
    """'300B' -> 3e11, '4M' -> 4e6 (binary 4,194,304), '4Mi' -> 4,194,304, '2e12' -> 2e12.

    Raises ValueError when `text` is not a number, with or without such a suffix."""
    text = str(text).strip()
    lower = text.lower()
    if len(lower) > 2 and lower[-1] == "i" and lower[-2] in BINARY_POWER:
        return TokenCount(float(text[:-2]) * 2 ** BINARY_POWER[lower[-2]], text)
    if lower[-1:] in DECIMAL:
        digits, power = float(text[:-1]), BINARY_POWER[lower[-1]]
        return TokenCount(digits * DECIMAL[lower[-1]], text, digits * 2 ** power, power)
    return TokenCount(float(text), text)


def _whole(tokens: float, seq_len: int) -> int | None:
    """tokens / seq_len when that is a whole number of sequences (at least one), else None."""
    sequences = tokens / seq_len
    return int(sequences) if sequences >= 1 and sequences == int(sequences) else None


def sequences_for_tokens(tokens: float, seq_len: int,
                         flag: str = "--global-batch-tokens") -> tuple[int, str | None]:
    """The global batch in sequences of `seq_len` for a batch of `tokens` (the module
    docstring's rule; a plain float is taken as written), and the note that says how it was
    read: None when the tokens are whole sequences as written."""
    written = getattr(tokens, "text", None) or f"{tokens:,.0f}"
    binary, power = getattr(tokens, "binary", None), getattr(tokens, "power", None)
    if binary is not None and (sequences := _whole(binary, seq_len)) is not None:
        return sequences, (f"{flag} {written}: {sequences} sequences of {seq_len} tokens "
                           f"({sequences * seq_len:,} tokens: {written[-1]} as 2^{power}, the "
                           f"usual reading of a batch in tokens; {float(tokens):.0f} means "
                           f"{float(tokens):,.0f})")
    if (sequences := _whole(tokens, seq_len)) is not None:
        return sequences, None
    sequences = max(1, round(tokens / seq_len))
    return sequences, (f"{flag} {written}: {sequences} sequences of {seq_len} tokens "
                       f"({sequences * seq_len:,} tokens), the nearest whole number of "
                       f"sequences to {float(tokens):,.0f}")


def sequences_for_seq_len(global_batch: int, seq_len: int, new_seq_len: int,
                          model: str) -> tuple[int, str]:
    """The global batch in sequences of `new_seq_len` that keeps the tokens per step of
    `global_batch` sequences of `seq_len` (a power of two of sequences where the division is
    not whole: a batch data-parallel sizes divide), and the note that says so."""
    tokens = global_batch * seq_len
    was = f"{model}'s {global_batch} x {seq_len}"
    sequences = _whole(tokens, new_seq_len)
    if sequences is not None:
        kept = f"keeping the {tokens:,} tokens per step of {was}"
    else:
        exact = max(tokens / new_seq_len, 1.0)
        low = 2 ** math.floor(math.log2(exact))
        sequences = low if exact - low <= 2 * low - exact else 2 * low
        kept = (f"{sequences * new_seq_len:,} tokens per step, the power of two of sequences "
                f"nearest the {tokens:,} of {was}")
    noun = "sequence" if sequences == 1 else "sequences"
    return sequences, (f"--seq-len {new_seq_len}: global batch {sequences} {noun}, {kept}; "
                       f"pass --global-batch to set it")
