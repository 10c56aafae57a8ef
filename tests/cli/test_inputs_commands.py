"""`planner schema` and `planner clusters --show`: the inputs, inspectable."""

from __future__ import annotations

import json
import re

import pytest
import yaml

import model_zoo
from planner.cli.commands import cli as cli_group
from planner.inputs import presets
from planner.inputs.file_schema import FILES, OUTPUTS, file_schema
from planner.inputs.loader import load_cluster, load_model
from planner.schemas.bounds import MAX_GPUS, MAX_LAYERS
from planner.schemas.cluster import ClusterSpec
from planner.schemas.model_file import LayersFile, TransformerShorthand
from planner.schemas.strategy import Strategy
from tests.conftest import SMALL_CLUSTER, TINY_MODEL


# --------------------------------------------------------------------------- a small checker

def conforms(schema: dict, data, defs: dict) -> bool:
    """Whether `data` satisfies `schema`, for the JSON Schema keywords pydantic writes for
    these files ($ref, oneOf/anyOf, type, enum, properties, required, additionalProperties,
    items, bounds). Written here so the test needs no jsonschema package."""
    if "$ref" in schema:
        return conforms(defs[schema["$ref"].rsplit("/", 1)[1]], data, defs)
    if "oneOf" in schema:
        return sum(conforms(s, data, defs) for s in schema["oneOf"]) == 1
    if "anyOf" in schema:
        return any(conforms(s, data, defs) for s in schema["anyOf"])
    if "enum" in schema and data not in schema["enum"]:
        return False
    if "const" in schema and data != schema["const"]:
        return False
    kind = schema.get("type")
    checks = {"object": lambda v: isinstance(v, dict), "array": lambda v: isinstance(v, list),
              "string": lambda v: isinstance(v, str), "boolean": lambda v: isinstance(v, bool),
              "null": lambda v: v is None,
              "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
              "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)}
    if kind is not None and not checks[kind](data):
        return False
    if kind in ("integer", "number"):
        if data > schema.get("maximum", data) or data < schema.get("minimum", data):
            return False
        if "exclusiveMinimum" in schema and data <= schema["exclusiveMinimum"]:
            return False
        if "exclusiveMaximum" in schema and data >= schema["exclusiveMaximum"]:
            return False
    if kind == "object":
        properties = schema.get("properties", {})
        if any(key not in data for key in schema.get("required", ())):
            return False
        for key, value in data.items():
            if key in properties:
                if not conforms(properties[key], value, defs):
                    return False
            elif schema.get("additionalProperties") is False:
                return False
            elif isinstance(schema.get("additionalProperties"), dict):
                if not conforms(schema["additionalProperties"], value, defs):
                    return False
    if kind == "array":
        if len(data) < schema.get("minItems", 0):
            return False
        items = schema.get("items")
        if items is not None and not all(conforms(items, v, defs) for v in data):
            return False
    return True


_YAML12_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
"""The YAML 1.2 core schema's float. PyYAML resolves YAML 1.1, where `175.0e9` (no exponent
sign) is a string that pydantic then reads as a number; an editor checking a file against
the schema reads YAML 1.2, where it is a number."""


def yaml12(data):
    """`data` as a YAML 1.2 reader sees it: numeric strings PyYAML left as text are floats."""
    if isinstance(data, dict):
        return {k: yaml12(v) for k, v in data.items()}
    if isinstance(data, list):
        return [yaml12(v) for v in data]
    if isinstance(data, str) and _YAML12_FLOAT.fullmatch(data):
        return float(data)
    return data


def check(name: str, data) -> bool:
    schema = file_schema(name)
    return conforms(schema, data, schema.get("$defs", {}))


# --------------------------------------------------------------------------- planner schema

@pytest.mark.parametrize("name", FILES)
def test_schema_prints_a_json_schema_with_sorted_keys(cli, name):
    code, out, err = cli("schema", name)
    assert (code, err) == (0, "")
    schema = json.loads(out)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["title"] == f"{name}.yaml"
    assert out == json.dumps(schema, indent=2, sort_keys=True) + "\n"
    assert cli("schema", name)[1] == out           # the same bytes every run


def test_schema_names_are_the_files_the_command_takes():
    assert tuple(cli_group.commands["schema"].params[0].type.choices) == FILES + OUTPUTS


def test_schema_of_cluster_and_strategy_lists_every_field():
    cluster, strategy = file_schema("cluster"), file_schema("strategy")
    assert set(cluster["properties"]) == set(ClusterSpec.model_fields)
    assert set(cluster["required"]) == {n for n, f in ClusterSpec.model_fields.items()
                                        if f.is_required()}
    assert cluster["additionalProperties"] is False
    assert set(strategy["properties"]) == set(Strategy.model_fields)
    assert "required" not in strategy                 # every strategy field has a default


def test_schema_of_model_is_one_of_the_two_shapes_the_loader_reads():
    schema = file_schema("model")
    defs = schema["$defs"]
    shorthand, layers_file = (defs[s["$ref"].rsplit("/", 1)[1]] for s in schema["oneOf"])
    assert set(shorthand["properties"]) == set(TransformerShorthand.model_fields)
    # `repeats` is the loader's: the file gives `repeat` on each entry instead.
    assert set(layers_file["properties"]) == set(LayersFile.model_fields) - {"repeats"}
    assert layers_file["required"] == ["name", "layers"]
    entries = layers_file["properties"]["layers"]["items"]
    assert set(entries["discriminator"]["mapping"]) == {
        "embedding", "transformer", "norm", "output", "evoformer", "mtp"}
    for ref in entries["discriminator"]["mapping"].values():
        repeat = defs[ref.rsplit("/", 1)[1]]["properties"]["repeat"]
        assert (repeat["minimum"], repeat["maximum"]) == (1, MAX_LAYERS)
    # An mtp block's own layer is a plain transformer block: no `repeat` there.
    assert "repeat" not in defs["TransformerBlock"]["properties"]


def test_schema_carries_the_bounds_of_planner_schemas_bounds():
    assert file_schema("strategy")["properties"]["tp"]["maximum"] == MAX_GPUS
    shorthand = file_schema("model")["$defs"]["TransformerShorthand"]
    assert shorthand["properties"]["num_layers"]["maximum"] == MAX_LAYERS


@pytest.mark.parametrize("name", model_zoo.names())
def test_every_zoo_model_file_conforms_to_the_model_schema(name):
    data = yaml12(yaml.safe_load(model_zoo.path(name).read_text()))
    assert check("model", data)


@pytest.mark.parametrize("name", presets.names())
def test_every_preset_conforms_to_the_cluster_schema(name):
    assert check("cluster", yaml12(yaml.safe_load(presets.path(name).read_text())))


def test_schema_refuses_what_the_loader_refuses():
    tiny, small = yaml.safe_load(TINY_MODEL), yaml.safe_load(SMALL_CLUSTER)
    assert check("model", tiny) and check("cluster", small)
    assert not check("model", {**tiny, "num_layer": 4})               # a typo
    assert not check("model", {**tiny, "num_layers": MAX_LAYERS + 1})
    assert not check("model", {**tiny, "mlp": "swiglu2"})
    assert not check("model", {**tiny, "layers": [{"kind": "norm", "hidden": 64}]})  # both
    assert not check("cluster", {**small, "gpus_per_node": 0})
    assert not check("cluster", {k: v for k, v in small.items() if k != "gpu"})
    assert check("strategy", {"tp": 2, "recompute": "full", "zero_stage": 1})
    assert not check("strategy", {"tp": 2, "recompute": "partial"})
    assert not check("strategy", {"zero_stage": 4})


def test_schema_of_a_layers_entry_takes_repeat(tmp_path):
    model = {"name": "m", "layers": [
        {"kind": "embedding", "vocab_size": 512, "hidden": 64},
        {"kind": "transformer", "repeat": 4, "hidden": 64, "num_heads": 8},
        {"kind": "output", "vocab_size": 512, "hidden": 64}]}
    assert check("model", model)
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(model))
    assert load_model(str(tmp_path / "m.yaml"))[0].num_layers == 4     # the loader agrees
    assert not check("model", {**model, "repeats": [1, 4, 1]})
    bad = [dict(e) for e in model["layers"]]
    bad[1]["repeat"] = 0
    assert not check("model", {**model, "layers": bad})


