"""Gather the job scripts a site publishes in its documentation repository into the corpus.

``python -m clusterkit.pages.published_collect SITE=CHECKOUT [SITE=CHECKOUT ...] [--out DIR]``
reads git checkouts of documentation repositories and finds every job script in them --
standalone script files (``.sh``, ``.sbatch``, ... holding ``#SBATCH`` or ``#BSUB``
directives) and the code blocks of their pages, read as ``check-job`` reads a page
(:mod:`clusterkit.grammars.page_blocks`) -- and writes those of the profile ``SITE`` under
``DIR/<site>/`` (default ``tests/corpus/published``) with their entries in
``DIR/manifest.yaml`` (:mod:`clusterkit.sites.published`). A script for another scheduler than
the site's (OLCF's Slurm scripts, for its machines other than Summit) is left out and counted
by the machine its page is about.

The corpus was gathered with::

    python -m clusterkit.pages.published_collect bede=BEDE archer2=ARCHER2 summit=OLCF

from N8-CIR-Bede/documentation, ARCHER2-HPC/archer2-docs and olcf/olcf-user-docs at the
commits the manifest records.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

from clusterkit.grammars import page_blocks
from clusterkit.sites import published_manifest as M
from clusterkit.sites.published import (
    DEFAULT_OUT,
    DIRECTIVE,
    OTHER_MACHINE_PATHS,
    SCRIPT_SUFFIXES,
    Published,
    merge,
    write_corpus,
)


def commit_of(checkout: Path) -> str:
    return _git(checkout, "rev-parse", "HEAD").strip()


def repo_of(checkout: Path) -> str:
    """``owner/name`` from the checkout's origin URL (``https://github.com/owner/name.git``,
    ``git@host:owner/name``), else from a folder named ``owner+name`` (a fetched snapshot's
    layout), else the folder's name."""
    url = _git(checkout, "config", "--get", "remote.origin.url", check=False).strip()
    m = re.search(r"[/:]([\w.-]+)/([\w.-]+?)(?:\.git)?/?$", url)
    if m:
        return f"{m[1]}/{m[2]}"
    for part in reversed(checkout.resolve().parts):
        if "+" in part:
            return part.replace("+", "/", 1)
    return checkout.resolve().name


def tracked_files(checkout: Path) -> list[str]:
    out = _git(checkout, "ls-files")
    return sorted(p for p in out.splitlines() if (checkout / p).is_file())


def _git(checkout: Path, *args: str, check: bool = True) -> str:
    return subprocess.run(
        ["git", "-C", str(checkout), *args], capture_output=True, text=True, check=check
    ).stdout


def scripts_in(text: str, suffix: str) -> list[tuple[int, str, int]]:
    """(line, script, table column or 0) of each job script of a file: a standalone script, or
    the code blocks of a page with ``#SBATCH`` or ``#BSUB`` directives."""
    suffix = suffix.lower()
    if suffix in SCRIPT_SUFFIXES:
        return [(1, text, 0)] if DIRECTIVE.search(text) else []
    if suffix not in page_blocks.PAGE_SUFFIXES:
        return []
    return [(b.line, b.text, b.column) for b in page_blocks.page_blocks(text, suffix)
            if DIRECTIVE.search(b.text)]  # fmt: skip


def find_scripts(checkout: Path, site: str | None, repo: str | None = None) -> list[Published]:
    """Every job script of a repository checkout, in path and line order; those for another
    scheduler than the site's are left out (``site`` None)."""
    from clusterkit.sites.profiles import load_site

    repo = repo or repo_of(checkout)
    commit = commit_of(checkout)
    scheduler = load_site(site).scheduler if site else None
    found = []
    for rel in tracked_files(checkout):
        text = (checkout / rel).read_text(encoding="utf-8", errors="replace")
        for line, body, column in scripts_in(text, Path(rel).suffix):
            script = Published(repo, commit, rel, line, body.rstrip() + "\n", column)
            other = OTHER_MACHINE_PATHS.get(site)
            keep = site if script.scheduler == scheduler else None
            if other is not None and other.search(rel):
                keep = None
            found.append(Published(repo, commit, rel, line, script.text, column, keep))
    return found


def _pair(item: str) -> tuple[str, Path]:
    site, sep, path = item.partition("=")
    if not sep or not site or not path:
        raise argparse.ArgumentTypeError(f"{item}: expected SITE=CHECKOUT (bede=../bede-docs)")
    return site, Path(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "checkouts",
        nargs="+",
        type=_pair,
        metavar="SITE=CHECKOUT",
        help="a site's profile name and a git checkout of its documentation repository",
    )
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    manifest = M.load(args.out / "manifest.yaml") if (args.out / "manifest.yaml").is_file() else {}
    repos = {repo_of(c) for _, c in args.checkouts}
    kept = [e for e in manifest.get("scripts", []) if e["repo"] not in repos]
    left = {k: v for k, v in manifest.get("left_out", {}).items() if k not in repos}
    for site, checkout in args.checkouts:
        repo = repo_of(checkout)
        for e in manifest.get("scripts", []):  # stale files of this repo go; current ones return
            if e["repo"] == repo:
                stale = M.script_path(e) if e.get("rebuilt") else args.out / e["file"]
                stale.unlink(missing_ok=True)
        entries, gone = write_corpus(find_scripts(checkout, site, repo), args.out)
        old = [e for e in manifest.get("scripts", []) if e["repo"] == repo]
        kept += merge(entries, old)
        if gone:
            left[repo] = dict(sorted(gone.items()))
        print(
            f"{repo}: {len(entries)} job scripts kept for {site}, {sum(gone.values())} left out",
            file=sys.stderr,
        )
    manifest["scripts"] = sorted(kept, key=lambda e: e["file"])
    manifest["left_out"] = left
    M.dump(manifest, args.out / "manifest.yaml")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
