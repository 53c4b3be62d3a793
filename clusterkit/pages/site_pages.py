"""The rules a site's pages keep, checked without a training run (part of the fast pass).

``python -m clusterkit.pages.site_pages``. Each finding names file, line and rule:

* ``fill-in``: no scaffold marker (``FILL-IN:key``, written by ``python -m clusterkit
  new-site``) is left in a profile, a page or an example: each stands for a fact that needs
  its source;
* ``matrix-row``: the landing page's site x framework matrix (docs/index.md) has a row for every
  profile, its first cell starting with the site's title;
* ``matrix-link``: every PyTorch and TensorFlow cell links at least one page; each page exists,
  shows a job script from examples/ that exists, and has the anchor the link names;
* ``reference-page``: docs/reference/sites/<name>.md exists and has a ``{site-facts}`` table for
  every part of the profile that has rows;
* ``trainer-page``: a site recipe that shows a job script starting a trainer links the
  trainer's option page (docs/reference/trainers/, found by its ``{argparse}`` ``:prog:``) and a
  download of the program; the option page lists the recipes that run it with a
  ``{recipes-running} PROGRAM`` block, which renders them, site by site, from the pages
  themselves (:func:`clusterkit.pages.recipes.recipes_running`), so no page keeps that list by
  hand; no how-to guide shows a trainer whole;
* ``tab-label``: tabs of a ``group-tab`` set are labelled with site titles, so the blocks in them
  are judged against the right site and a reader's choice follows through the page.

Toctrees are Sphinx's: the fast pass builds the site with ``-W``, where a page no toctree lists
is an error.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import (
    FILL_IN,
    ROOT,
    SITES_DIR,
    Site,
    all_sites,
    broken_sites,
    raw_profile,
    unloaded_note,
)

MARKER = FILL_IN
LINK = re.compile(r"\[[^\]]+\]\((?P<target>[^)\s]+)\)")
DOC_LINK = re.compile(r"\{doc\}`(?P<target>/[^`<>]+)`")
INCLUDE = re.compile(r"^```\{literalinclude\}\s+(?P<path>\S+)", re.M)
JOB_SUFFIXES = (".sbatch", ".slurm", ".lsf")
MATRIX_HEAD = "| Site | PyTorch | TensorFlow |"
SCANNED = ("sites", "examples", "docs", "contracts")
TEXT_SUFFIXES = {".yaml", ".yml", ".md", ".py", ".sh", ".sbatch", ".slurm", ".lsf", ".json"}


# --------------------------------------------------------------------------- fill-in markers
def fill_in_markers(root: Path = ROOT) -> list[Finding]:
    out = []
    for top in SCANNED:
        for path in sorted((root / top).rglob("*")):
            if not path.is_file() or path.suffix not in TEXT_SUFFIXES or "_build" in path.parts:
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
            if "FILL-IN:" not in text:
                continue
            for n, line in enumerate(text.splitlines(), 1):
                for m in MARKER.finditer(line):
                    out.append(
                        Finding(
                            path,
                            n,
                            "fill-in",
                            f"FILL-IN:{m['key']}: write the fact in place of the scaffold's "
                            "marker, from the site's documentation (its source goes under "
                            "sources: in the profile)",
                        )
                    )
    return out


def has_markers(path: Path) -> bool:
    return bool(MARKER.search(path.read_text(encoding="utf-8", errors="replace")))


# --------------------------------------------------------------------------- landing matrix
def matrix_rows(docs: Path) -> list[tuple[int, list[str]]]:
    """(line, cells) of each row of the landing page's matrix."""
    lines = (docs / "index.md").read_text(encoding="utf-8").splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == MATRIX_HEAD)
    except StopIteration:
        return []
    rows = []
    for i in range(start + 2, len(lines)):
        if not lines[i].startswith("|"):
            break
        rows.append((i + 1, [c.strip() for c in lines[i].split("|")[1:-1]]))
    return rows


