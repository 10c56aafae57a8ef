"""JSON Schema of the three input files, from the pydantic models the loader validates them with,
and of the report `planner plan --json` and `planner validate --json` print.

A cluster.yaml is a `ClusterSpec`, a strategy.yaml a `Strategy`. A model.yaml is one of two
shapes, and `loader._model_from_mapping` picks by the `layers` key: with it, a `LayersFile`
whose entries may carry `repeat: N` (the loader moves those counts into `repeats`, which the
file itself never holds); without it, a `TransformerShorthand`. The model schema says both:
`oneOf` the two, which exclude each other (`layers` is required in one and forbidden in the
other).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from planner.schemas.bounds import MAX_LAYERS
from planner.schemas.cluster import ClusterSpec
from planner.schemas.model_file import LayersFile, TransformerShorthand
from planner.schemas.output import REPORTS
from planner.schemas.strategy import Strategy

DIALECT = "https://json-schema.org/draft/2020-12/schema"
"""pydantic writes JSON Schema draft 2020-12."""

FILES = ("model", "cluster", "strategy")
"""The input files `planner schema` describes: model.yaml, cluster.yaml, strategy.yaml."""

OUTPUTS = ("report",)
"""The outputs it describes: the JSON of `plan --json` or `validate --json`."""

_REPEAT = {"type": "integer", "minimum": 1, "maximum": MAX_LAYERS,
           "description": "Copies of this block in a row (the loader's `repeat`, default 1)."}


def file_schema(name: str) -> dict[str, Any]:
    """The JSON Schema of a model, cluster or strategy file (`name` is one of FILES)."""
    if name == "cluster":
        return _single(ClusterSpec, "cluster.yaml")
    if name == "strategy":
        return _single(Strategy, "strategy.yaml")
    if name == "model":
        return _model()
    if name == "report":
        return _report()
    raise ValueError(f"no schema named {name!r}; one of {', '.join(FILES + OUTPUTS)}")


def schema_text(name: str) -> str:
    """`file_schema(name)` as JSON with sorted keys, the same bytes on every run."""
    return json.dumps(file_schema(name), indent=2, sort_keys=True) + "\n"


def _single(cls: type[BaseModel], title: str) -> dict[str, Any]:
    schema = cls.model_json_schema(mode="validation")
    return {"$schema": DIALECT, **schema, "title": title}


def _model() -> dict[str, Any]:
    refs, top = models_json_schema([(TransformerShorthand, "validation"),
                                    (LayersFile, "validation")])
    defs = top["$defs"]
    _entries_may_repeat(defs)
    return {"$schema": DIALECT, "title": "model.yaml",
            "description": "A transformer shorthand, or a `layers:` list of blocks (a file "
                           "with `layers` is read as the latter).",
            "oneOf": [refs[(TransformerShorthand, "validation")],
                      refs[(LayersFile, "validation")]],
            "$defs": defs}


def _report() -> dict[str, Any]:
    """`PlanOutput` or `ValidateOutput`, as serialized (computed fields included)."""
    refs, top = models_json_schema([(cls, "serialization") for cls in REPORTS])
    return {"$schema": DIALECT, "title": "planner report",
            "description": "The JSON `planner plan --json` prints (a PlanOutput) or "
                           "`planner validate --json` prints (a ValidateOutput); `planner "
                           "memory --json` prints the head keys, `strategy` and a "
                           "MemoryReport's keys.",
            "anyOf": [refs[(cls, "serialization")] for cls in REPORTS],
            "$defs": top["$defs"]}


def _entries_may_repeat(defs: dict[str, Any]) -> None:
    """Give each `layers` entry the `repeat` key and drop `repeats` (filled by the loader).

    A block nested elsewhere (an mtp block's `layer`) takes no `repeat`, so the entries get
    their own copies of the block definitions, named `<Block>Entry`."""
    layers_file = defs[LayersFile.__name__]
    layers_file["properties"].pop("repeats")
    items = layers_file["properties"]["layers"]["items"]
    renamed = {}
    for choice in items["oneOf"]:
        block = choice["$ref"].rsplit("/", 1)[1]
        entry = copy.deepcopy(defs[block])
        entry["properties"]["repeat"] = dict(_REPEAT)
        entry["title"] = f"{block}Entry"
        defs[f"{block}Entry"] = entry
        renamed[choice["$ref"]] = f"#/$defs/{block}Entry"
    items["oneOf"] = [{"$ref": renamed[c["$ref"]]} for c in items["oneOf"]]
    mapping = items["discriminator"]["mapping"]
    for kind, ref in mapping.items():
        mapping[kind] = renamed[ref]
