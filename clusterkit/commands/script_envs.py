"""Job scripts use the environments the pages set up, built for the nodes they run on.

A recipe's job script activates an environment that another page told the reader to make
(``docs/howto/environment.md``, or a site's set-up section). Two ways they drift apart, each a
rule:

* ``script-env-unknown``: ``conda activate NAME`` in a job script names an environment that no
  page showing the script, nor a page it links to, creates with ``conda create``;
* ``script-env-arch``: a path in the script names a CPU architecture directory (``/ppc64le/``,
  ``/aarch64/``, ``/x86_64/``) other than that of the nodes of the script's partition, as a
  POWER9 environment activated on a Grace-Hopper node would be ("Illegal instruction").

Activations through a variable (``conda activate "$TORCH_ENV"``) are left alone.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from clusterkit.commands import conda as conda_checks
from clusterkit.grammars import myst as P
from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import ROOT, Site, load_site, unless_unloaded

ARCHES = ("ppc64le", "aarch64", "x86_64")
_ARCH_DIR = re.compile(rf"/(?P<arch>{'|'.join(ARCHES)})/")
_PARTITION = re.compile(r"^#SBATCH\s+(?:--partition[= ]|-p\s*)(?P<name>[\w-]+)", re.M)
_INCLUDE = re.compile(r"^```\{literalinclude\}\s+(?P<path>\S+)", re.M)
JOB_SUFFIXES = (".sbatch", ".slurm")


def partition_arch(text: str, site: Site) -> str | None:
    """The CPU architecture of the nodes the script asks for (its partition, else the
    site's default), or None when that cannot be known."""
    m = _PARTITION.search(text)
    part = site.partitions.get(m["name"]) if m else site.default_partition
    return part.node_type.arch if part else None


def activations(text: str) -> list[tuple[int, str]]:
    """(line, environment) of each ``conda activate`` with a literal environment."""
    out = []
    for n, raw in enumerate(text.splitlines(), 1):
        if not re.search(r"^\s*conda\s+activate\s", raw):
            continue
        words = shlex.split(raw, comments=True)
        env = next((w for w in words[2:] if not w.startswith("-")), None)
        if env and "$" not in env:
            out.append((n, env))
    return out


def check_script(path: Path, site: Site, pages: list[Path]) -> list[Finding]:
    """The two rules for one job script of ``site`` that ``pages`` show."""
    text = Path(path).read_text(encoding="utf-8")
    out = []
    arch = partition_arch(text, site)
    for n, raw in enumerate(text.splitlines(), 1):
        code = raw.split(" #", 1)[0] if not raw.lstrip().startswith("#") else ""
        for m in _ARCH_DIR.finditer(code):
            if arch and m["arch"] != arch:
                out.append(
                    Finding(
                        path,
                        n,
                        "script-env-arch",
                        f"uses a {m['arch']} directory, but the job runs on {arch} nodes; "
                        f"software built for one does not run on the other",
                    )
                )
    made: set[str] = set()
    for page in pages:
        made |= conda_checks.environments(P.rel(page))
    for n, env in activations(text):
        if pages and env not in made:
            shown = ", ".join(P.rel(p) for p in pages)
            out.append(
                Finding(
                    path,
                    n,
                    "script-env-unknown",
                    f"conda activate {env}: no page showing this script ({shown}) or linked "
                    f"from one creates {env} (created there: {', '.join(sorted(made)) or 'none'})",
                )
            )
    return out


def showing_pages(docs: Path) -> dict[Path, list[Path]]:
    """Each file a page includes with ``literalinclude`` -> the pages that include it."""
    out: dict[Path, list[Path]] = {}
    for page in sorted(docs.rglob("*.md")):
        for m in _INCLUDE.finditer(page.read_text(encoding="utf-8")):
            out.setdefault((page.parent / m["path"]).resolve(), []).append(page)
    return out


def lint_all(root: Path = ROOT) -> list[Finding]:
    shown = showing_pages(root / "docs")
    out: list[Finding] = []
    for path in P.example_files(root / "examples"):
        name = P.example_site(path)
        if name and path.suffix in JOB_SUFFIXES:
            pages = shown.get(path.resolve(), [])
            out += unless_unloaded(
                path, lambda p=path, n=name, s=pages: check_script(p, load_site(n), s)
            )
    return out
