"""A test run leaves the checkout as it found it: the coverage report goes under _build/ and the
site shows it from there, and the tests session compares ``git status`` before and after."""

from __future__ import annotations

import json
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from clusterkit.grammars import myst as P
from clusterkit.pages import coverage as COV
from clusterkit.runs import clean_tree
from clusterkit.sites.profiles import ROOT

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git on PATH")


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
        cwd=repo,
        check=True,
        capture_output=True,
    )


@pytest.fixture
def repo(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / ".gitignore").write_text("_build/\n")
    (repo / "page.md").write_text("# A page\n")
    (repo / "notes.md").write_text("# Notes\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "start")
    return repo


def _run(repo: Path, record: Path, action: str) -> int:
    return clean_tree.main([action, str(record), "--root", str(repo)])


@needs_git
def test_a_run_that_changes_a_tracked_file_fails_naming_it(repo, tmp_path, capsys):
    record = tmp_path / "before.json"
    assert _run(repo, record, "save") == 0
    (repo / "page.md").write_text("# A page\n\nfigures of this machine\n")
    assert _run(repo, record, "check") == 1
    err = capsys.readouterr().err
    assert "page.md: [tree-clean] the test run left it changed" in err
    assert "notes.md" not in err


@needs_git
def test_a_new_untracked_file_fails_and_an_ignored_one_passes(repo, tmp_path, capsys):
    record = tmp_path / "before.json"
    _run(repo, record, "save")
    (repo / "_build").mkdir()
    (repo / "_build" / "report.md").write_text("generated\n")
    assert _run(repo, record, "check") == 0
    (repo / "sub").mkdir()
    (repo / "sub" / "left-behind.txt").write_text("x\n")
    assert _run(repo, record, "check") == 1
    assert "sub/left-behind.txt: [tree-clean] the test run left it untracked, new" in (
        capsys.readouterr().err
    )


@needs_git
def test_changes_made_before_the_run_are_left_alone(repo, tmp_path, capsys):
    (repo / "notes.md").write_text("# Notes\n\nwork in progress\n")
    (repo / "draft.md").write_text("# Draft\n")
    record = tmp_path / "before.json"
    _run(repo, record, "save")
    assert _run(repo, record, "check") == 0
    (repo / "notes.md").write_text("# Notes\n\nrewritten by a test\n")
    assert _run(repo, record, "check") == 1
    assert "notes.md: [tree-clean] the test run left it changed again" in capsys.readouterr().err


def test_outside_a_git_checkout_nothing_is_compared(tmp_path, capsys):
    plain = tmp_path / "unpacked"
    plain.mkdir()
    record = tmp_path / "before.json"
    _run(plain, record, "save")
    assert json.loads(record.read_text()) is None
    assert _run(plain, record, "check") == 0
    assert "not a git checkout" in capsys.readouterr().out


def test_the_coverage_report_is_written_under_build_not_over_a_tracked_page():
    assert COV.DEFAULT_PAGE.is_relative_to(ROOT / "_build")
    noxfile = (ROOT / "noxfile.py").read_text(encoding="utf-8")
    assert 'BUILD / "coverage" / "test-coverage.md"' in noxfile
    assert "clusterkit.runs.clean_tree" in noxfile
    shown = COV.SHOWN_ON.read_text(encoding="utf-8")
    assert COV.PLACEHOLDER.search(shown), f"{P.rel(COV.SHOWN_ON)} lost its {{block-coverage}}"
    assert "| how tested |" not in shown, "the tracked page must not hold a run's figures"


@pytest.fixture
def small_docs(tmp_path):
    docs = tmp_path / "docs"
    (docs / "project").mkdir(parents=True)
    (docs / "index.md").write_text(
        textwrap.dedent("""\
            # Index

            ```bash
            echo hello
            ```

            ```{toctree}
            project/test-coverage
            ```
            """)
    )
    (docs / "project" / "test-coverage.md").write_text(COV.SHOWN_ON.read_text(encoding="utf-8"))
    return docs


def _recorded(docs: Path, path: Path) -> Path:
    rows, _ = COV.match(
        COV.all_blocks(docs),
        [{"page": P.rel(docs / "index.md"), "line": 3, "how": "command-checked", "detail": "echo"}],
    )
    path.write_text(COV.render(rows), encoding="utf-8")
    return path


def test_the_site_shows_the_last_runs_report_else_the_predicted_routes(small_docs, tmp_path):
    text, origin = COV.report_text(tmp_path / "none.md", small_docs)
    assert origin.startswith("predicted (no test run has written it)")
    assert "No test run has recorded its results" in text and not text.startswith("# ")
    text, origin = COV.report_text(_recorded(small_docs, tmp_path / "run.md"), small_docs)
    assert origin.startswith("recorded")
    assert "from the results the page tests recorded" in text and "| command-checked |" in text
    (small_docs / "later.md").write_text("# Added after the run\n\n```bash\nls\n```\n")
    text, origin = COV.report_text(tmp_path / "run.md", small_docs)
    assert "lists other pages than docs/ holds now" in origin


def test_the_docs_build_shows_the_report_from_build(small_docs, tmp_path):
    sphinx = pytest.importorskip("sphinx.application", reason="builds a page with Sphinx")
    report = _recorded(small_docs, tmp_path / "run.md")
    (small_docs / "conf.py").write_text(
        "extensions = ['myst_parser', 'clusterkit.pages.sphinxext']\n"
        f"clusterkit_coverage_page = {str(report)!r}\n"
    )
    out = tmp_path / "out"
    app = sphinx.Sphinx(
        str(small_docs), str(small_docs), str(out), str(out / ".doctrees"), "text",
        status=None, warning=None, freshenv=True, warningiserror=True,
    )  # fmt: skip
    app.build(force_all=True)
    shown = " ".join(app.env.get_doctree("project/test-coverage").astext().split())
    assert "How each code block is tested" in shown
    assert "from the results the page tests recorded" in shown
    assert "command-checked" in shown and "echo" in shown
