"""Stack updates proposed from live output: ``module -t avail``, ``conda search``, ``pip index``.

Each source is compared with the ``stacks:`` of a profile that use it:

- a module stack whose module has left ``module -t avail`` becomes historical, and a framework
  module that no stack uses is reported;
- a conda stack whose channel offers a newer framework build for the stack's Python and
  architecture gets that version (``conda search --json`` or the plain table); a channel with
  no build for the stack's Python is reported;
- a pip stack that installs an unpinned framework gets the newest version ``pip index versions``
  lists for its index; a pinned one is reported when the pin has left the index or a newer
  release exists (pins are deliberate, so they are not moved).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from clusterkit.sites.changes import Change
from clusterkit.sites.profiles import line_of

PYPI = "https://pypi.org/simple"
# conda package names that carry each framework, most specific first
CONDA_NAMES = {
    "torch": ("pytorch-base", "pytorch"),
    "tensorflow": ("tensorflow-base", "tensorflow", "tensorflow-cpu"),
    "torchvision": ("torchvision",),
    "keras": ("keras",),
    "horovod": ("horovod",),
    "numpy": ("numpy",),
}
CONDA_SUBDIRS = {"ppc64le": "linux-ppc64le", "aarch64": "linux-aarch64", "x86_64": "linux-64"}
FRAMEWORK_MODULES = {"pytorch", "pytorch-gpu", "torch", "tensorflow", "keras", "open-ce", "horovod"}


@dataclass
class StackLive:
    """What the live sources say, for the stacks: conda builds and pip index listings."""

    conda: list[dict] = field(default_factory=list)  # name, version, build, subdir, channel
    pip: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # (index, name)


# --------------------------------------------------------------------------- parsing
def parse_conda_search(text: str) -> list[dict]:
    """``conda search --json`` (name -> builds) or the plain table, as a list of builds."""
    stripped = text.strip()
    if stripped.startswith(("{", "[")):
        data = json.loads(stripped)
        if not isinstance(data, dict):
            raise ValueError("expected an object of package name -> builds")
        out = []
        for name, builds in data.items():
            if isinstance(builds, list):  # an "error" key holds a string
                out += [{**b, "name": b.get("name", name)} for b in builds]
        return out
    rows = []
    for raw in text.splitlines():
        parts = raw.split()
        if len(parts) >= 4 and not raw.startswith(("#", "Loading", "Fetching")):
            rows.append(
                {
                    "name": parts[0],
                    "version": parts[1],
                    "build": parts[2],
                    "channel": parts[3],
                    "subdir": "",
                }
            )
    return rows


_PIP_BLOCK = re.compile(
    r"^(?P<name>[A-Za-z0-9_.-]+) \((?P<latest>[^)]+)\)\s*\n"
    r"Available versions: (?P<versions>.+)$",
    re.M,
)


def parse_pip_index(text: str) -> dict[str, list[str]]:
    """``pip index versions NAME`` (several outputs may follow one another): name -> versions."""
    return {
        canonicalize_name(m["name"]): [v.strip() for v in m["versions"].split(",") if v.strip()]
        for m in _PIP_BLOCK.finditer(text)
    }


def read_stack_live(conda: list[str] = (), pip: list[tuple[str, str]] = ()) -> StackLive:
    """Conda outputs, and (index URL, pip index output) pairs, read into one StackLive."""
    live = StackLive()
    for text in conda:
        live.conda += parse_conda_search(text)
    for index, text in pip:
        for name, versions in parse_pip_index(text).items():
            live.pip[(index.rstrip("/"), name)] = versions
    return live


# --------------------------------------------------------------------------- comparison
def _newest(versions: list[str]) -> str | None:
    good = []
    for v in versions:
        try:
            good.append((Version(v), v))
        except InvalidVersion:
            continue
    return max(good)[1] if good else None


def _arch(data: dict, stack: dict) -> str:
    return data["node_types"][stack["node_types"][0]]["arch"]


def _fits(build: dict, python: str | dict, subdir: str) -> bool:
    """A conda build for this Python (py311 in its build string) and subdir (or noarch); any
    Python's build where the stack's Python is unknown."""
    if build.get("subdir") and build["subdir"] not in (subdir, "noarch"):
        return False
    if not isinstance(python, str):
        return True
    tag = "py" + python.replace(".", "")
    pys = re.findall(r"py(\d{2,3})", build.get("build", ""))
    return not pys or tag[2:] in pys


def _conda_changes(data: dict, name: str, stack: dict, builds: list[dict]) -> list[Change]:
    channels = [c.rstrip("/") for c in stack["install"]["conda"]["channels"]]
    mine = [b for b in builds if any(str(b.get("channel", "")).startswith(c) for c in channels)]
    subdir = CONDA_SUBDIRS[_arch(data, stack)]
    out = []
    for fw, old in stack["frameworks"].items():
        named = [b for b in mine if b["name"] in CONDA_NAMES.get(fw, (fw,))]
        if not named:
            continue
        new = _newest([b["version"] for b in named if _fits(b, stack["python"], subdir)])
        keys = ["stacks", name, "frameworks", fw]
        if new is None:
            out.append(
                Change(
                    "stacks",
                    name,
                    "notice",
                    line=line_of(data, keys),
                    note=f"the channel has no {fw} build for Python {stack['python']} on {subdir}",
                )
            )
        elif Version(new) != Version(old):
            out.append(
                Change(
                    "stacks",
                    name,
                    "changed",
                    f"frameworks.{fw}",
                    old,
                    new,
                    line_of(data, keys),
                    note="newest in the channel",
                )
            )
    return out


def _pin(packages: list[str], fw: str) -> str | None:
    for spec in packages:
        m = re.match(rf"^{re.escape(fw)}\s*==\s*([^\s;,]+)$", spec.strip())
        if m:
            return m[1]
    return None


def _pip_changes(data: dict, name: str, stack: dict, pip: dict) -> list[Change]:
    how = stack["install"]["pip"]
    index = how.get("index", PYPI).rstrip("/")
    out = []
    for fw, old in stack["frameworks"].items():
        versions = pip.get((index, canonicalize_name(fw)))
        if not versions:
            continue
        newest, pinned = _newest(versions), _pin(how["packages"], fw)
        line = line_of(data, ["stacks", name, "frameworks", fw])
        if pinned and pinned not in versions:
            out.append(
                Change(
                    "stacks",
                    name,
                    "notice",
                    line=line,
                    note=f"pinned {fw}=={pinned} is no longer on {index}",
                )
            )
        elif pinned and Version(newest) > Version(pinned):
            out.append(
                Change(
                    "stacks",
                    name,
                    "notice",
                    line=line,
                    note=f"{fw} {newest} is out; the stack pins {pinned}",
                )
            )
        elif not pinned and Version(newest) != Version(old):
            out.append(
                Change(
                    "stacks",
                    name,
                    "changed",
                    f"frameworks.{fw}",
                    old,
                    newest,
                    line,
                    note=f"what an unpinned install from {index} gets",
                )
            )
    return out


def _module_changes(data: dict, modules: set[tuple[str, str | None]]) -> list[Change]:
    out, used = [], set()
    for name, stack in data.get("stacks", {}).items():
        module = stack["install"].get("module")
        if not module:
            continue
        used.add(module["name"])
        mod, _, version = module["name"].partition("/")
        if stack["status"] == "current" and (mod, version or None) not in modules:
            out.append(
                Change(
                    "stacks",
                    name,
                    "changed",
                    "status",
                    "current",
                    "historical",
                    line_of(data, ["stacks", name, "status"]),
                    note=f"module {module['name']} is not in module avail",
                )
            )
    retired = {  # modules the profile already marks as gone: the module report covers them
        f"{m['name']}/{m.get('version')}"
        for m in data.get("modules", [])
        if m["status"] != "current"
    }
    for mod, version in sorted(modules, key=lambda m: (m[0], m[1] or "")):
        full = f"{mod}/{version}" if version else mod
        if mod in FRAMEWORK_MODULES and version and full not in used | retired:
            out.append(
                Change(
                    "stacks",
                    full,
                    "notice",
                    note="a framework module that no stack describes: add one with its "
                    "Python, versions and sources",
                )
            )
    return out


def compare_stacks(
    data: dict, modules: set[tuple[str, str | None]] | None, live: StackLive | None
) -> list[Change]:
    """The stack changes that module avail, conda search and pip index output call for."""
    out = _module_changes(data, modules) if modules is not None else []
    if live is None:
        return out
    for name, stack in data.get("stacks", {}).items():
        if "conda" in stack["install"]:
            out += _conda_changes(data, name, stack, live.conda)
        elif "pip" in stack["install"]:
            out += _pip_changes(data, name, stack, live.pip)
    return out
