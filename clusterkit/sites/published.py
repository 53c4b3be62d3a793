"""Job scripts the sites publish in their own documentation repositories, kept as a corpus.

:class:`Published` is one script found in a repository (where, and its text);
:func:`write_corpus` writes the scripts kept, one file each under ``DIR/<site>/`` (default
``tests/corpus/published``), and gives their entries of ``DIR/manifest.yaml`` (repository,
commit, path and first line); :func:`merge` keeps the verdicts already recorded for every
script whose text has not changed, and gives a new or changed one ``expected: unknown`` until
it is judged (``tests/slurm/test_published_scripts.py`` records what Slurm says). The scripts
are found with the reader every page goes through (``python -m
clusterkit.pages.published_collect SITE=CHECKOUT ...``, which also names the site each
checkout's scripts belong to).

OLCF removed its Summit pages on 2025-01-16 (commit d900d52) and later brought back only the
Summit user guide, as an archive; the corpus takes OLCF's repository at the commit before the
removal (b70bf4c), where every Summit page still stands: check that commit out to re-extract.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from clusterkit.sites.profiles import ROOT

DEFAULT_OUT = ROOT / "tests" / "corpus" / "published"
# standalone files that may be job scripts (a page's code blocks are read as the page's kind)
SCRIPT_SUFFIXES = {".sh", ".slurm", ".sbatch", ".lsf", ".bsub", ".job"}
DIRECTIVE = re.compile(r"^[ \t]*#(SBATCH|BSUB)\b", re.M)
SUFFIX = {"slurm": ".sbatch", "lsf": ".lsf"}
# sites whose scripts' text is not kept in the repository: their entries are marked
# ``rebuilt`` and the text goes to published_manifest.REBUILT (see benchmarks/collect_corpus.py)
REBUILT_SITES = {"perlmutter"}
# scripts of a checkout that belong to another machine than the site's, by path: NERSC's
# Migrate-to-Perlmutter pairs each Perlmutter script with Cori's (Haswell, KNL) one
OTHER_MACHINE_PATHS = {"perlmutter": re.compile(r"-(hsw|knl)\.")}


@dataclass(frozen=True)
class Published:
    """One job script found in a documentation repository."""

    repo: str
    commit: str
    path: str  # inside the repository
    line: int  # of the script's first line in that file
    text: str
    column: int = 0  # 1, 2, ... for scripts laid out side by side in a table's columns
    site: str | None = None  # the profile it is judged against; None: left out of the corpus

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


def machine_of(script: Published) -> str:
    """For a left-out script (one for a machine that has no profile here): the machine its
    page is about, from the page's name (OLCF's ``frontier_user_guide.rst``), else the
    page's top folder."""
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
        site = s.site
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
