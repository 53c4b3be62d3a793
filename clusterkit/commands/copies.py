"""Copies a page shows: ``tar`` and ``rsync``, through the real tools, between stand-in folders.

* ``tar``: GNU tar reads the command line in an empty scratch directory, every absolute path
  moved under it; a usage error (tar's "Try 'tar --help'") is a finding, a missing file is not
  (the data is the reader's). An absolute path on one of the site's file systems is judged
  against the profile (:mod:`clusterkit.commands.paths`).
* ``rsync``: run with ``--dry-run`` in a scratch directory, each remote ``[USER@]HOST:PATH``
  and absolute path replaced by a local stand-in, the sources made as empty files and the
  destination as a folder: rsync must accept the options and copy nothing. The path of a
  remote argument is judged against the profile.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from clusterkit.commands import paths as path_checks
from clusterkit.commands.registry import register
from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import Site

_REMOTE = re.compile(r"^(?:[^@/:\s]+@)?[^@/:\s]+:(?P<path>.*)$")
TAR_USAGE = "Try 'tar --help'"


def _stand_in(word: str, scratch: Path) -> str:
    """A word with its absolute path or leading variable moved under ``scratch``."""
    if word.startswith("/"):
        return str(scratch / "fs" / word.lstrip("/"))
    if word.startswith("$"):
        return str(scratch / "fs" / re.sub(r"[^\w.-]", "_", word))
    return word


def _site_paths(page, line: int, paths: list[str], site: Site | None) -> list[Finding]:
    """Errors for absolute paths on the site's file systems (others are the reader's)."""
    if site is None:
        return []
    found = [path_checks.judge(page, line, p, site) for p in paths if p.startswith("/")]
    return [f for f in found if f is not None and f.level == "error"]


@register("tar")
def check_tar(page, line: int, words: list[str], site: Site | None, snippet: str = ""):
    tar = shutil.which("tar")
    if tar is None:
        return [Finding(page, line, "tool-missing", "tar is not installed here")]
    with tempfile.TemporaryDirectory(prefix="tar-scratch-") as tmp:
        scratch = Path(tmp)
        argv = [_stand_in(w, scratch) for w in words[1:]]
        r = subprocess.run(
            [tar, *argv],
            cwd=scratch,
            capture_output=True,
            text=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
        )
    if r.returncode and TAR_USAGE in r.stderr:
        said = r.stderr.strip().splitlines()[0].replace(tar + ":", "tar:")
        return [Finding(page, line, "tar-option", said.replace(str(scratch), ""))]
    return _site_paths(page, line, [w for w in words[1:] if not w.startswith("-")], site)


@register("rsync")
def check_rsync(page, line: int, words: list[str], site: Site | None, snippet: str = ""):
    rsync = shutil.which("rsync")
    if rsync is None:
        msg = "rsync is not installed here, so its options cannot be read (apt-get install rsync)"
        return [Finding(page, line, "tool-missing", msg)]
    args = [w for w in words[1:] if not w.startswith("-")]
    remote = [m["path"] for m in map(_REMOTE.match, args) if m]
    findings = _site_paths(page, line, remote, site)
    with tempfile.TemporaryDirectory(prefix="rsync-scratch-") as tmp:
        scratch = Path(tmp)
        argv = [_local(w, scratch) for w in words[1:]]
        _make_stand_ins([a for a in argv if not a.startswith("-")], scratch)
        r = subprocess.run(
            [rsync, "--dry-run", *argv], cwd=scratch, capture_output=True, text=True, timeout=60
        )
    if r.returncode:
        said = next((x for x in r.stderr.splitlines() if x.strip()), f"exit {r.returncode}")
        findings.append(Finding(page, line, "rsync-option", said.replace(str(scratch), "")))
    return findings


def _local(word: str, scratch: Path) -> str:
    m = _REMOTE.match(word) if not word.startswith("-") else None
    if m:
        return str(scratch / "remote" / m["path"].lstrip("/"))
    return _stand_in(word, scratch)


def _make_stand_ins(paths: list[str], scratch: Path) -> None:
    """Sources as empty files (folders where they end in /), the destination as a folder."""
    if not paths:
        return
    *sources, dest = paths
    for src in sources:
        p = scratch / src
        if src.endswith("/"):
            p.mkdir(parents=True, exist_ok=True)
        else:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.touch()
    (scratch / dest).mkdir(parents=True, exist_ok=True)
