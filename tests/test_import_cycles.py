"""No module of the package imports another that imports it back (directly or through others).

Read with the stdlib ``ast`` (nothing is imported): every ``import`` / ``from … import`` inside
``src/rejoinder``, at module level or inside functions, except those under ``if TYPE_CHECKING:``
(annotations only, never run). An import of ``a.b.c`` is an edge to ``a.b.c`` (its parent
packages' ``__init__`` are not counted: importing a submodule always runs them)."""

from __future__ import annotations

import ast
from pathlib import Path

import rejoinder

ROOT = Path(rejoinder.__file__).parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in node.body:
                skip.update(id(n) for n in ast.walk(sub))
    return skip


def import_graph(missing: list[str] | None = None) -> dict[str, set[str]]:
    """The package's import edges; each import of a ``rejoinder`` module that does not exist is
    appended to ``missing`` as ``"importer -> module"``."""
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _type_checking_nodes(tree)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[:len(base) - node.level + 1]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in mods else mod
                           for a in node.names]
                if missing is not None and mod.split(".")[0] == "rejoinder" and mod not in mods:
                    missing.append(f"{name} -> {mod}")
            for t in targets:
                if t in mods and t != name:
                    graph[name].add(t)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_sees_imports_of_every_kind():
    g = import_graph()
    assert "rejoinder.turns" in g["rejoinder.session"]          # from .turns import …
    assert "rejoinder.adapters.registry" in g["rejoinder.runtime"]  # from .adapters.registry …
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_imports_another_that_imports_it_back():
    assert cycles(import_graph()) == []


def test_every_import_of_the_package_names_one_of_its_modules():
    """A moved module leaves no import of its old path behind (the graph would not see it)."""
    missing: list[str] = []
    import_graph(missing)
    assert missing == []
