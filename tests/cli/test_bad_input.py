"""Bad input never becomes an internal error: the reproductions of issue 12 point 11, each an
exact exit code and one stderr line naming the file and the field, and a seeded generator of
malformed variants of every kind of input file (no exit 3, no traceback)."""

from __future__ import annotations

import json
import random
import time

import pytest

from tests.conftest import SMALL_CLUSTER, TINY_MODEL

STRATEGY = "tp: 2\npp: 2\nmicro_batch: 1\n"

# A small Llama-like Hugging Face config (keys of transformers' LlamaConfig).
HF_CONFIG = {
    "model_type": "llama", "num_hidden_layers": 4, "hidden_size": 64,
    "num_attention_heads": 8, "num_key_value_heads": 4, "intermediate_size": 172,
    "vocab_size": 512, "max_position_embeddings": 256, "tie_word_embeddings": False,
}

DEEPSPEED = {
    "train_batch_size": 32, "train_micro_batch_size_per_gpu": 1,
    "gradient_accumulation_steps": 4,
    "zero_optimization": {"stage": 1, "overlap_comm": True},
    "bf16": {"enabled": True},
    "tensor_parallel": {"autotp_size": 2},
}

TORCHTITAN = """\
[training]
local_batch_size = 1
global_batch_size = 32
seq_len = 128

[parallelism]
data_parallel_replicate_degree = 4
data_parallel_shard_degree = 1
tensor_parallel_degree = 2
pipeline_parallel_degree = 1
context_parallel_degree = 1

[activation_checkpoint]
mode = "none"
"""


def error_lines(err: str) -> list[str]:
    """stderr without the notes the loader prints before a result."""
    return [line for line in err.splitlines() if not line.startswith("note: ")]


def one_error(cli, *args, code: int = 2) -> str:
    got, _, err = cli(*args)
    lines = error_lines(err)
    assert (got, len(lines)) == (code, 1), err
    assert lines[0].startswith("Error: ") and "internal error" not in lines[0]
    return lines[0]


# --------------------------------------------------------------------------- the reproductions

@pytest.fixture
def files(write, tiny_model, small_cluster):
    return {"model": tiny_model, "cluster": small_cluster,
            "strategy": write("strategy.yaml", STRATEGY),
            "model16": write("model16.yaml", TINY_MODEL.replace("num_layers: 4",
                                                                 "num_layers: 16"))}


@pytest.mark.parametrize(("strategy", "expected"), [
    # Per-stage counts with vpp 2: one count per chunk (pp * vpp of them) is what is read.
    ("pp: 2\nvpp: 2\nlayers_per_stage: [7, 9]\n",
     "layers_per_stage has 2 entries but pp * vpp is 4: one count per pipeline chunk; use "
     "layers_per_stage [4, 4, 4, 4]"),
    ("pp: 3\nvpp: 2\nlayers_per_stage: [5, 5, 6]\n",
     "layers_per_stage has 3 entries but pp * vpp is 6: one count per pipeline chunk; use "
     "layers_per_stage [2, 3, 3, 3, 3, 2]"),
    ("pp: 3\nlayers_per_stage: [5, 5, 7]\n",
     "layers_per_stage sums to 17 but the model has 16 layers; use layers_per_stage [5, 6, 5]"),
    ("pp: 3\nlayers_per_stage: [20, 1, 1]\n",
     "layers_per_stage sums to 22 but the model has 16 layers; use layers_per_stage [5, 6, 5]"),
    ("pp: 6\nvpp: 3\n",
     "pp: pp * vpp = 18 pipeline chunks exceed the 16 layers of tiny: every chunk needs a layer"),
    # Fewer counts than stages with vpp > 1: was an internal error (the uneven-chunks note
    # sliced a stage's chunks out of the short list).
    ("pp: 4\nvpp: 2\nlayers_per_stage: [16]\n",
     "layers_per_stage has 1 entries but pp * vpp is 8: one count per pipeline chunk; use "
     "layers_per_stage [2, 2, 2, 2, 2, 2, 2, 2]"),
])
def test_memory_refuses_a_layout_that_cannot_exist(cli, write, files, strategy, expected):
    path = write("uneven.yaml", strategy)
    pp = int(strategy.split("pp: ")[1].split("\n")[0])
    line = one_error(cli, "memory", files["model16"], files["cluster"], path, "--gpus", str(pp),
                     "--nodes", "2")
    assert line == f"Error: {path}: {expected}"


