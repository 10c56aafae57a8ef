"""Bad input never shows a traceback: every Hugging Face fixture with any one key removed, or
set to a string or a list where the mapper expects a number, is read or refused with an
InputError naming the file (or planned infeasible), never another exception.

A sweep of this kind found `sliding_window: "4096"` (Mistral, Phi-3) reaching a comparison
with an integer as a TypeError."""

import copy
import json
from pathlib import Path

import pytest

from planner.errors import InfeasibleError, InputError
from planner.inputs.loader import make_problem

FIXTURES = sorted((Path(__file__).parent / "hf_configs").glob("*.json"))
MUTATIONS = {"removed": ..., "a string": "abc", "a list": [1]}


def _keys(config: dict, path: tuple = ()):
    """Every (path to its dict, key) of a config, nested configs (text_config) included."""
    for key, value in config.items():
        yield path, key
        if isinstance(value, dict):
            yield from _keys(value, path + (key,))


def _mutated(config: dict):
    for path, key in _keys(config):
        for what, value in MUTATIONS.items():
            out = copy.deepcopy(config)
            parent = out
            for step in path:
                parent = parent[step]
            if value is ...:
                del parent[key]
            else:
                parent[key] = value
            yield f"{'.'.join(path + (key,))} {what}", out


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.stem for f in FIXTURES])
def test_every_one_key_edit_is_read_or_refused_cleanly(fixture, tmp_path):
    config = json.loads(fixture.read_text())
    target = tmp_path / fixture.name
    for edit, mutated in _mutated(config):
        target.write_text(json.dumps(mutated))
        try:
            make_problem(str(target), "dgx-h100", gpus=8)
        except InputError as e:
            assert fixture.name in str(e), (edit, str(e))
        except InfeasibleError:
            pass
        except Exception as e:  # noqa: BLE001 - the point: nothing else may escape
            pytest.fail(f"{fixture.name} with {edit}: {type(e).__name__}: {e}")
