"""``check-job`` anywhere: the package installed from the repository alone knows every site and
judges every example job script, trainer options included, without PyTorch or TensorFlow.

Two tests hold it. The first runs everywhere, offline, in seconds: it builds the wheel of a copy
of the repository with the build tools at hand, unpacks it into a scratch folder (the files a
``pip install`` puts into site-packages) and runs the command from there, with the checkout off
the path and the frameworks' imports refused. The second (``slow``) does what a centre's CI
does: a bare virtual environment, ``pip install`` of the repository (the build tools and the
dependencies from PyPI or pip's cache), and the ``clusterkit`` command it installs; it
needs PyPI, and says so when it cannot reach it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest
import yaml

from clusterkit.sites.profiles import ROOT, profile_paths
from clusterkit.sites.root import DATA_DIRS

# What a pip install of the repository reads: the build configuration and what goes in the wheel.
BUILD_FILES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md")
FRAMEWORKS = ("torch", "torchvision", "tensorflow", "keras", "horovod", "jax")


def job_scripts() -> list[tuple[str, Path]]:
    """(site, script) for every job script under examples/<site>/, as the fast pass finds them."""
    out = []
    for profile in profile_paths():
        directive = yaml.safe_load(profile.read_text(encoding="utf-8"))["scheduler"]["directive"]
        for path in sorted((ROOT / "examples" / profile.stem).glob("*")):
            if path.is_file() and directive in path.read_text(errors="replace"):
                out.append((profile.stem, path))
    return out


def typo_script(tmp: Path) -> Path:
    """A copy of a job script that starts a trainer, with one of the trainer's flags misspelt."""
    src = ROOT / "examples" / "frontier" / "pytorch-ddp-1node.sbatch"
    text = src.read_text(encoding="utf-8")
    assert "--precision bf16" in text, f"{src} no longer sets --precision bf16: pick another flag"
    bad = tmp / "typo.sbatch"
    bad.write_text(text.replace("--precision bf16", "--precison bf16"), encoding="utf-8")
    return bad


def repository_copy(dest: Path) -> Path:
    """The files a pip install of the repository reads (no .nox, _build or caches)."""
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", ".*")
    dest.mkdir(parents=True, exist_ok=True)
    for name in BUILD_FILES:
        shutil.copy2(ROOT / name, dest / name)
    for name in ("clusterkit", *DATA_DIRS):
        shutil.copytree(ROOT / name, dest / name, ignore=skip)
    return dest


# Runs in a fresh interpreter: the frameworks cannot be imported, the checkout is not on the
# path, and each job script goes through the command line as `clusterkit check-job` runs it.
JUDGE = r"""
import contextlib, importlib.abc, io, json, sys
FRAMEWORKS = set(sys.argv[1].split(","))
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in FRAMEWORKS:
            raise ImportError(f"{name} is not installed here")
sys.meta_path.insert(0, Refuse())
import clusterkit
from clusterkit.cli import main
from clusterkit.sites.root import ROOT
out = {"package": clusterkit.__file__, "root": str(ROOT), "results": []}
for site, script in json.loads(sys.argv[2]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            main(["check-job", "--site", site, script])
            code = 0
        except SystemExit as exc:
            code = exc.code
    out["results"].append([site, script, code, err.getvalue()])
out["frameworks_loaded"] = sorted(m for m in sys.modules if m.split(".")[0] in FRAMEWORKS)
print(json.dumps(out))
"""


def test_the_installed_files_judge_every_job_script_without_frameworks(tmp_path):
    """The wheel's files, unpacked into a scratch folder, with only its dependencies."""
    # looked up, not imported: setuptools' distutils hack fails in a process that has already
    # imported the standard library's distutils (another test may have), and pip builds the
    # wheel in a process of its own anyway
    if importlib.util.find_spec("setuptools") is None:
        pytest.skip("builds the wheel with the setuptools at hand, and none is installed")
    src = repository_copy(tmp_path / "src")
    wheels = tmp_path / "wheels"
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "--no-index", "-w", str(wheels), str(src)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    (wheel,) = wheels.glob("clusterkit-*.whl")
    site_packages = tmp_path / "site-packages"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site_packages)
    data = site_packages / "clusterkit" / "data"
    assert sorted(p.name for p in data.iterdir()) == sorted(DATA_DIRS)
    assert {p.stem for p in (data / "sites").glob("*.yaml")} >= {p.stem for p in profile_paths()}

    scripts = [(site, str(path)) for site, path in job_scripts()]
    scripts.append(("frontier", str(typo_script(tmp_path))))
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("CLUSTERKIT_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")
    }
    env["PYTHONPATH"] = str(site_packages)
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    r = subprocess.run(
        [sys.executable, "-c", JUDGE, ",".join(FRAMEWORKS), json.dumps(scripts)],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.splitlines()[-1])
    assert Path(out["package"]).is_relative_to(site_packages), "the checkout's package was used"
    assert Path(out["root"]) == data
    assert out["frameworks_loaded"] == []
    *good, typo = out["results"]
    failed = [f"{site} {Path(s).name}: {code}\n{err}" for site, s, code, err in good if code != 0]
    assert not failed, "\n".join(failed)
    assert len(good) == len(job_scripts()) >= 20
    assert typo[2] == 1 and "[script-flag-unknown]" in typo[3] and "--precison" in typo[3]


