"""Content checks for the documentation pages, beyond what each code block's own test covers.

* The landing page's site x framework matrix links to pages that exist, that show a complete
  job script from examples/ (one click to the page, the script is on it), and whose anchors
  exist.
* Tab groups use the sites' titles as labels, so that a reader's choice follows through a page
  and the blocks inside are judged against the right site.
* The ARCHER2 venv set-up script is shown on the environment page verbatim (the page block is
  skipped by the page tests, because extend-venv-activate has no checker); here the two are
  compared, the script is shellchecked and its module loads are checked against the profile.
* Pages about a historical thing say so in a historical admonition with the replacement.
* Each site's reference page renders every facts table its profile has rows for.
* The recipes of the sites that have closed, and the page on moving on from them, point to
  the recipes of the sites their users moved to.
* How-to guides show job scripts, not the trainers: a recipe that runs a trainer links a
  download of it and its option page (generated from its parser), which lists the recipe back.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from clusterkit.pages.sphinxext import SHOWS, facts_rows
from clusterkit.sites.profiles import all_sites, load_site

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
LINK = re.compile(r"\[[^\]]+\]\((?P<target>[^)\s]+)\)")
JOB_SUFFIXES = (".sbatch", ".slurm", ".lsf")


def _matrix_rows() -> list[str]:
    text = (DOCS / "index.md").read_text(encoding="utf-8")
    start = text.index("| Site | PyTorch | TensorFlow |")
    rows = []
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def _anchors(page: Path) -> set[str]:
    text = page.read_text(encoding="utf-8")
    out = set(re.findall(r"^\((?P<label>[\w-]+)\)=\s*$", text, re.M))
    for heading in re.findall(r"^#{1,3}\s+(.+?)\s*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).strip().replace(" ", "-")
        out.add(slug)
    return out


def test_matrix_has_every_site_row():
    """Every site with a profile has a row (or several, one per kind of node) in the matrix."""
    firsts = [row.split("|")[1].strip() for row in _matrix_rows()]
    for site in all_sites():
        assert any(f.startswith(site.title) for f in firsts), f"no matrix row for {site.title}"
    for name in ("ARCHER2 GPU", "ARCHER2 CPU"):
        assert any(f.startswith(name) for f in firsts), f"no matrix row for {name}"


@pytest.mark.parametrize("row", _matrix_rows(), ids=lambda r: r.split("|")[1].strip()[:20])
def test_matrix_links_reach_job_scripts(row):
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert len(cells) == 3, row
    for cell in cells[1:]:
        links = [m["target"] for m in LINK.finditer(cell)]
        assert links, f"matrix cell without a link: {cell!r}"
        for target in links:
            path, _, anchor = target.partition("#")
            page = (DOCS / path).resolve()
            assert page.is_file(), f"{target}: no such page"
            text = page.read_text(encoding="utf-8")
            scripts = re.findall(r"\{literalinclude\}\s+(\S+)", text)
            jobs = [s for s in scripts if s.endswith(JOB_SUFFIXES)]
            assert jobs, f"{target}: the page shows no job script"
            for s in jobs:
                assert (page.parent / s).resolve().is_file(), f"{target}: {s} missing"
            if anchor:
                assert anchor in _anchors(page), f"{target}: no anchor {anchor!r}"


def test_tab_labels_are_site_titles():
    titles = {s.title for s in all_sites()}
    bad = []
    for page in DOCS.rglob("*.md"):
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            m = re.match(r"^[`:]{3,}\{group-tab\}\s+(.+?)\s*$", line)
            if m and m[1] not in titles:
                bad.append(f"{page.relative_to(ROOT)}:{n}: {m[1]!r}")
    assert not bad, "group-tab labels must be site titles:\n" + "\n".join(bad)


def test_setup_script_loads_modules_the_profile_knows():
    """The venv script runs on a login node (not in a job), so no scheduler emulation judges it:
    its `module load` lines are checked against ARCHER2's profile here."""
    script = ROOT / "examples" / "archer2" / "setup-deepcam-venv.sh"
    from clusterkit.emulate.modules import check_module_command

    site = load_site("archer2")
    loads = 0
    for n, line in enumerate(script.read_text(encoding="utf-8").splitlines(), 1):
        words = line.split()
        if words[:1] == ["module"]:
            errors = [
                f
                for f in check_module_command(script, n, "module", words[1:], site)
                if f.level == "error"
            ]
            assert not errors, errors
            loads += 1
    assert loads == 2


HISTORICAL_PAGES = [
    "howto/summit/distributed-training.md",
    "benchmarks/summit.md",
    "benchmarks/resnet50.md",
    "howto/containers.md",
    "howto/distributed.md",
    "howto/profiling.md",
    "howto/troubleshooting.md",
]


@pytest.mark.parametrize("rel", HISTORICAL_PAGES)
def test_historical_content_is_marked(rel):
    text = (DOCS / rel).read_text(encoding="utf-8")
    boxes = re.findall(r":::\{admonition\}[^\n]*\n:class: historical\n(.*?):::", text, re.S)
    assert boxes, f"{rel}: no historical admonition"
    for body in boxes:
        assert "Replaced by" in body, f"{rel}: a historical admonition names no replacement"
        assert re.search(r"\d{4}-\d{2}-\d{2}|\{\{ \w+_retired \}\}", body), (
            f"{rel}: a historical admonition gives no date"
        )


