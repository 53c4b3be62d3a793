#!/usr/bin/env python3
"""Rebuild the untuned corpus's job scripts from the sites' documentation repositories.

The repository keeps what was learnt from other centres' documentation -- each script's origin
(repository, commit, path, line), its digest and the expert verdict, in
``tests/corpus/untuned/manifest.yaml`` -- but not their text. This program takes the text back
from snapshots of those repositories and writes one file per manifest entry under an ignored
folder (``_build/corpus/untuned/`` by default), where ``benchmarks/check_corpus.py`` reads it:

    python benchmarks/collect_corpus.py                        # snapshots under /work/.mirror
    python benchmarks/collect_corpus.py --git CSCfi/csc-user-guide=/path/to/repo.git ...
    python benchmarks/collect_corpus.py --out /tmp/untuned
    python benchmarks/collect_corpus.py --manifest tests/corpus/published/manifest.yaml \
        --out _build/corpus/published          # the published corpus's rebuilt entries

A snapshot is a git directory (bare or not) of the repository that holds the manifest's commit:
given with ``--git OWNER/NAME=PATH``, or found as ``<mirror>/<owner>+<name>/repo`` (the layout a
fetched snapshot has; ``--mirror`` names the folder, default ``/work/.mirror``) or as a clone
``<mirror>/<owner>+<name>``. The file is read at the recorded commit (``git show
COMMIT:PATH``); a page's code block is found again with the reader ``check-job`` reads pages
with (``clusterkit.grammars.page_blocks``: the code block that starts at the recorded line, or
the table column). For pages whose renderer changes the code a reader copies (entries with
``rendered``: eth-cscs/cscs-docs, MkDocs code annotations and pymdownx snippets), the text is
rendered the same way: snippet lines replaced by the file they include, annotation markers
removed.

Every script is checked against its manifest digest (``source_digest`` for the extracted text
of a rendered entry, then ``digest`` for what is written); a script whose text differs is
named and not written, and the exit status is 1. Exit status 2: a repository or commit could
not be found.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import sys
from pathlib import Path, PurePosixPath

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from clusterkit.grammars.page_blocks import PAGE_SUFFIXES, page_blocks  # noqa: E402
from clusterkit.sites.published import DIRECTIVE, SCRIPT_SUFFIXES  # noqa: E402

DEFAULT_MANIFEST = ROOT / "tests" / "corpus" / "untuned" / "manifest.yaml"
DEFAULT_OUT = ROOT / "_build" / "corpus" / "untuned"
DEFAULT_MIRROR = Path("/work/.mirror")

# ------------------------------------------------------------------ MkDocs rendering (CSCS)
# pymdownx.snippets: a line `--8<-- "path"` is replaced by that file (base path: the repository
# root); content.code.annotate: `# (N)!` removes the whole comment, a trailing `(N)` in a
# comment is the marker alone.
SNIPPET = re.compile(r'^(?P<indent>[ \t]*)--8<--\s+"(?P<path>[^"]+)"\s*$')
BANG = re.compile(r"^(.*?)([ \t]*)#[ \t]*\(\d+\)![ \t]*$")
MARK = re.compile(r"[ \t]*\(\d+\)[ \t]*$")
ARITHMETIC = re.compile(r"\$\(\(.*\)\)")


def _in_comment(line: str) -> bool:
    return line.lstrip().startswith("#") or " #" in line


def render_mkdocs(text: str, read) -> str:
    """The code a reader copies from a MkDocs-Material page: ``read(path)`` gives a snippet."""
    out = []
    for line in text.split("\n"):
        m = SNIPPET.match(line)
        if m:
            out += read(m["path"]).rstrip("\n").split("\n")
            continue
        b = BANG.match(line)
        if b:
            out.append(b[1] + b[2])  # the renderer keeps the whitespace before the '#'
            continue
        if _in_comment(line) and MARK.search(line) and not ARITHMETIC.search(line):
            out.append(MARK.sub("", line))
            continue
        out.append(line)
    text = "\n".join(out)
    return text if text.endswith("\n") else text + "\n"


# ------------------------------------------------------------------ snapshots
class Snapshot:
    """Read files of one repository at a commit, from its git directory."""

    def __init__(self, git_dir: Path):
        self.git_dir = git_dir

    def _git(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["git", f"--git-dir={self.git_dir}", *args], capture_output=True, text=True
        )

    def has(self, commit: str) -> bool:
        return self._git("cat-file", "-e", f"{commit}^{{commit}}").returncode == 0

    def read(self, commit: str, path: str) -> str | None:
        r = subprocess.run(
            ["git", f"--git-dir={self.git_dir}", "show", f"{commit}:{path}"],
            capture_output=True,
        )
        return r.stdout.decode("utf-8", errors="replace") if r.returncode == 0 else None


def git_dir_of(path: Path) -> Path | None:
    """The git directory of a bare repository, a clone, or a fetched snapshot's folder."""
    for cand in (path, path / "repo", path / ".git", path / "repo" / ".git"):
        if (cand / "HEAD").is_file() and (cand / "objects").is_dir():
            return cand
    return None


