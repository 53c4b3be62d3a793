"""Install commands on a page build the stacks the page names as the profiles record them: the
same framework versions, channel or index, and Python. A command that differs fails at its line
(rule stack-install), naming the stack and what differs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from clusterkit.commands.shell import check_shell_text
from clusterkit.sites.profiles import load_site

ROOT = Path(__file__).resolve().parent.parent
ENVIRONMENT = "docs/howto/environment.md"
OPEN_CE = "conda create --yes --name pytorch python=3.11"  # Bede's POWER9 block
GRACE_HOPPER = "--index-url https://download.pytorch.org/whl/cu128"  # Bede's aarch64 block


def block(page: str, needle: str) -> tuple[str, int]:
    """(the bash block of ``page`` holding ``needle``, the line of its first command)."""
    text = (ROOT / page).read_text(encoding="utf-8")
    for m in re.finditer(r"^```bash\n(.*?)^```$", text, re.M | re.S):
        if needle in m[1]:
            return m[1], text.count("\n", 0, m.start(1)) + 1
    raise AssertionError(f"{page}: no bash block with {needle!r}")


def stack_findings(page, body: str, first: int, site: str = "bede") -> list[tuple[int, str]]:
    _how, found, _detail = check_shell_text(body, str(page), first, load_site(site))
    return [(f.line, f.message) for f in found if f.rule == "stack-install"]


def line_of(body: str, first: int, text: str) -> int:
    return first + body[: body.index(text)].count("\n")


@pytest.mark.parametrize("needle", [OPEN_CE, GRACE_HOPPER])
def test_bedes_install_blocks_build_the_stacks_the_page_names(needle):
    body, first = block(ENVIRONMENT, needle)
    assert stack_findings(ENVIRONMENT, body, first) == []


PYTORCH_LINE = "conda create --yes --name pytorch"
TF_LINE = "conda create --yes --name tensorflow"
GH_PIP_LINE = "python -m pip install torch=="


@pytest.mark.parametrize(
    ("needle", "old", "new", "at", "says"),
    [
        # Open-CE builds for Python 3.10 too, so only the stack can tell 3.10 from 3.11
        (OPEN_CE, "python=3.11 pytorch", "python=3.10 pytorch", PYTORCH_LINE, "Python 3.10;"),
        (OPEN_CE, "torchvision=0.16.2", "torchvision=0.16.1", PYTORCH_LINE, "torchvision 0.16.1;"),
        (OPEN_CE, "tensorflow=2.14.1", "tensorflow=2.14.0", TF_LINE, "tensorflow 2.14.0;"),
        (OPEN_CE, "open-ce/current/", "open-ce/1.10.0/", TF_LINE, "channel https://ftp.osuosl"),
        (GRACE_HOPPER, "whl/cu128", "whl/cu126", GH_PIP_LINE, "index https://download.pytorch"),
        (GRACE_HOPPER, "torch==2.8.0", "torch==2.7.1", GH_PIP_LINE, "installs torch 2.7.1;"),
        # the venv's Python comes from the conda create above the pip install
        (GRACE_HOPPER, "python=3.12", "python=3.11", GH_PIP_LINE, "Python 3.11;"),
    ],
)
def test_an_install_that_differs_from_its_stack_fails_at_its_line(needle, old, new, at, says):
    body, first = block(ENVIRONMENT, needle)
    changed = body.replace(old, new, 1)
    assert changed != body
    found = stack_findings(ENVIRONMENT, changed, first)
    assert (line_of(changed, first, at), says) in {(line, says) for line, m in found if says in m}
    assert all(m.startswith("bede/") and "the stack" in m for _line, m in found), found


def recipe(tmp_path: Path, stacks: str, body: str) -> Path:
    path = tmp_path / f"{stacks.replace('/', '-')}.md"  # one file per page: pages are cached
    path.write_text(f"---\nstacks: [{stacks}]\n---\n\n# Recipe\n\n```bash\n{body}```\n")
    return path


def test_a_framework_none_of_the_pages_stacks_holds_is_named(tmp_path):
    channel = "https://ftp.osuosl.org/pub/open-ce/current/"
    body = f"conda create --yes --name t --channel {channel} pytorch=2.1.2\n"
    page = recipe(tmp_path, "bede/opence-1.11-tensorflow", body)
    ((line, msg),) = stack_findings(page, body, 8)
    assert line == 8 and "installs torch, which none of the page's conda stacks" in msg
    assert "bede/opence-1.11-tensorflow" in msg


def test_adding_packages_to_an_environment_builds_no_stack(tmp_path):
    body = "python3 -m pip install keras==2.4.3 numpy==1.19.5\n"
    assert stack_findings(recipe(tmp_path, "bede/gh200-pip-cu128-pytorch", body), body, 8) == []


def test_a_page_naming_no_stack_of_the_installer_is_not_judged_here(tmp_path):
    body = "python3.12 -m pip install torch==2.1.0\n"
    assert stack_findings(recipe(tmp_path, "bede/opence-1.11-pytorch", body), body, 8) == []


def test_an_unpinned_framework_fails_only_where_the_stack_pins_it(tmp_path):
    pinned_stack = (
        "python3.12 -m pip install torch --index-url https://download.pytorch.org/whl/cu128\n"
    )
    page = recipe(tmp_path, "bede/gh200-pip-cu128-pytorch", pinned_stack)
    assert [m for _l, m in stack_findings(page, pinned_stack, 8)] == [
        "bede/gh200-pip-cu128-pytorch: torch is not pinned; the stack has torch 2.8.0"
    ]
    # Bede's own recipe: the node's python3 (3.9), torch from the CUDA 12.4 index, unpinned
    bedes = "python3 -m venv v\nv/bin/python -m pip install torch --index-url https://download.pytorch.org/whl/cu124\n"
    page = recipe(tmp_path, "bede/gh200-pip-cu124-pytorch", bedes)
    assert stack_findings(page, bedes, 8) == []
