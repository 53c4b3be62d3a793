"""``conda`` commands a page shows: their options, the environments they make and activate, and
the packages they ask for.

* Every command line goes through conda's options (:mod:`clusterkit.grammars.conda_cli`).
* ``conda activate NAME`` (or a prefix) must name an environment that a ``conda create`` makes
  in the same snippet, elsewhere on the page, or on a page it links to with ``{doc}``;
  ``base`` always exists.
* ``conda create``/``install`` must pin every package (``pytorch=2.1``): an unpinned spec
  takes whatever the channel holds that day. The channel is the first ``-c``, else the first
  one ``conda config --prepend/--add channels`` put in front earlier in the snippet, else
  conda-forge (Miniforge's default). Where a manifest of the channel is recorded
  (:func:`clusterkit.sites.channels.find_manifest`), the pins, the Python and the node's platform
  are judged against it; where none is, the command is reported "unresolvable here".
* A command that installs the frameworks of a stack the page names is held to that stack's
  versions, channel and Python (:mod:`clusterkit.commands.stack_installs`).
* ``conda config --set`` is judged for the settings pages use (``channel_priority``).
"""

from __future__ import annotations

import re
import shlex
from functools import cache
from pathlib import Path

from clusterkit.commands import install_target, stack_installs
from clusterkit.commands.registry import register
from clusterkit.grammars import conda_cli
from clusterkit.grammars import myst as P
from clusterkit.sites import channels
from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import ROOT, Site

DEFAULT_CHANNEL = "conda-forge"
_SPEC = re.compile(r"^(?:(?P<channel>[^:\s]+)::)?(?P<name>[A-Za-z0-9_.-]+)(?P<rest>.*)$")
_DOC = re.compile(r"\{doc\}`(?:[^`<]*<)?(?P<target>[^`>]+)>?`")


@register("conda")
def check(page, line: int, words: list[str], site: Site, snippet: str = "") -> list[Finding]:
    try:
        cmd = conda_cli.parse(list(words[1:]))
    except conda_cli.CondaOptionError as exc:
        sub = words[1] if len(words) > 1 else ""
        return [Finding(page, line, "conda-option", f"conda {sub}: error: {exc}")]
    if cmd.sub == "config":
        return _config(page, line, cmd)
    if cmd.sub == "activate":
        return _activate(page, line, cmd, snippet)
    if cmd.sub in {"create", "install"}:
        return _packages(page, line, cmd, site, snippet)
    return []


# --------------------------------------------------------------------------- config
def _config(page, line: int, cmd: conda_cli.CondaCommand) -> list[Finding]:
    out = []
    for key, value in cmd.options.get("set") or []:
        allowed = conda_cli.CONFIG_VALUES.get(key, ...)
        if allowed is ...:
            msg = f"conda config --set {key}: a setting not judged here"
            out.append(Finding(page, line, "conda-config", msg, "warning"))
        elif allowed is not None and value.lower() not in allowed:
            msg = f"conda config --set {key} {value}: {key} takes {', '.join(sorted(allowed))}"
            out.append(Finding(page, line, "conda-config", msg))
    for flag in ("prepend", "add", "append"):
        for key, _value in cmd.options.get(flag) or []:
            if key not in conda_cli.CONFIG_LISTS:
                msg = f"conda config --{flag} {key}: {key} is not a list setting"
                out.append(Finding(page, line, "conda-config", msg))
    return out


# --------------------------------------------------------------------------- environments
def _activate(page, line: int, cmd: conda_cli.CondaCommand, snippet: str) -> list[Finding]:
    env = _norm(cmd.positionals[0]) if cmd.positionals else "base"
    if env == "base" or "$" in env:
        return []
    made = created_in(snippet) | environments(str(page))
    if env in made:
        return []
    known = ", ".join(sorted(made)) or "none"
    msg = (
        f"conda activate {env}: no conda create on this page or a page it links to makes "
        f"{env} (made there: {known})"
    )
    return [Finding(page, line, "conda-env-unknown", msg)]


def _norm(env: str) -> str:
    return env.rstrip("/") or env


def created_in(text: str) -> set[str]:
    """The environments (names and prefixes) that ``conda create`` commands in ``text`` make."""
    out: set[str] = set()
    for raw in text.replace("\\\n", " ").splitlines():
        raw = re.sub(r"^\s*(?:\(\S+\)\s*)?\$ ", "", raw)
        if not re.search(r"\bconda[\"']?\s+create\b", raw):
            continue
        try:
            words = shlex.split(raw, comments=True)
        except ValueError:
            continue
        at = next((i for i, w in enumerate(words) if w == "create"), None)
        try:
            cmd = conda_cli.parse(words[at:]) if at is not None else None
        except conda_cli.CondaOptionError:
            continue
        for dest in ("name", "prefix"):
            out |= {_norm(v) for v in cmd.values(dest)} if cmd else set()
    return out


