"""Software stacks as the rest of the toolkit uses them: look one up by its ``site/name`` key,
say what CI installs to stand in for it, and judge whether a training program supports it.

The facts themselves live in the site profiles (``stacks:`` in ``sites/<site>.yaml``, read by
:mod:`clusterkit.sites.profiles`). A training program states the oldest framework versions it
runs on in a module-level ``MINIMUM_VERSIONS`` dict, read here from its source without importing it.
"""

from __future__ import annotations

import ast
import hashlib
import re
import sys
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from clusterkit.sites.errors import CheckError, Finding
from clusterkit.sites.profiles import ROOT, Stack, all_sites, broken_sites, unloaded_note

# What CI installs from PyPI for each framework a stack lists (x86-64, CPU builds where the
# framework publishes a separate CPU package). Horovod is left out: PyPI has only its sources.
# Installed beside the frameworks so that the trainers' own tests run under the stack.
TEST_TOOLS = ("pytest>=8", "pillow")
# Frameworks a training program may import (as Python names them), its own first.
KNOWN_FRAMEWORKS = ("torch", "torchvision", "tensorflow", "keras", "horovod")


# --------------------------------------------------------------------------- lookup
def all_stacks() -> dict[str, Stack]:
    """Every stack of every site, by key (``site/name``)."""
    return {s.key: s for site in all_sites() for s in site.stacks.values()}


def find(key: str, where: Path | str = "", line: int = 0) -> Stack:
    """The stack called ``key``; a finding naming ``where``:``line`` if there is none."""
    stacks = all_stacks()
    if key in stacks:
        return stacks[key]
    site = key.split("/", 1)[0]
    if site in broken_sites():
        note = unloaded_note(site)
        raise CheckError([Finding(where, line, "profile-loads", f"{key}: {note}", "warning")])
    same_site = sorted(k for k in stacks if k.startswith(site + "/"))
    hint = f"; {site} has {', '.join(same_site)}" if same_site else f"; {site} lists no stacks"
    if "/" not in key:
        hint = "; name it site/stack, e.g. bede/<stack>"
    raise CheckError([Finding(where, line, "stack-exists", f"no stack {key!r}{hint}")])


# --------------------------------------------------------------------------- what CI installs
@dataclass(frozen=True)
class CiRoute:
    """How CI stands in for a stack: the packages it installs, or why it cannot."""

    packages: tuple[str, ...] = ()
    skip: str = ""

    @property
    def runs(self) -> bool:
        return not self.skip


def ci_route(stack: Stack) -> CiRoute:
    """The stack's CI environment as the profile gives it (:attr:`Stack.ci_pip`: ``ci.pip``, else
    its framework versions from PyPI), or why CI cannot run it."""
    if stack.ci_skip:
        return CiRoute(skip=stack.ci_skip)
    packages = tuple(sorted(stack.ci_pip or ()))
    if not packages:
        return CiRoute(skip=f"none of {sorted(stack.frameworks)} is on PyPI as a wheel")
    return CiRoute(packages=packages)


@cache
def project_dependencies() -> tuple[str, ...]:
    """clusterkit's own requirements (pyproject.toml), which the tests import."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return tuple(data["project"]["dependencies"])


def environment_packages(route: CiRoute) -> tuple[str, ...]:
    """Everything pip installs into a stack's environment: the frameworks, then the tools."""
    return (*route.packages, *TEST_TOOLS, *project_dependencies())


def environment_name(packages: tuple[str, ...]) -> str:
    """``_stack-<hash>``: stacks with the same packages share one environment. The
    interpreter's version is part of the hash, since a venv is bound to its Python."""
    key = "\n".join([f"python {sys.version_info[0]}.{sys.version_info[1]}", *sorted(packages)])
    return "_stack-" + hashlib.sha256(key.encode()).hexdigest()[:10]


# --------------------------------------------------------------------------- programs
@cache
def minimum_versions(program: Path) -> dict[str, str]:
    """A training program's ``MINIMUM_VERSIONS`` (framework -> oldest version), from its source."""
    tree = ast.parse(Path(program).read_text(encoding="utf-8"), str(program))
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(getattr(t, "id", None) == "MINIMUM_VERSIONS" for t in node.targets)
            and isinstance(node.value, ast.Dict)
        ):
            value = ast.literal_eval(node.value)
            return {str(k): str(v) for k, v in value.items()}
    return {}


def version_tuple(text: str) -> tuple[int, ...]:
    """(2, 1, 2) for '2.1.2', '2.1.2+cu121' or '2.5.0a0+b465a58': the leading numbers."""
    m = re.match(r"\d+(?:\.\d+)*", text.strip())
    return tuple(int(p) for p in m[0].split(".")) if m else ()


@cache
def frameworks_of(program: Path) -> tuple[str, ...]:
    """The frameworks a program needs, its own first: its MINIMUM_VERSIONS, else (a program
    that does not state them) the frameworks its top-level imports name."""
    if minimum_versions(program):
        return tuple(minimum_versions(program))
    tree = ast.parse(Path(program).read_text(encoding="utf-8"), str(program))
    found: list[str] = []
    for node in tree.body:
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        for name in names:
            top = name.split(".")[0]
            if top in KNOWN_FRAMEWORKS and top not in found:
                found.append(top)
    return tuple(found)


def uses(program: Path, stack: Stack) -> bool:
    """Whether the program is one for the stack: the stack has the program's own framework
    (what else the program needs, the stack must provide too)."""
    needed = frameworks_of(program)
    return bool(needed) and needed[0] in stack.frameworks


def unsupported(program: Path, stack: Stack) -> list[str]:
    """Why ``program`` stops at start-up on ``stack``: each framework older than its minimum."""
    out = []
    for name, oldest in minimum_versions(program).items():
        have = stack.frameworks.get(name)
        if have is not None and version_tuple(have) < version_tuple(oldest):
            out.append(f"{name} {have} is older than {oldest}")
    return out


# --------------------------------------------------------------------------- in words
def how_made(stack: Stack) -> str:
    """How users make the stack, as a page says it."""
    how = stack.install
    if stack.route == "module":
        before = " ".join(f"module load {m};" for m in how.get("prerequisites", ()))
        return f"{before} module load {how['name']}".strip()
    if stack.route == "conda":
        return f"conda, channel {', '.join(how['channels'])}: {' '.join(how['packages'])}"
    if stack.route == "pip":
        index = f" --index-url {how['index']}" if how.get("index") else ""
        return f"pip install{index} {' '.join(how['packages'])}"
    runtime = how.get("runtime", "a container runtime")
    return f"container image {how['image']} ({runtime})"


def facts(stack: Stack) -> str:
    """Python, framework versions, accelerator build and node types, in one line."""
    frameworks = ", ".join(f"{name} {version}" for name, version in stack.frameworks.items())
    kind, _, version = stack.accelerator.partition(" ")
    build = {"cuda": "CUDA", "rocm": "ROCm", "cpu": "CPU"}[kind] + (
        f" {version}" if version else ""
    )
    return (
        f"Python {stack.python_text}; {frameworks}; {build} build; "
        f"node types {', '.join(stack.raw['node_types'])}; {stack.status}"
    )


def ci_sentence(stack: Stack) -> str:
    route = ci_route(stack)
    if not route.runs:
        return f"CI cannot run it: {route.skip}"
    return f"CI runs the programs with {' '.join(route.packages)} from PyPI (x86-64)"
