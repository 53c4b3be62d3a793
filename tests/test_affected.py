"""``nox -s affected``: a change to each kind of file selects what it reaches, from a map read
from the sources (clusterkit.pages.affected). The expectations here are found another way
(the files' own text) wherever they can be."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from clusterkit.pages import affected as A
from clusterkit.runs.stack_ci import TESTS
from clusterkit.sites.profiles import ROOT, load_site


def _docs(p: A.Plan) -> set[str]:
    return {t for t in p.targets if t.startswith("docs/")}


def _runs(p: A.Plan) -> set[str]:
    return {t for t in p.targets if t.startswith("tests/test_examples_run.py::")}


def _including(rel: str) -> set[str]:
    """Pages whose {literalinclude} names the file (read with a regular expression)."""
    out = set()
    for page in (ROOT / "docs").rglob("*.md"):
        for m in re.finditer(r"\{literalinclude\}\s+(\S+)", page.read_text(encoding="utf-8")):
            if (page.parent / m[1]).resolve() == (ROOT / rel).resolve():
                out.add(str(page.relative_to(ROOT)))
    return out


def test_a_page_selects_its_own_blocks_and_no_other_page():
    page = "docs/howto/frontier/pytorch-ddp-one-node.md"
    p = A.plan([page])
    assert not p.everything and p.static
    assert _docs(p) == {page} and not _runs(p)
    assert A.pytest_args(p)[0] == page


def test_an_example_selects_the_pages_that_include_it_and_its_run():
    script = "examples/frontier/pytorch-ddp-1node.sbatch"
    p = A.plan([script])
    assert _docs(p) == _including(script) and len(_including(script)) >= 1
    assert _runs(p) == {A.EXAMPLES_RUN.format("frontier/pytorch-ddp-1node.sbatch")}
    assert not p.everything


def test_a_profile_selects_every_page_and_script_of_its_site():
    p = A.plan(["sites/frontier.yaml"])
    docs = _docs(p)
    howto = {str(f.relative_to(ROOT)) for f in (ROOT / "docs" / "howto" / "frontier").glob("*")}
    assert howto | {"docs/reference/sites/frontier.md"} <= docs
    title = load_site("frontier").title
    for page in (ROOT / "docs").rglob("*.md"):
        text = page.read_text(encoding="utf-8")
        if re.search(r"^site: frontier$", text, re.M) or re.search(
            rf"^[`:]{{3,}}\{{(group-)?tab\}}\s+{title}\s*$", text, re.M
        ):
            assert str(page.relative_to(ROOT)) in docs, page
    assert "docs/howto/bede/pytorch-ddp-one-node.md" not in docs
    scripts = [
        s
        for s in (ROOT / "examples" / "frontier").glob("*.sbatch")
        if any(re.search(rf"\b{re.escape(t)}\b", s.read_text()) for t in A.TRAINERS)
    ]
    converts = re.compile(r"python\s+make_(shards|tfrecords)\.py\s")
    assert _runs(p) == {
        (A.CONVERSION_RUN if converts.search(s.read_text()) else A.EXAMPLES_RUN).format(
            f"frontier/{s.name}"
        )
        for s in scripts
    }
    assert "tests/test_profiles.py" in p.targets  # a test module that loads the profile


def test_a_trainer_selects_its_tests_its_option_page_and_the_scripts_that_start_it():
    program = "examples/pytorch/train_resnet.py"
    p = A.plan([program])
    assert TESTS[program] in p.targets
    assert "docs/reference/trainers/pytorch.md" in p.targets
    starting = set()
    for script in (ROOT / "examples").glob("*/*"):
        if not script.is_file():  # __pycache__ beside a helper module
            continue
        text = script.read_text(encoding="utf-8", errors="replace")
        node = A.example_run(str(script.relative_to(ROOT)))
        if node and re.search(r"(?<![\w-])train_resnet\.py\b", text):
            starting.add(node)
    assert starting and _runs(p) == starting
    tf_only = A.example_run("examples/frontier/tensorflow-1node.sbatch")
    assert tf_only and tf_only not in p.targets
    assert "tests/test_examples_run.py" not in p.targets, "node by node, not the whole module"


@pytest.mark.parametrize(
    "rel",
    [
        "clusterkit/emulate/slurm.py",
        "noxfile.py",
        "requirements/ml.txt",
        "pyproject.toml",
        "tests/conftest.py",
        "sites/schema.yaml",
    ],
)
def test_the_code_and_the_configuration_reach_everything(rel):
    p = A.plan([rel])
    assert p.everything == [rel]
    assert "reaches everything (nox -t ci)" in A.describe(p)


def test_a_test_module_selects_itself_and_no_static_pass():
    p = A.plan(["tests/test_profiles.py"])
    assert list(p.targets) == ["tests/test_profiles.py"] and not p.static


def test_the_runs_it_names_are_the_ones_pytest_collects():
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q",
         "tests/test_examples_run.py"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    runs = r"test_(?:job_script|conversion_job)_runs"
    collected = set(re.findall(rf"^(tests/test_examples_run\.py::{runs}\[.*\])$", r.stdout, re.M))
    named = {
        node
        for s in sorted((ROOT / "examples").glob("*/*"))
        if (node := A.example_run(str(s.relative_to(ROOT))))
    }
    assert named and named == collected


@pytest.mark.skipif(shutil.which("git") is None, reason="reads the change with git")
def test_the_change_is_what_differs_from_base_committed_or_not(tmp_path):
    def git(*args):
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
            cwd=tmp_path, check=True, capture_output=True,
        )  # fmt: skip

    git("init", "-q")
    (tmp_path / "a.md").write_text("a\n")
    (tmp_path / "b.md").write_text("b\n")
    git("add", ".")
    git("commit", "-q", "-m", "base")
    (tmp_path / "a.md").write_text("a, changed and committed\n")
    git("commit", "-qam", "change")
    (tmp_path / "b.md").write_text("b, changed, not committed\n")
    (tmp_path / "c.md").write_text("new\n")
    assert A.changed_files("HEAD~1", tmp_path) == ["a.md", "b.md", "c.md"]
    assert A.changed_files("HEAD", tmp_path) == ["b.md", "c.md"]


def test_a_file_that_reaches_a_test_already_planned_is_not_said_to_reach_none():
    """A profile changed with its own pages: the pages are planned for both, and the profile
    is listed as reaching them, never as read by no test."""
    pages = [p for p in A.pages_of_site("frontier") if p.startswith("docs/howto/frontier/")]
    p = A.plan([*pages, "sites/frontier.yaml"])
    assert "sites/frontier.yaml" not in p.reaches_nothing
    assert all("sites/frontier.yaml" in p.targets[page] for page in pages)
    assert "no test reads it" not in A.describe(p)
    nothing = A.Plan(["x.md"], static=True, reaches_nothing=["x.md"])
    assert "x.md: no test reads it" in A.describe(nothing)


def test_the_plan_says_which_tests_need_the_frameworks():
    """Pages, profiles and their job scripts' pages run in the small environment; the
    scaled-down runs and the trainers' own tests need PyTorch and TensorFlow, and say why."""
    p = A.plan(["sites/frontier.yaml"])
    runs = {t for t in A.pytest_args(p) if t.startswith(A.EXAMPLES_RUN.split("::")[0])}
    assert runs and runs <= set(p.ml)
    assert all(p.ml[t] == "a scaled-down run of a job script trains" for t in runs)
    own = [t for t in A.pytest_args(p) if t.startswith("docs/howto/frontier/")]
    assert own and not set(own) & set(p.ml), "the site's pages need no framework"
    assert "needs PyTorch and TensorFlow (.nox/_ml) for" in A.describe(p)
    page = A.plan(["docs/howto/frontier/pytorch-ddp-one-node.md"])
    assert page.ml == {} and "needs no PyTorch or TensorFlow" in A.describe(page)
    trainer = A.plan(["examples/pytorch/train_resnet.py"])
    assert trainer.ml[TESTS["examples/pytorch/train_resnet.py"]] == "a trainer's own tests train"
    assert A.needs_ml("docs/howto/data.md").startswith("it runs python "), "its run block trains"
