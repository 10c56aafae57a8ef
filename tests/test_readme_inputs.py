"""The README's Inputs section: its example files load and fit, and its reference tables list
every field of the schemas, with the right default and every allowed value, and no other."""

from __future__ import annotations

import json
import re
import types
import typing
from enum import Enum, IntEnum
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from planner.inputs.loader import load_cluster
from planner.schemas.cluster import ClusterSpec
from planner.schemas.model import Block
from planner.schemas.model_file import LayersFile, TransformerShorthand
from planner.schemas.strategy import Strategy
from tests.cli.test_inputs_commands import check, yaml12

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()
INPUTS = README.split("\n## Inputs\n", 1)[1].split("\n## ", 1)[0]


def _section(title: str) -> str:
    return INPUTS.split(f"\n### {title}\n", 1)[1].split("\n### ", 1)[0]


def _examples() -> dict[str, str]:
    """The ```yaml blocks of the Inputs section, by the file name ending the line above."""
    found = {}
    for before, block in zip(INPUTS.split("```yaml\n")[:-1], INPUTS.split("```yaml\n")[1:]):
        name = re.fullmatch(r".*`([\w.-]+\.yaml)`:", before.rstrip().splitlines()[-1])
        assert name, f"name the file on the line before the block: {before[-80:]!r}"
        found[name.group(1)] = block.split("```", 1)[0]
    return found


EXAMPLES = _examples()


# --------------------------------------------------------------------------- the examples

def test_inputs_section_shows_one_complete_example_of_each_file():
    assert set(EXAMPLES) == {"my-model.yaml", "my-layers.yaml", "my-cluster.yaml",
                             "my-strategy.yaml"}


@pytest.fixture
def examples(tmp_path) -> Path:
    for name, text in EXAMPLES.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def test_readme_examples_load_and_fit(cli, examples):
    """`planner memory my-model.yaml my-cluster.yaml my-strategy.yaml`, as the README says."""
    code, out, err = cli("memory", *(str(examples / f"my-{n}.yaml")
                                     for n in ("model", "cluster", "strategy")), "--json")
    assert (code, err) == (0, "")
    report = json.loads(out)
    assert report["num_gpus"] == 32 and report["strategy"]["dp"] == 8    # as its comment says
    # The shapes of Llama 3 8B: the count its source gives (HF safetensors total).
    assert report["params"]["total"] == 8_030_261_248


def test_readme_layers_example_is_gpt2_small(cli, examples):
    (examples / "s.yaml").write_text("tp: 1\n")
    code, out, err = cli("memory", str(examples / "my-layers.yaml"),
                         str(examples / "my-cluster.yaml"), str(examples / "s.yaml"),
                         "--gpus", "8", "--json")
    assert (code, err) == (0, "")
    # GPT-2 small, "124M" (HF model card of openai-community/gpt2), counted by hand, h = 768:
    # per layer 4h^2 + 4h (attention) + 8h^2 + 5h (MLP) + 4h (two LayerNorms) = 7,087,872,
    # x 12 = 85,054,464; embeddings (50,257 + 1,024) x h = 39,383,808; final LayerNorm 2h.
    assert json.loads(out)["params"]["total"] == 124_439_808


def test_readme_cluster_example_has_the_numbers_of_the_preset_it_names(examples):
    mine, preset = load_cluster(str(examples / "my-cluster.yaml")), load_cluster("dgx-h100")
    # The example spells out the fabric the preset leaves to its defaults: one NIC per GPU,
    # and a leaf size that a non-blocking fabric makes moot.
    differ = {"name": True, "description": True, "num_nodes": True, "source": True,
              "nvlink_domain": True, "inter_node": {"nics_per_node", "nodes_per_leaf"}}
    assert mine.model_dump(exclude=differ) == preset.model_dump(exclude=differ)
    assert mine.inter_node.nics_per_node == preset.gpus_per_node
    assert mine.nvlink_gpus == preset.nvlink_gpus
    assert mine.inter_node.oversubscription == 1.0


@pytest.mark.parametrize(("name", "schema"), [
    ("my-model.yaml", "model"), ("my-layers.yaml", "model"),
    ("my-cluster.yaml", "cluster"), ("my-strategy.yaml", "strategy")])
def test_readme_examples_conform_to_the_json_schema(name, schema):
    assert check(schema, yaml12(yaml.safe_load(EXAMPLES[name])))


