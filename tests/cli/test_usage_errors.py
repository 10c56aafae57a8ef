"""Usage errors read as click writes them: `planner` alone prints its help, a missing
argument with choices lists them a line each, and every other usage error stays one line
(issue 27 point 1)."""

from __future__ import annotations


def test_planner_alone_prints_the_readable_help(cli):
    code, out, err = cli()
    assert (code, out) == (2, "")                # click's convention for help with no command
    lines = err.splitlines()
    assert lines[0] == "Usage: planner [OPTIONS] COMMAND [ARGS]..."
    assert "\\n" not in err and "Error" not in err
    assert any(line.split()[:1] == ["plan"] for line in lines)      # the commands, one a line


def test_a_missing_argument_with_choices_lists_them(cli):
    code, out, err = cli("schema")
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        "Error: Missing argument '{model|cluster|strategy|report}'. Choose from:",
        "  model,",
        "  cluster,",
        "  strategy,",
        "  report",
        "(see 'planner schema --help')",
    ]


def test_other_usage_errors_stay_one_line(cli):
    code, _, err = cli("plan")
    assert (code, err) == (2, "Error: Missing argument 'MODEL'. (see 'planner plan --help')\n")
    # A newline the user typed stays escaped: only click's own choice lists span lines.
    code, _, err = cli("plan", "a", "b", "c\nd")
    assert code == 2 and err == ("Error: Got unexpected extra argument (c\\nd) "
                                 "(see 'planner plan --help')\n")
