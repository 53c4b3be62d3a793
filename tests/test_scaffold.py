"""A new site from the scaffold (``python -m clusterkit new-site``): the fast pass refuses it while
its facts are fill-in markers and accepts it once they are written; the guide names every place
the scaffold writes, and no other; the fast pass catches each rule a site's pages keep."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit.pages import scaffold, site_pages
from clusterkit.sites.profiles import ROOT, all_sites

NAME, TITLE = "sandbox", "Sandbox"
# A throw-away site: one value for each marker key the scaffold writes. A key missing here fails
# the test, so a new marker in the scaffold gets its value.
FACTS = {
    "docs-repository": "example-org/sandbox-docs",
    "docs-commit": "0123456789abcdef0123456789abcdef01234567",
    "docs-url": "https://docs.example.org/sandbox/",
    "operator": "An example computing centre",
    "summary": "A throw-away site that the scaffold's test writes and removes.",
    "in-service-since": "2026-01-01",
    "lifecycle-source-title": "Sandbox, service news",
    "lifecycle-source-url": "https://docs.example.org/sandbox/news/",
    "retrieved": "2026-11-27",
    "account-pattern": "^[a-z]{3}[0-9]{3}$",
    "account-example": "abc123",
    "gpu-node-type": "gpu-node",
    "gpu-node-description": "GPU node with four GPUs",
    "arch": "x86_64",
    "cpu": "AMD EPYC 7763 (64 cores)",
    "sockets": "1",
    "cores-per-socket": "64",
    "threads-per-core": "2",
    "memory-gb": "512",
    "gpus-per-node": "4",
    "gpu-model": "A100",
    "gpu-vendor": "nvidia",
    "gpu-partition": "gpu",
    "gpu-partition-description": "the GPU nodes",
    "max-walltime": "24:00:00",
    "module-inventory-note": "the framework modules the user guide names",
    "pytorch-module": "pytorch",
    "pytorch-module-version": "2.14.1",
    "pytorch-module-provides": "PyTorch 2.14.1 with torchvision 0.29.1",
    "tensorflow-module": "tensorflow",
    "tensorflow-module-version": "2.21.0",
    "tensorflow-module-provides": "TensorFlow 2.21.0",
    "home-path": "/home/<user>",
    "home-description": "home directory",
    "home-kind": "network",
    "scratch-path": "/scratch/<project>",
    "scratch-description": "scratch for jobs",
    "scratch-kind": "parallel",
    "pytorch-stack-title": "PyTorch module",
    "pytorch-python": "3.12",
    "torch-version": "2.14.1",
    "torchvision-version": "0.29.1",
    "accelerator-kind": "cuda",
    "accelerator-version": "12.8",
    "pytorch-stack-source-title": "Sandbox, PyTorch",
    "pytorch-stack-source-url": "https://docs.example.org/sandbox/pytorch/",
    "tensorflow-stack-title": "TensorFlow module",
    "tensorflow-python": "3.12",
    "tensorflow-version": "2.21.0",
    "tensorflow-stack-source-title": "Sandbox, TensorFlow",
    "tensorflow-stack-source-url": "https://docs.example.org/sandbox/tensorflow/",
    "hardware-source-title": "Sandbox hardware",
    "hardware-source-url": "https://docs.example.org/sandbox/hardware/",
    "cores-per-rank": "16",
    "cores-per-node": "64",
    "reference-intro": "A throw-away site of the scaffold's test.",
    "pytorch-recipe-intro": "Four ranks, one for each GPU of a node.",
    "pytorch-job-explained": "One node, four tasks, one GPU and sixteen cores each.",
    "tensorflow-recipe-intro": "One process drives the four GPUs of a node.",
    "tensorflow-job-explained": "One node, one task with every core and GPU.",
    "notes-checked-date": "2026-11-27",
    "notes-sources": "the example documentation at 0123456",
}


def repository_copy(dest: Path) -> Path:
    """The checkout's files git knows (tracked, or new and not ignored): no .nox, no _build."""
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, (f.decode() for f in files)):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def run(repo: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLUSTERKIT_")}
    env["PYTHONPATH"] = str(repo)
    return subprocess.run(
        [sys.executable, *args], cwd=repo, env=env, capture_output=True, text=True, timeout=600
    )


def fill(repo: Path, writes: list[scaffold.Write]) -> None:
    for w in writes:
        path = repo / w.path.relative_to(ROOT)
        text = path.read_text(encoding="utf-8")
        unknown = {m["key"] for m in site_pages.MARKER.finditer(text)} - set(FACTS)
        assert not unknown, f"no value in FACTS for the marker(s) {sorted(unknown)}"
        text = site_pages.MARKER.sub(lambda m: FACTS[m["key"]], text)
        path.write_text(text, encoding="utf-8")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None, reason="copies the files git knows; needs git")
