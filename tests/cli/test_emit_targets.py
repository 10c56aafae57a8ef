"""`planner plan --emit a,b,c`: each target's files come from its own best plan, byte for byte
what `--emit TARGET` alone writes, not from one plan all of them run (issue 24, item 6)."""

import json

PROBLEM = ("llama3-8b", "dgx-h100", "--gpus", "16", "--top", "1")
TARGETS = ("megatron", "torchtitan", "deepspeed")


def _plan(cli, out_dir, targets, *extra):
    code, out, err = cli("plan", *PROBLEM, "--emit", ",".join(targets), "--out", str(out_dir),
                         "--json", *extra)
    assert code == 0, err
    return json.loads(out), err


def test_each_target_writes_what_it_alone_writes(cli, tmp_path):
    together, err = _plan(cli, tmp_path / "all", TARGETS)
    assert [t["target"] for t in together["targets"]] == list(TARGETS)
    assert together["plans"][0] == together["targets"][0]["plan"]    # the first's ranking
    steps = set()
    for entry in together["targets"]:
        target = entry["target"]
        alone, _ = _plan(cli, tmp_path / target, (target,))
        assert alone["framework"] == entry["framework"] == target
        assert entry["plan"] == alone["plans"][0], target
        assert [p.rsplit("/", 1)[1] for p in entry["files"]] == \
            [p.rsplit("/", 1)[1] for p in alone["emitted"]]
        for mine, its in zip(entry["files"], alone["emitted"]):
            assert open(mine).read() == open(its).read(), mine
        steps.add(entry["plan"]["time"]["step_s"])
        label = entry["plan"]["strategy"]
        assert any(line.startswith(f"wrote {entry['files'][0]} ({target}: dp {label['dp']}, ")
                   for line in err.splitlines()), err
    # Not one common plan: the targets' own best plans differ here (megatron's runs cp 2).
    assert len({json.dumps(t["plan"]["strategy"]) for t in together["targets"]}) > 1
    assert together["emitted"] == [p for t in together["targets"] for p in t["files"]]


def test_text_names_the_plan_of_each_target(cli, tmp_path):
    code, out, err = cli("plan", *PROBLEM, "--emit", ",".join(TARGETS), "--out",
                         str(tmp_path))
    assert code == 0, err
    text = out[out.index("--emit: each target's files from its own best plan"):]
    rows = {line.split()[0]: line.split() for line in text.splitlines()[1:]
            if line.split() and line.split()[0] in TARGETS}
    assert set(rows) == set(TARGETS)
    assert all(rows[t][1] == t for t in TARGETS)          # priced by its own framework


def test_one_target_prints_no_target_table(cli, tmp_path):
    code, out, err = cli("plan", *PROBLEM, "--emit", "deepspeed", "--out", str(tmp_path))
    assert code == 0, err
    assert "--emit: each target" not in out
    assert err.splitlines() == [f"wrote {tmp_path / 'ds_config.json'}"]


def test_plan_rank_past_a_targets_ranking_is_bad_input(cli, tmp_path):
    code, _, err = cli("plan", *PROBLEM, "--emit", "megatron,deepspeed", "--out",
                       str(tmp_path), "--plan", "2")
    assert code == 2
    assert err.splitlines()[-1] == "Error: --plan 2: the search ranked 1 plan(s) for megatron"
    assert not list(tmp_path.iterdir())                    # nothing written
