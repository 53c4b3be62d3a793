"""``git`` commands a page shows.

Each command line is given to git itself, in an empty scratch repository with no configuration
and no remote: git reads the options before it does anything, and exits with status 129 when
it refuses them (unknown option, missing value), so a refusal is told apart from the work the
scratch repository cannot do ("nothing to commit", "origin does not appear to be a git
repository"). ``git clone`` is given a local path that does not exist in place of its URL, so
nothing is fetched; the URL must be the repository of a third-party program whose command-line
contract the project keeps (``contracts/*.json``), since that is the code the pages' job
scripts are checked against.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from clusterkit.commands.registry import register
from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import ROOT

USAGE_ERROR = 129
_CLONE_VALUED = {
    "--depth", "-b", "--branch", "-o", "--origin", "--filter", "--reference", "-c", "--config",
    "--shallow-since", "--shallow-exclude", "-j", "--jobs", "--template", "-u",
    "--upload-pack", "--separate-git-dir", "--recurse-submodules",
}  # fmt: skip


def recorded_repositories() -> set[str]:
    """The upstream repositories of the kept third-party contracts."""
    out = set()
    for path in sorted((ROOT / "contracts").glob("*.json")):
        source = json.loads(path.read_text()).get("source")
        if isinstance(source, dict) and source.get("repo"):
            out.add(_norm(source["repo"]))
    return out


def _norm(url: str) -> str:
    return url.rstrip("/").removesuffix(".git").lower()


@register("git", site_free=True)
def check(page, line: int, words: list[str], site=None, snippet: str = "") -> list[Finding]:
    args = list(words[1:])
    out = []
    status, err = _run(_scratch_args(args))
    if status == USAGE_ERROR:
        lines = [x for x in err.splitlines() if x.strip()]
        return [Finding(page, line, "git-option", f"git: {lines[0] if lines else 'usage'}")]
    if args[:1] == ["clone"]:
        url_at = _clone_url_index(args)
        if url_at is None:
            return [Finding(page, line, "git-option", "git clone: no repository given")]
        url = args[url_at]
        if _norm(url) not in recorded_repositories():
            msg = (
                f"git clone {url}: not the repository of a kept contract "
                "(contracts/*.json source.repo), so nothing checks the code it brings"
            )
            out.append(Finding(page, line, "git-repo", msg))
    return out


def _scratch_args(args: list[str]) -> list[str]:
    """The command line with a clone's URL replaced by a path that does not exist."""
    args = list(args)
    if args[:1] == ["clone"]:
        at = _clone_url_index(args)
        if at is not None:
            args[at] = "/nonexistent/clusterkit-scratch-repository"
    return args


def _clone_url_index(args: list[str]) -> int | None:
    i = 1
    while i < len(args):
        a = args[i]
        if a == "--":
            return i + 1 if i + 1 < len(args) else None
        if a in _CLONE_VALUED and "=" not in a:
            i += 2 if a != "--recurse-submodules" else 1
            continue
        if not a.startswith("-"):
            return i
        i += 1
    return None


def _run(args: list[str]) -> tuple[int, str]:
    git = shutil.which("git")
    if git is None:
        return 0, ""
    with tempfile.TemporaryDirectory(prefix="git-scratch-") as tmp:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": tmp,
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_AUTHOR_NAME": "x",
            "GIT_AUTHOR_EMAIL": "x@example.org",
            "GIT_COMMITTER_NAME": "x",
            "GIT_COMMITTER_EMAIL": "x@example.org",
        }
        repo = Path(tmp) / "repo"
        subprocess.run([git, "init", "-q", str(repo)], env=env, capture_output=True, check=True)
        r = subprocess.run(
            [git, *args], cwd=repo, env=env, capture_output=True, text=True, timeout=60
        )
        return r.returncode, r.stderr