def test_a_scaffolded_site_is_refused_until_its_facts_are_written(tmp_path):
    repo = repository_copy(tmp_path / "repo")
    r = run(repo, "-m", "clusterkit", "new-site", NAME, "--title", TITLE)
    assert r.returncode == 0, r.stderr
    writes = scaffold.plan(NAME, TITLE, ROOT)
    for w in writes:
        assert f"{'new ' if w.new else 'edit'} {w.path.relative_to(ROOT)}" in r.stdout

    refused = run(repo, "-m", "clusterkit.pages.fast")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    marked = {w.path.relative_to(ROOT) for w in writes if site_pages.MARKER.search(w.text)}
    named = {Path(m) for m in re.findall(r"^(\S+?):\d+: \[fill-in\]", refused.stderr, re.M)}
    assert named == marked, "every file with a marker is named, at its lines"
    assert f"sites/{NAME}.yaml: [fill-in] not validated" in refused.stderr
    assert "skipped: needs every profile to load" in refused.stdout

    fill(repo, writes)
    accepted = run(repo, "-m", "clusterkit.pages.fast")
    if accepted.returncode != 0:  # errors the checkout had before the site: not the site's
        base = run(repository_copy(tmp_path / "base"), "-m", "clusterkit.pages.fast")
        ours = set(_errors(accepted)) - set(_errors(base))
        assert not ours, "\n".join(sorted(ours))
        assert not [e for e in _errors(accepted) if NAME in e]
    assert re.search(rf"^jobs +ok +{len(_job_scripts()) + 2} job script", accepted.stdout, re.M)
    # and the site's pages pass their own tests (each block judged against the new profile)
    pages = [str(w.path.relative_to(ROOT)) for w in writes if w.new and w.path.suffix == ".md"]
    tested = run(repo, "-m", "pytest", "-p", "no:cacheprovider", "-q", *pages)
    assert tested.returncode == 0, tested.stdout[-3000:]


def _errors(r: subprocess.CompletedProcess) -> list[str]:
    return [line for line in r.stderr.splitlines() if "warning:" not in line and line.strip()]


def _job_scripts() -> list[Path]:
    names = {s.name for s in all_sites()}
    return [
        p
        for p in (ROOT / "examples").glob("*/*")
        if p.parent.name in names and re.search(r"^#(SBATCH|BSUB)", p.read_text(), re.M)
    ]


def test_the_guide_names_every_place_the_scaffold_writes_and_no_other():
    guide = (ROOT / "docs" / "contributing.md").read_text(encoding="utf-8")
    section = guide[guide.index("## Add a site") :]
    section = section[: section.index("\n## ", 1)]
    table = [line.strip() for line in section.splitlines() if line.strip().startswith("| `")]
    named = {re.match(r"^\| `([^`]+)`", line)[1] for line in table}
    for path, what, kind in scaffold.PLACES:
        assert f"| `{path}` | {what}{' (new)' if kind == 'new' else ''} |" in table
    written = scaffold.places(scaffold.plan("some-site", "Some Site"), "some-site")
    assert named == written
    assert written == {path for path, _, _ in scaffold.PLACES}
    assert "python -m clusterkit new-site" in section


def test_the_scaffold_refuses_a_bad_name_or_a_site_that_exists(tmp_path, capsys):
    assert scaffold.main(["Not_A_Name"]) == 1
    assert "lowercase words joined by hyphens" in capsys.readouterr().err
    assert scaffold.main(["frontier", "--dry-run"]) == 1
    assert "sites/frontier.yaml: exists already; nothing written" in capsys.readouterr().err
    (tmp_path / "docs").mkdir()
    assert scaffold.main(["newsite"], root=tmp_path) == 1
    assert "docs/index.md: not found" in capsys.readouterr().err
    assert not (tmp_path / "sites" / "newsite.yaml").exists(), "nothing is written on a refusal"


def test_the_recipe_lists_of_the_option_pages_take_the_new_recipe():
    one = "the recipes that run\nit are {doc}`/howto/a/x`.\n"
    assert scaffold.recipe_list(one, "p", "/howto/b/y") == (
        "the recipes that run\nit are {doc}`/howto/a/x` and\n{doc}`/howto/b/y`.\n"
    )
    many = "the recipes that run it are {doc}`/a`, {doc}`/b`\nand {doc}`/c`.\n"
    assert scaffold.recipe_list(many, "p", "/d") == (
        "the recipes that run it are {doc}`/a`, {doc}`/b`,\n{doc}`/c` and\n{doc}`/d`.\n"
    )


# --------------------------------------------------------------------------- the rules
@pytest.fixture
def docs(tmp_path):
    """A copy of docs/ and examples/ to break."""
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    return tmp_path / "docs"


def _rules(docs: Path) -> list[str]:
    sites = list(all_sites())
    found = [
        *site_pages.check_matrix(docs, sites),
        *site_pages.check_reference_pages(docs, sites),
        *site_pages.check_trainer_pages(docs, sites),
        *site_pages.check_tab_labels(docs, sites),
    ]
    return [f"[{f.rule}] {f.message}" for f in found]


def test_the_pages_keep_the_rules_now(docs):
    assert _rules(docs) == []


def test_a_tensorflow_cell_that_reaches_no_job_script_is_refused(docs):
    index = docs / "index.md"
    text = index.read_text(encoding="utf-8")
    old = "[one node, in AMD's ROCm container](howto/frontier/tensorflow-one-node.md)"
    assert old in text
    index.write_text(text.replace(old, "[the environment](howto/environment.md)"))
    (found,) = _rules(docs)
    assert found.startswith("[matrix-link] howto/environment.md: the page shows no job script")


def test_a_site_without_a_row_or_a_reference_page_is_refused(docs):
    index = docs / "index.md"
    index.write_text(
        "\n".join(
            line
            for line in index.read_text(encoding="utf-8").splitlines()
            if not line.startswith("| Cirrus")
        )
    )
    (docs / "reference" / "sites" / "cirrus.md").unlink()
    found = _rules(docs)
    assert any(f.startswith("[matrix-row] no row for Cirrus (cirrus)") for f in found)
    assert any(f.startswith("[reference-page] no reference page for cirrus") for f in found)


def test_an_option_page_that_leaves_out_a_recipe_is_refused(docs):
    page = docs / "reference" / "trainers" / "tensorflow.md"
    text = page.read_text(encoding="utf-8")
    page.write_text(text.replace("{doc}`/howto/frontier/tensorflow-one-node` and\n", ""))
    (found,) = _rules(docs)
    assert found.startswith(
        "[trainer-page] does not list {doc}`/howto/frontier/tensorflow-one-node`"
    )
