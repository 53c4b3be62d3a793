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
  manifests (:func:`channel_manifest`); where none is recorded the command is reported as
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

from clusterkit.errors import Finding
from clusterkit.profiles import ROOT

CACHE = ROOT / ".cache" / "installs"
CHANNELS = ROOT / "contracts" / "channels"
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


def channel_manifest(index: str) -> dict | None:
    """The recorded manifest of an index CI cannot reach, if one is kept."""
    key = re.sub(r"[^A-Za-z0-9]+", "-", index).strip("-").lower()
    for path in (CHANNELS / f"{key}.yaml", CHANNELS / f"{key}.json"):
        if path.is_file():
            import yaml

            return yaml.safe_load(path.read_text())
    return None


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
        result = Resolution(error=" ".join(lines[-3:]) or f"uv exited {run.returncode}")
    else:
        pins = re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", run.stdout, re.M)
        result = Resolution({n.lower().replace("_", "-"): v for n, v in pins})
    if not result.error or "No solution" in result.error:  # a network error is not kept
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result.__dict__))
    return result


def check_install(page: Path | str, line: int, words: list[str], target: Target) -> list[Finding]:
    """Findings for ``pip install ...`` (``words`` after ``install``) meant for ``target``."""
    reqs, indexes = install_args(words)
    reqs = [r for r in reqs if not r.startswith((".", "/")) and "$" not in r]
    if not reqs:
        return []
    where = target.what or f"{target.arch}, Python {target.python}"
    off_pypi = [i for i in indexes if not i.rstrip("/").endswith("pypi.org/simple")]
    for index in off_pypi:
        if channel_manifest(index) is None:
            return [
                Finding(
                    page,
                    line,
                    "install-unresolvable",
                    f"unresolvable here: {index} (no recorded manifest under contracts/channels/)",
                    level="warning",
                )
            ]
    if target.platform is None:
        return [
            Finding(
                page,
                line,
                "install-unresolvable",
                f"unresolvable here: no wheel platform known for {target.arch}",
                level="warning",
            )
        ]
    res = resolve(reqs, target)
    if res.error:
        return [
            Finding(
                page,
                line,
                "install-resolve",
                f"pip install {' '.join(reqs)} does not resolve for {where}: {res.error}",
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
