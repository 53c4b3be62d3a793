"""Job scripts the sites publish in their own documentation repositories, gathered as a corpus.

``python -m clusterkit.sites.published CHECKOUT [CHECKOUT ...] [--out DIR]`` reads git
checkouts of the sites' documentation repositories (Bede's, ARCHER2's, OLCF's), finds every job
script in them -- standalone script files, and code blocks of the reStructuredText and Markdown
pages that hold ``#SBATCH`` or ``#BSUB`` directives -- and writes one file per script under
``DIR/<site>/`` (default ``tests/corpus/published``) plus the entries of ``DIR/manifest.yaml``:
repository, commit, path and first line. Verdicts already in the manifest are kept for every
script whose text has not changed; a new or changed script gets ``expected: unknown`` until
it is judged (``tests/slurm/test_published_scripts.py`` records what Slurm says).

OLCF removed its Summit pages on 2025-01-16 (commit d900d52) and later brought back only the
Summit user guide, as an archive; the corpus takes OLCF's repository at the commit before the
removal (b70bf4c), where every Summit page still stands: check that commit out to re-extract.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from clusterkit.sites.profiles import ROOT

DEFAULT_OUT = ROOT / "tests" / "corpus" / "published"
SCRIPT_SUFFIXES = {".sh", ".slurm", ".sbatch", ".lsf", ".bsub", ".job"}
PAGE_SUFFIXES = {".rst", ".md"}
DIRECTIVE = re.compile(r"^[ \t]*#(SBATCH|BSUB)\b", re.M)
# repository -> the site its Slurm scripts belong to (OLCF: see site_of)
REPO_SITES = {
    "N8-CIR-Bede/documentation": "bede",
    "ARCHER2-HPC/archer2-docs": "archer2",
    "olcf/olcf-user-docs": "summit",
    # NERSC's documentation lives on GitLab; its Perlmutter job scripts here come from the
    # training and example repositories NERSC publishes on GitHub
    "NERSC/Migrate-to-Perlmutter": "perlmutter",
    "NERSC/nersc-dl-multigpu": "perlmutter",
    "NERSC/pytorch-examples": "perlmutter",
    "NERSC/nersc-tf-tests": "perlmutter",
    "NERSC/sc25-dl-tutorial": "perlmutter",
}
# sites whose scripts' text is not kept in the repository: their entries are marked
# ``rebuilt`` and the text goes to published_manifest.REBUILT (see benchmarks/collect_corpus.py)
REBUILT_SITES = {"perlmutter"}
SUFFIX = {"slurm": ".sbatch", "lsf": ".lsf"}


@dataclass(frozen=True)
class Published:
    """One job script found in a documentation repository."""

    repo: str
    commit: str
    path: str  # inside the repository
    line: int  # of the script's first line in that file
    text: str
    column: int = 0  # 1, 2, ... for scripts laid out side by side in a table's columns

    @property
    def scheduler(self) -> str:
        return "lsf" if re.search(r"^[ \t]*#BSUB\b", self.text, re.M) else "slurm"

    @property
    def form(self) -> str:
        """``script`` for a whole job script: it starts with ``#!`` (LSF reads one without it
        when it names a project and a walltime) and leaves nothing out; ``excerpt`` for a
        piece of one (no ``#!``, or a ``...`` line standing for what is left out)."""
        lines = [ln.strip() for ln in self.text.splitlines() if ln.strip()]
        if any(ln in {"...", "# ..."} for ln in lines):
            return "excerpt"
        if lines[0].startswith("#!"):
            return "script"
        options = set(re.findall(r"^#BSUB\s+(-\w+)", self.text, re.M))
        return "script" if self.scheduler == "lsf" and {"-P", "-W"} <= options else "excerpt"

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()[:16]

    def file_name(self) -> str:
        stem = re.sub(r"\.[^./]+$", "", self.path)
        stem = re.sub(r"[^A-Za-z0-9]+", "-", stem).strip("-").lower()
        col = f"-c{self.column}" if self.column else ""
        return f"{stem}-L{self.line}{col}{SUFFIX[self.scheduler]}"


# --------------------------------------------------------------------------- code blocks
def markdown_blocks(text: str) -> Iterator[tuple[int, str]]:
    """(first content line, content) of each fenced block -- also fences indented in tabs or
    admonitions, whose indentation is taken off their content -- and of each indented code
    block (four spaces after a blank line) whose first line starts with ``#``."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^([ \t]*)(`{3,}|~{3,})(.*)$", lines[i])
        if m and not (m[2][0] == "`" and "`" in m[3]):  # ```code``` on one line: inline
            indent, fence = len(m[1]), m[2]
            close = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
            body, j = [], i + 1
            while j < len(lines) and not close.match(lines[j]):
                body.append(_unindent(lines[j], indent))
                j += 1
            yield i + 2, "\n".join(body)
            i = j + 1
        elif _starts_indented_code(lines, i):
            level = _level(lines[i])
            j = i
            while j < len(lines) and (not lines[j].strip() or _level(lines[j]) >= level):
                j += 1
            yield i + 1, textwrap.dedent("\n".join(lines[i:j]).expandtabs()).strip("\n")
            i = j
        else:
            i += 1


def _starts_indented_code(lines: list[str], i: int) -> bool:
    line = lines[i]
    if not line.strip() or _level(line) < 4 or not line.lstrip().startswith("#"):
        return False
    prev = next((p for p in reversed(lines[:i]) if p.strip()), "")
    return i > 0 and not lines[i - 1].strip() and _level(prev) + 4 <= _level(line)


def _unindent(line: str, indent: int) -> str:
    strip = len(line) - len(line.lstrip(" \t"))
    return line[min(indent, strip) :]


RST_OPENER = re.compile(r"^([ \t]*)(\.\. (code-block|code|sourcecode)::.*|.*::)[ \t]*$")


def rst_blocks(text: str) -> Iterator[tuple[int, str]]:
    """(first content line, content) of each literal block: ``.. code-block::`` (and
    ``code``, ``sourcecode``) directives and paragraphs ending in ``::``."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = RST_OPENER.match(line)
        if not m or (line.lstrip().startswith("..") and not m[3]):
            continue
        level = len(m[1].expandtabs())
        j = i + 1
        if m[3]:  # directive options, then a blank line
            while j < len(lines) and re.match(r"^[ \t]+:[\w-]+:", lines[j]):
                j += 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        start, body = j, []
        while j < len(lines) and (not lines[j].strip() or _level(lines[j]) > level):
            body.append(lines[j])
            j += 1
        if body:
            yield start + 1, textwrap.dedent("\n".join(body).expandtabs()).strip("\n")


def grid_table_columns(text: str) -> Iterator[tuple[int, str, int]]:
    """(line, script, column from 1) for each column of a reStructuredText grid table whose
    cells spell a script one ``literal`` per cell, top to bottom (OLCF's side-by-side job
    scripts)."""
    lines = [ln.expandtabs(8) for ln in text.splitlines()]
    i = 0
    while i < len(lines):
        if not re.match(r"^[ \t]*\+[-=+]+\+[ \t]*$", lines[i]):
            i += 1
            continue
        edges = [k for k, ch in enumerate(lines[i]) if ch == "+"]
        j, columns = i, {}
        while j < len(lines) and lines[j].lstrip().startswith(("+", "|")):
            for m in re.finditer(r"``(.+?)``", lines[j]):
                col = sum(1 for e in edges if e < m.start()) - 1
                columns.setdefault(col, []).append((j + 1, m[1]))
            j += 1
        for col, cells in sorted(columns.items()):
            script = "\n".join(c for _, c in cells)
            if cells[0][1].startswith("#!") and DIRECTIVE.search(script):
                yield cells[0][0], script, col + 1
        i = j


def _level(line: str) -> int:
    return len(line.expandtabs()) - len(line.expandtabs().lstrip())


def page_blocks(text: str, suffix: str) -> list[tuple[int, str, int]]:
    """(line, text, table column or 0) of every literal block of a page and, in
    reStructuredText, of every script spelled out in a grid table's column."""
    if suffix == ".md":
        return [(n, t, 0) for n, t in markdown_blocks(text)]
    return sorted([*((n, t, 0) for n, t in rst_blocks(text)), *grid_table_columns(text)])


# --------------------------------------------------------------------------- a checkout
def commit_of(checkout: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def repo_of(checkout: Path) -> str:
    """``owner/name`` from the checkout's origin URL, or its directory name."""
    url = subprocess.run(
        ["git", "-C", str(checkout), "config", "--get", "remote.origin.url"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    for name in REPO_SITES:
        if name.lower() in url.lower() or name.replace("/", "+") in url:
            return name
    return checkout.resolve().name


def tracked_files(checkout: Path) -> list[str]:
    out = subprocess.run(
        ["git", "-C", str(checkout), "ls-files"], capture_output=True, text=True, check=True
    ).stdout
    return sorted(p for p in out.splitlines() if (checkout / p).is_file())


def find_scripts(checkout: Path, repo: str | None = None) -> list[Published]:
    """Every job script of a repository checkout, in path and line order."""
    repo = repo or repo_of(checkout)
    commit = commit_of(checkout)
    found = []
    for rel in tracked_files(checkout):
        suffix = Path(rel).suffix.lower()
        if suffix not in SCRIPT_SUFFIXES | PAGE_SUFFIXES:
            continue
        text = (checkout / rel).read_text(encoding="utf-8", errors="replace")
        if suffix in SCRIPT_SUFFIXES:
            pieces = [(1, text, 0)] if DIRECTIVE.search(text) else []
        else:
            pieces = [p for p in page_blocks(text, suffix) if DIRECTIVE.search(p[1])]
        for line, body, column in pieces:
            found.append(Published(repo, commit, rel, line, body.rstrip() + "\n", column))
    return found


def site_of(script: Published) -> str | None:
    """The profile a script belongs to, or None: OLCF's Slurm scripts are for its other
    machines (Frontier, Andes, ...), which have no profile here; LSF there meant Summit."""
    if script.repo == "olcf/olcf-user-docs":
        return "summit" if script.scheduler == "lsf" else None
    if script.repo == "NERSC/Migrate-to-Perlmutter" and re.search(r"-(hsw|knl)\.", script.path):
        return None  # the Cori (Haswell, KNL) halves of its before-and-after pairs
    return REPO_SITES.get(script.repo)


def machine_of(script: Published) -> str:
    """For a left-out OLCF script: the machine its page is about, from the page's name."""
    name = Path(script.path).stem.lower()
    m = re.match(r"([a-z]+)_(user|quick_start)_guide", name)
    return m[1] if m else f"{Path(script.path).parts[0]} pages"


# --------------------------------------------------------------------------- writing
def write_corpus(scripts: list[Published], out: Path) -> tuple[list[dict], Counter]:
    """Write the kept scripts under ``out/<site>/``; return their manifest entries (no
    verdicts) and the count of left-out scripts per machine."""
    from clusterkit.sites.published_manifest import REBUILT

    entries, left = [], Counter()
    for s in scripts:
        site = site_of(s)
        if site is None:
            left[machine_of(s)] += 1
            continue
        target = (REBUILT if site in REBUILT_SITES else out) / site / s.file_name()
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(s.text, encoding="utf-8")
        entries.append(
            {
                "file": f"{site}/{target.name}",
                "site": site,
                "scheduler": s.scheduler,
                "form": s.form,
                "repo": s.repo,
                "commit": s.commit,
                "path": s.path,
                "line": s.line,
                **({"column": s.column} if s.column else {}),
                "digest": s.digest,
                **({"rebuilt": True} if site in REBUILT_SITES else {}),
            }
        )
    return entries, left


def merge(new: list[dict], old: list[dict]) -> list[dict]:
    """New entries, with the verdicts of old ones whose script text is the same."""
    by_digest = {e.get("digest"): e for e in old}
    merged = []
    for e in new:
        prev = by_digest.get(e["digest"])
        keep = {k: v for k, v in (prev or {}).items() if k not in e} if prev else {}
        merged.append({**e, **(keep or {"expected": "unknown"})})
    return merged


def main(argv: list[str] | None = None) -> int:
    from clusterkit.sites import published_manifest as M

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkouts", nargs="+", type=Path, help="git checkouts of the doc repos")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    manifest = M.load(args.out / "manifest.yaml") if (args.out / "manifest.yaml").is_file() else {}
    repos = {repo_of(c) for c in args.checkouts}
    kept = [e for e in manifest.get("scripts", []) if e["repo"] not in repos]
    left = {k: v for k, v in manifest.get("left_out", {}).items() if k not in repos}
    for checkout in args.checkouts:
        repo = repo_of(checkout)
        for e in manifest.get("scripts", []):  # stale files of this repo go; current ones return
            if e["repo"] == repo:
                (M.script_path(e) if e.get("rebuilt") else args.out / e["file"]).unlink(
                    missing_ok=True
                )
        entries, gone = write_corpus(find_scripts(checkout, repo), args.out)
        old = [e for e in manifest.get("scripts", []) if e["repo"] == repo]
        kept += merge(entries, old)
        if gone:
            left[repo] = dict(sorted(gone.items()))
        print(
            f"{repo}: {len(entries)} job scripts kept, {sum(gone.values())} left out",
            file=sys.stderr,
        )
    manifest["scripts"] = sorted(kept, key=lambda e: e["file"])
    manifest["left_out"] = left
    M.dump(manifest, args.out / "manifest.yaml")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