@pytest.mark.parametrize("site", list(all_sites()), ids=lambda s: s.name)
def test_reference_page_shows_every_table_the_profile_fills(site):
    """docs/reference/sites/<name>.md has a {site-facts} table for each part of the profile
    that has rows (nodes, partitions, stacks, ...), so that a new site's page lacks none."""
    page = DOCS / "reference" / "sites" / f"{site.name}.md"
    assert page.is_file(), f"no reference page for {site.name}"
    head = r"^[`:]{3,}\{site-facts\}\s+" + re.escape(site.name) + r"\s*\n:show:\s*(\w+)"
    shown = set(re.findall(head, page.read_text(encoding="utf-8"), re.M))
    filled = {show for show in SHOWS if facts_rows(site, show)[1]}
    assert filled <= shown, f"{page.relative_to(ROOT)} leaves out {sorted(filled - shown)}"


# Recipes of a closed site -> the site whose recipes its users now need.
MOVED_TO = {
    "howto/summit/distributed-training.md": "frontier",
    "howto/archer2/pytorch-gpu.md": "isambard-ai",
    "howto/archer2/tensorflow-gpu.md": "isambard-ai",
    "howto/archer2/pytorch-cpu.md": "cirrus",
    "howto/archer2/tensorflow-cpu.md": "cirrus",
}
DOC_LINK = re.compile(r"\{doc\}`(?P<target>/[^`<>]+)`")


def test_moved_to_sites_are_current():
    for rel, site in MOVED_TO.items():
        assert load_site(rel.split("/")[1]).status != "current", rel
        assert load_site(site).is_current, site


@pytest.mark.parametrize("site", sorted(set(MOVED_TO.values())))
def test_closed_sites_recipes_point_to_where_users_went(site):
    """Together, the pages of the closed site link to every recipe of the site users moved to."""
    linked = set()
    for rel, target in MOVED_TO.items():
        if target == site:
            text = (DOCS / rel).read_text(encoding="utf-8")
            linked |= {m["target"] for m in DOC_LINK.finditer(text)}
    recipes = {f"/howto/{site}/{p.stem}" for p in (DOCS / "howto" / site).glob("*.md")}
    assert recipes, f"no recipes under docs/howto/{site}/"
    assert recipes <= linked, f"not linked: {sorted(recipes - linked)}"


def test_moving_on_links_every_recipe_of_the_sites_users_moved_to():
    text = (DOCS / "howto" / "moving-on.md").read_text(encoding="utf-8")
    linked = {m["target"] for m in DOC_LINK.finditer(text)}
    for site in sorted(set(MOVED_TO.values())):
        recipes = {f"/howto/{site}/{p.stem}" for p in (DOCS / "howto" / site).glob("*.md")}
        assert recipes <= linked, f"moving-on.md does not link {sorted(recipes - linked)}"


# The trainers, and the option pages generated from their parsers.
TRAINER_PAGES = {
    "train_resnet.py": "/reference/trainers/pytorch",
    "train_resnet_keras.py": "/reference/trainers/tensorflow",
}
INCLUDE = re.compile(r"^```\{literalinclude\}\s+(?P<path>\S+)", re.M)


def _site_recipes_running(program: str) -> dict[str, str]:
    """Site recipes (docs/howto/<site>/*.md) that show a job script starting ``program``:
    their doc name -> their text."""
    sites = {s.name for s in all_sites()}
    out = {}
    for page in sorted((DOCS / "howto").glob("*/*.md")):
        if page.parent.name not in sites:
            continue
        text = page.read_text(encoding="utf-8")
        for m in INCLUDE.finditer(text):
            shown = (page.parent / m["path"]).resolve()
            if shown.suffix in JOB_SUFFIXES and re.search(
                rf"\b{re.escape(program)}\b", shown.read_text(encoding="utf-8")
            ):
                out[f"/{page.relative_to(DOCS).with_suffix('').as_posix()}"] = text
    return out


def test_how_tos_link_the_trainers_instead_of_listing_them():
    for page in sorted((DOCS / "howto").rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        for m in INCLUDE.finditer(text):
            assert Path(m["path"]).name not in TRAINER_PAGES, (
                f"{page.relative_to(ROOT)} lists {Path(m['path']).name} whole; link its "
                "option page and a download instead"
            )


@pytest.mark.parametrize("program", sorted(TRAINER_PAGES))
def test_recipes_and_the_trainers_option_page_link_each_other(program):
    """A recipe that runs a trainer links its generated option page and a download of it; the
    option page lists every recipe that runs it."""
    reference = TRAINER_PAGES[program]
    recipes = _site_recipes_running(program)
    assert recipes, f"no recipe runs {program}"
    for doc, text in recipes.items():
        assert f"{{doc}}`{reference}`" in text, f"{doc} runs {program}, does not link {reference}"
        assert re.search(rf"\{{download\}}`[^`]*<[^>]*/{re.escape(program)}>`", text), (
            f"{doc} runs {program} but gives no download of it"
        )
    listed = {m["target"] for m in DOC_LINK.finditer((DOCS / f"{reference[1:]}.md").read_text())}
    assert set(recipes) <= listed, f"{reference} does not list {sorted(set(recipes) - listed)}"