def _memory_json(cli, files, write, strategy: str) -> dict:
    path = write("s.yaml", strategy)
    code, out, err = cli("memory", files["model16"], files["cluster"], path, "--gpus", "6",
                         "--json")
    assert code == 0, err
    return json.loads(out)


def test_uneven_interleaved_layout_puts_each_chunk_on_its_stage(cli, write, files):
    # pp 3, vpp 2 on 16 layers: chunk k runs on stage k % 3 (Megatron-LM's interleaving).
    # Even split: even_layer_counts(16, 6) = [2, 3, 3, 3, 3, 2] -> stages 2+3, 3+3, 3+2.
    # Uneven [3, 3, 3, 3, 3, 1]                              -> stages 3+3, 3+3, 3+1.
    even = _memory_json(cli, files, write, "pp: 3\nvpp: 2\n")
    uneven = _memory_json(cli, files, write, "pp: 3\nvpp: 2\nlayers_per_stage: [3, 3, 3, 3, 3, 1]\n")
    assert [s["num_layers"] for s in even["stages"]] == [5, 6, 5]
    assert [s["num_layers"] for s in uneven["stages"]] == [6, 6, 4]
    assert uneven["strategy"]["layers_per_stage"] == [3, 3, 3, 3, 3, 1]
    # Each layer is the same: stage 0 gains one layer's weights, stage 2 loses one; the
    # embedding (stage 0) and output (stage 2) stay where they were.
    e, u = ([s["weights_bytes"] for s in r["stages"]] for r in (even, uneven))
    layer = u[0] - e[0]
    assert layer > 0
    assert u[1] == e[1] and u[2] == pytest.approx(e[2] - layer)
    # tiny: h = 64, bf16 weights (2 bytes): QKV, projection, two MLP matrices with biases and
    # two LayerNorms, tp 1.
    h = 64
    assert layer == 2 * ((3 * h * h + 3 * h) + (h * h + h) + (4 * h * h + 4 * h)
                         + (4 * h * h + h) + 2 * (2 * h))


@pytest.mark.parametrize("key", ["global_batch", "dp"])
def test_a_strategy_key_left_empty_is_as_if_absent(cli, write, files, key):
    # `global_batch:` with no value (YAML null) was an internal error in validate.
    path = write("s.yaml", STRATEGY + f"{key}:\n")
    code, out, err = cli("validate", files["model"], files["cluster"], path, "--gpus", "4",
                         "--no-compare", "--json")
    assert code in (0, 1) and "internal error" not in err, err
    absent = cli("validate", files["model"], files["cluster"], files["strategy"], "--gpus",
                 "4", "--no-compare", "--json")
    assert json.loads(out)["strategy"] == json.loads(absent[1])["strategy"]


def test_validate_names_a_short_interleaved_layout(cli, write, files):
    # Fewer counts than stages with vpp > 1 was an internal error in validate: its note on
    # uneven chunks sliced each stage's chunks out of the short list.
    path = write("short.yaml", "pp: 4\nvpp: 2\nlayers_per_stage: [16]\n")
    code, out, err = cli("validate", files["model16"], files["cluster"], path, "--gpus", "4",
                         "--nodes", "2", "--no-compare")
    assert code == 1 and "internal error" not in err, err
    assert "layers_per_stage has 1 entries but pp * vpp is 8" in " ".join(out.split())


def test_hf_model_type_given_as_a_list(cli, write, files):
    path = write("config.json", json.dumps({**HF_CONFIG, "model_type": ["llama"]}))
    line = one_error(cli, "memory", path, files["cluster"], files["strategy"])
    assert line.startswith(f"Error: {path}: model_type: must be a string (got ['llama'])")


@pytest.mark.parametrize("suffix", ["yaml", "toml", "json"])
def test_nesting_500_deep(cli, write, files, suffix):
    deep = "[" * 500 + "1" + "]" * 500
    text = {"yaml": f"tp: {deep}\n", "toml": f"[parallelism]\ntensor_parallel_degree = {deep}\n",
            "json": json.dumps({**DEEPSPEED})[:-1] + f', "x": {deep}}}'}[suffix]
    path = write(f"strategy.{suffix}", text)
    line = one_error(cli, "validate", files["model"], files["cluster"], path, "--no-compare")
    assert line.startswith(f"Error: {path}: ") and "nested more than 32 levels deep" in line


