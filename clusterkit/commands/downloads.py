"""Downloads and installers a page runs: ``curl URL``, ``sha256sum -c``, ``bash INSTALLER``.

* ``curl``'s command line goes to curl itself with the URL replaced by a ``file://`` path that
  does not exist, so nothing is fetched: curl exits 2 when it refuses an option.
* The URL (``$base/...`` resolved from assignments earlier in the snippet) must be a file
  recorded in ``contracts/downloads.yaml``, or its checksum file, built for the architecture of
  the node the page runs it on (:mod:`clusterkit.commands.install_target`).
* ``bash INSTALLER OPTIONS``: a recorded installer's own options (``-b -p PREFIX``); an absolute
  prefix is judged against the profile's file systems (:mod:`clusterkit.commands.paths`).
* ``sha256sum``: coreutils' options.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

import yaml

from clusterkit.commands import install_target
from clusterkit.commands import paths as path_checks
from clusterkit.commands.registry import register
from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import ROOT, Site

RECORD = ROOT / "contracts" / "downloads.yaml"
CURL_USAGE_ERROR = 2
_ASSIGN = re.compile(r"^\s*(?:export\s+)?(\w+)=(\S+)\s*$")
# coreutils sha256sum (GNU coreutils 9): option -> takes a value
SHA256SUM = {
    "-b": False, "--binary": False, "-c": False, "--check": False, "--tag": False,
    "-t": False, "--text": False, "-z": False, "--zero": False, "--ignore-missing": False,
    "--quiet": False, "--status": False, "--strict": False, "-w": False, "--warn": False,
}  # fmt: skip


@cache
def records() -> list[dict]:
    return list(yaml.safe_load(RECORD.read_text(encoding="utf-8"))["downloads"])


def recorded_file(url: str) -> tuple[dict, str, bool] | None:
    """(record, file name, is the checksum file) of a recorded URL."""
    for rec in records():
        base = rec["base"].rstrip("/") + "/"
        if not url.startswith(base):
            continue
        name = url[len(base) :]
        suffix = rec.get("checksum_suffix", "")
        plain = name[: -len(suffix)] if suffix and name.endswith(suffix) else name
        if plain in rec["files"]:
            return rec, plain, plain != name
    return None


def installer(name: str) -> tuple[dict, str] | None:
    for rec in records():
        if Path(name).name in rec["files"] and rec.get("installer_options"):
            return rec, Path(name).name
    return None


def _expand(word: str, snippet: str) -> str:
    values = dict(m.groups() for m in map(_ASSIGN.match, snippet.splitlines()) if m)
    return re.sub(r"\$\{?(\w+)\}?", lambda m: values.get(m[1], m[0]).strip("'\""), word)


@register("curl")
def check_curl(page, line: int, words: list[str], site: Site, snippet: str = ""):
    urls = [i for i, w in enumerate(words) if re.match(r"^(\$\{?\w+\}?/|https?://|ftp://)", w)]
    out = []
    scratch = list(words)
    for i in urls:
        scratch[i] = "file:///nonexistent/clusterkit-scratch"
    status, err = _run(scratch)
    if status == CURL_USAGE_ERROR:
        lines = [x for x in err.splitlines() if x.strip()]
        return [Finding(page, line, "curl-option", lines[0] if lines else "curl: bad option")]
    if not urls:
        return [Finding(page, line, "download-url", "curl: no URL to download")]
    target = install_target.target_for(page, line, site, snippet) if site else None
    for i in urls:
        url = _expand(words[i], snippet)
        found = recorded_file(url)
        if found is None:
            msg = f"{url}: not a download recorded in contracts/downloads.yaml"
            out.append(Finding(page, line, "download-url", msg))
            continue
        rec, name, _checksum = found
        arch = rec["files"][name]
        if target is not None and arch != target.arch:
            msg = f"{name} is the {arch} build; {target.what} needs the {target.arch} one"
            out.append(Finding(page, line, "download-platform", msg))
    return out


@register("sha256sum")
def check_sha256sum(page, line: int, words: list[str], site=None, snippet: str = ""):
    for w in words[1:]:
        if w.startswith("-") and w not in SHA256SUM:
            return [
                Finding(page, line, "sha256sum-option", f"sha256sum: unrecognized option '{w}'")
            ]
    return []


def check_installer(page, line: int, words: list[str], site: Site, snippet: str = ""):
    """``bash INSTALLER OPTIONS`` for a recorded installer; None if ``words`` run another
    script."""
    script = next((w for w in words[1:] if not w.startswith("-")), None)
    known = installer(script) if script else None
    if known is None:
        return None
    rec, name = known
    options = rec["installer_options"]
    args = words[words.index(script) + 1 :]
    out, i = [], 0
    while i < len(args):
        flag = args[i]
        if flag not in options:
            out.append(Finding(page, line, "installer-option", f"{name}: illegal option {flag}"))
        elif options[flag]:
            if i + 1 >= len(args):
                msg = f"{name}: option {flag} requires an argument"
                out.append(Finding(page, line, "installer-option", msg))
            elif site is not None and args[i + 1].startswith("/"):
                found = path_checks.judge(page, line, args[i + 1], site)
                out += [found] if found else []
            i += 1
        i += 1
    return out


def _run(words: list[str]) -> tuple[int, str]:
    curl = shutil.which("curl")
    if curl is None:
        return 0, ""
    with tempfile.TemporaryDirectory(prefix="curl-scratch-") as tmp:
        env = {"PATH": os.environ.get("PATH", ""), "HOME": tmp}
        r = subprocess.run(
            [curl, *words[1:]], cwd=tmp, env=env, capture_output=True, text=True, timeout=30
        )
        return r.returncode, r.stderr
