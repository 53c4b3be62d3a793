"""The examples docs/reference/check-job.md gives a centre's documentation repository, run as
they are printed, in a throwaway git repository that stands for the centre's documentation:

* the pre-commit configuration, with pre-commit itself (installed from PyPI into a scratch
  environment): ``pre-commit autoupdate`` writes ``rev``, as the page says, then
  ``pre-commit run --all-files`` installs the hook and judges the repository's files;
* the GitHub Actions workflow: each ``run:`` step, in bash as the runner runs it.

Two things differ from a centre's run, because a test reaches no git host. The address of this
guide's repository is a placeholder on the page; pre-commit is given a local git repository
made from this checkout instead (pre-commit clones any git address, a path included), and the
workflow's ``CHECK_JOB_FROM`` (``git+ADDRESS@COMMIT``, which pip builds a wheel from) is a wheel
built from this checkout. The ``uses:`` steps cannot run here: the throwaway repository stands
for what actions/checkout checks out, and a fresh virtual environment's Python, first on PATH,
for actions/setup-python's. pre-commit and the checker's dependencies come from PyPI (or pip's
cache): where they cannot, the tests say so and are skipped.

The last test runs the how-to's ``CLUSTERKIT_ROOT`` example with a clone that has a profile
of its own site.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest
import yaml
from test_install import _pip_unreachable, repository_copy

from clusterkit.grammars.page_blocks import page_blocks
from clusterkit.sites.profiles import ROOT
from clusterkit.sites.root import DATA_DIRS

PAGE = ROOT / "docs" / "reference" / "check-job.md"
ADDRESS = "https://git.example.org/hpc-docs/hpc-dl-guide"  # the page's placeholder address

GOOD = """\
#!/bin/bash
#SBATCH --job-name=hello
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --time=00:10:00
srun hostname
"""
DOCS = {
    "README.md": "# Our documentation\n\nBuild it with `mkdocs build`.\n\n"
    "```bash\n#!/bin/bash\nset -e\nmkdocs build --strict\n```\n",
    "docs/index.md": '# Jobs\n\n=== "Slurm"\n\n    ```bash\n'
    + "".join(f"    {line}\n" for line in GOOD.splitlines())
    + "    ```\n",
    "docs/usage.rst": "Usage\n=====\n\nSubmit this::\n\n"
    + "".join(f"    {line}\n" for line in GOOD.splitlines()),
    "docs/tools/setup.sh": "#!/bin/bash\n# a helper, not a job script: the hook leaves .sh alone\n"
    "SBATCH_ARGS=--partion\n",
}
BAD = "# Bad\n\n```bash\n#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --partion=standard\nsrun x\n```\n"
BAD_LINE = 6  # the page line of --partion


def printed_yaml(key: str) -> tuple[str, dict]:
    """The YAML block of the reference page that has ``key`` at its top, as printed."""
    text = PAGE.read_text(encoding="utf-8")
    found = [
        b.text
        for b in page_blocks(text, ".md")
        if b.lang == "yaml" and key in (yaml.safe_load(b.text) or {})
    ]
    assert len(found) == 1, f"one YAML block with {key!r} on {PAGE.name}"
    return found[0], yaml.safe_load(found[0])


def clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CLUSTERKIT_", "PRE_COMMIT", "GIT_"))
        and k not in ("PYTHONPATH", "VIRTUAL_ENV")
    }
    who = {"GIT_AUTHOR_NAME": "Docs", "GIT_AUTHOR_EMAIL": "docs@example.org"}
    who |= {"GIT_COMMITTER_NAME": "Docs", "GIT_COMMITTER_EMAIL": "docs@example.org"}
    return {**env, **who, **extra}


def git(repo: Path, *args: str) -> str:
    r = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                       env=clean_env(), check=True)  # fmt: skip
    return r.stdout.strip()


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def docs_repo(where: Path) -> Path:
    """A centre's documentation: pages with and without job scripts, a helper script."""
    for rel, text in DOCS.items():
        (where / rel).parent.mkdir(parents=True, exist_ok=True)
        (where / rel).write_text(text, encoding="utf-8")
    (where / "docs" / "nodes.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00")
    subprocess.run(["git", "init", "-q", str(where)], check=True)
    commit_all(where, "docs")
    return where


@pytest.fixture(scope="module")
def runner(tmp_path_factory) -> Path:
    """A scratch environment with pre-commit: the bin folder of its Python."""
    env_dir = tmp_path_factory.mktemp("runner") / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    bin_dir = env_dir / ("Scripts" if os.name == "nt" else "bin")
    r = subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
         "pre-commit"],
        capture_output=True, text=True, env=clean_env(), timeout=600,
    )  # fmt: skip
    if r.returncode != 0 and (_pip_unreachable(r.stdout + r.stderr) or "pre-commit" in r.stderr):
        pytest.skip(f"pre-commit cannot be installed from PyPI here: {r.stderr[-500:]}")
    assert r.returncode == 0, r.stderr
    return bin_dir


@pytest.fixture(scope="module")
def guide(tmp_path_factory) -> tuple[Path, str]:
    """This checkout as a git repository (what a centre clones): its path and commit."""
    src = repository_copy(tmp_path_factory.mktemp("guide") / "hpc-dl-guide")
    shutil.copy2(ROOT / ".pre-commit-hooks.yaml", src / ".pre-commit-hooks.yaml")
    subprocess.run(["git", "init", "-q", str(src)], check=True)
    return src, commit_all(src, "guide")


