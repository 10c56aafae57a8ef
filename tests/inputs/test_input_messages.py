"""What the one-line input errors say (issue 27 points 7 to 9): a directory given for a file,
every missing field named, and Megatron-LM / NeMo / torchtitan / DeepSpeed names answered
with the planner's own."""

from __future__ import annotations

import pytest

from tests.conftest import SMALL_CLUSTER, TINY_MODEL


def _error(cli, *args) -> str:
    code, _, err = cli(*args)
    assert code == 2 and len(err.splitlines()) == 1, err
    return err.rstrip("\n")


@pytest.mark.parametrize(("files", "suggested"), [
    ({"model.yaml": TINY_MODEL}, "model.yaml"),
    ({"config.json": "{}"}, "config.json"),
    ({"notes.txt": "", "my-model.yaml": TINY_MODEL}, "my-model.yaml"),
    ({}, None),
])
def test_a_directory_as_model(cli, tmp_path, small_cluster, files, suggested):
    folder = tmp_path / "llama"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    hint = (f" (did you mean '{folder / suggested}'?)" if suggested else ", and it holds none")
    assert _error(cli, "plan", str(folder), small_cluster) == (
        f"Error: {folder}: is a directory; expected a model.yaml or a Hugging Face config.json "
        f"file{hint}")


def test_a_directory_as_cluster(cli, tmp_path, tiny_model, monkeypatch):
    (tmp_path / "site").mkdir()
    monkeypatch.chdir(tmp_path)
    assert _error(cli, "plan", tiny_model, "site") == (
        "Error: site: is a directory; expected a cluster.yaml file, and it holds none")
    (tmp_path / "site" / "cluster-a.yaml").write_text(SMALL_CLUSTER)
    assert _error(cli, "plan", tiny_model, "site") == (
        "Error: site: is a directory; expected a cluster.yaml file (did you mean "
        "'site/cluster-a.yaml'?)")


def test_a_zoo_name_wins_over_a_directory_of_that_name(cli, tmp_path, monkeypatch):
    (tmp_path / "llama2-7b").mkdir()
    (tmp_path / "dgx-h100").mkdir()
    monkeypatch.chdir(tmp_path)
    code, _, _ = cli("plan", "llama2-7b", "dgx-h100", "--gpus", "8", "--top", "1", "--json")
    assert code == 0
