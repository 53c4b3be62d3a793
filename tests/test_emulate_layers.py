"""The modules of clusterkit/emulate import each other in one direction only: no circle, and no
module of the package imports a judge (the registry finds them by name; the shims that run
things, in clusterkit/runs, import them from outside). Imports inside functions count as much
as those at the top. tests/test_layers.py holds the packages to their layers."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

from clusterkit.emulate import registry

EMULATE = Path(registry.__file__).parent
PACKAGE = "clusterkit.emulate"


def _names(node: ast.Import | ast.ImportFrom) -> list[str]:
    """The dotted names an import statement may load (``from x import y``: x, and x.y if y is
    a module)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level == 0:
        base = node.module or ""
    elif node.level == 1:  # from . import x, from .x import y: inside this package
        base = ".".join(filter(None, [PACKAGE, node.module]))
    else:
        return []  # above the package
    return [base, *(f"{base}.{a.name}" for a in node.names)]


def _siblings(names: list[str], siblings: set[str]) -> set[str]:
    tails = (
        n.removeprefix(f"{PACKAGE}.").split(".")[0] for n in names if n.startswith(PACKAGE + ".")
    )
    return {t for t in tails if t in siblings}


def import_graph(folder: Path) -> dict[str, set[str]]:
    """Each module of the package in ``folder`` -> the modules of the same package it imports."""
    siblings = {p.stem for p in folder.glob("*.py")}
    graph = {}
    for path in sorted(folder.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        names = [
            name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
            for name in _names(node)
        ]
        graph[path.stem] = _siblings(names, siblings) - {path.stem}
    return graph


def circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One circle of imports, or None."""
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as err:
        return err.args[1]
    return None


GRAPH = import_graph(EMULATE)
JUDGES = {name.rsplit(".", 1)[1] for name in registry.JUDGE_MODULES}


def test_the_graph_is_read_from_the_code():
    # the graph sees what the package's own docstring says: a judge over the core
    assert "slurm_request" in GRAPH["sbatch"] and "registry" in GRAPH["checkjob"]
    assert JUDGES <= set(GRAPH)


def test_no_circle_of_imports():
    assert circle(GRAPH) is None, " -> ".join(circle(GRAPH))


@pytest.mark.parametrize("judge", sorted(JUDGES))
def test_no_judge_imports_another(judge):
    assert not GRAPH[judge] & JUDGES, GRAPH[judge] & JUDGES


def test_no_module_of_the_package_imports_a_judge():
    importers = {m for m, deps in GRAPH.items() if deps & JUDGES}
    assert importers == set(), sorted(importers)


def test_a_circle_is_found(tmp_path):
    """The check can fail: two modules that import each other, one of them inside a function."""
    pkg = tmp_path / "emulate"
    pkg.mkdir()
    (pkg / "a.py").write_text("from clusterkit.emulate import b\n")
    (pkg / "b.py").write_text("def f():\n    from clusterkit.emulate.a import x\n")
    (pkg / "c.py").write_text("from . import a\nimport clusterkit.emulate.b as bb\n")
    graph = import_graph(pkg)
    assert graph == {"a": {"b"}, "b": {"a"}, "c": {"a", "b"}}
    assert sorted(circle(graph)) == ["a", "a", "b"]
