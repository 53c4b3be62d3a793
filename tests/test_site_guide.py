"""The guide's "Add a site" (docs/contributing.md), followed on a fresh clone: its commands run
as the guide writes them, in its order, in the virtual environment its first step makes.

What the guide leaves to the writer is done the way test_scaffold does it: each fill-in marker
is replaced by a fact of a throw-away site (its FACTS), with one fact written as unknown in the
form the guide shows, and the site's documentation repository is a stand-in git repository
holding one job script. The clone is of a committed copy of the working tree, so uncommitted
changes are followed too. The first step installs from PyPI (pip's cache serves wheels it
has); where the index cannot be reached, the test is skipped, saying so.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_scaffold import FACTS, errors_the_checkout_lacks, git_repository_copy

from clusterkit.pages.scaffold import FRAMEWORKS
from clusterkit.sites.profiles import FILL_IN, ROOT

GUIDE = ROOT / "docs" / "contributing.md"
OFFLINE = re.compile(
    r"NewConnectionError|Temporary failure in name resolution|Network is unreachable|"
    r"Failed to establish a new connection|ConnectTimeout|ProxyError|"
    r"No matching distribution found"
)
# A job script of the stand-in documentation repository, in a page's code block
PUBLISHED = """\
# Jobs

```bash
#!/bin/bash
#SBATCH --account=abc123
#SBATCH --partition=gpu
#SBATCH --nodes=1
#SBATCH --gpus-per-node=4
#SBATCH --time=00:30:00
srun hostname
```
"""


def section() -> str:
    text = GUIDE.read_text(encoding="utf-8")
    start = text.index("## Add a site\n")
    return text[start : text.index("\n## ", start + 1)]


def console_blocks(text: str) -> list[list[str]]:
    """The commands (``$ `` lines) of each console block, in the section's order."""
    blocks = re.findall(r"^ *```console\n(.*?)^ *```", text, re.M | re.S)
    return [[m[1] for m in re.finditer(r"^ *\$ (.+)$", b, re.M)] for b in blocks]


def block_with(blocks: list[list[str]], pattern: str) -> list[str]:
    """The one console block with a command that ``pattern`` finds."""
    found = [b for b in blocks if any(re.search(pattern, cmd) for cmd in b)]
    assert len(found) == 1, f"the guide has {len(found)} console blocks with {pattern!r}"
    return found[0]


class Shell:
    """Commands run in bash from the clone (stopping at the first that fails), in the guide's
    virtual environment once its first step has made it."""

    def __init__(self, clone: Path):
        self.clone = clone
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("CLUSTERKIT_") and k not in ("VIRTUAL_ENV", "PYTHONPATH")
        }
        # the guide's `python3`: the interpreter running the tests (Python 3.11 or newer)
        self.env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), self.env["PATH"]])

    def run(self, *commands: str, timeout: int = 900) -> subprocess.CompletedProcess:
        activate = [". .venv/bin/activate"] if (self.clone / ".venv").is_dir() else []
        return subprocess.run(
            ["bash", "-c", "\n".join(["set -e", *activate, *commands])],
            cwd=self.clone,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def write_the_profile(clone: Path, name: str, unknown_wall: str) -> None:
    """The writer's part: every marker replaced by a fact, the partition's limit unknown."""
    written = [
        clone / "sites" / f"{name}.yaml",
        clone / "sites" / "NOTES.md",
        clone / "docs" / "reference" / "sites" / f"{name}.md",
        *clone.glob(f"examples/{name}/*"),
        *clone.glob(f"docs/howto/{name}/*.md"),
    ]
    for path in written:
        path.write_text(FILL_IN.sub(lambda m: FACTS[m["key"]], path.read_text()))
    profile = clone / "sites" / f"{name}.yaml"
    text = profile.read_text()
    assert text.count(f'max_walltime: "{FACTS["max-walltime"]}"') == 1
    profile.write_text(text.replace(f'max_walltime: "{FACTS["max-walltime"]}"', unknown_wall))


def stand_in_docs(path: Path) -> None:
    path.mkdir(parents=True)
    (path / "jobs.md").write_text(PUBLISHED)
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.org"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "docs"]):
        subprocess.run([*git, *args], cwd=path, check=True, capture_output=True)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None, reason="clones the repository; needs git")