def anchors(page: Path) -> set[str]:
    """The anchors MyST gives the page: explicit labels and headings up to level 3."""
    text = page.read_text(encoding="utf-8")
    out = set(re.findall(r"^\((?P<label>[\w-]+)\)=\s*$", text, re.M))
    for heading in re.findall(r"^#{1,3}\s+(.+?)\s*$", text, re.M):
        out.add(re.sub(r"[^\w\- ]", "", heading.lower()).strip().replace(" ", "-"))
    return out


def check_matrix(docs: Path, sites: list[Site]) -> list[Finding]:
    index = docs / "index.md"
    rows = matrix_rows(docs)
    if not rows:
        return [Finding(index, 0, "matrix-row", f"no site matrix (a table headed {MATRIX_HEAD})")]
    out = []
    firsts = [cells[0] if cells else "" for _, cells in rows]
    for site in sites:
        if not any(first.startswith(site.title) for first in firsts):
            out.append(
                Finding(
                    index,
                    rows[-1][0],
                    "matrix-row",
                    f"no row for {site.title} ({site.name}): add one whose first cell starts "
                    f"with {site.title!r}, linking its PyTorch and TensorFlow recipes",
                )
            )
    for line, cells in rows:
        if len(cells) != 3:
            out.append(Finding(index, line, "matrix-row", f"{len(cells)} cells, not 3"))
            continue
        for framework, cell in zip(("PyTorch", "TensorFlow"), cells[1:], strict=True):
            links = [m["target"] for m in LINK.finditer(cell)]
            if not links:
                out.append(
                    Finding(
                        index,
                        line,
                        "matrix-link",
                        f"the {framework} cell of {cells[0]!r} links no page: link a recipe "
                        "that shows a job script",
                    )
                )
            for target in links:
                why = _link_problem(docs, target)
                if why:
                    out.append(Finding(index, line, "matrix-link", f"{target}: {why}"))
    return out


def _link_problem(docs: Path, target: str) -> str:
    path, _, anchor = target.partition("#")
    page = (docs / path).resolve()
    if not page.is_file():
        return "no such page"
    text = page.read_text(encoding="utf-8")
    jobs = [s for s in re.findall(r"\{literalinclude\}\s+(\S+)", text) if s.endswith(JOB_SUFFIXES)]
    if not jobs:
        return "the page shows no job script ({literalinclude} of examples/<site>/...)"
    missing = [s for s in jobs if not (page.parent / s).resolve().is_file()]
    if missing:
        return f"the page includes {', '.join(missing)}, which does not exist"
    if anchor and anchor not in anchors(page):
        return f"the page has no anchor {anchor!r}"
    return ""


# --------------------------------------------------------------------------- reference pages
def check_reference_pages(docs: Path, sites: list[Site]) -> list[Finding]:
    from clusterkit.pages.sphinxext import SHOWS, facts_rows

    out = []
    for site in sites:
        page = docs / "reference" / "sites" / f"{site.name}.md"
        if not page.is_file():
            out.append(
                Finding(
                    page,
                    0,
                    "reference-page",
                    f"no reference page for {site.name}: write it with the {{site-facts}} "
                    "tables (python -m clusterkit new-site writes one)",
                )
            )
            continue
        head = r"^[`:]{3,}\{site-facts\}\s+" + re.escape(site.name) + r"\s*\n:show:\s*(\w+)"
        shown = set(re.findall(head, page.read_text(encoding="utf-8"), re.M))
        for show in SHOWS:
            if show not in shown and facts_rows(site, show)[1]:
                out.append(
                    Finding(
                        page,
                        0,
                        "reference-page",
                        f"the profile has {show} but the page shows no `{{site-facts}} "
                        f"{site.name}` table with `:show: {show}`",
                    )
                )
    return out


# --------------------------------------------------------------------------- trainer pages
def trainer_pages(docs: Path) -> dict[str, str]:
    """Program name -> the doc name of its option page (``{argparse}`` with ``:prog:``)."""
    out = {}
    for page in sorted((docs / "reference" / "trainers").glob("*.md")):
        m = re.search(r"^```\{argparse\}\n(?:.*\n)*?:prog:\s*(\S+)", page.read_text("utf-8"), re.M)
        if m:
            out[m[1]] = "/" + page.relative_to(docs).with_suffix("").as_posix()
    return out


