"""bench/data/expert_configs.yaml, the index bench/bench_expert.py reads: every entry names a
cited run that exists, a zoo model of the run's shape and a cluster preset (YAML only: no
pricing, no search)."""

import pytest
import yaml

import model_zoo
from bench import sc21
from bench.published import DATA, EXPERT_INDEX, PRESET_OF_GPU
from planner.inputs.loader import is_preset, load_model
from planner.schemas.framework import FrameworkProfile
from planner.search.candidates import SearchSpace

SC21_TABLE1 = "narayanan2021_table1"
SC21_CITATION = "arXiv:2104.04473"   # bench/sc21.py: Narayanan et al. 2021, Table 1

INDEX = yaml.safe_load((DATA / EXPERT_INDEX).read_text())["configs"]


def _sources() -> dict[str, dict]:
    """Every source file of bench/data by its key (the index file is not one)."""
    out = {}
    for file in sorted(DATA.glob("*.yaml")):
        if file.name != EXPERT_INDEX:
            data = yaml.safe_load(file.read_text())
            out[data["source"]["key"]] = data
    return out


SOURCES = _sources()
TABLE1 = {run["name"]: run for run in yaml.safe_load(sc21.DATA.read_text())["runs"]}


def _run(entry: dict) -> tuple[dict, str, str]:
    """The entry's run, its citation, and the cluster preset it runs on."""
    if entry["source"] == SC21_TABLE1:
        return TABLE1[entry["run"]], SC21_CITATION, sc21.CLUSTER
    source = SOURCES[entry["source"]]
    (run,) = [r for r in source["runs"] if r["name"] == entry["run"]]
    return run, source["source"]["url"], run.get("cluster") or PRESET_OF_GPU[run["gpu"]]


def test_index_names_each_run_once():
    keys = [(e["source"], e["run"]) for e in INDEX]
    assert len(keys) == len(set(keys))
    assert len(keys) >= 30


@pytest.mark.parametrize("entry", INDEX, ids=lambda e: e["run"])
def test_entry_is_a_cited_run_with_a_zoo_shape_and_a_preset(entry):
    assert set(entry) - {"features", "demonstration", "later_layout"} == {"source", "run", "zoo",
                                                                          "why"}
    assert entry["why"].strip() and entry.get("demonstration", "x").strip()
    later = entry.get("later_layout")
    if later is not None:
        # The experts' later stage layout of the same recipe: cited, and every layer placed.
        assert set(later) == {"layers_per_stage", "why"} and later["why"].strip()
        run, _, _ = _run(entry)
        shape = run["model"]
        s = run["strategy"]
        assert len(later["layers_per_stage"]) == s["pp"] * s["vpp"]
        assert sum(later["layers_per_stage"]) == shape["num_layers"]
    features = entry.get("features", {})
    # What the run's framework version could do: SearchSpace fields and profile fields.
    assert set(features) <= {"space", "framework"}
    assert set(features.get("space", {})) <= set(SearchSpace.__dataclass_fields__)
    assert set(features.get("framework", {})) <= set(FrameworkProfile.model_fields)
    run, citation, preset = _run(entry)
    assert citation.strip()
    assert is_preset(preset), preset
    load_model(entry["zoo"])                     # resolves, and loads
    zoo = yaml.safe_load(model_zoo.path(entry["zoo"]).read_text())
    shape = run["model"]
    if isinstance(shape, str):                  # a run written with a zoo name
        shape = yaml.safe_load(model_zoo.path(shape).read_text())
    # Same layers, width and heads (the vocabulary may differ by padding).
    keys = ("num_layers", "hidden", "num_heads")
    assert [zoo[k] for k in keys] == [shape[k] for k in keys], entry["zoo"]
