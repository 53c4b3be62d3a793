"""Which how-to pages run a training program: what an option page's ``{recipes-running}``
block lists, read from the pages' own includes so that no page keeps the list by hand."""

from __future__ import annotations

import re
from pathlib import Path

INCLUDE = re.compile(r"^```\{literalinclude\}\s+(?P<path>\S+)", re.M)
JOB_SUFFIXES = (".sbatch", ".slurm", ".lsf")


def recipes_running(docs: Path, program: str) -> dict[str, list[str]]:
    """Every how-to page that shows a job script starting ``program``, by the site the script
    is for (its ``examples/<site>/`` folder): site name -> doc names, in page order. What the
    ``{recipes-running}`` block of an option page renders."""
    out: dict[str, list[str]] = {}
    for page in sorted((docs / "howto").rglob("*.md")):
        for m in INCLUDE.finditer(page.read_text(encoding="utf-8")):
            shown = (page.parent / m["path"]).resolve()
            if shown.suffix not in JOB_SUFFIXES or not shown.is_file():
                continue
            if shown.parent.parent.name != "examples":
                continue
            if not re.search(rf"\b{re.escape(program)}\b", shown.read_text(encoding="utf-8")):
                continue
            doc = "/" + page.relative_to(docs).with_suffix("").as_posix()
            listed = out.setdefault(shown.parent.name, [])
            if doc not in listed:
                listed.append(doc)
    return out