@pytest.mark.slow
def test_the_pre_commit_configuration_runs_as_printed(runner, guide, tmp_path):
    text, config = printed_yaml("repos")
    (hook,) = config["repos"][0]["hooks"]
    assert config["repos"][0]["repo"] == ADDRESS and "files" not in hook
    path, commit = guide
    repo = docs_repo(tmp_path / "docs-repo")
    (repo / ".pre-commit-config.yaml").write_text(text.replace(ADDRESS, str(path)) + "\n")
    commit_all(repo, "pre-commit")
    env = clean_env(PRE_COMMIT_HOME=str(tmp_path / "pre-commit-home"))
    env["PATH"] = f"{runner}{os.pathsep}{env['PATH']}"

    def pre_commit(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(runner / "pre-commit"), *args], capture_output=True,
                              text=True, cwd=repo, env=env, timeout=900)  # fmt: skip

    r = pre_commit("autoupdate")
    assert r.returncode == 0, r.stdout + r.stderr
    updated = yaml.safe_load((repo / ".pre-commit-config.yaml").read_text())
    assert updated["repos"][0]["rev"] == commit, "autoupdate writes the newest commit's hash"
    commit_all(repo, "autoupdate")

    r = pre_commit("run", "--all-files", "--verbose")
    if r.returncode != 0 and _pip_unreachable(r.stdout + r.stderr):
        pytest.skip(f"pip cannot reach PyPI for the hook's environment: {r.stdout[-500:]}")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "3 pages: " in r.stdout and "setup.sh" not in r.stdout and "nodes.png" not in r.stdout

    (repo / "docs" / "bad.md").write_text(BAD, encoding="utf-8")
    git(repo, "add", "-A")
    r = pre_commit("run", "--all-files")
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"docs/bad.md:{BAD_LINE}: error: [sbatch-option]" in r.stdout, r.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel pip builds from this repository (what ``git+ADDRESS@COMMIT`` gives)."""
    import importlib.util

    if importlib.util.find_spec("setuptools") is None:
        pytest.skip("builds the wheel with the setuptools at hand, and none is installed")
    tmp = tmp_path_factory.mktemp("wheel")
    src = repository_copy(tmp / "src")
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "--no-index", "-w", str(tmp / "dist"), str(src)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    (built,) = (tmp / "dist").glob("clusterkit-*.whl")
    return built


@pytest.mark.slow
def test_the_workflow_runs_as_printed(runner, wheel, tmp_path):
    _text, workflow = printed_yaml("jobs")
    assert workflow["env"]["CHECK_JOB_FROM"].startswith(f"git+{ADDRESS}@")
    (job,) = workflow["jobs"].values()
    uses = [s["uses"] for s in job["steps"] if "uses" in s]
    runs = [s["run"] for s in job["steps"] if "run" in s]
    assert [u.split("@")[0] for u in uses] == ["actions/checkout", "actions/setup-python"]
    assert "./hpc-dl-guide" not in _text, "a centre's checkout has no clone of this repository"
    repo = docs_repo(tmp_path / "docs-repo")
    env = clean_env(**{**workflow["env"], "CHECK_JOB_FROM": str(wheel)})
    env["PATH"] = f"{runner}{os.pathsep}{env['PATH']}"

    def step(command: str) -> subprocess.CompletedProcess:
        # the shell GitHub's Linux runners run a `run:` step with
        shell = ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", command]
        return subprocess.run(shell, capture_output=True, text=True, cwd=repo, env=env, timeout=900)

    for command in runs:
        r = step(command)
        if r.returncode != 0 and _pip_unreachable(r.stdout + r.stderr):
            pytest.skip(f"pip cannot reach PyPI for the checker's dependencies: {r.stderr[-500:]}")
        assert r.returncode == 0, f"{command}\n{r.stdout}{r.stderr}"
    assert r.stdout == "", "no finding on the good pages"

    (repo / "docs" / "bad.md").write_text(BAD, encoding="utf-8")
    r = step(runs[-1])
    assert r.returncode == 1
    assert r.stdout.startswith(
        f"::error file=docs/bad.md,line={BAD_LINE},title=check-job [sbatch-option]::"
    ), r.stdout


def test_clusterkit_root_points_the_checker_at_a_clone_with_its_own_profile(tmp_path):
    """The how-to's last example: a clone with ``sites/my-centre.yaml`` (here a copy of
    Cirrus's profile under the new name), named by ``CLUSTERKIT_ROOT``."""
    clone = tmp_path / "hpc-dl-guide"
    for name in DATA_DIRS:
        shutil.copytree(ROOT / name, clone / name, ignore=shutil.ignore_patterns("__pycache__"))
    profile = (ROOT / "sites" / "cirrus.yaml").read_text(encoding="utf-8")
    assert re.search(r"^name: cirrus$", profile, re.M)
    mine = re.sub(r"^name: cirrus$", "name: my-centre", profile, flags=re.M)
    (clone / "sites" / "my-centre.yaml").write_text(mine, encoding="utf-8")
    page = tmp_path / "docs" / "jobs.md"
    page.parent.mkdir()
    page.write_text("```bash\n#!/bin/bash\n#SBATCH --partition=nosuch\nsrun hostname\n```\n")
    how_to = (ROOT / "docs" / "howto" / "site-staff" / "check-your-docs.md").read_text()
    assert "CLUSTERKIT_ROOT=~/hpc-dl-guide clusterkit check-job --site my-centre" in how_to
    cmd = [sys.executable, "-m", "clusterkit", "check-job", "--site", "my-centre", "docs/*.md"]
    env = clean_env(PYTHONPATH=str(ROOT))

    r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert r.returncode == 1 and "no profile for site 'my-centre'" in r.stderr, r.stderr
    env["CLUSTERKIT_ROOT"] = str(clone)
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert r.returncode == 1 and "docs/jobs.md:3: error: [partition-exists]" in r.stderr, r.stderr
