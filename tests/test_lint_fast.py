"""The fast static check: every check runs, a broken check fails the run, and no framework is
imported."""

from __future__ import annotations

import json
import subprocess
import sys

from clusterkit.pages import fast
from clusterkit.sites.profiles import ROOT


def test_all_checks_are_wired():
    assert set(fast.CHECKS) == {*fast.RUNNERS, "sphinx"}


def test_static_checks_run_without_importing_a_framework():
    code = (
        "import json, sys\n"
        "from clusterkit.pages import fast\n"
        "results = fast.run([n for n in fast.CHECKS if n != 'sphinx'], quiet=True)\n"
        "print(json.dumps({'frameworks': sorted(m for m in ('torch', 'tensorflow', 'keras')\n"
        "    if m in sys.modules), 'ran': [r.name for r in results]}))\n"
    )
    # (its time is not judged here: `nox -s check` prints each check's seconds)
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    assert data["frameworks"] == []
    assert data["ran"] == [n for n in fast.CHECKS if n != "sphinx"]


def test_a_check_that_crashes_fails_the_run(monkeypatch, capsys):
    def boom():
        raise RuntimeError("no")

    monkeypatch.setitem(fast.RUNNERS, "profiles", boom)
    assert fast.main(["--only", "profiles"]) == 1
    assert "crashed: RuntimeError: no" in capsys.readouterr().err


def test_sphinx_is_skipped_with_a_reason_where_it_is_missing(monkeypatch, capsys):
    monkeypatch.setattr(fast, "sphinx_command", lambda out: None)
    assert fast.main(["--only", "sphinx"]) == 0
    assert "skipped: Sphinx is not installed" in capsys.readouterr().out


def test_job_scripts_and_profiles_pass():
    assert fast.main(["--only", "profiles", "--only", "jobs", "-q"]) == 0


# Runs in a fresh interpreter in which the packages named in argv[1] cannot be imported.
WITHOUT = r"""
import importlib.abc, sys
REFUSED = set(sys.argv[1].split(","))
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in REFUSED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Refuse())
sys.argv = sys.argv[2:]
import runpy
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""


def _without(packages: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT, packages, *argv],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_a_command_that_needs_a_missing_package_names_it():
    r = _without("packaging", "clusterkit", "profiles")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert r.stderr.strip().splitlines()[-1] == (
        "clusterkit profiles: needs the Python package packaging, which is not installed here: "
        "install packaging"
    )


def test_a_check_that_needs_a_missing_package_names_it():
    r = _without("docutils,sphinx", "clusterkit.pages.fast", "--only", "site-pages")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert (
        "site-pages: needs the Python package docutils, which is not installed here: install "
        "docutils (or pip install -e '.[docs]')"
    ) in r.stderr
