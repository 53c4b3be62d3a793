"""clusterkit is one package per layer, and imports point down the layers only.

Each package's ``__init__`` docstring ends with the layers it may import (``May import: ...``);
these tests read that line and hold every module of the package to it, imports inside
functions included, so the docstring and the code cannot drift apart. The modules at the top
(``cli``, ``__main__``) are the command line: they may import any layer, and no layer imports
them. The last tests plant a wrong import in a copy of the tree and show that it is found.
"""

from __future__ import annotations

import ast
import graphlib
import re
import shutil
from pathlib import Path

import pytest

import clusterkit
from clusterkit.commands import registry

PACKAGE = Path(clusterkit.__file__).parent
TOP_LIMIT = 10  # modules and packages at the top of clusterkit/
_MAY_IMPORT = re.compile(r"^May import:(?P<what>.*?)(?:\n\s*\n|\Z)", re.M | re.S)


def modules(root: Path) -> dict[str, Path]:
    """Dotted name -> file of every module under ``root`` (a copy of ``clusterkit/``)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = (root.name, *path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _defined(tree: ast.Module) -> set[str]:
    """Names a module defines at its top (what ``from PACKAGE import name`` can take)."""
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _resolve(name: str, mods: dict[str, Path]) -> str | None:
    """The module of the tree that ``import name`` loads last (its longest prefix), or None."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def read_imports(root: Path) -> tuple[dict[str, set[str]], list[str]]:
    """(module -> the modules of the tree it imports, anywhere in it; imports that name
    nothing in the tree). ``root`` is ``clusterkit/`` or a copy of it."""
    mods = modules(root)
    trees = {m: ast.parse(p.read_text(encoding="utf-8"), filename=str(p)) for m, p in mods.items()}
    defined = {m: _defined(tree) for m, tree in trees.items()}
    top = root.name
    graph: dict[str, set[str]] = {}
    missing = []
    for mod, tree in trees.items():
        here = mod if mods[mod].name == "__init__.py" else mod.rpartition(".")[0]
        out = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                wanted = [a.name for a in node.names if a.name.split(".")[0] == top]
                for name in wanted:
                    if name not in mods:
                        missing.append(f"{mod}:{node.lineno}: import {name}")
                    out.add(_resolve(name, mods))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")[: len(here.split(".")) - node.level + 1]
                    source = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    source = node.module or ""
                if source.split(".")[0] != top:
                    continue
                if source not in mods:
                    missing.append(f"{mod}:{node.lineno}: from {source} import ...")
                    continue
                for a in node.names:
                    full = f"{source}.{a.name}"
                    if full in mods:
                        out.add(full)  # (and the package's face, which belongs to its layer)
                        continue
                    out.add(source)
                    if a.name not in defined[source] and a.name != "*":
                        missing.append(f"{mod}:{node.lineno}: from {source} import {a.name}")
        # the package itself (its face, loaded with every module) belongs to no layer
        graph[mod] = {m for m in out if m and m not in {mod, top}}
    return graph, missing


def packages(root: Path) -> list[str]:
    return sorted(p.parent.name for p in root.glob("*/__init__.py"))


def may_import(root: Path) -> dict[str, set[str]]:
    """Package -> the packages its ``__init__`` docstring says it may import."""
    out = {}
    for name in packages(root):
        doc = ast.get_docstring(ast.parse((root / name / "__init__.py").read_text())) or ""
        m = _MAY_IMPORT.search(doc)
        if m is None:
            raise AssertionError(f"{root.name}/{name}/__init__.py does not say what it may import")
        out[name] = set(re.findall(rf"\b{root.name}\.(\w+)", m["what"]))
    return out


_PACKAGES = set(packages(PACKAGE))


def imports_up(root: Path, graph: dict[str, set[str]] | None = None) -> list[str]:
    """Every import of a module of another layer than its own layer may import."""
    graph = graph if graph is not None else read_imports(root)[0]
    allowed = may_import(root)
    pkgs = set(packages(root))
    bad = []
    for mod, deps in sorted(graph.items()):
        here = _layer(mod, pkgs)
        for dep in sorted(deps):
            there = _layer(dep, pkgs)
            if here in {"cli", there}:  # the command line may import any layer
                continue
            if there == "cli" or there not in allowed.get(here, set()):
                bad.append(f"{mod} -> {dep} ({here} may not import {there})")
    return bad


