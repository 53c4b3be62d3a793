"""benchmarks/collect_corpus.py rebuilds a corpus's scripts from a repository snapshot.

A small git repository stands for a site's documentation: a Markdown page with a job script in
a code block, a MkDocs snippet it includes, and a standalone script file. The collector writes
the scripts whose digests match the manifest, names the one whose text differs, and says which
repository has no snapshot.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
COLLECT = ROOT / "benchmarks" / "collect_corpus.py"

PAGE = """# Running jobs

Text.

```bash
#!/bin/bash
#SBATCH --nodes=1
#SBATCH --account=<project>   # (1)!
--8<-- "docs/env_vars"
srun hostname  # (2)
```

1. The project.
"""
SNIPPET = "export NCCL_DEBUG=WARN\n"
SCRIPT = "#!/bin/bash\n#SBATCH --ntasks=2\nsrun ./a.out\n"


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.fixture
def snapshot(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "src"
    (repo / "docs").mkdir(parents=True)
    (repo / "docs" / "jobs.md").write_text(PAGE)
    (repo / "docs" / "env_vars").write_text(SNIPPET)
    (repo / "job.sh").write_text(SCRIPT)
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "docs")
    return repo, git(repo, "rev-parse", "HEAD")


def manifest(tmp_path: Path, commit: str, wrong: bool = False) -> Path:
    block = PAGE.split("```bash\n", 1)[1].split("```", 1)[0]
    rendered = (
        "#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --account=<project>   \n"
        + SNIPPET
        + "srun hostname  #\n"
    )
    entries = [
        {
            "file": "site/docs-jobs-L6.sbatch",
            "repo": "owner/docs",
            "commit": commit,
            "path": "docs/jobs.md",
            "line": 6,
            "source_digest": digest(block),
            "rendered": ["annotation marker removed", 'snippet "docs/env_vars" included'],
            "digest": digest(rendered),
        },
        {
            "file": "site/job-L1.sbatch",
            "repo": "owner/docs",
            "commit": commit,
            "path": "job.sh",
            "line": 1,
            "digest": "0" * 16 if wrong else digest(SCRIPT),
        },
    ]
    path = tmp_path / "manifest.yaml"
    data = {"repositories": {"owner/docs": commit}, "scripts": entries}
    path.write_text(yaml.safe_dump(data))
    return path


def collect(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(COLLECT), *args], capture_output=True, text=True, cwd=ROOT
    )


def test_rebuilds_rendered_blocks_and_script_files(tmp_path, snapshot):
    repo, commit = snapshot
    out = tmp_path / "out"
    r = collect(
        "--manifest", str(manifest(tmp_path, commit)), "--out", str(out),
        "--mirror", str(tmp_path / "none"), "--git", f"owner/docs={repo}",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    text = (out / "site" / "docs-jobs-L6.sbatch").read_text()
    assert "(1)" not in text and "(2)" not in text and "--8<--" not in text
    assert "export NCCL_DEBUG=WARN\nsrun hostname  #\n" in text
    assert (out / "site" / "job-L1.sbatch").read_text() == SCRIPT


def test_finds_a_fetched_snapshot_under_the_mirror(tmp_path, snapshot):
    repo, commit = snapshot
    mirror = tmp_path / "mirror"
    (mirror / "owner+docs").mkdir(parents=True)
    subprocess.run(
        ["git", "clone", "-q", "--bare", str(repo), str(mirror / "owner+docs" / "repo")],
        check=True,
    )
    out = tmp_path / "out"
    r = collect(
        "--manifest", str(manifest(tmp_path, commit)), "--out", str(out), "--mirror", str(mirror)
    )
    assert r.returncode == 0, r.stderr
    assert "2 of 2 scripts written" in r.stderr


def test_names_a_script_whose_text_differs(tmp_path, snapshot):
    repo, commit = snapshot
    out = tmp_path / "out"
    r = collect(
        "--manifest", str(manifest(tmp_path, commit, wrong=True)), "--out", str(out),
        "--git", f"owner/docs={repo}", "--mirror", str(tmp_path / "none"),
    )  # fmt: skip
    assert r.returncode == 1
    assert "site/job-L1.sbatch: the text at owner/docs@" in r.stderr
    assert "differs from the recorded one" in r.stderr
    assert not (out / "site" / "job-L1.sbatch").exists()
    assert (out / "site" / "docs-jobs-L6.sbatch").is_file()


def test_says_which_repository_has_no_snapshot(tmp_path, snapshot):
    _, commit = snapshot
    r = collect(
        "--manifest", str(manifest(tmp_path, commit)), "--out", str(tmp_path / "out"),
        "--mirror", str(tmp_path / "none"),
    )  # fmt: skip
    assert r.returncode == 2
    assert "owner/docs: no snapshot (fetch github:owner/docs" in r.stderr


def test_a_script_kept_beside_the_manifest_is_not_rebuilt(tmp_path, snapshot):
    """The published corpus keeps most scripts' text beside its manifest and rebuilds only the
    others (NERSC's): a kept one is passed over, so its repository needs no snapshot."""
    repo, commit = snapshot
    path = manifest(tmp_path, commit)
    data = yaml.safe_load(path.read_text())
    data["scripts"].append(
        {"file": "kept/job.sbatch", "repo": "other/docs", "commit": commit, "path": "x", "line": 1,
         "digest": "0" * 16}
    )  # fmt: skip
    path.write_text(yaml.safe_dump(data))
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "job.sbatch").write_text("#!/bin/bash\n")
    out = tmp_path / "out"
    r = collect("--manifest", str(path), "--out", str(out), "--git", f"owner/docs={repo}")
    assert r.returncode == 0, r.stderr
    assert "2 of 2 scripts written" in r.stderr
    assert not (out / "kept").exists()