def find_snapshots(repos: list[str], given: dict[str, Path], mirror: Path) -> dict[str, Path]:
    found = {}
    for repo in repos:
        where = given.get(repo) or mirror / repo.replace("/", "+")
        git_dir = git_dir_of(where)
        if git_dir is not None:
            found[repo] = git_dir
    return found


# ------------------------------------------------------------------ one script
def extract(text: str, entry: dict) -> str | None:
    """The script at the entry's line (and table column) of a page, or the whole script file."""
    suffix = PurePosixPath(entry["path"]).suffix.lower()
    if suffix in SCRIPT_SUFFIXES:
        return text.rstrip() + "\n" if DIRECTIVE.search(text) else None
    if suffix not in PAGE_SUFFIXES:
        return None
    for block in page_blocks(text, suffix):
        if block.line == entry["line"] and block.column == entry.get("column", 0):
            return block.text.rstrip() + "\n"
    return None


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def rebuild(entry: dict, snap: Snapshot) -> tuple[str | None, str]:
    """(the script's text, "") or (None, why it could not be rebuilt)."""
    page = snap.read(entry["commit"], entry["path"])
    if page is None:
        return None, f"{entry['path']} is not in {entry['repo']} at {entry['commit'][:7]}"
    text = extract(page, entry)
    where = f"{entry['repo']}@{entry['commit'][:7]}:{entry['path']}:{entry['line']}"
    if text is None:
        return None, f"no job script starts at {where}"
    if entry.get("rendered"):
        if digest(text) != entry.get("source_digest"):
            return None, (
                f"the text at {where} differs from the recorded one (digest {digest(text)}, "
                f"recorded source_digest {entry.get('source_digest')})"
            )
        missing: list[str] = []

        def read(path: str) -> str:
            got = snap.read(entry["commit"], path)
            if got is None:
                missing.append(path)
            return got or ""

        text = render_mkdocs(text, read)
        if missing:
            return None, f"snippet {missing[0]} of {where} is not in the snapshot"
    if digest(text) != entry["digest"]:
        return None, (
            f"the text at {where} differs from the recorded one (digest {digest(text)}, "
            f"recorded {entry['digest']})"
        )
    return text, ""


# ------------------------------------------------------------------ main
def parse_given(items: list[str]) -> dict[str, Path]:
    given = {}
    for item in items:
        repo, sep, path = item.partition("=")
        if not sep or "/" not in repo:
            raise SystemExit(f"--git {item}: expected OWNER/NAME=PATH")
        given[repo] = Path(path)
    return given


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder the scripts go to")
    ap.add_argument("--mirror", type=Path, default=DEFAULT_MIRROR, help="fetched snapshots")
    ap.add_argument(
        "--git",
        action="append",
        default=[],
        metavar="OWNER/NAME=PATH",
        help="the git directory of a repository (repeatable)",
    )
    args = ap.parse_args(argv)

    data = yaml.safe_load(args.manifest.read_text(encoding="utf-8")) or {}
    # an entry whose text the repository keeps beside its manifest needs no rebuilding
    kept = args.manifest.parent
    entries = [e for e in data.get("scripts", []) if not (kept / e["file"]).is_file()]
    repos = sorted({e["repo"] for e in entries})
    snapshots = find_snapshots(repos, parse_given(args.git), args.mirror)
    status = 0
    for repo in repos:
        if repo not in snapshots:
            print(
                f"{repo}: no snapshot (fetch github:{repo}, or give --git {repo}=PATH)",
                file=sys.stderr,
            )
            status = 2
    for repo, commit in sorted(data.get("repositories", {}).items()):
        if repo in snapshots and not Snapshot(snapshots[repo]).has(commit):
            print(f"{repo}: {snapshots[repo]} lacks commit {commit}", file=sys.stderr)
            del snapshots[repo]
            status = 2

    written = differ = 0
    for entry in entries:
        if entry["repo"] not in snapshots:
            continue
        text, why = rebuild(entry, Snapshot(snapshots[entry["repo"]]))
        if text is None:
            print(f"{entry['file']}: {why}", file=sys.stderr)
            differ += 1
            continue
        target = args.out / entry["file"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        written += 1
    print(
        f"{written} of {len(entries)} scripts written to {args.out}"
        + (f"; {differ} differ from the manifest or could not be found" if differ else ""),
        file=sys.stderr,
    )
    if differ and status == 0:
        status = 1
    return status


if __name__ == "__main__":
    raise SystemExit(main())