def _pip_unreachable(output: str) -> bool:
    return bool(
        re.search(
            r"NewConnectionError|Failed to establish a new connection|Temporary failure in "
            r"name resolution|Network is unreachable|No matching distribution found for "
            r"setuptools",
            output,
        )
    )


@pytest.mark.slow
def test_pip_install_into_a_bare_venv_gives_a_clusterkit_command_that_knows_every_site(tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    bin_dir = env_dir / ("Scripts" if os.name == "nt" else "bin")
    src = repository_copy(tmp_path / "src")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("CLUSTERKIT_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")
    }
    r = subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
         str(src)],
        capture_output=True, text=True, env=env, timeout=900,
    )  # fmt: skip
    if r.returncode != 0 and _pip_unreachable(r.stdout + r.stderr):
        pytest.skip(f"PyPI is out of reach here, so pip cannot install the build tools: {r.stderr}")
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    probe = subprocess.run(
        [str(bin_dir / "python"), "-c", "import importlib.util as u; "
         f"print([m for m in {FRAMEWORKS!r} if u.find_spec(m)])"],
        capture_output=True, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert probe.stdout.strip() == "[]", f"the bare environment holds {probe.stdout}"
    # every job script in one process of the environment's Python (a process each would take
    # minutes), then the console script pip wrote, as a centre's CI calls it
    scripts = [(site, str(path)) for site, path in job_scripts()]
    r = subprocess.run(
        [str(bin_dir / "python"), "-c", JUDGE, ",".join(FRAMEWORKS), json.dumps(scripts)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.splitlines()[-1])
    assert Path(out["root"]).is_relative_to(env_dir), "the checkout's data was used"
    failed = [
        f"{site} {Path(s).name}: {code}\n{err}" for site, s, code, err in out["results"] if code
    ]
    assert not failed, "\n".join(failed)
    command = [str(bin_dir / "clusterkit"), "check-job", "--site", "frontier"]
    r = subprocess.run(
        [*command, str(typo_script(tmp_path))],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert r.returncode == 1 and "[script-flag-unknown]" in r.stderr, r.stderr


def test_the_pre_commit_hook_runs_check_job_on_job_scripts(tmp_path):
    """.pre-commit-hooks.yaml: what pre-commit needs of a hook, a file pattern that takes the
    sites' job scripts and documentation pages and leaves the rest (helper scripts, images),
    and an entry that judges the files it is given."""
    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    assert {"id", "name", "entry", "language"} <= set(hook)
    assert hook["id"] == "check-job" and hook["language"] == "python"
    pattern = re.compile(hook["files"])
    scripts = {p for _, p in job_scripts()}
    examples = [p for p in (ROOT / "examples").rglob("*") if p.is_file()]
    assert all(pattern.search(str(p.relative_to(ROOT))) for p in scripts)
    taken = {p for p in examples if pattern.search(str(p.relative_to(ROOT)))}
    assert taken == scripts, f"the hook would also take {sorted(map(str, taken - scripts))}"
    pages = ["docs/index.md", "README.md", "docs/usage/index.rst", "guide.markdown"]
    others = ["docs/tools/setup.sh", "docs/images/nodes.png", "mkdocs.yml", "docs/conf.py"]
    assert all(pattern.search(p) for p in pages) and not any(pattern.search(p) for p in others)
    entry = hook["entry"].split()
    assert entry[0] == "clusterkit", "the console script pyproject.toml installs"
    scripts_table = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^clusterkit = "clusterkit\.cli:main"$', scripts_table, re.M)
    # the entry as pre-commit runs it, with the site the centre's configuration names
    cmd = [sys.executable, "-m", "clusterkit", *entry[1:], "--site", "frontier"]
    ok = subprocess.run(
        [*cmd, str(ROOT / "examples" / "frontier" / "pytorch-ddp-1node.sbatch")],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run(
        [*cmd, str(typo_script(tmp_path))], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert bad.returncode == 1 and "--precison" in bad.stderr
    page = (ROOT / "docs" / "reference" / "check-job.md").read_text(encoding="utf-8")
    assert "id: check-job" in page and ".pre-commit-config.yaml" in page


def test_the_data_root_is_the_checkout_an_explicit_root_or_the_installed_copy(
    tmp_path, monkeypatch
):
    from clusterkit.sites import root

    monkeypatch.delenv("CLUSTERKIT_ROOT", raising=False)
    assert root.find_root() == ROOT == root.CHECKOUT, "a checkout reads its own folders"
    assert root.cache_dir(ROOT) == ROOT / ".cache"
    monkeypatch.setenv("CLUSTERKIT_ROOT", str(tmp_path))
    assert root.find_root() == tmp_path
    monkeypatch.delenv("CLUSTERKIT_ROOT")
    monkeypatch.setattr(root, "CHECKOUT", tmp_path)  # site-packages: no sites/schema.yaml
    assert root.find_root() == root.INSTALLED
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert root.cache_dir(root.INSTALLED) == tmp_path / "cache" / "clusterkit"