def _layer(module: str, pkgs: set[str]) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in pkgs else "cli"


GRAPH, MISSING = read_imports(PACKAGE)
ALLOWED = may_import(PACKAGE)
UP = imports_up(PACKAGE, GRAPH)


def test_the_graph_is_read_from_the_code():
    # a function-level import (pages.sphinxext draws with results_plot only when asked)
    assert "clusterkit.pages.results_plot" in GRAPH["clusterkit.pages.sphinxext"]
    assert "clusterkit.commands.registry" in GRAPH["clusterkit.commands.shell"]
    assert ALLOWED["sites"] == set() and ALLOWED["grammars"] == {"sites"}


def test_few_modules_at_the_top():
    top = sorted(p.name for p in PACKAGE.iterdir() if p.suffix == ".py" or p.name in _PACKAGES)
    assert len(top) <= TOP_LIMIT, top


def test_the_layers_are_ordered():
    """What the packages may import has no circle: they stack as floors."""
    order = list(graphlib.TopologicalSorter(ALLOWED).static_order())
    assert order[0] == "sites"
    assert set(order) == _PACKAGES, set(order) ^ _PACKAGES


def test_every_import_names_a_module_of_this_tree():
    """A stale name would be answered by another checkout's editable install, not fail."""
    assert MISSING == []


@pytest.mark.parametrize("package", sorted(_PACKAGES))
def test_no_import_runs_up_a_layer(package):
    bad = [line for line in UP if line.startswith(f"clusterkit.{package}.")]
    assert bad == []


def test_nothing_imports_the_command_line():
    importers = {m for m, deps in GRAPH.items() if {"clusterkit.cli", "clusterkit.__main__"} & deps}
    assert importers <= {"clusterkit.__main__"}, importers


def test_no_circle_of_imports():
    try:
        tuple(graphlib.TopologicalSorter(GRAPH).static_order())
    except graphlib.CycleError as err:
        pytest.fail(" -> ".join(err.args[1]))


def test_the_router_imports_no_judge():
    """The commands register by name: the router looks each one up and imports none."""
    judges = set(registry.JUDGE_MODULES)
    for core in ("clusterkit.commands.shell", "clusterkit.commands.registry"):
        assert not GRAPH[core] & judges, GRAPH[core] & judges
    registered = {j.judge.__module__ for j in registry.commands().values()}
    registered.discard("clusterkit.grammars.tensorboard_cli")  # judged by its grammar
    registered.discard("clusterkit.grammars.reframe_cli")
    assert registered == judges, registered ^ judges


# ------------------------------------------------------------------ the tests can fail
@pytest.fixture
def tree(tmp_path) -> Path:
    """A copy of clusterkit/ to plant wrong imports in."""
    copy = tmp_path / "clusterkit"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    graph, missing = read_imports(copy)
    assert imports_up(copy, graph) == [] and missing == []
    return copy


def test_a_planted_import_up_a_layer_is_found(tree):
    """A data module that reaches for the page router inside a function."""
    with (tree / "sites" / "profiles.py").open("a") as f:
        f.write("\n\ndef _planted():\n    from clusterkit.pages import pagetest\n")
    assert imports_up(tree) == [
        "clusterkit.sites.profiles -> clusterkit.pages.pagetest (sites may not import pages)"
    ]


def test_a_planted_import_of_the_command_line_is_found(tree):
    with (tree / "runs" / "trainlog.py").open("a") as f:
        f.write("\nimport clusterkit.cli\n")
    assert imports_up(tree) == [
        "clusterkit.runs.trainlog -> clusterkit.cli (runs may not import cli)"
    ]


def test_a_planted_stale_name_is_found(tree):
    with (tree / "pages" / "fast.py").open("a") as f:
        f.write("\n\ndef _planted():\n    from clusterkit import emulation\n")
    found = read_imports(tree)[1]
    assert len(found) == 1 and found[0].endswith("from clusterkit import emulation")


def test_a_package_that_does_not_say_what_it_may_import_is_found(tree):
    (tree / "runs" / "__init__.py").write_text('"""The runners."""\n')
    with pytest.raises(AssertionError, match=r"runs/__init__\.py does not say"):
        may_import(tree)
