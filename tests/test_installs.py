"""Install commands resolved for the node and Python they are meant for (uv, cached)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from clusterkit import installs
from clusterkit.lint import pages as P
from clusterkit.profiles import load_site

ROOT = Path(__file__).resolve().parent.parent
GH_PAGE = ROOT / "docs" / "howto" / "bede" / "pytorch-ddp-one-node.md"


def _grace_hopper_install() -> tuple[int, list[str]]:
    """The page's pip install line for the Grace-Hopper nodes: (line, words after install)."""
    page = P.scan_page(GH_PAGE)
    for block in page.blocks:
        for n, text in block.body:
            if "pip install" in text:
                words = shlex.split(text)
                return n, words[words.index("install") + 1 :]
    raise AssertionError("the Grace-Hopper recipe no longer shows a pip install")


def _gh_target(python: str) -> installs.Target:
    node = load_site("bede").partitions["gh"].node_type
    return installs.Target(node.arch, python, node.gpus, f"Bede gh ({node.arch})")


needs_uv = pytest.mark.skipif(installs._uv() is None, reason="uv is not installed")


@needs_uv
def test_the_grace_hopper_install_gets_a_cuda_build_of_torch_under_python_3_12():
    line, words = _grace_hopper_install()
    target = _gh_target("3.12")
    assert installs.check_install(GH_PAGE, line, words, target) == []
    res = installs.resolve(installs.install_args(words)[0], target)
    assert "torch" in res.packages and res.gpu_build, res.packages


@needs_uv
def test_the_same_install_under_python_3_9_is_a_cpu_build_and_says_so():
    line, words = _grace_hopper_install()
    (finding,) = installs.check_install(GH_PAGE, line, words, _gh_target("3.9"))
    assert (finding.line, finding.rule) == (line, "install-cpu-build")
    assert "CPU-only" in finding.message and "3.9" in finding.message
    assert "aarch64" in finding.message


def test_an_index_ci_cannot_reach_is_unresolvable_here_not_passed():
    words = ["torch", "--index-url", "https://download.pytorch.org/whl/cu126"]
    (finding,) = installs.check_install("p.md", 3, words, _gh_target("3.12"))
    assert finding.rule == "install-unresolvable" and finding.level == "warning"
    assert "download.pytorch.org" in finding.message


def test_install_arguments_are_read_as_pip_reads_them():
    words = ["-q", "--prefix", "/x", "torch==2.9.1", "-i", "https://i/simple", "numpy"]
    assert installs.install_args(words) == (["torch==2.9.1", "numpy"], ["https://i/simple"])
