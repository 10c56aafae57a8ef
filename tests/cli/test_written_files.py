"""Files the planner writes: whole or not at all, with the mode the umask gives (issue 27
points 3 to 5)."""

from __future__ import annotations

import os
import stat

import pytest

from planner.frameworks import write_files

STRATEGY = "tp: 2\npp: 2\nmicro_batch: 1\n"


@pytest.fixture
def umask():
    """umask(value): set the process umask for the test, restored after it."""
    saved = os.umask(0o022)
    os.umask(saved)
    yield os.umask
    os.umask(saved)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize(("mask", "plain", "script"), [(0o022, 0o644, 0o755),
                                                      (0o077, 0o600, 0o700),
                                                      (0o002, 0o664, 0o775)])
def test_written_files_honour_the_umask(tmp_path, umask, mask, plain, script):
    umask(mask)
    paths = write_files({"a.yaml": "a: 1\n", "run.sh": "echo\n"}, tmp_path / "out", force=False)
    assert [_mode(p) for p in paths] == [plain, script]
    assert sorted(os.listdir(tmp_path / "out")) == ["a.yaml", "run.sh"]   # no temporary left


def test_every_command_that_writes_honours_the_umask(cli, tmp_path, umask, write, tiny_model,
                                                      small_cluster):
    umask(0o022)
    schema = tmp_path / "model.schema.json"
    assert cli("schema", "model", "--out", str(schema))[0] == 0
    strategy = write("strategy.yaml", STRATEGY)
    code, _, err = cli("emit", tiny_model, small_cluster, strategy, "--target", "megatron",
                       "--out", str(tmp_path / "emitted"))
    assert code == 0, err
    emitted = sorted((tmp_path / "emitted").iterdir())
    assert emitted and {p.name: _mode(p) for p in emitted} == \
        {p.name: 0o755 if p.suffix == ".sh" else 0o644 for p in emitted}
    assert _mode(schema) == 0o644


def test_an_interrupt_while_writing_leaves_the_old_files(tmp_path, monkeypatch):
    (tmp_path / "a.yaml").write_text("old a\n")
    (tmp_path / "b.yaml").write_text("old b\n")
    real = os.fdopen
    calls = []

    def fdopen(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt       # Ctrl-C while the second file is written
        return real(*args, **kwargs)

    monkeypatch.setattr(os, "fdopen", fdopen)
    with pytest.raises(KeyboardInterrupt):
        write_files({"a.yaml": "new a\n", "b.yaml": "new b\n"}, tmp_path, force=True)
    assert sorted(os.listdir(tmp_path)) == ["a.yaml", "b.yaml"]
    assert [(tmp_path / n).read_text() for n in ("a.yaml", "b.yaml")] == ["old a\n", "old b\n"]
