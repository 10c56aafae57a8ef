"""Text-level damage to the example inputs never becomes an internal error (issue 27 point
11): a seeded generator inserts control characters and NUL bytes, cuts, repeats and drops
lines, and puts zeros, negative and huge numbers and 10,000-character names in place of
values, in examples/ files and a torchtitan TOML; each variant goes through the command that
reads it, which exits 0, 1 or 2, never with a traceback, and bad input is one stderr line."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES, SMALL_CLUSTER

TORCHTITAN = """\
[training]
local_batch_size = 1
global_batch_size = 32
seq_len = 2048

[parallelism]
data_parallel_replicate_degree = 2
data_parallel_shard_degree = 1
tensor_parallel_degree = 2
pipeline_parallel_degree = 2
context_parallel_degree = 1

[activation_checkpoint]
mode = "full"
"""

BLOOM_STRATEGY = ("tp: 4\npp: 12\ndp: 8\nmicro_batch: 2\nglobal_batch: 2048\nrecompute: full\n"
                  "zero_stage: 1\n")

LONG = "x" * 10_000
VALUES = ["0", "-1", "-0", "1e400", str(2**70), "0.5", "nan", "inf", "", "~", "[]", "{}",
          "yes", '"', "'", "0x10", "1_0", LONG, f'"{LONG}"', "\u2028", "\ufeff1", "é"]
CONTROL = [chr(c) for c in (*range(0, 9), 11, 12, *range(14, 32), 0x7f, 0x85)]


def _mutate(text: str, rng: random.Random) -> str:
    """One random piece of damage to `text`."""
    lines = text.splitlines(keepends=True)
    kind = rng.randrange(8)
    if kind == 0:                                   # a control character or NUL anywhere
        at = rng.randrange(len(text) + 1)
        return text[:at] + rng.choice(CONTROL) + text[at:]
    if kind == 1:                                   # a number replaced
        numbers = list(re.finditer(r"-?\d+(\.\d+)?", text))
        if numbers:
            m = rng.choice(numbers)
            return text[:m.start()] + rng.choice(VALUES) + text[m.end():]
    if kind == 2:                                   # a value replaced
        values = list(re.finditer(r"(?<=[:=] )[^\n,}\]]+", text))
        if values:
            m = rng.choice(values)
            return text[:m.start()] + rng.choice(VALUES) + text[m.end():]
    if kind == 3 and lines:                         # a line dropped
        del lines[rng.randrange(len(lines))]
        return "".join(lines)
    if kind == 4 and lines:                         # a line repeated
        i = rng.randrange(len(lines))
        lines.insert(i, lines[i])
        return "".join(lines)
    if kind == 5:                                   # cut short
        return text[:rng.randrange(len(text) + 1)]
    if kind == 6 and lines:                         # a key renamed, long or odd
        i = rng.randrange(len(lines))
        lines[i] = re.sub(r"^(\s*)[\w.-]+", lambda m: m.group(1) + rng.choice(
            [LONG, "name", "tp", "tensor_parallel", "\x00", "é"]), lines[i], count=1)
        return "".join(lines)
    if kind == 7 and lines:                         # indentation broken
        i = rng.randrange(len(lines))
        lines[i] = " " * rng.randrange(1, 5) + lines[i].lstrip()
        return "".join(lines)
    return text + rng.choice(CONTROL + ["\n" + LONG + ": 1\n", "\n- 1\n"])


def _bases() -> list[tuple[str, str, str]]:
    """(kind, file name, text) of every input the generator damages."""
    return [
        ("strategy", "strategy.yaml", (EXAMPLES / "strategy-gpt3-175b.yaml").read_text()),
        ("cluster", "cluster.yaml", (EXAMPLES / "cluster-jean-zay.yaml").read_text()),
        ("runs", "runs.yaml", (EXAMPLES / "runs-bloom-jean-zay.yaml").read_text()),
        ("torchtitan", "job.toml", TORCHTITAN),
    ]


def _args(kind: str, path: str, tmp: Path) -> list[str]:
    if kind == "strategy":
        return ["memory", "gpt3-175b", "dgx-a100-80gb", path, "--gpus", "1024"]
    if kind == "cluster":
        strategy = tmp / "bloom.yaml"
        strategy.write_text(BLOOM_STRATEGY)
        return ["memory", "bloom-176b", path, str(strategy), "--gpus", "384"]
    if kind == "runs":
        return ["calibrate", str(EXAMPLES / "cluster-jean-zay.yaml"), path, "--json",
                "--fit", "gemm_peak_fraction"]
    return ["validate", "llama3-8b", "dgx-h100", path, "--gpus", "8", "--no-compare", "--json"]


def _variants(seed: int, count: int):
    rng = random.Random(seed)
    bases = _bases()
    for n in range(count):
        kind, name, text = bases[n % len(bases)]
        for _ in range(rng.choice((1, 1, 2, 3))):
            text = _mutate(text, rng)
        yield n, kind, name, text


VARIANTS = list(_variants(seed=27, count=200))


def test_the_generator_damages_every_example():
    assert {kind for _, kind, _, _ in VARIANTS} == {"strategy", "cluster", "runs", "torchtitan"}
    originals = {kind: text for kind, _, text in _bases()}
    assert sum(text != originals[kind] for _, kind, _, text in VARIANTS) >= 190


@pytest.mark.parametrize("kind", ["strategy", "cluster", "runs", "torchtitan"])
def test_the_examples_themselves_run(cli, tmp_path, kind):
    name, text = next((n, t) for k, n, t in _bases() if k == kind)
    path = tmp_path / name
    path.write_text(text)
    code, _, err = cli(*_args(kind, str(path), tmp_path))
    assert code in (0, 1), err


def test_damaged_examples_never_give_an_internal_error(cli, tmp_path):
    failures = []
    for n, kind, name, text in VARIANTS:
        folder = tmp_path / f"v{n}"
        folder.mkdir()
        path = folder / name
        path.write_bytes(text.encode("utf-8", "surrogatepass"))
        code, _, err = cli(*_args(kind, str(path), folder))
        errors = [line for line in err.splitlines() if not line.startswith("note: ")]
        one_line = code != 2 or (len(errors) == 1 and errors[0].startswith("Error: "))
        if code not in (0, 1, 2) or "internal error" in err or "Traceback" in err \
                or not one_line:
            failures.append((n, kind, code, err[:300], text[:200]))
    assert not failures, failures[:5]


@pytest.mark.parametrize("field", ["tensor_parallel_degree", "pipeline_parallel_degree",
                                   "context_parallel_degree", "data_parallel_replicate_degree",
                                   "expert_parallel_degree"])
def test_a_torchtitan_degree_of_zero(cli, tmp_path, field):
    toml = tmp_path / "job.toml"
    # Without data_parallel_shard_degree, torchtitan's -1 divides the GPUs by the others.
    text = re.sub(r"data_parallel_shard_degree = 1\n", "", TORCHTITAN)
    text = re.sub(rf"{field} = \d+", f"{field} = 0", text)
    if field not in text:
        text = text.replace("[parallelism]\n", f"[parallelism]\n{field} = 0\n")
    toml.write_text(text)
    code, _, err = cli("validate", "llama3-8b", "dgx-h100", str(toml), "--gpus", "8",
                       "--no-compare")
    assert (code, err) == (2, f"Error: {toml}: parallelism.{field}: must be at least 1 "
                              f"(got 0)\n")


@pytest.mark.parametrize(("text", "where", "code"), [
    ("name: ti\x01ny\n", "line 1, column 9", "U+0001"),
    ("name: tiny\x00\n", "line 1, column 11", "U+0000"),
    ("name: tiny\nhidden: 64\x1b\n", "line 2, column 11", "U+001B"),
])
def test_control_characters_in_yaml(cli, write, small_cluster, text, where, code):
    model = write("model.yaml", text)
    got, _, err = cli("plan", model, small_cluster)
    assert (got, err) == (2, f"Error: {model}: {where}: control character {code} is not "
                             f"allowed in YAML (write it as an escape in a double-quoted "
                             f"string, or remove it)\n")


def test_very_long_names(cli, tmp_path, tiny_model, small_cluster):
    for args in (("plan", LONG, small_cluster), ("plan", tiny_model, LONG),
                 ("plan", str(tmp_path / LONG / "m.yaml"), small_cluster),
                 ("schema", "model", "--out", str(tmp_path / LONG)),
                 ("plan", tiny_model, small_cluster, "--emit", "megatron", "--out",
                  str(tmp_path / LONG))):
        code, _, err = cli(*args)
        errors = [line for line in err.splitlines() if not line.startswith("note: ")]
        assert code == 2 and len(errors) == 1 and len(errors[0]) < 400, err[:400]
        assert "internal error" not in err and "(10,0" in err    # the name cut, its length said


@pytest.mark.parametrize(("kind", "text", "field", "shown_as"), [
    # An escaped newline would put a line of its own into the scripts --emit writes.
    ("model", 'name: "tiny\\necho hi"\nnum_layers: 4\nhidden: 64\nnum_heads: 8\n'
              'vocab_size: 512\n', "name", "tiny\\necho hi"),
    ("cluster", None, "gpu.name", "g\\x1b[31m"),
])
def test_names_with_control_characters(cli, write, tiny_model, small_cluster, kind, text,
                                        field, shown_as):
    if text is None:
        text = SMALL_CLUSTER.replace("name: test-gpu", 'name: "g\\x1b[31m"')
    path = write(f"{kind}.yaml", text)
    args = (path, small_cluster) if kind == "model" else (tiny_model, path)
    code, _, err = cli("plan", *args)
    assert code == 2
    assert err == (f"Error: {path}: {field}: a name must not hold control characters (got "
                   f"'{shown_as}')\n")
