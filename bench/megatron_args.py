"""Regenerate planner/frameworks/data/megatron_args.txt: every command-line flag Megatron-LM's
pretrain_gpt.py accepts, with its argparse choices, read statically out of a Megatron-LM git
mirror (nothing is imported or run).

Megatron-LM builds its parser in megatron/training/arguments.py from two sources:
  * explicit `add_argument('--flag', ..., choices=[...])` calls;
  * `ArgumentGroupFactory(SomeConfig, exclude=[...]).build_group(...)`
    (megatron/training/argument_utils.py), which turns every init field of a config
    dataclass, its bases included, into `--field-name` (underscores to hyphens). A bool field
    whose default is not False becomes `--no-field` and `--disable-field` (store_false); a
    Literal[...] or Enum annotation gives the choices (an Enum's member names); a field's
    metadata {"argparse_meta": {"arg_names": [...], "choices": [...]}} overrides both.
pretrain_gpt.py adds megatron/post_training/arguments.py (add_modelopt_args) when ModelOpt is
installed; those flags are listed too, so that a script using them is never called wrong.

Usage: python bench/megatron_args.py /work/.mirror/NVIDIA+Megatron-LM/repo [COMMIT]
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "planner" / "frameworks" / "data" / "megatron_args.txt"
SOURCES = ("megatron/training/arguments.py", "megatron/post_training/arguments.py")


class Mirror:
    def __init__(self, git_dir: str, commit: str) -> None:
        self.git_dir, self.commit = git_dir, commit
        self._classes: dict[str, list[tuple[str, ast.ClassDef]]] | None = None

    def git(self, *args: str) -> str:
        return subprocess.run(["git", "-C", self.git_dir, *args], check=True,
                              capture_output=True, text=True).stdout

    def show(self, path: str) -> str:
        return self.git("show", f"{self.commit}:{path}")

    def classes(self, name: str) -> list[ast.ClassDef]:
        """Every class of that name defined under megatron/ (parsed once, lazily)."""
        if self._classes is None:
            self._classes = {}
            files = [f for f in self.git("ls-tree", "-r", "--name-only", self.commit,
                                          "megatron").split() if f.endswith(".py")]
            for path in files:
                try:
                    tree = ast.parse(self.show(path))
                except SyntaxError:
                    continue
                for node in tree.body:
                    if isinstance(node, ast.ClassDef):
                        self._classes.setdefault(node.name, []).append((path, node))
        found = self._classes.get(name, [])
        return [node for _, node in found]

    def one_class(self, name: str) -> ast.ClassDef:
        found = self.classes(name)
        if len(found) != 1:
            raise SystemExit(f"class {name}: {len(found)} definitions under megatron/")
        return found[0]


def _literal(node):
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return None


def _choices_of_annotation(mirror: Mirror, node) -> list[str] | None:
    """Literal[...] values or an Enum's member names; Optional[...] unwrapped."""
    if isinstance(node, ast.Subscript):
        head = ast.unparse(node.value)
        inner = node.slice
        if head.endswith("Optional"):
            return _choices_of_annotation(mirror, inner)
        if head.endswith("Literal"):
            values = inner.elts if isinstance(inner, ast.Tuple) else [inner]
            return [str(_literal(v)) for v in values]
        return None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):     # X | None
        if ast.unparse(node.right) == "None":
            return _choices_of_annotation(mirror, node.left)
        return None
    if isinstance(node, ast.Name):
        found = mirror.classes(node.id)
        if len(found) == 1 and any("Enum" in ast.unparse(b) for b in found[0].bases):
            return [t.id for stmt in found[0].body if isinstance(stmt, ast.Assign)
                    for t in stmt.targets if isinstance(t, ast.Name)]
    return None


def _is_bool(node) -> bool:
    text = ast.unparse(node)
    return text in ("bool", "Optional[bool]", "bool | None", "typing.Optional[bool]")


