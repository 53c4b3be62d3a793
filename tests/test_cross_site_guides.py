"""Every site in service has a tab in every cross-site how-to guide.

The cross-site guides (GUIDES) show one task on every site, in sphinx-tabs tab groups whose
labels are the sites' titles, so that a reader picks a site once and every group follows. A
site is in service when its profile's ``lifecycle.status`` is ``current``; ``end-of-service``
and ``retired`` sites (ARCHER2, Summit) are records and need no tab. Here:

* each guide has at least one group of site tabs;
* every group of site tabs in a guide has a tab for each site in service, unless NO_TAB_YET
  names the site with its reason (a CPU-only site, or one whose tabs come in a later change);
* a site whose GPU nodes span several CPU architectures (Bede: POWER9 ``ppc64le`` and
  Grace-Hopper ``aarch64``) has tabs that, in each guide, name every one of them, so that
  neither kind of node is left out;
* NO_TAB_YET names only sites in service, each with a reason, and none that has its tabs.

The tab groups are read with markdown-it (MyST's own parser): a ``{tabs}`` fence, then the
``{group-tab}`` fences inside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from mdit_py_plugins.colon_fence import colon_fence_plugin

from clusterkit.sites.profiles import Site, all_sites

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

# The cross-site how-to guides, each showing one task on every site.
GUIDES = [
    "howto/environment.md",
    "howto/containers.md",
    "howto/interactive.md",
    "howto/job-scripts.md",
    "howto/own-script.md",
    "howto/pytorch-ddp-one-node.md",
    "howto/troubleshooting.md",
]

# Sites in service that may lack tabs, by profile name, with the reason.
NO_TAB_YET: dict[str, str] = {
    "perlmutter": (
        "its recipes and reference page came with its profile; its tabs in the cross-site "
        "guides come in a later change"
    ),
}

_MD = MarkdownIt("commonmark").use(colon_fence_plugin)


@dataclass
class Tab:
    label: str
    text: str
    line: int  # 1-based line of the tab's opening fence in the page


def _directive(info: str) -> tuple[str, str]:
    """('tabs', '') or ('group-tab', 'Bede') from a fence's info string, else ('', '')."""
    info = info.strip()
    if not info.startswith("{") or "}" not in info:
        return "", ""
    name, _, arg = info[1:].partition("}")
    return name.strip(), arg.strip()


def tab_groups(text: str, offset: int = 0) -> list[list[Tab]]:
    """The page's groups of group-tabs, in order, each the list of its tabs."""
    groups = []
    for token in _MD.parse(text):
        if token.type != "fence" or not token.map:
            continue
        name, _ = _directive(token.info)
        start = offset + token.map[0]
        if name == "tabs":
            tabs = []
            for inner in _MD.parse(token.content):
                kind, label = _directive(inner.info) if inner.type == "fence" else ("", "")
                if kind == "group-tab" and inner.map:
                    tabs.append(Tab(label, inner.content, start + 2 + inner.map[0]))
            groups.append(tabs)
        else:  # a directive that holds tab groups of its own (an admonition, say)
            groups.extend(tab_groups(token.content, start + 1))
    return groups


def in_service() -> dict[str, Site]:
    """Title -> site, for every profile whose lifecycle status is current."""
    return {site.title: site for site in all_sites() if site.is_current}


def site_groups(rel: str) -> list[list[Tab]]:
    titles = {site.title for site in all_sites()}
    groups = tab_groups((DOCS / rel).read_text(encoding="utf-8"))
    return [g for g in groups if any(t.label in titles for t in g)]


def gpu_arches(site: Site) -> set[str]:
    """CPU architectures of the node types behind the site's current GPU partitions."""
    return {
        p.node_type.raw["arch"]
        for p in site.partitions.values()
        if p.status == "current" and p.node_type.raw.get("gpus")
    }


def test_the_guides_exist_and_there_are_sites_in_service():
    missing = [rel for rel in GUIDES if not (DOCS / rel).is_file()]
    assert not missing, f"GUIDES names pages that do not exist: {missing}"
    assert in_service(), "no profile has lifecycle status current"


@pytest.mark.parametrize("rel", GUIDES)
def test_guide_has_a_tab_for_every_site_in_service(rel):
    groups = site_groups(rel)
    assert groups, f"docs/{rel}: no group of site tabs"
    wanted = {t: s for t, s in in_service().items() if s.name not in NO_TAB_YET}
    missing = []
    for tabs in groups:
        labels = {t.label for t in tabs}
        first = min(t.line for t in tabs)
        for title, site in sorted(wanted.items()):
            if title not in labels:
                cpu = "" if gpu_arches(site) else " (its profile has no GPU nodes)"
                missing.append(f"docs/{rel}:{first}: tab group without a {title!r} tab{cpu}")
    assert not missing, (
        "every group of site tabs needs a tab for each site in service; add the tab, or name "
        "the site in NO_TAB_YET with the reason:\n" + "\n".join(missing)
    )


@pytest.mark.parametrize("rel", GUIDES)
def test_tabs_of_a_site_with_several_architectures_cover_each(rel):
    groups = site_groups(rel)
    for title, site in sorted(in_service().items()):
        arches = gpu_arches(site)
        if len(arches) < 2 or site.name in NO_TAB_YET:
            continue
        text = "\n".join(t.text for tabs in groups for t in tabs if t.label == title)
        absent = sorted(a for a in arches if a not in text)
        assert not absent, (
            f"docs/{rel}: the {title} tabs never name {absent}; {title}'s GPU nodes are "
            f"{sorted(arches)}, and each kind needs its word in the guide"
        )


def test_no_tab_yet_names_sites_in_service_that_lack_tabs():
    current = {site.name for site in in_service().values()}
    for name, reason in NO_TAB_YET.items():
        assert name in current, f"NO_TAB_YET names {name!r}, which is not a site in service"
        assert reason.strip(), f"NO_TAB_YET gives no reason for {name!r}"
        title = next(s.title for s in in_service().values() if s.name == name)
        complete = all(
            all(title in {t.label for t in tabs} for tabs in site_groups(rel)) for rel in GUIDES
        )
        assert not complete, (
            f"{title} has a tab in every group of every guide: drop it from NO_TAB_YET"
        )


def test_tab_groups_are_read_from_nested_fences():
    """The reader finds each group-tab of a tab group, with its text and line, and looks
    inside other directives for groups; ordinary code blocks are no groups."""
    page = "\n".join(
        [
            "# Page",
            "",
            "`````{tabs}",
            "````{group-tab} Bede",
            "POWER9 text, `ppc64le`",
            "",
            "```bash",
            "sbatch job.sbatch",
            "```",
            "````",
            "````{group-tab} Frontier",
            "MI250X text",
            "````",
            "`````",
            "",
            "```bash",
            "echo not a tab group",
            "```",
            "",
            "``````{note}",
            "`````{tabs}",
            "````{group-tab} Isambard-AI",
            "GH200 text",
            "````",
            "`````",
            "``````",
        ]
    )
    groups = tab_groups(page)
    assert [[t.label for t in g] for g in groups] == [["Bede", "Frontier"], ["Isambard-AI"]]
    bede = groups[0][0]
    assert "ppc64le" in bede.text and "sbatch job.sbatch" in bede.text
    assert bede.line == 4 and groups[0][1].line == 11 and groups[1][0].line == 22