def site_recipes_running(docs: Path, program: str, sites: list[Site]) -> dict[str, Path]:
    """Site recipes (docs/howto/<site>/*.md) that show a job script starting ``program``:
    their doc name -> their path."""
    names = {s.name for s in sites}
    out = {}
    for page in sorted((docs / "howto").glob("*/*.md")):
        if page.parent.name not in names:
            continue
        for m in INCLUDE.finditer(page.read_text(encoding="utf-8")):
            shown = (page.parent / m["path"]).resolve()
            if (
                shown.suffix in JOB_SUFFIXES
                and shown.is_file()
                and re.search(rf"\b{re.escape(program)}\b", shown.read_text(encoding="utf-8"))
            ):
                out["/" + page.relative_to(docs).with_suffix("").as_posix()] = page
    return out


RECIPES_BLOCK = r"^[`:]{{3,}}\{{recipes-running\}}\s+{program}\s*$"


def check_trainer_pages(docs: Path, sites: list[Site]) -> list[Finding]:
    out = []
    pages = trainer_pages(docs)
    for page in sorted((docs / "howto").rglob("*.md")):
        for m in INCLUDE.finditer(text := page.read_text(encoding="utf-8")):
            if Path(m["path"]).name in pages:
                out.append(
                    Finding(
                        page,
                        text[: m.start()].count("\n") + 1,
                        "trainer-page",
                        f"shows {Path(m['path']).name} whole: link its option page "
                        f"({{doc}}`{pages[Path(m['path']).name]}`) and a download instead",
                    )
                )
    for program, reference in pages.items():
        recipes = site_recipes_running(docs, program, sites)
        for page in recipes.values():
            text = page.read_text(encoding="utf-8")
            if f"{{doc}}`{reference}`" not in text:
                out.append(
                    Finding(
                        page,
                        0,
                        "trainer-page",
                        f"runs {program} but does not link its option page {{doc}}`{reference}`",
                    )
                )
            if not re.search(rf"\{{download\}}`[^`]*<[^>]*/{re.escape(program)}>`", text):
                out.append(
                    Finding(
                        page,
                        0,
                        "trainer-page",
                        f"runs {program} but gives no {{download}} of it",
                    )
                )
        option_page = docs / f"{reference[1:]}.md"
        block = RECIPES_BLOCK.format(program=re.escape(program))
        if not re.search(block, option_page.read_text(encoding="utf-8"), re.M):
            out.append(
                Finding(
                    option_page,
                    0,
                    "trainer-page",
                    f"does not list the recipes that run {program}: add a ```{{recipes-running}} "
                    f"{program}``` block, which renders them from the pages",
                )
            )
    return out


# --------------------------------------------------------------------------- tab labels
def check_tab_labels(docs: Path, sites: list[Site]) -> list[Finding]:
    titles = {s.title for s in sites}
    for name in broken_sites():  # a profile being written: its title as the YAML gives it
        raw = raw_profile(name)
        if isinstance(raw, dict) and isinstance(raw.get("title"), str):
            titles.add(raw["title"])
    out = []
    for page in sorted(docs.rglob("*.md")):
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            m = re.match(r"^[`:]{3,}\{group-tab\}\s+(.+?)\s*$", line)
            if m and m[1] not in titles:
                out.append(
                    Finding(
                        page,
                        n,
                        "tab-label",
                        f"tab {m[1]!r} is not a site's title ({', '.join(sorted(titles))})",
                    )
                )
    return out


def check_all(root: Path = ROOT) -> list[Finding]:
    docs = root / "docs"
    sites = list(all_sites())
    left_out = [
        Finding(SITES_DIR / f"{name}.yaml", 0, "profile-loads", unloaded_note(name), "warning")
        for name in sorted(broken_sites())
    ]
    return [
        *left_out,
        *check_matrix(docs, sites),
        *check_reference_pages(docs, sites),
        *check_trainer_pages(docs, sites),
        *check_tab_labels(docs, sites),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.parse_args(argv)
    found = fill_in_markers() + check_all()
    for f in found:
        print(f, file=sys.stderr)
    print(f"site pages: {len(found)} finding(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
