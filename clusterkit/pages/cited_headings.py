"""Job-script comments that send the reader to a page section must name one that exists.

A comment such as ``# The conda environment made in "Get the framework"`` is how a script
tells its reader where the environment comes from. When the section is renamed or never
existed, the reader is lost. Every double-quoted title after ``in``, ``see``, ``from``,
``under`` or ``section`` in a comment of an example file must equal a heading of some page
(rule ``cited-heading``); case and surrounding space do not count.
"""

from __future__ import annotations

import re
from pathlib import Path

from clusterkit.grammars import myst as P
from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import ROOT

_CITE = re.compile(r"\b(?:in|see|from|under|section)\s+\"(?P<title>[^\"]{3,100})\"", re.I)
_SUBST = re.compile(r"\{\{[^}]*\}\}")


def _norm(title: str) -> str:
    title = re.sub(r"[`*_]", "", _SUBST.sub("", title))
    return re.sub(r"\s+", " ", title).strip().lower()


def headings(docs: Path) -> set[str]:
    return {_norm(title) for page in P.scan_pages(docs) for _, _, title in page.headings}


def check_file(path: Path, known: set[str]) -> list[Finding]:
    out = []
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    for n, raw in enumerate(text.splitlines(), 1):
        comment = raw.strip()
        if not comment.startswith("#") or comment.startswith("#!"):
            if " # " not in raw:
                continue
            comment = raw.split(" # ", 1)[1]
        for m in _CITE.finditer(comment):
            if _norm(m["title"]) not in known:
                out.append(
                    Finding(
                        path,
                        n,
                        "cited-heading",
                        f'cites the section "{m["title"]}", which no page has: name a heading '
                        "the pages have, as the reader will see it",
                    )
                )
    return out


def lint_all(root: Path = ROOT) -> list[Finding]:
    known = headings(root / "docs")
    out: list[Finding] = []
    for path in P.example_files(root / "examples"):
        out += check_file(path, known)
    return out