def test_cluster_example_gives_every_cluster_field():
    """Complete: every field of ClusterSpec, nested ones too, is in the example."""
    data = yaml.safe_load(EXAMPLES["my-cluster.yaml"])
    missing = [p for p in _paths(ClusterSpec) if not _has(data, p.split("."))]
    assert missing == []


def _has(data, parts) -> bool:
    return not parts or (isinstance(data, dict) and parts[0] in data
                         and _has(data[parts[0]], parts[1:]))


# --------------------------------------------------------------------------- the tables

def _models(annotation) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds (through Optional, tuples, Annotated)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _models(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType, tuple, list, dict):
        return [m for a in typing.get_args(annotation) for m in _models(a)]
    return [annotation] if isinstance(annotation, type) and issubclass(annotation,
                                                                       BaseModel) else []


def _allowed(annotation) -> set[str]:
    """The values an enum or Literal in the annotation allows, as the YAML spells them."""
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return {str(a) for a in typing.get_args(annotation)}
    if origin is not None:
        return {v for a in typing.get_args(annotation) for v in _allowed(a)}
    if isinstance(annotation, type) and issubclass(annotation, IntEnum):
        return {str(int(m)) for m in annotation}
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return {m.value for m in annotation}
    return set()


def _fields(root: type[BaseModel], prefix: str = "", skip=()) -> dict[str, object]:
    """Every field by dotted path, nested models included (not the blocks of `layers`)."""
    found = {}
    for name, field in root.model_fields.items():
        if name in skip:
            continue
        found[prefix + name] = field
        if name != "layers":
            for model in _models(field.annotation):
                found |= _fields(model, f"{prefix}{name}.")
    return found


def _paths(root: type[BaseModel]) -> list[str]:
    return list(_fields(root))


def _default_text(field) -> str:
    """The README's Default cell for a field."""
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, IntEnum):
        return str(int(value))
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (int, float)):
        return f"{value:g}"
    if isinstance(value, BaseModel):
        return "each field's default"
    if value == ():
        return "[]"
    if value == {}:
        return "{}"
    raise AssertionError(f"no README spelling for the default {value!r}")


def _rows(section: str) -> dict[str, list[str]]:
    """Table rows by each name in their first cell: `a`, `b` | type | default | meaning."""
    rows = {}
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        for name in re.findall(r"`([^`]+)`", cells[0]):
            assert name not in rows, f"{name} documented twice"
            rows[name] = cells
    return rows


FILES = {
    "model.yaml": {**_fields(TransformerShorthand), **_fields(LayersFile, skip=("repeats",))},
    "cluster.yaml": _fields(ClusterSpec),
    "strategy.yaml": _fields(Strategy),
}


@pytest.mark.parametrize("title", FILES)
def test_reference_table_documents_every_field_and_no_other(title):
    rows = {n: c for n, c in _rows(_section(title)).items() if not n.startswith("kind: ")}
    assert sorted(set(FILES[title]) - set(rows)) == [], "fields missing from the README"
    assert sorted(set(rows) - set(FILES[title])) == [], "README rows for no field"


@pytest.mark.parametrize("title", FILES)
def test_reference_table_gives_each_default_and_every_allowed_value(title):
    rows = _rows(_section(title))
    for path, field in FILES[title].items():
        _, kind, default, meaning = rows[path]
        expected = _default_text(field)
        assert re.match(re.escape(expected) + r"(\W|$)", default.replace("`", "")), \
            f"{path}: default {default!r}, the schema's is {expected!r}"
        listed = set(re.findall(r"`([^`]+)`", kind))
        assert _allowed(field.annotation) <= listed, f"{path}: allowed values"
        assert meaning, f"{path}: say what it means"


def test_block_table_lists_every_field_of_each_block_kind():
    rows = {n[len("kind: "):]: c for n, c in _rows(_section("model.yaml")).items()
            if n.startswith("kind: ")}
    kinds = {_kind(cls): cls for cls in _models(Block)}
    assert set(rows) == set(kinds)
    for kind, cls in kinds.items():
        listed = set(re.findall(r"`(\w+)`", rows[kind][1]))
        assert set(cls.model_fields) - {"kind"} <= listed, kind
    assert "Every entry may also carry `repeat` (integer ≥ 1, default 1)." in INPUTS


def _kind(cls: type[BaseModel]) -> str:
    return typing.get_args(cls.model_fields["kind"].annotation)[0]
