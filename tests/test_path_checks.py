"""Paths in page commands against the profile's file systems; the site's own tools."""

from __future__ import annotations

import pytest

from clusterkit.commands.shell import check_shell_text
from clusterkit.sites.profiles import load_site

BEDE, ARCHER2 = load_site("bede"), load_site("archer2")


def _findings(text: str, site):
    _how, found, detail = check_shell_text(text, "p.md", 10, site)
    return found, detail


@pytest.mark.parametrize(
    "site, path",
    [
        (BEDE, "/nobackup/projects/bdXXXYY/$USER/first-job"),
        (BEDE, "/nobackup/projects/<project>/${USER}/ppc64le"),
        (BEDE, "/nobackup/projects/bdabc12/jo/x"),
        (ARCHER2, "/work/t01/t01/$USER/first-tf"),
        (ARCHER2, "/work/z19/shared/mlperf-hpc/deepcam/mini"),
    ],
)
def test_paths_under_the_profiles_file_systems_pass(site, path):
    found, detail = _findings(f'mkdir -p "{path}"\ncd "{path}"\n', site)
    assert found == [] and detail == "mkdir, cd"


@pytest.mark.parametrize(
    "site, path",
    [
        (BEDE, "/nobackup/projects/t01/$USER"),  # ARCHER2's budget code on Bede
        (BEDE, "/nobackup/bdXXXYY/$USER"),  # projects/ left out
        (ARCHER2, "/work/t01/$USER/first-tf"),  # one <project> level left out
    ],
)
def test_a_path_the_profile_does_not_have_fails_with_its_line(site, path):
    found, _ = _findings(f'echo start\ncd "{path}"\n', site)
    assert [(f.line, f.rule, f.level) for f in found] == [(11, "path-unknown", "error")]


def test_other_file_systems_warn_and_relative_paths_are_not_judged():
    found, _ = _findings("cd /tmp/x\n", BEDE)
    assert [(f.rule, f.level) for f in found] == [("path-unknown", "warning")]
    found, _ = _findings("cd /nobackup/projects/bdXXXYY/$USER\n", ARCHER2)  # Bede's layout
    assert [(f.rule, f.level) for f in found] == [("path-unknown", "warning")]
    found, _ = _findings('mkdir -p ppc64le && cd "$PWD/x"\n', BEDE)
    assert [f.rule for f in found] == ["block-untested"]  # nothing judged: says so


def test_a_site_tool_needs_its_arguments_and_its_module():
    found, _ = _findings("extend-venv-activate /work/t01/t01/u/v\n", ARCHER2)
    assert [f.rule for f in found] == ["tool-module"]
    text = "module -q load pytorch/2.9.1a0\nextend-venv-activate a b\n"
    found, _ = _findings(text, ARCHER2)
    assert [(f.line, f.rule) for f in found] == [(11, "tool-args")]
    found, _ = _findings("extend-venv-activate v\n", BEDE)
    assert [f.rule for f in found] == ["block-untested"]  # Bede has no such command


def test_a_path_on_a_retired_file_system_names_the_current_one():
    found, _ = _findings("cd /gpfs/alpine/<projid>/scratch/$USER\n", load_site("frontier"))
    [f] = found
    assert f.rule == "path-retired" and f.level == "error"
    assert "2024-01-01" in f.message and "use /lustre/orion" in f.message