def test_schema_unknown_file_is_a_usage_error(cli):
    code, out, err = cli("schema", "modle")
    assert (code, out) == (2, "")
    assert err == ("Error: Invalid value for '{model|cluster|strategy|report}': 'modle' is not "
                   "one of 'model', 'cluster', 'strategy', 'report'. (see 'planner schema "
                   "--help')\n")


def test_schema_out_writes_the_file(cli, tmp_path):
    out = tmp_path / "cluster.schema.json"
    out.write_text("old")
    code, printed, err = cli("schema", "cluster", "--out", str(out))
    assert (code, printed, err) == (0, "", f"wrote {out}\n")
    assert json.loads(out.read_text()) == file_schema("cluster")
    code, _, err = cli("schema", "cluster", "--out", str(tmp_path))       # a directory
    assert code == 2 and "is a directory" in err


# --------------------------------------------------------------------------- clusters --show

def test_clusters_show_prints_the_preset_file_with_its_sources(cli):
    code, out, err = cli("clusters", "--show", "dgx-h100")
    assert (code, err) == (0, "")
    assert out == presets.path("dgx-h100").read_text()
    assert "# NCCL tuning.cc" in out                     # the comments citing sources stay


@pytest.mark.parametrize("name", presets.names())
def test_clusters_show_reads_back_as_the_same_cluster(cli, tmp_path, name):
    code, out, _ = cli("clusters", "--show", name)
    assert code == 0
    (tmp_path / "my.yaml").write_text(out)
    assert load_cluster(str(tmp_path / "my.yaml")) == load_cluster(name)