def _dataclass_flags(mirror: Mirror, class_name: str, exclude: set[str]) -> dict[str, list]:
    """Flags ArgumentGroupFactory builds from a config dataclass (bases first, as fields())."""
    fields = _dataclass_fields(mirror, class_name)
    flags: dict[str, list] = {}
    for name, stmt in fields.items():
        if name in exclude:
            continue
        default, meta = stmt.value, {}
        if isinstance(default, ast.Call) and ast.unparse(default.func).endswith("field"):
            keywords = {k.arg: k.value for k in default.keywords}
            if _literal(keywords.get("init")) is False:
                continue
            default = keywords.get("default")
            meta_node = keywords.get("metadata")
            if isinstance(meta_node, ast.Dict):
                for k, v in zip(meta_node.keys, meta_node.values):
                    if _literal(k) == "argparse_meta" and isinstance(v, ast.Dict):
                        meta = {_literal(mk): mv for mk, mv in zip(v.keys, v.values)}
        choices = _choices_of_annotation(mirror, stmt.annotation)
        hyphen = name.replace("_", "-")
        if _is_bool(stmt.annotation):
            # argument_utils.py: store_true only when the default == False.
            is_false = isinstance(default, ast.Constant) and default.value is False
            names = [f"--{hyphen}"] if is_false else [f"--no-{hyphen}", f"--disable-{hyphen}"]
            choices = None
        else:
            names = [f"--{hyphen}"]
        if "arg_names" in meta:
            names = _literal(meta["arg_names"]) or names
        if "choices" in meta:
            choices = [str(c) for c in (_literal(meta["choices"]) or [])] or choices
        for flag in names:
            flags[flag] = choices or []
    return flags


def _dataclass_fields(mirror: Mirror, class_name: str) -> dict[str, ast.AnnAssign]:
    node = mirror.one_class(class_name)
    out: dict[str, ast.AnnAssign] = {}
    for base in node.bases:
        base_name = ast.unparse(base).split(".")[-1]
        if len(mirror.classes(base_name)) == 1:
            out.update(_dataclass_fields(mirror, base_name))
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) \
                and "ClassVar" not in ast.unparse(stmt.annotation):
            out[stmt.target.id] = stmt
    return out


def _argparse_flags(mirror: Mirror, tree: ast.AST) -> dict[str, list]:
    flags: dict[str, list] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = ast.unparse(node.func)
        if func.endswith("add_argument"):
            names = [a.value for a in node.args
                     if isinstance(a, ast.Constant) and isinstance(a.value, str)
                     and a.value.startswith("-")]
            keywords = {k.arg: k.value for k in node.keywords}
            choices = _literal(keywords["choices"]) if "choices" in keywords else None
            for flag in names:
                flags[flag] = [str(c) for c in choices] if isinstance(choices, (list, tuple)) \
                    else []
        elif func == "ArgumentGroupFactory" and node.args:
            class_name = ast.unparse(node.args[0])
            keywords = {k.arg: k.value for k in node.keywords}
            exclude = keywords.get("exclude")
            if isinstance(exclude, ast.Name):            # exclude=exclude: the local list
                exclude = _local_list(tree, node, exclude.id)
            names = set(_literal(exclude) or []) if exclude is not None else set()
            flags.update(_dataclass_flags(mirror, class_name, names))
    return flags


def _local_list(tree: ast.AST, call: ast.Call, name: str):
    """The list literal assigned to `name` in the function that holds `call`."""
    for func in ast.walk(tree):
        if isinstance(func, ast.FunctionDef) and any(n is call for n in ast.walk(func)):
            for stmt in ast.walk(func):
                if isinstance(stmt, ast.Assign) and any(
                        isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
                    return stmt.value
    raise SystemExit(f"exclude={name}: no local list")


def main(git_dir: str, commit: str = "HEAD") -> None:
    mirror = Mirror(git_dir, commit)
    full = mirror.git("rev-parse", commit).strip()
    date = mirror.git("show", "-s", "--format=%cs", full).strip()
    flags: dict[str, list] = {}
    for path in SOURCES:
        flags.update(_argparse_flags(mirror, ast.parse(mirror.show(path))))
    lines = [
        "# Megatron-LM command-line flags (pretrain_gpt.py), one per line: the flag, then its",
        "# argparse choices, if any, separated by spaces.",
        f"# Generated by bench/megatron_args.py from NVIDIA/Megatron-LM @{full[:8]} ({date}):",
        "# " + ", ".join(SOURCES) + " and the config dataclasses their",
        "# ArgumentGroupFactory calls expand. Do not edit; regenerate.",
    ]
    lines += [" ".join([flag, *choices]) for flag, choices in sorted(flags.items())]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{OUT}: {len(flags)} flags from @{full[:8]}")


if __name__ == "__main__":
    main(*sys.argv[1:])
