"""``pip install`` commands resolved for the machine they are meant for, not this one.

A page's install command runs on a cluster node: another architecture (aarch64 Grace-Hopper,
ppc64le POWER9) and another Python. The resolution here asks what that node would get:

* The resolver is uv (``uv pip compile --python-platform ... --python-version ...``), not
  pip's ``--platform``: pip evaluates environment markers such as ``platform_machine ==
  "x86_64"`` against the machine it runs on, so x86-64-only dependencies (torch's
  ``nvidia-*`` wheels) leak into an aarch64 resolution, which then fails or lies. uv
  evaluates the markers for the target platform.
* The result is judged: it must resolve; on a GPU node a framework must be a GPU build (torch
  with its ``nvidia-*``/``cuda-*`` or ROCm dependencies); a CPU-only wheel is reported with its
  cause (the Python version or the platform that selected it).
* Resolutions are cached under ``.cache/installs/`` keyed by the requirements, platform,
  Python and index, so a warm run asks no index.
* Indexes CI cannot reach (download.pytorch.org, conda channels) are judged against recorded
  manifests (:mod:`clusterkit.sites.channels`); where none is recorded the command is reported as
  "unresolvable here" (a warning), never passed in silence.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from clusterkit.grammars import pip_cli
from clusterkit.sites import channels
from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import ROOT
from clusterkit.sites.root import CACHE as CACHE_ROOT

CACHE = CACHE_ROOT / "installs"
PYPI = "https://pypi.org/simple"
# uv's names for the manylinux platforms of each architecture the profiles name
PLATFORMS = {
    "x86_64": "x86_64-manylinux_2_28",
    "aarch64": "aarch64-manylinux_2_28",
    "ppc64le": "powerpc64le-unknown-linux-gnu",
}
GPU_DEPENDENCY = re.compile(r"^(nvidia-|cuda-|pytorch-triton-rocm|rocm-|triton-rocm)")
FRAMEWORKS = {"torch", "tensorflow", "jax", "jaxlib"}
# pip install options that take a value
_VALUED = {
    "-i",
    "--index-url",
    "--extra-index-url",
    "-f",
    "--find-links",
    "-c",
    "--constraint",
    "-r",
    "--requirement",
    "--prefix",
    "--target",
    "-t",
    "--root",
    "--config-settings",
    "-C",
    "--platform",
    "--python-version",
}


@dataclass
class Resolution:
    packages: dict[str, str] = field(default_factory=dict)  # name -> version
    error: str = ""

    @property
    def gpu_build(self) -> bool:
        return any(GPU_DEPENDENCY.match(name) for name in self.packages)


@dataclass(frozen=True)
class Target:
    arch: str
    python: str
    gpus: int = 0
    what: str = ""  # how a finding names it: "Bede gh (aarch64)"

    @property
    def platform(self) -> str | None:
        return PLATFORMS.get(self.arch)


def install_args(words: list[str]) -> tuple[list[str], list[str]]:
    """(requirements, index URLs) of ``pip install ...`` words (after ``install``)."""
    reqs, indexes = [], []
    i = 0
    while i < len(words):
        w = words[i]
        name, eq, value = w.partition("=")
        if name in _VALUED:
            value = value if eq else (words[i + 1] if i + 1 < len(words) else "")
            if name in {"-i", "--index-url", "--extra-index-url"}:
                indexes.append(value)
            i += 1 if eq else 2
            continue
        if not w.startswith("-"):
            reqs.append(w)
        i += 1
    return reqs, indexes


def _uv() -> str | None:
    found = shutil.which("uv")
    if found:
        return found
    try:
        from uv import find_uv_bin  # the uv package from PyPI

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        return None


def resolve(reqs: list[str], target: Target, index: str = PYPI) -> Resolution:
    """What ``pip install REQS`` gets on ``target`` (cached)."""
    key = json.dumps([sorted(reqs), target.platform, target.python, index])
    path = CACHE / (hashlib.sha256(key.encode()).hexdigest()[:24] + ".json")
    if path.is_file():
        return Resolution(**json.loads(path.read_text()))
    uv = _uv()
    if uv is None:
        return Resolution(error="uv is not installed (pip install uv)")
    cmd = [
        uv,
        "pip",
        "compile",
        "-",
        "--python-platform",
        str(target.platform),
        "--python-version",
        target.python,
        "--only-binary",
        ":all:",
        "--no-header",
        "--no-annotate",
        "--quiet",
        "--index-url",
        index,
    ]
    run = subprocess.run(
        cmd, input="\n".join(reqs) + "\n", capture_output=True, text=True, timeout=300
    )
    if run.returncode:
        lines = [x for x in run.stderr.strip().splitlines() if x.strip()]
        result = Resolution(error="\n".join(lines) or f"uv exited {run.returncode}")
    else:
        pins = re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", run.stdout, re.M)
        result = Resolution({n.lower().replace("_", "-"): v for n, v in pins})
    if not result.error or "No solution" in result.error:  # a network error is not kept
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result.__dict__))
    return result


def check_install(page: Path | str, line: int, words: list[str], target: Target) -> list[Finding]:
    """Findings for ``pip install ...`` (``words`` after ``install``) meant for ``target``."""
    return check_pip(page, line, ["install", *words], target)


def check_pip(page: Path | str, line: int, words: list[str], target: Target) -> list[Finding]:
    """Findings for a pip command line (``words`` after ``pip``) meant for ``target``: pip's own
    parser first, then, for ``install``, what the requirements resolve to on the target."""
    try:
        cmd = pip_cli.parse(words)
    except pip_cli.PipOptionError as exc:
        return [Finding(page, line, "pip-option", str(exc))]
    if cmd.sub != "install":
        return []  # download/wheel run where the command runs: their options are judged
    out: list[Finding] = []
    reqs: list[str] = []
    for spec in [*cmd.requirements, *cmd.editables]:
        kind = requirement_kind(spec)
        if kind == "project":
            found, deps = _this_project(page, line, target)
            out += found
            reqs += deps
        elif kind in {"vcs", "path"}:
            what = "a VCS requirement" if kind == "vcs" else "a local path"
            out.append(_unresolvable(page, line, f"{spec} ({what}; CI has no copy of it)"))
        elif kind == "requirement":
            reqs.append(spec)
    if cmd.files:
        out.append(_unresolvable(page, line, f"requirement files {', '.join(cmd.files)}"))
    if any(f.level == "error" for f in out) or not reqs:
        return out
    return out + _judge(page, line, reqs, cmd.indexes, target)


def requirement_kind(spec: str) -> str:
    """``requirement`` (a name with a version specifier), ``project`` (``.``: this project),
    ``vcs`` (``git+https://...``, ``name @ git+...``), ``path`` (another local file or
    directory) or ``placeholder`` (``$VAR``, a stand-in value)."""
    if "$" in spec or spec.isdigit():
        return "placeholder"
    if spec in {".", "./"}:
        return "project"
    if re.search(r"(^|@\s*)(git|hg|svn|bzr)\+", spec):
        return "vcs"
    if spec.startswith((".", "/", "~")) or "://" in spec or spec.endswith((".whl", ".tar.gz")):
        return "path"
    return "requirement"


def _unresolvable(page, line: int, what: str) -> Finding:
    return Finding(page, line, "install-unresolvable", f"unresolvable here: {what}", "warning")


def _this_project(page, line: int, target: Target) -> tuple[list[Finding], list[str]]:
    """``pip install -e .`` from a checkout of this project: its Python floor and its
    dependencies, from pyproject.toml."""
    import tomllib

    from packaging.specifiers import SpecifierSet

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    floor = project.get("requires-python", "")
    if target.python and floor and target.python not in SpecifierSet(floor):
        where = target.what or f"Python {target.python}"
        msg = (
            f"{project['name']} requires Python {floor}: with Python {target.python} "
            f"({where}) the install stops; make the environment with a newer Python"
        )
        return [Finding(page, line, "install-python", msg)], []
    return [], list(project.get("dependencies", []))


def _judge(page, line: int, reqs: list[str], indexes: list[str], target: Target):
    where = target.what or f"{target.arch}, Python {target.python}"
    off_pypi = [i for i in indexes if not i.rstrip("/").endswith("pypi.org/simple")]
    if off_pypi:
        return _judge_recorded(page, line, reqs, off_pypi[0], target)
    if target.platform is None:
        return [_unresolvable(page, line, f"no wheel platform known for {target.arch}")]
    if not target.python:
        return [_unresolvable(page, line, f"no Python known for {where}")]
    res = resolve(reqs, target)
    if res.error and _needs_build(res.error):
        msg = (
            f"pip install {' '.join(reqs)} on {where}: {', '.join(_needs_build(res.error))} "
            "has no wheel there, so pip would compile it from source on the node "
            "(resolution stops here)"
        )
        return [Finding(page, line, "install-builds-from-source", msg, "warning")]
    if res.error:
        return [
            Finding(
                page,
                line,
                "install-resolve",
                f"pip install {' '.join(reqs)} does not resolve for {where}: "
                + " ".join(res.error.splitlines()[-3:]),
            )
        ]
    out = []
    if target.gpus:
        for fw in sorted(FRAMEWORKS & set(res.packages)):
            if not res.gpu_build:
                out.append(
                    Finding(
                        page,
                        line,
                        "install-cpu-build",
                        f"on {where} this installs {fw} {res.packages[fw]}, a CPU-only build "
                        f"(no CUDA or ROCm libraries among its dependencies: for Python "
                        f"{target.python} on {target.arch} the index has no GPU build); "
                        "the job would train on the CPU",
                    )
                )
    return out


def _judge_recorded(page, line: int, reqs: list[str], index: str, target: Target):
    """An index CI cannot reach: each pinned requirement against its recorded manifest."""
    from packaging.requirements import InvalidRequirement, Requirement

    manifest = channels.find_manifest(index)
    if manifest is None:
        return [
            _unresolvable(page, line, f"{index} (no recorded manifest under contracts/channels/)")
        ]
    where = f"{target.what or target.arch} with Python {target.python}"
    out = []
    for raw in reqs:
        try:
            req = Requirement(raw)
        except InvalidRequirement:
            out.append(Finding(page, line, "install-requirement", f"not a requirement: {raw}"))
            continue
        pins = [s.version for s in req.specifier if s.operator in ("==", "===")]
        if not pins:
            what = f"{index}: {raw} is not pinned, so which release it gets cannot be judged"
            out.append(_unresolvable(page, line, what))
            continue
        answer = channels.channel_has(index, req.name, pins[0], target.python, target.arch)
        if not answer:
            msg = f"pip install {raw} from {index} on {where}: {answer.why}"
            out.append(Finding(page, line, "install-not-offered", msg))
        elif (
            target.gpus
            and req.name in FRAMEWORKS
            and not any(e.get("cuda") or e.get("rocm") for e in answer.entries)
        ):
            msg = f"on {where} {index} offers {req.name} {pins[0]} as a CPU-only build"
            out.append(Finding(page, line, "install-cpu-build", msg))
    return out


def _needs_build(error: str) -> list[str]:
    """The packages uv reports as having no wheel for the target (``Wheels are required for
    `lxml` ...``)."""
    return sorted(set(re.findall(r"Wheels are required for `([^`]+)`", error)))