@pytest.mark.parametrize(("name", "text", "field"), [
    ("model.yaml", TINY_MODEL.replace("num_layers: 4", "num_layers: " + "9" * 5000),
     "num_layers"),
    ("config.json", json.dumps({**HF_CONFIG, "hidden_size": 0}).replace(
        '"hidden_size": 0', '"hidden_size": ' + "9" * 5000), "hidden_size"),
    ("cluster.yaml", SMALL_CLUSTER.replace("latency_us: 3", "latency_us: " + "1" * 5000),
     "intra_node.latency_us"),
])
def test_a_5000_digit_number(cli, write, files, name, text, field):
    path = write(name, text)
    args = {"model.yaml": (path, files["cluster"]), "config.json": (path, files["cluster"]),
            "cluster.yaml": (files["model"], path)}[name]
    line = one_error(cli, "memory", *args, files["strategy"])
    assert line == f"Error: {path}: {field}: a number of 5,000 digits is out of range"


def test_a_5000_digit_number_in_toml_and_deepspeed(cli, write, files):
    toml = write("job.toml", TORCHTITAN.replace("seq_len = 128", "seq_len = " + "9" * 5000))
    line = one_error(cli, "validate", files["model"], files["cluster"], toml, "--no-compare")
    assert line == f"Error: {toml}: line 4: seq_len: a number of more than 64 digits"
    ds = write("ds.json", json.dumps(DEEPSPEED).replace('"gradient_accumulation_steps": 4',
                                                        '"gradient_accumulation_steps": '
                                                        + "9" * 5000))
    line = one_error(cli, "validate", files["model"], files["cluster"], ds, "--no-compare")
    assert line == (f"Error: {ds}: gradient_accumulation_steps: a number of 5,000 digits is "
                    f"out of range")


def test_train_batch_size_of_2_to_the_70(cli, write, files):
    ds = write("ds.json", json.dumps({**DEEPSPEED, "train_batch_size": 2**70}))
    line = one_error(cli, "validate", files["model"], files["cluster"], ds, "--no-compare")
    assert line == (f"Error: {ds}: train_batch_size: 1.18e+21 exceeds the largest accepted, "
                    f"16,777,216 (far above any real run)")


def test_a_million_layers_is_refused_at_once(cli, write, files):
    path = write("deep.yaml", TINY_MODEL.replace("num_layers: 4", "num_layers: 1000000"))
    start = time.perf_counter()
    line = one_error(cli, "memory", path, files["cluster"], files["strategy"])
    assert time.perf_counter() - start < 5
    assert line == (f"Error: {path}: num_layers: 1,000,000 exceeds the largest accepted, "
                    f"10,000 (80x the deepest models trained)")


def test_a_million_repeated_blocks_is_refused(cli, write, files):
    path = write("layers.yaml", "name: x\nlayers:\n  - kind: transformer\n    hidden: 64\n"
                                "    num_heads: 8\n    repeat: 1000000\n")
    line = one_error(cli, "memory", path, files["cluster"], files["strategy"])
    assert line == (f"Error: {path}: layers[0].repeat: 1e+06 exceeds the largest accepted, "
                    f"10,000 (80x the deepest models trained)")


@pytest.mark.parametrize("command", ["memory", "plan"])
def test_a_global_batch_of_2_to_the_62(cli, files, command):
    args = [files["model"], files["cluster"]] + ([files["strategy"]] if command == "memory"
                                                 else [])
    line = one_error(cli, command, *args, "--global-batch", "4611686018427387904")
    assert line == ("Error: command line: global_batch: 4.61e+18 exceeds the largest accepted, "
                    "16,777,216 (1,000x the largest batches published)")


def test_token_counts_are_bounded_too(cli, files):
    line = one_error(cli, "plan", files["model"], files["cluster"], "--global-batch-tokens",
                     "1e15")
    assert line.startswith("Error: --global-batch-tokens: global_batch: 7,812,500,000,000 exceeds")
    line = one_error(cli, "plan", files["model"], files["cluster"], "--tokens", "1e30")
    assert line == ("Error: Invalid value for '--tokens': 1e+30 exceeds the largest accepted, "
                    "1e+18 tokens (far above any real run) (see 'planner plan --help')")


