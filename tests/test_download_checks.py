"""Downloads and installers on pages: recorded URLs for the node's architecture, curl's and the
installer's own options."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from clusterkit.commands.shell import check_shell_text
from clusterkit.sites.profiles import load_site

PAGE = "docs/howto/environment.md"
BASE = "base=https://github.com/conda-forge/miniforge/releases/latest/download\n"


def _errors(text: str, line: int):
    _how, found, _ = check_shell_text(text, PAGE, line, load_site("bede"))
    return [(f.line - line, f.rule) for f in found if f.level == "error"]


def _gh_line() -> int:
    """The line of the Grace-Hopper block of the environment page (aarch64)."""
    text = (Path(__file__).resolve().parent.parent / PAGE).read_text()
    lines = text.splitlines()
    return next(i for i, raw in enumerate(lines, 1) if 'Miniforge3-Linux-aarch64.sh"' in raw)


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_the_installer_must_be_the_one_for_the_nodes_architecture():
    line = _gh_line()
    good = BASE + 'curl -fsSLO "$base/Miniforge3-Linux-aarch64.sh"\n'
    assert _errors(good, line) == []
    wrong = BASE + 'curl -fsSLO "$base/Miniforge3-Linux-ppc64le.sh.sha256"\n'
    assert _errors(wrong, line) == [(1, "download-platform")]
    unknown = BASE + 'curl -fsSLO "$base/Miniforge3-Linux-arm64.sh"\n'
    assert _errors(unknown, line) == [(1, "download-url")]
    assert _errors('curl --fsSLO "https://x.org/a"\n', line) == [(0, "curl-option")]


def test_a_recorded_installers_options_and_prefix_are_judged():
    line = _gh_line()
    ok = 'bash Miniforge3-Linux-aarch64.sh -b -p "/nobackup/projects/bdXXXYY/$USER/m"\n'
    assert _errors(ok, line) == []
    assert _errors("bash Miniforge3-Linux-aarch64.sh -b -x\n", line) == [(0, "installer-option")]
    assert _errors("bash Miniforge3-Linux-aarch64.sh -b -p /nobackup/m\n", line) == [
        (0, "path-unknown")
    ]
    assert _errors("bash other.sh\n", line) == [(0, "block-untested")]
    assert _errors("sha256sum --chek x.sha256\n", line) == [(0, "sha256sum-option")]
