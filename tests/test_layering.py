"""cost_models is a leaf: importing it pulls in none of click, rich, ortools, pydantic; and
`planner --help` does not import the heavy parts."""

import subprocess
import sys


def _modules_after(statement: str) -> set[str]:
    code = f"{statement}; import sys; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_cost_models_imports_no_framework():
    loaded = _modules_after("import cost_models.memory, cost_models.compute, "
                            "cost_models.communication, cost_models.pipeline, "
                            "cost_models.parameters, cost_models.evoformer")
    assert not {"click", "rich", "ortools", "pydantic"} & {m.split(".")[0] for m in loaded}


def test_cli_help_does_not_import_the_solver():
    loaded = _modules_after("import planner.cli")
    assert "ortools" not in {m.split(".")[0] for m in loaded}
