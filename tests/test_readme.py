"""The commands the README prints run, and print what it shows."""

import shlex
from pathlib import Path

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def _setup_commands() -> list[str]:
    block = README.split("```sh\n", 1)[1].split("```", 1)[0]
    return block.strip().splitlines()


def test_readme_starts_with_the_two_setup_commands():
    assert README.startswith("```sh\n")
    install_and_run, install_and_test = _setup_commands()
    assert "pip install -q ." in install_and_run and "planner plan" in install_and_run
    assert install_and_test.endswith(".venv/bin/python -m pytest")
    ci = (Path(__file__).resolve().parent.parent / ".ci" / "run").read_text()
    assert install_and_test in ci


def test_readme_main_command_runs(cli):
    command = _setup_commands()[0].split(".venv/bin/planner ", 1)[1]
    code, out, err = cli(*shlex.split(command))
    assert (code, err) == (0, "")
    assert "time to train" in out


def _examples() -> list[tuple[list[str], list[str]]]:
    """(args, shown output lines) of every `$ planner ...` block."""
    found = []
    for block in README.split("```\n$ planner ")[1:]:
        text = block.split("```", 1)[0]
        first, *shown = text.splitlines()
        found.append((shlex.split(first), [line for line in shown if line.strip()]))
    return found


def _files() -> dict[str, str]:
    """Files the README shows before using them: ```json blocks, named in the line above."""
    found = {}
    for before, block in zip(README.split("```json\n")[:-1], README.split("```json\n")[1:]):
        name = before.rstrip().rsplit("`", 2)[-2]
        found[name] = block.split("```", 1)[0]
    return found


def test_readme_examples_print_what_it_shows(cli, tmp_path, monkeypatch):
    examples = _examples()
    assert len(examples) == 6
    # Run where the README's relative paths hold, and print as short as it shows them: the
    # files it shows written here, the repository's folders linked.
    root = Path(__file__).resolve().parent.parent
    for folder in ("examples", "tests"):
        (tmp_path / folder).symlink_to(root / folder)
    for name, text in _files().items():
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    for args, shown in examples:
        code, out, err = cli(*args)
        # The terminal wraps long lines; compare the words.
        printed = " ".join((out + err).split())
        for line in shown:
            if line.strip() != "...":
                assert " ".join(line.split()) in printed, line


def test_readme_python_examples_run(capsys):
    """Every ```python block (the Python API section) runs as shown."""
    blocks = [b.split("```", 1)[0] for b in README.split("```python\n")[1:]]
    assert blocks
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {"__name__": "readme"})
    printed = capsys.readouterr().out
    assert "no strategy for llama3-405b on 8 x H100-SXM5-80GB" in printed


def test_readme_picture_is_what_the_command_draws(cli, tmp_path):
    """The timeline the Pictures section shows is the one its first command writes."""
    section = README.split("### Pictures:", 1)[1]
    command = section.split("```sh\n", 1)[1].splitlines()[0]
    args = shlex.split(command)[1:]
    shown = args[args.index("--timeline") + 1]
    args[args.index("--timeline") + 1] = str(tmp_path / "timeline.svg")
    args[args.index("--memory-chart") + 1] = str(tmp_path / "memory.svg")
    code, _, _ = cli(*args)
    assert code == 0
    root = Path(__file__).resolve().parent.parent
    assert f"]({shown})" in section
    assert (tmp_path / "timeline.svg").read_bytes() == (root / shown).read_bytes()
