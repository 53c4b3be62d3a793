"""A new site from the scaffold (``python -m clusterkit new-site``): the fast pass refuses it while
its facts are fill-in markers (and checks every other site meanwhile) and accepts it once they
are written; a site unlike the others (QoS first, facts no source gives) passes the fast pass,
affected's planner and the generated Slurm configuration; the guide names every place the
scaffold writes, and no other; the fast pass catches each rule a site's pages keep."""

from __future__ import annotations

import difflib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from clusterkit.pages import scaffold, site_pages
from clusterkit.pages.recipes import recipes_running
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
    "data-dir": "/scratch/abc123/imagenet-shards",
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


def git_repository_copy(dest: Path) -> Path:
    """The copy of :func:`repository_copy`, committed: a base for affected's planner."""
    repository_copy(dest)
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.org"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "base"]):
        subprocess.run([*git, *args], cwd=dest, check=True, capture_output=True)
    return dest


def run(repo: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLUSTERKIT_")}
    env["PYTHONPATH"] = str(repo)
    return subprocess.run(
        [sys.executable, *args], cwd=repo, env=env, capture_output=True, text=True, timeout=600
    )


def fill(repo: Path, writes: list[scaffold.Write], facts: dict[str, str] = FACTS) -> None:
    for w in writes:
        path = repo / w.path.relative_to(ROOT)
        text = path.read_text(encoding="utf-8")
        unknown = {m["key"] for m in site_pages.MARKER.finditer(text)} - set(facts)
        assert not unknown, f"no value in FACTS for the marker(s) {sorted(unknown)}"
        text = site_pages.MARKER.sub(lambda m: facts[m["key"]], text)
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

    checks = ("fill-in", "profiles", "jobs", "site-pages", "stacks")
    refused = run(repo, "-m", "clusterkit.pages.fast", *(f"--only={c}" for c in checks))
    assert refused.returncode == 1, refused.stdout + refused.stderr
    marked = {w.path.relative_to(ROOT) for w in writes if site_pages.MARKER.search(w.text)}
    named = {Path(m) for m in re.findall(r"^(\S+?):\d+: \[fill-in\]", refused.stderr, re.M)}
    assert named == marked, "every file with a marker is named, at its lines"
    assert f"sites/{NAME}.yaml: [fill-in] not validated" in refused.stderr
    # the other sites are checked meanwhile: every job script but the new site's is judged
    assert "skipped" not in refused.stdout
    assert re.search(rf"^jobs +ok +{len(_job_scripts())} job script", refused.stdout, re.M)
    assert refused.stdout.splitlines()[-1].endswith(f"the profile of {NAME} does not load")

    fill(repo, writes)
    accepted = run(repo, "-m", "clusterkit.pages.fast")
    if accepted.returncode != 0:  # errors the checkout had before the site: not the site's
        ours = errors_the_checkout_lacks(accepted, repo, repository_copy(tmp_path / "base"))
        assert not ours, "\n".join(sorted(ours))
        assert not [e for e in _errors(accepted) if NAME in e]
    assert re.search(rf"^jobs +ok +{len(_job_scripts()) + 2} job script", accepted.stdout, re.M)
    # and the site's pages pass their own tests (each block judged against the new profile)
    pages = [str(w.path.relative_to(ROOT)) for w in writes if w.new and w.path.suffix == ".md"]
    tested = run(repo, "-m", "pytest", "-p", "no:cacheprovider", "-q", *pages)
    assert tested.returncode == 0, tested.stdout[-3000:]
    # the option pages list the new recipes, found by their links, as they list every other
    for program, page in (("train_resnet.py", "pytorch-ddp-one-node"),
                          ("train_resnet_keras.py", "tensorflow-one-node")):  # fmt: skip
        listed = recipes_running(repo / "docs", program)
        assert listed[NAME] == [f"/howto/{NAME}/{page}"]
        assert listed.keys() - {NAME} == recipes_running(ROOT / "docs", program).keys()


def _errors(r: subprocess.CompletedProcess) -> list[str]:
    return [line for line in r.stderr.splitlines() if "warning:" not in line and line.strip()]


def errors_the_checkout_lacks(
    r: subprocess.CompletedProcess, repo: Path, base: Path, run_base=None
) -> set[str]:
    """The fast pass's errors in ``repo`` that the same pass over ``base`` (the checkout as it
    was, in another folder) does not report: a failing pass is the change's only through
    these. Paths are taken relative to each folder before they are compared."""
    if r.returncode == 0:
        return set()
    before = (run_base or (lambda: run(base, "-m", "clusterkit.pages.fast")))()

    def norm(result: subprocess.CompletedProcess, root: Path) -> set[str]:
        lines = (line.replace(f"{root}/", "") for line in _errors(result))
        return {re.sub(r"0x[0-9a-f]+", "0x...", line) for line in lines}  # objects' addresses

    return norm(r, repo) - norm(before, base)


def _job_scripts() -> list[Path]:
    names = {s.name for s in all_sites()}
    return [
        p
        for p in (ROOT / "examples").glob("*/*")
        if p.parent.name in names
        and p.is_file()
        and re.search(r"^#(SBATCH|BSUB)", p.read_text(), re.M)
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


def test_the_scaffold_edits_no_sentence():
    """It adds rows, toctree entries and sections; every line it changes in a page it edits is
    a table row, a toctree entry or a line of a new section, never a line of prose."""
    for w in scaffold.plan("some-site", "Some Site"):
        if w.new:
            continue
        before, after = w.path.read_text(encoding="utf-8").splitlines(), w.text.splitlines()
        ops = difflib.SequenceMatcher(None, before, after, autojunk=False).get_opcodes()
        assert {op for op, *_ in ops} <= {"equal", "insert"}, f"{w.path}: a line changed"
        added = [line for op, _, _, j1, j2 in ops if op == "insert" for line in after[j1:j2]]
        assert added, w.path
        if w.path.parent.name == "docs" or w.path.name == "index.md":
            # a row of the landing matrix, or a toctree entry (a document's path)
            assert all(re.fullmatch(r"\|.*\||[\w/-]+", line) for line in added), added


# --------------------------------------------------------------------------- an unlike site
# A site whose jobs choose their nodes by constraint (-C gpu), name a QoS first (a job that
# names none gets the default one), are charged to the user's default account unless they name
# another, take an option of a SPANK plugin, and whose documentation leaves two facts open. Its
# profile, as changes to the filled-in skeleton: (keys, value); what the schema gains joins
# this list, and the job scripts' lines below.
UNLIKE, UNLIKE_TITLE = "lakeside", "Lakeside"
WHY_WALL = "not in Lakeside's queue policy page or its FAQ (both read 2026-11-28)"
WHY_PYTHON = "the module page names no interpreter (read 2026-11-28)"
SOURCE = [{"title": "Lakeside, jobs", "url": "https://docs.example.org/lakeside/jobs/",
           "retrieved": "2026-11-28"}]  # fmt: skip
UNLIKE_PROFILE = [
    (("account",), {"required": False, "default": "the user's default project",
                    "option": "--account", "pattern": "^[a-z]{3}[0-9]{3}$", "example": "abc123"}),
    (("node_types", "gpu-node", "features"), ["gpu"]),
    (("qos",), {"debug": {"description": "short tests", "default": True,
                          "max_walltime": "00:30:00", "max_nodes": 2},
                "regular": {"description": "production work", "max_nodes": 64}}),
    (("partitions", "gpu", "qos"), ["debug", "regular"]),
    (("partitions", "gpu", "max_walltime"), {"unknown": WHY_WALL}),
    (("plugins",), {"gpu-pin": {
        "description": "pins each task to the GPUs nearest its cores",
        "options": [{"name": "--gpu-pin", "value": "required", "pattern": "^(closest|none)$",
                     "tools": ["sbatch", "srun"]}],
        "sources": SOURCE}}),
    (("stacks", "pytorch", "python"), {"unknown": WHY_PYTHON}),
]  # fmt: skip
# #SBATCH lines the site's job scripts carry besides the skeleton's
UNLIKE_DIRECTIVES = ["#SBATCH --qos=regular", "#SBATCH -C gpu", "#SBATCH --gpu-pin=closest"]
# sections its reference page has besides the skeleton's, for the parts of the profile it adds
UNLIKE_SECTIONS = [
    "## QoS\n\n```{{site-facts}} {name}\n:show: qos\n```\n",
    "## Plug-ins\n\n```{{site-facts}} {name}\n:show: plugins\n```\n",
]


def _unlike(repo: Path) -> list[scaffold.Write]:
    r = run(repo, "-m", "clusterkit", "new-site", UNLIKE, "--title", UNLIKE_TITLE)
    assert r.returncode == 0, r.stderr
    writes = scaffold.plan(UNLIKE, UNLIKE_TITLE, ROOT)
    fill(repo, writes)
    profile = repo / "sites" / f"{UNLIKE}.yaml"
    data = yaml.safe_load(profile.read_text(encoding="utf-8"))
    for keys, value in UNLIKE_PROFILE:
        node = data
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value
    profile.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    for script in (repo / "examples" / UNLIKE).glob("*.sbatch"):
        lines = script.read_text(encoding="utf-8").splitlines()
        at = max(i for i, line in enumerate(lines) if line.startswith("#SBATCH")) + 1
        script.write_text("\n".join([*lines[:at], *UNLIKE_DIRECTIVES, *lines[at:]]) + "\n")
    reference = repo / "docs" / "reference" / "sites" / f"{UNLIKE}.md"
    sections = "\n".join(s.format(name=UNLIKE) for s in UNLIKE_SECTIONS)
    reference.write_text(reference.read_text(encoding="utf-8") + "\n" + sections)
    return writes


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None, reason="copies the files git knows; needs git")
def test_a_site_unlike_the_others_passes_the_fast_pass_the_planner_and_slurm(tmp_path):
    repo = git_repository_copy(tmp_path / "repo")
    writes = _unlike(repo)

    fast = run(repo, "-m", "clusterkit.pages.fast")
    ours = errors_the_checkout_lacks(fast, repo, repository_copy(tmp_path / "base"))
    assert not ours, "\n".join(sorted(ours))
    assert not [e for e in _errors(fast) if UNLIKE in e], fast.stderr[-5000:]
    assert "skipped" not in fast.stdout.replace("skipped: shellcheck", "")
    # the job asks for an hour against a limit no source gives: not checked, and said so
    wall = f"not checked: {UNLIKE_TITLE} partition gpu's max_walltime is unknown ({WHY_WALL})"
    for script in ("pytorch-ddp-1node.sbatch", "tensorflow-1node.sbatch"):
        r = run(
            repo, "-m", "clusterkit", "check-job", "--site", UNLIKE, f"examples/{UNLIKE}/{script}"
        )
        assert r.returncode == 0 and f"warning: [fact-unknown] {wall}" in r.stderr, r.stderr
        # without its QoS the job gets the default one, whose 30 minutes are too few
        text = (repo / "examples" / UNLIKE / script).read_text()
        (tmp_path / script).write_text(text.replace("#SBATCH --qos=regular\n", ""))
        r = run(repo, "-m", "clusterkit", "check-job", "--site", UNLIKE, str(tmp_path / script))
        assert r.returncode == 1 and "[qos-time-limit]" in r.stderr, r.stderr
        # the plugin's option is judged against its pattern, as the profile declares it
        (tmp_path / script).write_text(text.replace("--gpu-pin=closest", "--gpu-pin=nearest"))
        r = run(repo, "-m", "clusterkit", "check-job", "--site", UNLIKE, str(tmp_path / script))
        assert r.returncode == 1 and "--gpu-pin" in r.stderr, r.stderr

    plan = run(repo, "-m", "clusterkit.pages.affected", "HEAD", "--json")
    assert plan.returncode == 0, plan.stderr
    got = json.loads(plan.stdout.splitlines()[-1])
    assert got["static"] and not got["everything"]
    new_pages = {str(w.path.relative_to(ROOT)) for w in writes if w.path.suffix == ".md" and w.new}
    assert new_pages <= set(got["pytest"])
    runs = {f"tests/test_examples_run.py::test_job_script_runs[{UNLIKE}/{s}]"
            for s in ("pytorch-ddp-1node.sbatch", "tensorflow-1node.sbatch")}  # fmt: skip
    assert runs <= set(got["pytest"])
    assert set(got["ml"]) == runs, "the new site's pages need no framework"
    assert f"sites/{UNLIKE}.yaml" not in got["reaches_nothing"]
    collected = run(repo, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", *runs)
    assert collected.returncode == 0, collected.stdout[-2000:]

    out = tmp_path / "slurm"
    conf = run(repo, "-m", "clusterkit.runs.slurmconf", UNLIKE, "--out", str(out),
               "--state", str(tmp_path / "state"), "--no-phantoms")  # fmt: skip
    assert conf.returncode == 0, conf.stderr
    text = (out / "slurm.conf").read_text()
    (part,) = re.findall(r"^PartitionName=gpu .*$", text, re.M)
    assert "MaxTime=UNLIMITED" in part and f"# gpu's max_walltime is unknown ({WHY_WALL})" in text
    assert re.search(r"^NodeName=\S+ .*Sockets=1 CoresPerSocket=64 ThreadsPerCore=2 "
                     r"RealMemory=524288 Gres=gpu:4 Features=gpu", text, re.M), text  # fmt: skip
    lua = (out / "job_submit.lua").read_text()
    assert re.search(r'\["debug"\] = \{.*max_minutes = 30', lua), lua


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


def test_an_option_page_that_does_not_list_the_recipes_is_refused(docs):
    page = docs / "reference" / "trainers" / "tensorflow.md"
    text = page.read_text(encoding="utf-8")
    page.write_text(text.replace("```{recipes-running} train_resnet_keras.py\n```\n", ""))
    (found,) = _rules(docs)
    assert found.startswith(
        "[trainer-page] does not list the recipes that run train_resnet_keras.py: add a "
        "```{recipes-running} train_resnet_keras.py``` block"
    )


def test_the_option_pages_list_every_recipe_that_runs_the_trainer(docs):
    """By its job script's site, from the pages' own includes: a recipe of each site whose
    scripts start the trainer, the data page under each site it has a script for."""
    listed = recipes_running(docs, "train_resnet.py")
    assert "/howto/frontier/pytorch-ddp-one-node" in listed["frontier"]
    includes = re.finditer(
        r"\{literalinclude\}\s+\S*examples/([\w-]+)/(\S+\.(?:sbatch|slurm|lsf))\s*$",
        (docs / "howto" / "data.md").read_text(),
        re.M,
    )
    data_sites = {
        m[1] for m in includes if "train_resnet.py" in (ROOT / "examples" / m[1] / m[2]).read_text()
    }
    assert data_sites and {s for s, docs_ in listed.items() if "/howto/data" in docs_} == data_sites
    assert not any(doc.startswith("/howto/bede/") for doc in listed.get("frontier", []))