@pytest.mark.parametrize(("flag", "value"), [("--seed", "99999999999"),
                                             ("--workers", "100000000")])
def test_solver_settings_are_bounded(cli, files, flag, value):
    # CP-SAT's seed and worker count are 32-bit; 10^8 worker threads would never start.
    line = one_error(cli, "plan", files["model"], files["cluster"], flag, value)
    assert line.startswith(f"Error: Invalid value for '{flag}': ")


def test_a_billion_laughs_anchor_bomb(cli, write, files):
    lines = ['x0: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, 10):
        lines.append(f"x{i}: &{chr(97 + i)} [" + ", ".join([f"*{chr(96 + i)}"] * 9) + "]")
    path = write("cluster.yaml", "\n".join(lines) + "\n")
    line = one_error(cli, "memory", files["model"], path, files["strategy"])
    assert line == (f"Error: {path}: line 2, column 9: alias *a is not allowed in planner "
                    f"inputs; write the value out")


def test_a_file_name_holding_a_newline(cli, tmp_path, files):
    path = tmp_path / "bad\nname.yaml"
    path.write_text("name: [\n")
    line = one_error(cli, "memory", str(path), files["cluster"], files["strategy"])
    shown = str(path).replace("\n", "\\n")
    assert line == (f"Error: '{shown}': line 2, column 1: YAML syntax error: expected the node "
                    f"content, but found '<stream end>'")


def test_a_missing_file_with_a_newline_in_its_name(cli, tmp_path, files):
    line = one_error(cli, "memory", files["model"], files["cluster"], str(tmp_path / "a\nb.yaml"))
    assert line.endswith("a\\nb.yaml': file not found")


@pytest.mark.parametrize("command", ["plan", "emit"])
def test_out_empty_is_an_error(cli, files, command):
    args = ([files["model"], files["cluster"], "--emit", "megatron"] if command == "plan" else
            [files["model"], files["cluster"], files["strategy"], "--target", "megatron"])
    assert one_error(cli, command, *args, "--out", "") == "Error: --out: empty path"


def test_non_utf8_empty_directory_and_oversized_files(cli, write, tmp_path, files):
    bad = tmp_path / "bytes.yaml"
    bad.write_bytes(b"name: tiny\nnum_layers: \xff\xfe\n")
    assert one_error(cli, "memory", str(bad), files["cluster"], files["strategy"]) == (
        f"Error: {bad}: line 2: not UTF-8 text (byte 0xff at offset 23)")
    empty = write("empty.yaml", "")
    assert one_error(cli, "memory", files["model"], empty, files["strategy"]) == (
        f"Error: {empty}: expected a mapping of fields at the top level, got an empty file")
    assert one_error(cli, "memory", files["model"], files["cluster"], str(tmp_path)) == (
        f"Error: {tmp_path}: is a directory, not a file")
    big = tmp_path / "big.yaml"
    big.write_text("# padding\n" * 200_000)
    assert one_error(cli, "memory", files["model"], files["cluster"], str(big)) == (
        f"Error: {big}: larger than 1 MiB; planner inputs are a few KB (is this the right "
        f"file?)")


# --------------------------------------------------------------------------- the generator

def _yaml_scalar(value) -> str:
    return json.dumps(value)      # JSON scalars, lists and objects are YAML flow syntax


def _mutations(rng: random.Random):
    """Values that are wrong for (almost) any field."""
    deep = "[" * 60 + "1" + "]" * 60
    return [None, -1, 0, 2**70, 10**30, 1.5, 1e300, -1e-300, "abc", "", "12", True,
            [1, 2], {"a": 1}, [], {}, deep, "9" * 5000, "nan", "inf", "-.inf",
            rng.randint(-10**6, 10**6), "\u00e9\n\t", [[1]] * 3]


def _flat_keys(data, prefix=()):
    """Paths of every leaf and branch of a nested dict."""
    for key, value in data.items():
        yield (*prefix, key)
        if isinstance(value, dict):
            yield from _flat_keys(value, (*prefix, key))


def _mutate(data: dict, rng: random.Random) -> tuple[dict, str | None]:
    """A deep copy of `data` with one key deleted or replaced; the raw text for values that
    JSON cannot carry (a 5,000-digit number, deep nesting)."""
    data = json.loads(json.dumps(data))
    path = rng.choice(list(_flat_keys(data)))
    parent = data
    for key in path[:-1]:
        parent = parent[key]
    if rng.random() < 0.2:
        del parent[path[-1]]
        return data, None
    value = rng.choice(_mutations(rng))
    if value == "9" * 5000 or (isinstance(value, str) and value.startswith("[[[")):
        parent[path[-1]] = "@RAW@"
        return data, value
    parent[path[-1]] = value
    return data, None


def _yaml(data, indent=0) -> str:
    pad = " " * indent
    out = ""
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out += f"{pad}{key}:\n{_yaml(value, indent + 2)}"
        else:
            out += f"{pad}{key}: {_yaml_scalar(value)}\n"
    return out


def _toml(data) -> str:
    out = ""
    for section, values in data.items():
        if not isinstance(values, dict):
            out += f"{section} = {_toml_value(values)}\n"
            continue
        out += f"[{section}]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in values.items())
    return out


def _toml_value(value) -> str:
    if value is None:
        return '"null"'
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, float) and value != value:
        return "nan"
    return json.dumps(value)


