"""cost_models is a leaf: importing it pulls in none of click, rich, ortools, pydantic; and
`planner --help` does not import the heavy parts."""

import ast
import subprocess
import sys
from pathlib import Path


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


ROOT = Path(__file__).resolve().parents[1] / "planner"


def _subpackage(module: str) -> str | None:
    """The planner subpackage (or top-level module) a dotted name lies in."""
    parts = module.split(".")
    if parts[0] != "planner" or len(parts) == 1:
        return None
    return parts[1]


def _imports(path: Path, *, typing: bool = False) -> set[str]:
    """Every module a file imports, at any depth (function-level ones too); those under
    `if TYPE_CHECKING:` (annotations only, never run) only with `typing`."""
    tree = ast.parse(path.read_text())
    typing_only = set() if typing else {
        id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
        and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            # `from planner import x` imports the subpackage x.
            if node.module == "planner":
                found |= {f"planner.{a.name}" for a in node.names
                          if (ROOT / a.name).is_dir() or (ROOT / f"{a.name}.py").exists()}
    return found


def _package_graph(*, typing: bool = False) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in ROOT.rglob("*.py"):
        source = _subpackage(".".join(path.relative_to(ROOT.parent).with_suffix("").parts))
        if source is None:
            continue
        for module in _imports(path, typing=typing):
            target = _subpackage(module)
            if target is not None and target != source:
                graph.setdefault(source, set()).add(target)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph, or None (depth-first search with colours)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        state[node] = 2
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_no_import_cycle_between_planner_subpackages():
    # Imports for annotations count too: a cycle through them is still a tangle to read.
    graph = _package_graph(typing=True)
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}}) is None


def test_core_imports_no_other_planner_package():
    assert _package_graph().get("core", set()) == set()
    loaded = _modules_after("import planner.core.problem, planner.core.candidates, "
                            "planner.core.rules")
    others = {m.split(".")[1] for m in loaded if m.startswith("planner.")} - {"core"}
    assert not others, others


def test_only_the_cli_imports_click_and_rich_and_only_the_search_ortools():
    for path in ROOT.rglob("*.py"):
        package = _subpackage(".".join(path.relative_to(ROOT.parent).with_suffix("").parts))
        tops = {m.split(".")[0] for m in _imports(path)}
        if package != "cli":
            assert not tops & {"click", "rich"}, path
        if package != "search":
            assert "ortools" not in tops, path


ORDER = ("core", "schemas", "inputs", "costing", "frameworks", "rules", "search", "review",
         "calibrate", "api", "cli")
"""The packages (and planner/api.py, the Python API) in import order (README, "How the code
is laid out"): each imports only those before it (and planner.errors)."""


def test_each_package_imports_only_those_before_it():
    graph = _package_graph()
    assert set(ORDER) - {"api"} == {p.name for p in ROOT.iterdir()
                                    if (p / "__init__.py").exists()}
    for i, package in enumerate(ORDER):
        allowed = set(ORDER[:i]) | {"errors", "__init__"}
        assert graph.get(package, set()) <= allowed, (package, graph[package] - allowed)


def test_numpy_runs_one_blas_thread_under_the_planner():
    code = ("import planner, os, numpy; "
            "print(os.environ['OPENBLAS_NUM_THREADS'], os.environ['MKL_NUM_THREADS'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={"OPENBLAS_NUM_THREADS": "8", "PATH": ""})
    assert out.stdout.split() == ["1", "1"]
