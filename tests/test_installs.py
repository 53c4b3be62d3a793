"""Install commands resolved for the node and Python they are meant for (uv, cached)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from clusterkit.commands import install_target, installs
from clusterkit.commands import python as python_commands
from clusterkit.grammars import myst as P
from clusterkit.sites.profiles import Site, load_site

ROOT = Path(__file__).resolve().parent.parent
GH_PAGE = ROOT / "docs" / "howto" / "environment.md"
PLAIN_PYPI = ["torch", "torchvision"]  # what Bede's own recipe for these nodes installs


def _grace_hopper_install() -> tuple[int, list[str]]:
    """The page's pip install line for the Grace-Hopper nodes: (line, words after install)."""
    page = P.scan_page(GH_PAGE)
    for block in page.blocks:
        for n, text in block.body:
            if "pip install" in text and "aarch64" in "".join(t for _, t in block.body):
                words = shlex.split(text)
                return n, words[words.index("install") + 1 :]
    raise AssertionError("the Grace-Hopper environment no longer shows a pip install")


def _gh_target(python: str) -> installs.Target:
    node = load_site("bede").partitions["gh"].node_type
    return installs.Target(node.arch, python, node.gpus, f"Bede gh ({node.arch})")


needs_uv = pytest.mark.skipif(installs._uv() is None, reason="uv is not installed")


def test_the_grace_hopper_install_is_a_cuda_build_for_the_pages_python():
    line, words = _grace_hopper_install()
    assert installs.check_install(GH_PAGE, line, words, _gh_target("3.12")) == []


def test_the_same_install_under_python_3_9_is_reported():
    line, words = _grace_hopper_install()
    found = installs.check_install(GH_PAGE, line, words, _gh_target("3.9"))
    assert {(f.line, f.rule) for f in found} == {(line, "install-not-offered")}
    assert any("torch 2.8.0" in f.message and "3.9" in f.message for f in found)


@needs_uv
def test_torch_from_pypi_under_python_3_12_on_aarch64_is_a_cuda_build():
    res = installs.resolve(PLAIN_PYPI, _gh_target("3.12"))
    assert "torch" in res.packages and res.gpu_build, res.packages


@needs_uv
def test_torch_from_pypi_under_python_3_9_on_aarch64_is_a_cpu_build_and_says_so():
    (finding,) = installs.check_install("p.md", 4, PLAIN_PYPI, _gh_target("3.9"))
    assert (finding.line, finding.rule) == (4, "install-cpu-build")
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


# --------------------------------------------------------------------------- the target rule
def _page_below_gh200_script(tmp_path) -> Path:
    script = ROOT / "examples" / "bede" / "pytorch-gh200.sbatch"
    page = tmp_path / "p.md"
    page.write_text(
        f"# T\n\n```{{literalinclude}} {script}\n:language: bash\n```\n\n"
        "```bash\npip install torch\n```\n"
    )
    return page


def test_the_target_is_the_node_of_the_job_script_above_and_the_python_the_block_names(tmp_path):
    bede = load_site("bede")
    snippet = "aarch64/python3.12/bin/python3.12 -m venv v\npython -m pip install torch\n"
    target = install_target.target_for(_page_below_gh200_script(tmp_path), 8, bede, snippet)
    assert (target.arch, target.python, target.gpus) == ("aarch64", "3.12", 1)
    assert "pytorch-gh200.sbatch" in target.what


def test_without_a_python_in_the_block_the_node_types_own_python3_is_used(tmp_path):
    bede = load_site("bede")
    page = _page_below_gh200_script(tmp_path)
    target = install_target.target_for(page, 8, bede, "pip install torch\n")
    assert target.python == bede.node_types["grace-hopper"].python == "3.9"


def test_a_conda_create_python_pin_sets_the_python():
    bede = load_site("bede")
    snippet = "conda create --yes --prefix ~/e python=3.11\n"
    assert install_target.target_for(GH_PAGE, 1, bede, snippet).python == "3.11"


def test_an_architecture_named_above_the_block_picks_the_node(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# T\n\nOn a Grace-Hopper node (`aarch64`):\n\n```bash\npip install x\n```\n")
    target = install_target.target_for(page, 5, load_site("bede"), "pip install x\n")
    assert target.arch == "aarch64" and "named above" in target.what


def test_a_stack_in_the_front_matter_wins(tmp_path):
    bede = load_site("bede")
    stack = {
        "title": "t",
        "status": "current",
        "node_types": ["grace-hopper"],
        "python": "3.13",
        "frameworks": {"torch": "2.9.1"},
        "accelerator": {"kind": "cuda", "version": "12.8"},
        "install": {"pip": {"packages": ["torch==2.9.1"]}},
        "sources": [],
    }
    site = Site(bede.name, bede.path, {**bede.data, "stacks": {"gh-pip": stack}})
    page = tmp_path / "p.md"
    page.write_text("---\nstacks: [bede/gh-pip]\n---\n\n```bash\npip install x\n```\n")
    target = install_target.target_for(page, 5, site, "python3.9 -m venv v\n")
    assert (target.arch, target.python) == ("aarch64", "3.13")
    assert "stack bede/gh-pip" in target.what


# --------------------------------------------------------------------------- pip command lines
def test_an_option_pip_no_longer_has_is_refused_by_pips_own_parser():
    (f,) = installs.check_pip("p.md", 4, ["install", "--install-option=--prefix=/x", "h"], _T)
    assert (f.line, f.rule) == (4, "pip-option") and "--install-option" in f.message


def test_pip_download_is_read_by_its_own_parser_without_install_only_options():
    """pip download has no -e (the parser leaves it unset): its words are read, not crashed on,
    and an option only install has is pip's own refusal."""
    assert installs.check_pip("p.md", 4, ["download", "--no-deps", "-d", "w", "torch"], _T) == []
    (f,) = installs.check_pip("p.md", 4, ["download", "-e", "."], _T)
    assert (f.line, f.rule) == (4, "pip-option") and "-e" in f.message


def test_this_project_needs_its_python_floor():
    (f,) = installs.check_pip("p.md", 2, ["install", "-e", "."], _old_python)
    assert f.rule == "install-python" and "3.6" in f.message


def test_a_vcs_requirement_is_unresolvable_here_not_passed():
    spec = "mlperf-logging @ git+https://github.com/mlcommons/logging.git@hpc-1.0-branch"
    (f,) = installs.check_pip("p.md", 2, ["install", spec], _T)
    assert (f.rule, f.level) == ("install-unresolvable", "warning") and "VCS" in f.message


def test_python_dash_m_module_options_are_read_from_the_modules_own_parser():
    bede = load_site("bede")
    bad = ["python", "-m", "clusterkit", "check-job", "--sight", "bede", "job.sh"]
    (f,) = python_commands.check("p.md", 3, bad, bede)
    assert f.rule == "script-flag-unknown" and "--sight" in f.message
    good = ["python", "-m", "clusterkit", "check-job", "--site", "bede", "job.sh"]
    assert python_commands.check("p.md", 3, good, bede) == []
    assert python_commands.check("p.md", 3, ["python3", "-m", "venv", "--clear", "v"], bede) == []


def test_python_dash_c_is_compiled():
    (f,) = python_commands.check("p.md", 3, ["python", "-c", "import torch;print("], None)
    assert f.rule == "python-syntax"


_T = installs.Target("x86_64", "3.12", 0, "test node")
_old_python = installs.Target("ppc64le", "3.6", 0, "old node")
