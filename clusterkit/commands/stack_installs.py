"""An install command on a page against the software stack it builds.

A page names its stacks in its front matter (``stacks: [site/name]``). A ``conda create`` or
``pip install`` on that page that installs a framework builds one of them, and must build it as
the profile records it: the same framework versions, from the same conda channel or package
index, with the same Python. The stack is the one of the command's site and installer (conda or
pip) that holds the framework the command installs (torch or TensorFlow), built for the
architecture of the node the command is meant for (:mod:`clusterkit.commands.install_target`).
A command that installs neither (keras into an existing environment, say) builds no stack, and
where the page names no stack of that site and installer nothing is judged here: either way the
command is still resolved for its node.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from clusterkit.commands import install_target
from clusterkit.grammars import pip_cli
from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import Site, Stack

PYPI = "https://pypi.org/simple"
RULE = "stack-install"
# the frameworks that make an environment one stack or another; the others are judged only
# where the stack records them
MAIN_FRAMEWORKS = {"torch", "tensorflow"}
_SPEC = re.compile(r"^([A-Za-z0-9_.-]+)(.*)$")
# package names (conda's and PyPI's) -> the framework names of the profiles' stacks
FRAMEWORK_OF = {
    "torch": "torch",
    "pytorch": "torch",
    "pytorch-base": "torch",
    "torchvision": "torchvision",
    "tensorflow": "tensorflow",
    "tensorflow-base": "tensorflow",
    "tensorflow-cpu": "tensorflow",
    "keras": "keras",
    "horovod": "horovod",
    "numpy": "numpy",
}


@dataclass(frozen=True)
class Install:
    """What an install command builds: by which installer, from where, with which versions."""

    route: str  # "conda" or "pip", as a stack's install route is named
    source: str  # the conda channel or the package index
    pins: dict[str, str]  # framework -> the version the command asks for ("" when unpinned)
    python: str | None = None  # the Python the command's snippet makes the environment with


# --------------------------------------------------------------------------- the commands
def check_conda(page, line: int, site: Site, snippet: str, channel: str, specs) -> list[Finding]:
    """``conda create/install``: ``specs`` are (name, version, spec) of its packages."""
    pins = {FRAMEWORK_OF[n]: v for n, v, _ in specs if n in FRAMEWORK_OF}
    python = next((v.rstrip(".*") for n, v, _ in specs if n == "python" and v), None)
    return check(page, line, site, snippet, Install("conda", channel, pins, python))


def check_pip(page, line: int, words: list[str], site: Site, snippet: str = "") -> list[Finding]:
    """A pip command line (``words`` after ``pip``); only ``install`` builds a stack."""
    try:
        cmd = pip_cli.parse(list(words))
    except pip_cli.PipOptionError:
        return []  # reported by clusterkit.commands.installs, which reads the same words
    if cmd.sub != "install":
        return []
    pins = {}
    for raw in cmd.requirements:
        try:
            req = Requirement(raw)
        except InvalidRequirement:
            continue  # a path, a placeholder: not a framework of a stack
        name = FRAMEWORK_OF.get(canonicalize_name(req.name))
        if name:
            pins[name] = next((s.version for s in req.specifier if s.operator in ("==", "===")), "")
    source = next((i for i in cmd.indexes if _norm(i) != _norm(PYPI)), PYPI)
    python = install_target.snippet_python(snippet)
    return check(page, line, site, snippet, Install("pip", source, pins, python))


# --------------------------------------------------------------------------- the judgement
def check(page, line: int, site: Site, snippet: str, install: Install) -> list[Finding]:
    """Findings for an install that builds one of the page's stacks other than it is recorded."""
    main = sorted(set(install.pins) & MAIN_FRAMEWORKS)
    if not main:
        return []  # adds packages to an environment (keras, numpy): builds no stack
    named = [s for s in install_target.page_stacks(page, site) if s.route == install.route]
    if not named:
        return []
    holding = [s for s in named if set(main) <= set(s.frameworks)]
    if not holding:
        keys = ", ".join(s.key for s in named)
        msg = (
            f"{install.route} installs {', '.join(main)}, which none of the "
            f"page's {install.route} stacks of {site.name} holds ({keys}): name the stack "
            "it builds in the front matter (stacks:)"
        )
        return [Finding(page, line, RULE, msg)]
    arch = install_target.target_for(page, line, site, snippet).arch
    stack = next((s for s in holding if _arch(site, s) == arch), holding[0])
    return [
        Finding(page, line, RULE, f"{stack.key}: {why}")
        for why in _differences(install, stack, site)
    ]


def _differences(install: Install, stack: Stack, site: Site) -> list[str]:
    out = []
    for name, pin in sorted(install.pins.items()):
        have = stack.frameworks.get(name)
        if have is None:
            continue  # a package the stack does not record
        if not pin and _pinned_by(stack, name):
            out.append(f"{name} is not pinned; the stack has {name} {have}")
        elif pin and not _same_release(pin, have):
            out.append(f"the command installs {name} {pin}; the stack has {name} {have}")
    source = _sources(stack)
    if _norm(install.source) not in {_norm(s) for s in source}:
        where = "channel" if install.route == "conda" else "index"
        out.append(
            f"the command installs from the {where} {install.source}; the stack's "
            f"{where} is {', '.join(source)}"
        )
    python = install.python or _node_python(install, stack, site)
    if python and stack.python and python != stack.python:
        how = "makes its environment with" if install.python else "runs on the node's python3,"
        out.append(f"the command {how} Python {python}; the stack has Python {stack.python}")
    return out


def _pinned_by(stack: Stack, name: str) -> bool:
    """Whether the stack's own install command pins the framework (``torch==2.8.0``, not
    ``pytorch``)."""
    for raw in stack.install.get("packages", ()):
        m = _SPEC.match(raw.split("::")[-1].strip())
        if m and FRAMEWORK_OF.get(canonicalize_name(m[1])) == name and m[2].strip():
            return True
    return False


def _same_release(pin: str, have: str) -> bool:
    """``2.1.2`` and ``2.1.2``; a series and a release in it (``1.26`` and ``1.26.4``)."""
    pin, have = pin.rstrip(".*"), have.rstrip(".*")
    return pin == have or pin.startswith(have + ".") or have.startswith(pin + ".")


def _sources(stack: Stack) -> list[str]:
    if stack.route == "conda":
        return list(stack.install["channels"])
    return [stack.install.get("index") or PYPI]


def _node_python(install: Install, stack: Stack, site: Site) -> str | None:
    """A pip install in a snippet that names no Python runs on the node's own python3."""
    if install.route != "pip":
        return None
    node = site.node_types.get(stack.raw["node_types"][0])
    return node.python if node is not None else None


def _arch(site: Site, stack: Stack) -> str | None:
    node = site.node_types.get(stack.raw["node_types"][0])
    return node.arch if node is not None else None


def _norm(url: str) -> str:
    return str(url).rstrip("/")