@cache
def environments(page: str) -> frozenset[str]:
    """Environments made on ``page`` (a path under the repository) and the pages it links to."""
    path = ROOT / page
    if path.suffix != ".md" or not path.is_file():
        return frozenset()
    made = set()
    for target in [path, *linked_pages(path)]:
        for block in P.scan_page(target).blocks:
            if block.is_shell:
                made |= created_in(block.text)
    return frozenset(made)


def linked_pages(path: Path) -> list[Path]:
    """The pages ``path`` links to with ``{doc}``."""
    out = []
    docs = ROOT / "docs"
    for m in _DOC.finditer(path.read_text(encoding="utf-8")):
        target = m["target"].strip()
        base = docs / target.lstrip("/") if target.startswith("/") else path.parent / target
        cand = base.with_suffix(".md")
        if cand.is_file() and cand not in out:
            out.append(cand)
    return out


# --------------------------------------------------------------------------- packages
def _packages(page, line: int, cmd, site: Site, snippet: str) -> list[Finding]:
    out = []
    if cmd.sub == "create":
        if not cmd.values("name") and not cmd.values("prefix"):
            msg = "conda create: one of -n/--name or -p/--prefix is required"
            return [Finding(page, line, "conda-env-name", msg)]
        if cmd.values("name") and cmd.values("prefix"):
            msg = "conda create: -n/--name and -p/--prefix are mutually exclusive"
            return [Finding(page, line, "conda-env-name", msg)]
        if cmd.values("clone"):
            return []
    specs = [_split_spec(s) for s in cmd.positionals]
    for _name, version, raw in specs:
        if not version:
            msg = (
                f"conda {cmd.sub} {raw}: unpinned; pin it ({raw}=VERSION) so that the "
                "environment does not change when the channel does"
            )
            out.append(Finding(page, line, "conda-unpinned", msg))
    if out or not specs:
        return out
    channel = _channel(cmd, snippet)
    out = stack_installs.check_conda(page, line, site, snippet, channel, specs)
    manifest = channels.find_manifest(channel)
    if manifest is None:
        what = f"{channel} (no recorded manifest under contracts/channels/)"
        unresolvable = f"unresolvable here: {what}"
        return [*out, Finding(page, line, "install-unresolvable", unresolvable, "warning")]
    target = install_target.target_for(page, line, site, snippet)
    return out + _against_manifest(page, line, cmd, specs, manifest, target)


def _split_spec(spec: str) -> tuple[str, str, str]:
    """(name, version, spec) of a conda match spec (``pytorch=2.1``, ``python>=3.10``,
    ``conda-forge::numpy 1.26``)."""
    m = _SPEC.match(spec.strip())
    if not m:
        return spec, "", spec
    version = m["rest"].strip().lstrip("=<>!~ ").strip()
    return m["name"].lower(), version, spec


def _channel(cmd, snippet: str) -> str:
    given = cmd.values("channel")
    if given:
        return given[0]
    prepended = None
    for raw in snippet.splitlines():
        m = re.search(r"\bconda\s+config\b.*--(?:prepend|add)\s+channels\s+(\S+)", raw)
        if m:
            prepended = m[1].strip("'\"")
    return prepended or DEFAULT_CHANNEL


def _against_manifest(page, line: int, cmd, specs, manifest, target) -> list[Finding]:
    """Pinned specs against a recorded manifest (:class:`clusterkit.sites.channels.Manifest`)."""
    entries = manifest.data["packages"]
    where = manifest.data.get("title", manifest.channel)
    archs = {channels.arch_of(p) for e in entries for p in e["platforms"]}
    if target.arch not in archs and "noarch" not in archs:
        msg = f"{where} records no {target.arch} packages, and {target.what} needs them"
        return [Finding(page, line, "conda-platform", msg)]
    out = []
    pythons = sorted({p for e in entries for p in e["python"]})
    for name, version, raw in specs:
        if name == "python":
            if not any(_matches(version, v) for v in pythons):
                msg = f"conda {cmd.sub} {raw}: {where} builds for Python {', '.join(pythons)}"
                out.append(Finding(page, line, "conda-version", msg))
            continue
        recorded = sorted({e["version"] for e in manifest.entries(name)})
        if not recorded:
            msg = f"conda {cmd.sub} {raw}: {name} is not in the recorded manifest of {where}"
            out.append(Finding(page, line, "conda-version", msg, "warning"))
        elif not any(_matches(version, v) for v in recorded):
            msg = f"conda {cmd.sub} {raw}: {where} has {name} {', '.join(recorded)}, not {version}"
            out.append(Finding(page, line, "conda-version", msg))
    return out


def _matches(pin: str, have: str) -> bool:
    """Whether a pinned version (``2.1``, ``2.1.2``, ``2.1.*``) and a recorded version series
    (``2.1``) can meet."""
    pin, have = pin.rstrip(".*"), have.rstrip(".*")
    return pin == have or pin.startswith(have + ".") or have.startswith(pin + ".")