def test_the_guide_adds_a_site_on_a_fresh_clone(tmp_path):
    text = section()
    blocks = console_blocks(text)
    origin = git_repository_copy(tmp_path / "origin")
    subprocess.run(["git", "branch", "-M", "main"], cwd=origin, check=True)
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(origin), str(clone)], check=True)
    sh = Shell(clone)

    # 1. install, on a branch of one's own
    install = block_with(blocks, "pip install")
    r = sh.run(*install)
    if r.returncode and OFFLINE.search(r.stdout + r.stderr):
        pytest.skip(
            f"the package index cannot be reached: {OFFLINE.search(r.stdout + r.stderr)[0]}"
        )
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert (clone / ".venv" / "bin" / "python").exists()
    branch = sh.run("git rev-parse --abbrev-ref HEAD").stdout.strip()
    assert branch != "main" and sh.run("git rev-parse main").returncode == 0

    # 2. scaffold it: the checks fail naming the site, and still check every other one
    (scaffold,) = block_with(blocks, "new-site")
    name = shlex.split(scaffold)[4]
    r = sh.run(scaffold)
    assert r.returncode == 0, r.stderr
    assert f"sites/{name}.yaml" in r.stdout
    (check,) = block_with(blocks, r"clusterkit check$")
    r = sh.run(check)
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    assert "Traceback" not in r.stderr and "crashed" not in r.stdout
    assert r.stdout.splitlines()[-1].endswith(f"the profile of {name} does not load"), r.stdout
    assert not re.search(r"^\S+ +skipped", r.stdout, re.M), r.stdout

    # 3. write the profile (a fact no source gives in the guide's unknown form), check it
    unknown = re.search(r"`(max_walltime: \{unknown: \"[^`]+\"\})`", text)
    assert unknown, "the guide shows how to write a fact no source gives"
    write_the_profile(clone, name, unknown[1])
    assert yaml.safe_load((clone / "sites" / f"{name}.yaml").read_text())["partitions"]
    (profiles,) = block_with(blocks, "clusterkit profiles")
    r = sh.run(profiles)
    assert r.returncode == 0 and f"sites/{name}.yaml: ok" in r.stdout, r.stdout + r.stderr

    # 4. the job scripts
    (job,) = block_with(blocks, "check-job --site frontier")
    assert sh.run(job).returncode == 0
    r = sh.run(f"python -m clusterkit check-job --site {name} examples/{name}/*.sbatch")
    assert r.returncode == 0, r.stderr
    assert (
        f"not checked: LUMI partition {FACTS['gpu-partition']}'s max_walltime is unknown"
        in r.stderr
    )

    # 5. the site's published scripts, from a stand-in of its documentation repository
    published = block_with(blocks, "clusterkit.pages.published_collect")
    given, checkout = shlex.split(published[0])[3].split("=", 1)
    assert given == name
    stand_in_docs((clone / checkout).resolve())
    r = sh.run(*published)
    assert r.returncode == 0, r.stdout + r.stderr
    corpus = clone / "tests" / "corpus" / "published" / name
    (script,) = corpus.glob("*.sbatch")
    manifest = yaml.safe_load((corpus.parent / "manifest.yaml").read_text())
    (entry,) = [e for e in manifest["scripts"] if e["site"] == name]
    assert entry["file"] == f"{name}/{script.name}" and entry["expected"] == "unknown"
    assert entry["path"] == "jobs.md" and entry["line"] == 4

    # 7. the checks pass (or fail only as the checkout did before the site), and the plan
    # tests the pages without a framework
    r = sh.run(check)
    python = str(clone / ".venv" / "bin" / "python")
    base = Shell(origin)
    ours = errors_the_checkout_lacks(
        r, clone, origin, lambda: base.run(f"{python} -m clusterkit.pages.fast")
    )
    assert not ours, "\n".join(sorted(ours))
    assert not [e for e in r.stderr.splitlines() if name in e and "warning:" not in e]
    (plan,) = block_with(blocks, "clusterkit.pages.affected")
    r = sh.run(plan)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    for framework in FRAMEWORKS.values():
        assert f"pytest docs/howto/{name}/{framework['page']}.md" in r.stdout, r.stdout
    assert f"sites/{name}.yaml: no test reads it" not in r.stdout
    got = json.loads(sh.run(f"{plan} --json").stdout.splitlines()[-1])
    assert got["static"] and not got["everything"]
    runs = {t for t in got["pytest"] if t.startswith("tests/test_examples_run.py::")}
    assert len(runs) == 2 and runs <= set(got["ml"]), "the scaled-down runs need the frameworks"
    pages = [t for t in got["pytest"] if t.startswith("docs/")]
    assert pages and not set(pages) & set(got["ml"]), "the pages need no framework"