def _parse_yaml(text: str) -> dict:
    import yaml

    return yaml.safe_load(text)


def _bases():
    """(kind, parsed document, writer): the valid inputs the generator mutates."""
    import tomllib

    return [
        ("model.yaml", _parse_yaml(TINY_MODEL), _yaml),
        ("cluster.yaml", _parse_yaml(SMALL_CLUSTER), _yaml),
        ("strategy.yaml", {**_parse_yaml(STRATEGY), "layers_per_stage": [1, 1, 1, 1],
                           "vpp": 2, "recompute": "selective", "zero_stage": 1}, _yaml),
        ("config.json", HF_CONFIG, lambda d: json.dumps(d)),
        ("ds.json", DEEPSPEED, lambda d: json.dumps(d)),
        ("job.toml", tomllib.loads(TORCHTITAN), _toml),
    ]


def _args(kind: str, path: str, files: dict) -> list[str]:
    model, cluster, strategy = files["model"], files["cluster"], files["strategy"]
    if kind in ("model.yaml", "config.json"):
        return ["memory", path, cluster, strategy]
    if kind == "cluster.yaml":
        return ["memory", model, path, strategy]
    if kind == "strategy.yaml":
        return ["memory", model, cluster, path]
    return ["validate", model, cluster, path, "--no-compare"]


