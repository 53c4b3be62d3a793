"""Content checks for the documentation pages, beyond what each code block's own test covers.
The rules any site's pages keep are :mod:`clusterkit.pages.site_pages` (the fast pass runs them
too); the tests here hold the pages to them, and add the rules of particular sites.

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

from clusterkit.pages import site_pages as SP
from clusterkit.sites.profiles import all_sites, load_site

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SITES = list(all_sites())


def _matrix_rows() -> list[str]:
    return [" | ".join(["", *cells, ""]).strip() for _, cells in SP.matrix_rows(DOCS)]


def test_matrix_has_every_site_row():
    """Every site with a profile has a row (or several, one per kind of node) in the matrix."""
    assert not [f for f in SP.check_matrix(DOCS, SITES) if f.rule == "matrix-row"]
    firsts = [cells[0] for _, cells in SP.matrix_rows(DOCS)]
    for name in ("ARCHER2 GPU", "ARCHER2 CPU"):
        assert any(f.startswith(name) for f in firsts), f"no matrix row for {name}"


@pytest.mark.parametrize("row", SP.matrix_rows(DOCS), ids=lambda r: r[1][0][:20])
def test_matrix_links_reach_job_scripts(row):
    line, _ = row
    found = [f for f in SP.check_matrix(DOCS, SITES) if f.line == line]
    assert not found, "\n".join(map(str, found))


def test_tab_labels_are_site_titles():
    bad = SP.check_tab_labels(DOCS, SITES)
    assert not bad, "group-tab labels must be site titles:\n" + "\n".join(map(str, bad))


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


@pytest.mark.parametrize("site", SITES, ids=lambda s: s.name)
def test_reference_page_shows_every_table_the_profile_fills(site):
    """docs/reference/sites/<name>.md has a {site-facts} table for each part of the profile
    that has rows (nodes, partitions, stacks, ...), so that a new site's page lacks none."""
    found = SP.check_reference_pages(DOCS, [site])
    assert not found, "\n".join(map(str, found))


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
TRAINER_PAGES = SP.trainer_pages(DOCS)


def test_the_trainers_option_pages_are_found():
    assert TRAINER_PAGES == {
        "train_lm.py": "/reference/trainers/lm",
        "train_resnet.py": "/reference/trainers/pytorch",
        "train_resnet_keras.py": "/reference/trainers/tensorflow",
    }


def test_how_tos_link_the_trainers_instead_of_listing_them():
    found = [f for f in SP.check_trainer_pages(DOCS, SITES) if "whole" in f.message]
    assert not found, "\n".join(map(str, found))


@pytest.mark.parametrize("program", sorted(TRAINER_PAGES))
def test_recipes_and_the_trainers_option_page_link_each_other(program):
    """A recipe that runs a trainer links its generated option page and a download of it; the
    option page lists every recipe that runs it."""
    assert SP.site_recipes_running(DOCS, program, SITES), f"no recipe runs {program}"
    found = [f for f in SP.check_trainer_pages(DOCS, SITES) if program in f.message]
    assert not found, "\n".join(map(str, found))


def test_a_message_that_points_to_the_guide_names_a_section_it_has(tmp_path):
    """The emulator's warning for a third-party program without a contract sends the reader to
    a section of docs/contributing.md, by its heading, and the guide has it."""
    from clusterkit.emulate.sbatch import check_slurm_script

    text = (
        "#!/bin/bash\n#SBATCH --account=bdXXXYY\n#SBATCH --gres=gpu:1\n#SBATCH --time=00:10:00\n"
        "srun python their_benchmark.py --steps 10\n"
    )
    report = check_slurm_script(tmp_path / "job.sbatch", load_site("bede"), text=text)
    (warning,) = [f for f in report.findings if f.rule == "script-contract"]
    section = re.search(r'see "([^"]+)" in docs/contributing\.md', warning.message)
    assert section, warning.message
    headings = re.findall(r"^## (.+?)\s*$", (DOCS / "contributing.md").read_text(), re.M)
    assert section[1] in headings
