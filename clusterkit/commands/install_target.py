"""Which node and which Python an install command on a page is meant for.

``pip install`` (and ``conda create``) shown on a page runs on a cluster node, so it is resolved
for that node's architecture and Python (:mod:`clusterkit.commands.installs`), not for the
test machine. The target comes from the first of these that applies:

Node type
  1. the page's front matter ``stacks: [site/name, ...]``: the stack of the command's site
     (its first node type); where the page names several, the one built for the node type the
     rules below find, else the first listed;
  2. the nearest job script of the same site the page shows above the command (an included
     file or a job-script block): the node type of its partition (``#SBATCH --partition``,
     ``#BSUB -q``; the site's default without one);
  3. an architecture named first in the tab title or the prose just above the command
     (``aarch64``/``Grace-Hopper``, ``ppc64le``/``POWER9``, ``x86_64``): the default
     partition's node type if it has that architecture, else the first partition's that has;
  4. in a script that is not on a page (an included setup script): the first node type listed
     by the modules it loads (``pytorch/2.9.1-gpu`` is for the GPU nodes);
  5. the site's default partition.

Python
  1. the stack's ``python``;
  2. an interpreter the command's snippet names with its version: ``python=3.11`` in a
     ``conda create``, ``python3.12 -m venv``;
  3. the node type's ``python`` in the profile (the plain ``python3`` a venv is made with).

Without a Python the target has ``python=""`` and the install is reported unresolvable here.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from clusterkit.commands.installs import Target
from clusterkit.grammars import myst as P
from clusterkit.sites.profiles import ROOT, NodeType, Site, Stack

ARCH_WORDS = [
    (re.compile(r"aarch64|arm64|Grace[- ]Hopper|GH200", re.I), "aarch64"),
    (re.compile(r"ppc64le|POWER9", re.I), "ppc64le"),
    (re.compile(r"x86[_-]64", re.I), "x86_64"),
]
_PARTITION = re.compile(r"^#SBATCH\s+(?:--partition[= ]|-p\s*)(\S+)", re.M)
_QUEUE = re.compile(r"^#BSUB\s+-q\s+(\S+)", re.M)
_CONDA_PYTHON = re.compile(r"\bconda[\"']?\s+create\b[^\n]*?\bpython=(3\.\d+)")
_VERSIONED_PYTHON = re.compile(r"\bpython(3\.\d+)\b")
_MODULE_LOAD = re.compile(r"\bmodule\s+(?:-q\s+)?load\s+([^\s;#]+(?:\s+[^\s;#-][^\s;#]*)*)")


def target_for(page: str | Path, line: int, site: Site, snippet: str = "") -> Target:
    """The node and Python a command at ``page``:``line`` is meant for (see the module's
    docstring); ``snippet`` is the block or span that holds the command."""
    path = ROOT / page if not Path(page).is_absolute() else Path(page)
    node, why = _node_type(path, line, site, snippet)
    stack = _stack(path, site, node)
    if stack is not None:
        node = site.node_types[stack.raw["node_types"][0]]
        why = f"stack {stack.key}"
        if stack.python_unknown:
            why += f", whose python is unknown: {stack.python_unknown}"
        return _target(site, node, stack.python or "", why)
    python = snippet_python(snippet) or node.python or ""
    return _target(site, node, python, why)


def _target(site: Site, node: NodeType, python: str, why: str) -> Target:
    what = f"{site.title} {node.name} ({node.arch}, Python {python or 'unknown'}; {why})"
    return Target(node.arch, python, node.gpus, what)


@cache
def _page(path: Path) -> P.Page | None:
    if path.suffix != ".md" or not path.is_file():
        return None
    return P.scan_page(path)


def page_stacks(page: str | Path, site: Site) -> list[Stack]:
    """The stacks of ``site`` that the page names in its front matter, in order."""
    path = ROOT / page if not Path(page).is_absolute() else Path(page)
    scanned = _page(path)
    if scanned is None:
        return []
    named = []
    for key in scanned.front_matter.get("stacks") or []:
        site_name, _, name = str(key).partition("/")
        if site_name == site.name and name in site.stacks:
            named.append(site.stacks[name])
    return named


def _stack(path: Path, site: Site, node: NodeType):
    """The stack of ``site`` the page names for ``node`` (see the module's docstring)."""
    named = page_stacks(path, site)
    if len(named) > 1:
        types = site.node_types
        same_arch = [
            s for s in named if any(types[t].arch == node.arch for t in s.raw["node_types"])
        ]
        return next((s for s in same_arch if node.name in s.raw["node_types"]), None) or next(
            iter(same_arch), named[0]
        )
    return named[0] if named else None


def _node_type(path: Path, line: int, site: Site, snippet: str) -> tuple[NodeType, str]:
    page = _page(path)
    if page is not None:
        script = _job_script_above(page, line, site)
        if script is not None:
            part = _script_partition(script[1], site)
            return part.node_type, f"partition {part.name} of {script[0]}"
        arch = _arch_named(page, line)
        if arch:
            return _node_of_arch(site, arch), f"{arch} named above the command"
    else:
        nodes = _module_node_types(snippet or _read(path), site)
        if nodes:
            return nodes[0], f"node type of the modules {path.name} loads"
    part = site.default_partition or next(iter(site.partitions.values()))
    return part.node_type, f"default partition {part.name}"


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _job_script_above(page: P.Page, line: int, site: Site) -> tuple[str, str] | None:
    """(name, text) of the nearest job script of ``site`` shown above ``line``."""
    found = None
    for b in page.blocks:
        if b.line >= line:
            break
        if b.is_include:
            inc = b.include_path()
            if inc is None or not inc.is_file() or P.example_site(inc) != site.name:
                continue
            text = inc.read_text(encoding="utf-8", errors="replace")
            name = inc.name
        elif b.is_shell and page.site_of(b) == site.name:
            text, name = b.text, f"the block at line {b.line}"
        else:
            continue
        if "#SBATCH" in text or "#BSUB" in text:
            found = (name, text)
    return found


def _script_partition(text: str, site: Site):
    m = _PARTITION.search(text) or _QUEUE.search(text)
    parts = site.partitions
    if m and m[1] in parts:
        return parts[m[1]]
    return site.default_partition or next(iter(parts.values()))


def _arch_named(page: P.Page, line: int) -> str | None:
    """The architecture named first in the prose just above ``line`` (back to the previous
    block or heading), else in the enclosing tab's title."""
    lines = page.text.splitlines()
    stops = {b.end for b in page.blocks if b.end and b.end < line}
    stops |= {h[0] for h in page.headings if h[0] < line}
    start = max(stops, default=0)
    prose = "\n".join(lines[start : line - 1])
    tab = next((b.tab for b in page.blocks if b.line == line), None)
    for text in (prose, tab or ""):
        hits = [(m.start(), arch) for rx, arch in ARCH_WORDS for m in [rx.search(text)] if m]
        if hits:
            return min(hits)[1]
    return None


def _node_of_arch(site: Site, arch: str) -> NodeType:
    default = site.default_partition
    if default is not None and default.node_type.arch == arch:
        return default.node_type
    for part in site.partitions.values():
        if part.node_type.arch == arch and part.status == "current":
            return part.node_type
    return (default or next(iter(site.partitions.values()))).node_type


def _module_node_types(text: str, site: Site) -> list[NodeType]:
    out: list[NodeType] = []
    types = site.node_types
    for m in _MODULE_LOAD.finditer(text):
        for spec in m[1].split():
            module, _others = site.find_module(spec)
            for name in (module.raw.get("node_types") or []) if module else []:
                if name in types and types[name] not in out:
                    out.append(types[name])
    return out


def snippet_python(snippet: str) -> str | None:
    """The Python version the snippet makes its environment with, if it names one."""
    m = _CONDA_PYTHON.search(snippet) or _VERSIONED_PYTHON.search(snippet)
    return m[1] if m else None