def _variants(seed: int, count: int):
    rng = random.Random(seed)
    bases = _bases()
    for n in range(count):
        kind, data, writer = bases[n % len(bases)]
        mutated, raw = _mutate(data, rng)
        text = writer(mutated)
        if raw is not None:
            text = text.replace('"@RAW@"', raw)
        yield n, kind, text.encode()
    # Whole-file damage, once per kind: empty, not UTF-8, truncated, a list at the top.
    for kind, data, writer in bases:
        text = writer(data).encode()
        for damaged in (b"", b"\xff\xfe\x00" + text, text[: len(text) // 2], b"- 1\n- 2\n"):
            yield -1, kind, damaged


GENERATED = list(_variants(seed=20240611, count=300))


def test_generator_covers_every_kind():
    kinds = {kind for _, kind, _ in GENERATED}
    assert kinds == {"model.yaml", "cluster.yaml", "strategy.yaml", "config.json", "ds.json",
                     "job.toml"}
    assert len(GENERATED) >= 300


def test_malformed_variants_never_give_an_internal_error(cli, tmp_path, files):
    failures = []
    for i, (n, kind, data) in enumerate(GENERATED):
        path = tmp_path / f"v{i}" / kind
        path.parent.mkdir()
        path.write_bytes(data)
        code, _, err = cli(*_args(kind, str(path), files))
        lines = error_lines(err)
        ok = (code in (0, 1, 2) and "Traceback" not in err and "internal error" not in err
              and (code != 2 or (len(lines) == 1 and lines[0].startswith("Error: "))))
        if not ok:
            failures.append((n, kind, code, err.strip()[:300], data[:300]))
    assert not failures, failures[:5]


@pytest.mark.parametrize("extra", [(), ("--global-batch", "16777213")])
def test_a_million_gpus_is_explained_not_walked(cli, files, extra):
    # Nothing divides the batch: the explanation looks for nearby GPU counts and batches. On
    # a million GPUs it once walked node by node (hours), and suggested a batch over the bound
    # (an internal error); now it stops where no dp can divide the batch.
    start = time.perf_counter()
    code, _, err = cli("plan", files["model"], "dgx-h100", "--gpus", "1048576", *extra)
    assert code == 1 and "internal error" not in err
    assert "satisfies batch_divisible" in err
    assert time.perf_counter() - start < 60      # a hang guard, not a speed target


def test_a_search_space_beyond_the_budget_is_refused(cli, write, files):
    model = write("deep.yaml", TINY_MODEL.replace("num_layers: 4", "num_layers: 10000"))
    line = one_error(cli, "plan", model, "dgx-h100", "--gpus", "8192", "--global-batch", "8192")
    assert line.startswith("Error: the search space is too large: ")
    assert line.endswith("at most 16,777,216; narrow it with --max-pp, --pp, --micro-batch or "
                         "--max-micro-batch, or fewer --gpus")


def test_a_key_given_twice_is_refused_not_overwritten(cli, write, files):
    # PyYAML would keep the last `dp:` silently; YAML 1.2 (Sec. 3.2.1.1) requires unique keys.
    path = write("dup.yaml", "tp: 1\ndp: 4\ndp: 8\n")
    line = one_error(cli, "memory", files["model"], files["cluster"], path)
    assert line == f"Error: {path}: line 3, column 1: dp: given twice in one mapping"


# ----------------------------------------------------------------- every key, every wrong type

WRONG = {"removed": ..., "a string": "abc", "a list": [1], "a table": {"a": 1}, "negative": -1}
"""One of each wrong kind of value, for every key of a base file: a sweep of this kind found
torchtitan's compile.components given as a number, MindFormers' parallel_mode, compute_dtype
and context_parallel_algo given as a list reaching Python as TypeErrors."""


def _every_key_wrong(data: dict):
    for path in _flat_keys(data):
        for what, value in WRONG.items():
            mutated = json.loads(json.dumps(data))
            parent = mutated
            for key in path[:-1]:
                parent = parent[key]
            if value is ...:
                del parent[path[-1]]
            else:
                parent[path[-1]] = value
            yield f"{'.'.join(path)} {what}", mutated


def _sweep(cli, tmp_path, name, texts, *args):
    failures = []
    for i, (edit, text) in enumerate(texts):
        path = tmp_path / f"v{i}" / name
        path.parent.mkdir()
        path.write_text(text)
        code, _, err = cli("validate", *args[:2], str(path), *args[2:], "--no-compare")
        if code not in (0, 1, 2) or "internal error" in err or "Traceback" in err:
            failures.append(f"{edit}: {code} {err.strip()[-200:]}")
    assert not failures, failures


def test_every_torchtitan_key_given_a_wrong_value(cli, tmp_path, files):
    import tomllib

    base = tomllib.loads(TORCHTITAN + '\n[compile]\nenable = true\ncomponents = ["model", '
                                      '"loss"]\n')
    _sweep(cli, tmp_path, "job.toml", ((e, _toml(d)) for e, d in _every_key_wrong(base)),
           files["model"], files["cluster"])


def test_every_mindformers_key_given_a_wrong_value(cli, tmp_path):
    import yaml

    from tests.frameworks.test_mindformers import LLAMA31_8B

    base = yaml.safe_load(LLAMA31_8B.replace(
        "  micro_batch_num: 1\n", "  micro_batch_num: 1\n  context_parallel: 2\n"
        "  context_parallel_algo: colossalai_cp\n"))
    _sweep(cli, tmp_path, "run.yaml",
           ((e, yaml.safe_dump(d)) for e, d in _every_key_wrong(base)),
           "llama3-8b", "ascend-910b", "--gpus", "16")


@pytest.mark.parametrize("flag", ["--tp", "--pp", "--dp", "--vpp", "--micro-batch", "--dp-shard",
                                  "--ep", "--etp", "--cp"])
def test_a_pin_beyond_int64_is_refused(cli, files, flag):
    # --ep 99999999999999999999 was an internal error (an OverflowError building the space).
    code, _, err = cli("plan", files["model"], files["cluster"], "--gpus", "4", flag,
                       "99999999999999999999")
    assert code == 2 and "internal error" not in err
    assert error_lines(err)[0].startswith(f"Error: Invalid value for '{flag}'")