def test_clusters_show_saved_file_plans_as_the_preset(cli, tmp_path):
    """`planner clusters --show dgx-h100 > my.yaml` then plan on my.yaml: the same plans."""
    (tmp_path / "my.yaml").write_text(cli("clusters", "--show", "dgx-h100")[1])
    code, from_file, err = cli("plan", "llama3-8b", str(tmp_path / "my.yaml"), "--gpus", "8",
                               "--json")
    assert (code, err) == (0, "")
    code, from_preset, _ = cli("plan", "llama3-8b", "dgx-h100", "--gpus", "8", "--json")
    assert code == 0
    assert json.loads(from_file) == json.loads(from_preset)
    assert json.loads(from_file)["cluster"] == "dgx-h100"


def test_clusters_show_unknown_name_says_did_you_mean(cli):
    code, out, err = cli("clusters", "--show", "dgx-h10")
    assert (code, out) == (2, "")
    assert err == (f"Error: no cluster preset named 'dgx-h10' (did you mean 'dgx-h100'?); "
                   f"presets: {', '.join(presets.names())}\n")
    # A path is not a preset name, even one load_cluster would read.
    code, _, err = cli("clusters", "--show", "dgx-h100.yaml")
    assert code == 2 and "no cluster preset named 'dgx-h100.yaml'" in err


def test_clusters_list_says_which_presets_are_calibrated(cli):
    # A preset whose efficiencies were fitted to measured runs names them (source.calibration);
    # the others are copied or assumed, and the list says so (as the plans' note and band do).
    code, out, err = cli("clusters")
    assert (code, err) == (0, "")
    lines = {line.split()[0]: line for line in out.splitlines()}
    assert lines["dgx-h100"].endswith("; calibrated")
    assert lines["dgx-a100-80gb"].endswith("; calibrated")
    for name in ("gb300-nvl72", "dgx-b300", "amd-mi300x", "dgx-h800"):
        assert lines[name].endswith("; efficiencies assumed"), name
