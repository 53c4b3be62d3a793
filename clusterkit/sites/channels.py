"""Recorded channel manifests: what a channel CI cannot reach offers, as data with sources.

``contracts/channels/*.yaml`` (format: ``contracts/channels/README.md``, schema: ``schema.yaml``
beside them) each describe one conda channel, pip index or container image repository: which
package versions it holds, for which Python, platform and CUDA/ROCm build, how each entry is
known (``basis``), and whether the channel's own listing was read at all. :func:`channel_has`
answers "does this channel offer PACKAGE VERSION for Python X on platform Y?" for the checks that
judge install commands without the network.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import jsonschema
import yaml
from packaging.version import InvalidVersion, Version

from clusterkit.sites.errors import CheckError, Finding
from clusterkit.sites.profiles import ROOT, line_of, load_yaml

CHANNELS_DIR = ROOT / "contracts" / "channels"
SCHEMA_PATH = CHANNELS_DIR / "schema.yaml"

# every platform spelling a manifest or a caller may use -> the CPU architecture
_ARCH_PATTERNS = (
    (re.compile(r"(x86_64|amd64|linux-64)$"), "x86_64"),
    (re.compile(r"(aarch64|arm64)$"), "aarch64"),
    (re.compile(r"ppc64le$"), "ppc64le"),
)


def arch_of(platform: str) -> str:
    """``linux-ppc64le``, ``manylinux_2_28_aarch64``, ``linux/arm64``, ``x86_64`` -> the arch."""
    for rx, arch in _ARCH_PATTERNS:
        if rx.search(platform):
            return arch
    if platform == "noarch":
        return "noarch"
    raise ValueError(f"unknown platform {platform!r}")


def _same_channel(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/")


def _version_matches(offered: str, wanted: str) -> bool:
    """Equal as PEP 440 versions; ``2.9.1`` also matches ``2.9.1+rocm6.3``, as pip's == does."""
    try:
        have, want = Version(offered), Version(wanted)
    except InvalidVersion:
        return offered == wanted
    return have == want or (not want.local and Version(have.public) == want)


@dataclass(frozen=True)
class Answer:
    """What a manifest says about one package version; true when the channel offers it."""

    found: bool
    channel: str
    listing_seen: bool
    entries: tuple[dict, ...] = field(default=())
    why: str = ""

    def __bool__(self) -> bool:
        return self.found

    @property
    def basis(self) -> str:
        """How the answer is known: the entries' bases, or ``listing``/``no manifest``."""
        if self.entries:
            return ", ".join(sorted({e["basis"] for e in self.entries}))
        return "listing" if self.listing_seen else self.why


@dataclass(frozen=True)
class Manifest:
    path: Path
    data: dict

    @property
    def channel(self) -> str:
        return self.data["channel"]

    @property
    def listing_seen(self) -> bool:
        return self.data["listing"]["seen"]

    def entries(self, package: str, tag: str | None = None) -> list[dict]:
        return [
            p
            for p in self.data["packages"]
            if p["name"] == package and (tag is None or p.get("tag") == tag)
        ]


def _schema_findings(path: Path, data: object) -> list[Finding]:
    schema = yaml.safe_load(SCHEMA_PATH.read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    out = []
    for err in sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.absolute_path))):
        where = ".".join(str(p) for p in err.absolute_path) or "(top level)"
        out.append(
            Finding(
                path,
                line_of(data, list(err.absolute_path)),
                f"channel-schema:{err.validator}",
                f"{where}: {err.message}",
            )
        )
    return out


def _consistency_findings(path: Path, data: dict) -> list[Finding]:
    out = []
    for i, pkg in enumerate(data["packages"]):
        line = line_of(data, ["packages", i])
        if (data["kind"] == "container") != ("tag" in pkg):
            out.append(
                Finding(
                    path, line, "channel-tag", "container entries name their tag; no other does"
                )
            )
        if pkg["basis"] == "listing" and not data["listing"]["seen"]:
            out.append(
                Finding(
                    path,
                    line,
                    "channel-basis",
                    "an entry from the listing, but listing.seen is false",
                )
            )
        for platform in pkg["platforms"]:
            try:
                arch_of(platform)
            except ValueError as exc:
                out.append(Finding(path, line, "channel-platform", str(exc)))
    return out


def load_manifest(path: Path) -> Manifest:
    """Load and check one manifest; a problem is a CheckError naming file, line and rule."""
    data = load_yaml(path)
    findings = _schema_findings(path, data)
    if not findings:
        findings = _consistency_findings(path, data)
    if findings:
        raise CheckError(findings)
    return Manifest(path, data)


@cache
def manifests(channels_dir: Path = CHANNELS_DIR) -> tuple[Manifest, ...]:
    paths = sorted(p for p in channels_dir.glob("*.yaml") if p.name != "schema.yaml")
    return tuple(load_manifest(p) for p in paths)


def find_manifest(channel: str, channels_dir: Path = CHANNELS_DIR) -> Manifest | None:
    """The manifest of a channel URL, index URL or image (``repo`` or ``repo:tag``)."""
    repo = _split_image(channel)[0]
    for m in manifests(channels_dir):
        if _same_channel(m.channel, channel) or _same_channel(m.channel, repo):
            return m
    return None


def _split_image(channel: str) -> tuple[str, str | None]:
    """``nvcr.io/nvidia/pytorch:24.09-py3`` -> (repository, tag); URLs are left whole."""
    if "://" in channel:
        return channel, None
    repo, sep, tag = channel.rpartition(":")
    return (repo, tag) if sep and "/" not in tag else (channel, None)


def channel_has(
    channel: str,
    package: str,
    version: str,
    python: str,
    platform: str,
    channels_dir: Path = CHANNELS_DIR,
) -> Answer:
    """Does the recorded ``channel`` offer ``package`` ``version`` for ``python`` on ``platform``?

    ``channel`` is a conda channel URL, a pip index URL, or an image ``repository:tag`` (then
    ``package`` is the framework inside the image). ``platform`` may be an architecture
    (``aarch64``) or any platform spelling (``linux-ppc64le``, ``manylinux_2_28_aarch64``,
    ``linux/arm64``). The answer is falsy when the manifest has no such entry, and carries the
    entries that match, the basis they rest on and whether the channel's listing was read.
    """
    manifest = find_manifest(channel, channels_dir)
    if manifest is None:
        return Answer(False, channel, False, why=f"no manifest under {channels_dir}")
    arch = arch_of(platform)
    hits = tuple(
        e
        for e in manifest.entries(package, _split_image(channel)[1])
        if _version_matches(e["version"], version)
        and python in e["python"]
        and any(arch_of(p) in (arch, "noarch") for p in e["platforms"])
    )
    why = "" if hits else _why_not(manifest, package, version, python, arch)
    return Answer(bool(hits), manifest.channel, manifest.listing_seen, hits, why)


def _why_not(manifest: Manifest, package: str, version: str, python: str, arch: str) -> str:
    same = [e for e in manifest.entries(package) if _version_matches(e["version"], version)]
    if not same:
        listed = sorted({e["version"] for e in manifest.entries(package)}) or ["none"]
        return f"{package} {version} is not recorded (recorded: {', '.join(listed)})"
    pythons = sorted({p for e in same for p in e["python"]})
    if python not in pythons:
        return f"{package} {version} is recorded for Python {', '.join(pythons)} only"
    return f"{package} {version} is not recorded for {arch}"
