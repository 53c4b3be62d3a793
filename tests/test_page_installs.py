"""The install and image blocks of the Frontier and Isambard-AI pages, as the page tests check
them: the block as shown passes, and a wrong option, tag, installer or version in it fails at
its line with a rule."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from clusterkit.commands.shell import check_shell_text
from clusterkit.sites.profiles import load_site

ROOT = Path(__file__).resolve().parent.parent
FRONTIER, ISAMBARD = "docs/howto/frontier", "docs/howto/isambard-ai"
PAGES = {
    "frontier-conda": (f"{FRONTIER}/pytorch-ddp-one-node.md", "conda create", "frontier"),
    "frontier-image": (f"{FRONTIER}/tensorflow-one-node.md", "apptainer pull", "frontier"),
    "isambard-miniforge": (f"{ISAMBARD}/pytorch-ddp-one-node.md", "Miniforge3", "isambard-ai"),
    "isambard-image": (f"{ISAMBARD}/tensorflow-one-node.md", "apptainer build", "isambard-ai"),
}


def block(key: str) -> tuple[str, str, int]:
    """(page, the bash block holding the key's text, the line of its first command)."""
    page, needle, _site = PAGES[key]
    text = (ROOT / page).read_text(encoding="utf-8")
    for m in re.finditer(r"^```bash\n(.*?)^```$", text, re.M | re.S):
        if needle in m[1]:
            return page, m[1], text.count("\n", 0, m.start(1)) + 1
    raise AssertionError(f"{page}: no bash block with {needle!r}")


def errors(key: str, body: str) -> list[tuple[str, int, str]]:
    page, _shown, first = block(key)
    _how, found, _detail = check_shell_text(body, page, first, load_site(PAGES[key][2]))
    return [(str(f.path), f.line, f.rule) for f in found if f.level == "error"]


@pytest.mark.parametrize("key", sorted(PAGES))
def test_the_blocks_as_shown_pass(key):
    assert errors(key, block(key)[1]) == []


@pytest.mark.parametrize(
    ("key", "old", "new", "rule"),
    [
        ("frontier-conda", "torch==2.10.0", "torch==2.99.0", "install-not-offered"),
        ("frontier-conda", "conda create --yes", "conda create --yess", "conda-option"),
        ("frontier-image", "tf2.18-dev", "tf2.99-dev", "container-tag"),
        ("frontier-image", "apptainer pull", "apptainer pull --no-such-flag", "container-option"),
        ("isambard-miniforge", 'Linux-aarch64.sh"', 'Linux-x86_64.sh"', "download-platform"),
        ("isambard-miniforge", "-b -p", "-b -q -p", "installer-option"),
        ("isambard-miniforge", "torchvision==0.25.0", "torchvision==0.99.0", "install-not-offered"),
        ("isambard-image", "24.09-tf2-py3", "24.99-tf2-py3", "container-tag"),
    ],
)
def test_a_mistake_fails_at_its_line(key, old, new, rule):
    page, shown, first = block(key)
    assert old in shown
    line = first + shown[: shown.index(old)].count("\n")
    found = errors(key, shown.replace(old, new, 1))
    assert (page, line, rule) in found, found
