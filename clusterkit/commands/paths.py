"""Paths a page's commands use (``cd DIR``, ``mkdir -p DIR``, ``source FILE``), judged against the
file systems the site's profile lists under ``paths:``.

An absolute path must lie under one of the profile's paths: ``/nobackup/projects/bdXXXYY/$USER``
is under Bede's ``/nobackup/projects/<project>/<user>``. A placeholder segment of the profile
(``<project>``, ``<user>``) accepts the site's example account and its documented placeholders,
a real account code, a shell variable (``$USER``, ``${SLURM_JOB_ACCOUNT}``) or a ``<...>``
placeholder. A path whose top directory is one of the profile's (``/nobackup``, ``/work``) but
that matches none of them is an error (a typo, another site's layout); a path elsewhere
(``/tmp``, ``/opt``) gets a warning, since the profile does not describe it. Relative paths and
paths that start with a variable (``$PWD/x``, ``~``) are where the reader is: not judged.
"""

from __future__ import annotations

import re

from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import Site

PATH_COMMANDS = {"cd", "mkdir", "source", ".", "pushd"}
_VARIABLE = re.compile(r"^\$(\{\w+\}|\w+)$")
_PLACEHOLDER = re.compile(r"^<[^<>/]+>$")
_MKDIR_VALUED = {"-m", "--mode", "--context"}


def path_args(words: list[str]) -> list[str]:
    """The path arguments of ``cd``/``mkdir``/``source`` words."""
    name, args = words[0], list(words[1:])
    if name in {"source", ".", "cd", "pushd"}:
        args = [a for a in args if not a.startswith("-")]
        return args[:1]
    out, i = [], 0
    while i < len(args):
        if args[i] in _MKDIR_VALUED:
            i += 2
            continue
        if not args[i].startswith("-"):
            out.append(args[i])
        i += 1
    return out


def check(page, line: int, words: list[str], site: Site) -> tuple[list[Finding], int]:
    """(findings, how many paths were judged) for a ``cd``/``mkdir``/``source`` command."""
    findings, judged = [], 0
    for path in path_args(words):
        path = _site_variable(path, site)
        if not path.startswith("/"):
            continue
        judged += 1
        finding = judge(page, line, path, site)
        if finding is not None:
            findings.append(finding)
    return findings, judged


_LEADING_VARIABLE = re.compile(r"^\$(?:\{(\w+)\}|(\w+))(?=/|$)")


def _site_variable(path: str, site: Site) -> str:
    """``$PROJECTDIR/x`` as the path the site's variable holds (``/projects/<project>/x``),
    for a variable the profile gives a file system (``variable:``); else ``path``."""
    m = _LEADING_VARIABLE.match(path.strip("'\""))
    if m is None:
        return path
    name = m[1] or m[2]
    for place in site.data.get("paths", {}).values():
        if place.get("variable") == name:
            return place["path"] + path.strip("'\"")[m.end() :]
    return path


def judge(page, line: int, path: str, site: Site) -> Finding | None:
    fs = site.retired_path(path)
    if fs is not None:
        msg = (
            f"{path} is on {fs['name']}, which {site.title} took out of service on "
            f"{fs['retired']}: use {fs['successor']}"
        )
        return Finding(page, line, "path-retired", msg)
    segments = _segments(path)
    templates = {key: _segments(p["path"]) for key, p in site.data.get("paths", {}).items()}
    for template in templates.values():
        if len(segments) >= len(template) and all(
            _segment_ok(want, got, site) for want, got in zip(template, segments, strict=False)
        ):
            return None
    listed = ", ".join(site.data["paths"][k]["path"] for k in templates)
    roots = {t[0] for t in templates.values() if t}
    if segments and segments[0] in roots:
        msg = f"{path} is under none of {site.title}'s file systems ({listed})"
        return Finding(page, line, "path-unknown", msg)
    msg = f"{path}: {site.title}'s profile does not list this file system ({listed})"
    return Finding(page, line, "path-unknown", msg, "warning")


def _segments(path: str) -> list[str]:
    return [s for s in path.split("/") if s]


def _segment_ok(want: str, got: str, site: Site) -> bool:
    if not _PLACEHOLDER.match(want):
        return want == got
    variable = _VARIABLE.match(got)
    if variable:  # the reader's shell fills it in; $USER names a user, not a project
        return want == "<user>" or "USER" not in variable[1]
    if _PLACEHOLDER.match(got):
        return True
    if want == "<project>":
        return site.account_ok(got)
    return re.fullmatch(r"[A-Za-z0-9_.-]+", got) is not None
