"""What a change reaches: the tests to run for the files changed since a commit.

``python -m clusterkit.pages.affected BASE`` prints the plan; ``--json`` for ``nox -s affected``,
which runs it. The map is read from the sources each time, never kept by hand:

* a page (``docs/**.md``): its blocks (``pytest docs/PAGE``, which also judges the files it
  includes);
* an example job script: the pages that include it (their ``{literalinclude}``), and its
  scaled-down run in tests/test_examples_run.py when it starts a trainer on a Slurm site;
* a training program (``examples/<framework>/*.py``): its tests (clusterkit.runs.stack_ci's
  ``TESTS``), the runs of the job scripts that start it, its option page (the ``{argparse}``
  page whose ``:prog:`` names it) and the pages that name it (their commands and sentences
  give its options);
* a profile (``sites/<name>.yaml``): every page of that site (front matter ``site:``, a tab or
  marker of the site, a stack of the site, its recipes and reference page) and the runs of
  every job script under ``examples/<name>/``;
* ``results/``: the pages whose directives render recorded results;
* ``contracts/``, ``lint/``: every page (their commands are judged against those records);
* a test module: itself; a file under tests/ that is not one: the test modules that use it
  (the real-Slurm and browser tests, sessions of their own, are left to ``nox -t ci``);
* ``clusterkit/``, ``noxfile.py``, ``requirements/``, ``pyproject.toml``, ``conf.py``, the
  profiles' schema, the pytest configuration (``conftest.py``) and CI's own files: everything
  (``nox -t ci``).

Besides, every file reaches the test modules that name it: its path, its path below its top
folder, or its file name in quotes where no other file has that name. When anything outside
tests/ changed, the fast static pass runs too (``python -m clusterkit.pages.fast``, a few tens
of seconds): the profiles, every job script, the lint, the site rules and a Sphinx build.

The plan says which of its tests need PyTorch and TensorFlow (``ml``, with the reason): the
scaled-down runs of job scripts, the trainers' tests, and the pages and test modules that
import a framework, run a program of ``examples/`` or ``benchmarks/``, or check a fragment
against upstream code. Everything else -- a profile, a page, a job script's pages -- runs in
the small environment that planned it (``nox -s affected`` builds ``.nox/_ml`` only when a
test needs it), where a trainer's options are read with the frameworks stubbed out, as the
fast pass reads them.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from clusterkit.grammars import myst as P
from clusterkit.sites.profiles import ROOT, all_sites, raw_profile

EVERYTHING = (
    "clusterkit/",
    "noxfile.py",
    "requirements/",
    "pyproject.toml",
    "conf.py",
    "sites/schema.yaml",
    "conftest.py",  # tests/conftest.py, docs/conftest.py: how every test runs
    ".ci/",
    "ci/",
)
EXAMPLES_RUN = "tests/test_examples_run.py::test_job_script_runs[{}]"
CONVERSION_RUN = "tests/test_examples_run.py::test_conversion_job_runs[{}]"
# Tests of sessions of their own (a real Slurm, a browser): nox -t ci runs them.
OTHER_SESSIONS = ("tests/slurm/", "tests/browser/")
# the programs test_examples_run starts (its TRAINERS)
TRAINERS = (
    "train_resnet.py",
    "train_resnet_keras.py",
    "train_lm.py",
    "ddp_skeleton.py",
    "keras_skeleton.py",
    "finetune_hf.py",
)
CONVERTERS = ("make_shards.py", "make_tfrecords.py")  # ... and the data converters
JOB_SUFFIXES = {".sbatch", ".slurm", ".sh", ".lsf"}
RESULT_DIRECTIVES = re.compile(r"^[`:]{3,}\{(results-table|results-plot|last-verified)\}", re.M)
# What makes a test need PyTorch and TensorFlow (.nox/_ml) rather than the small environment.
FRAMEWORKS = r"(?:torch|torchvision|tensorflow|keras|horovod|transformers|peft|accelerate|datasets)"
_IMPORTS_FRAMEWORK = re.compile(
    rf"^\s*(?:import|from)\s+{FRAMEWORKS}\b|-m\s+{FRAMEWORKS}\b"
    rf"|(?:importorskip|find_spec)\(\s*[\"']{FRAMEWORKS}[\"']",
    re.M,
)
# a test module that runs a training program (tiny runs, job scripts through the shims, the
# benchmarks, measured program lines)
_RUNS_TRAINER = re.compile(
    r"TRAIN_TINY|--tiny\b|\bemulated_env\b|\bprogram_lines\b|\bbenchmark_module\b"
)
_RUNS_PROGRAM = re.compile(r"\bpython\S*\s+(?:examples|benchmarks)/\S+\.py\b")
_FRAGMENT = re.compile(r"^% test: fragment ", re.M)


@dataclass
class Plan:
    changed: list[str]
    everything: list[str] = field(default_factory=list)  # changed files that reach everything
    targets: dict[str, list[str]] = field(default_factory=dict)  # pytest target -> changed files
    static: bool = False  # the fast pass runs
    reaches_nothing: list[str] = field(default_factory=list)
    ml: dict[str, str] = field(default_factory=dict)  # target -> why it needs the ML env

    def add(self, target: str, because: str) -> None:
        why = self.targets.setdefault(target, [])
        if because not in why:
            why.append(because)

    def as_dict(self) -> dict:
        return {
            "changed": self.changed,
            "everything": self.everything,
            "targets": self.targets,
            "static": self.static,
            "reaches_nothing": self.reaches_nothing,
            "ml": self.ml,
        }


# --------------------------------------------------------------------------- what changed
def changed_files(base: str, root: Path = ROOT) -> list[str]:
    """Files that differ from ``base`` in the working tree (committed since, staged, or not),
    and new files git does not ignore."""

    def git(*args: str) -> list[str]:
        r = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"git {' '.join(args)}: {r.stderr.strip()}")
        return [line for line in r.stdout.splitlines() if line]

    return sorted(
        set(git("diff", "--name-only", "--no-renames", base, "--"))
        | set(git("ls-files", "--others", "--exclude-standard"))
    )


# --------------------------------------------------------------------------- the sources
@cache
def _pages() -> tuple[P.Page, ...]:
    return tuple(P.scan_pages(ROOT / "docs"))


@cache
def _test_modules() -> dict[str, str]:
    """tests/**/test_*.py -> its text."""
    return {
        str(p.relative_to(ROOT)): p.read_text(encoding="utf-8", errors="replace")
        for p in sorted((ROOT / "tests").rglob("test_*.py"))
        if not p.relative_to(ROOT).as_posix().startswith(OTHER_SESSIONS)
    }


@cache
def _name_counts() -> dict[str, int]:
    counts: dict[str, int] = {}
    r = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    for line in r.stdout.splitlines():
        name = Path(line).name
        counts[name] = counts.get(name, 0) + 1
    return counts


def tests_naming(rel: str) -> list[str]:
    """Test modules that name the file: its path, its path below its top folder, or its name
    in quotes where the name is the repository's only file of that name."""
    parts = Path(rel).parts
    needles = [rel]
    if len(parts) > 2:
        needles.append("/".join(parts[1:]))
    if _name_counts().get(parts[-1], 0) <= 1:
        needles += [f'"{parts[-1]}"', f"'{parts[-1]}'"]
    if parts[0] == "tests" and len(parts) > 2:  # a data folder of the tests: those that use it
        needles += [f'"{parts[1]}"', f"/{parts[1]}/", f"'{parts[1]}'"]
    if parts[0] == "tests" and rel.endswith(".py"):  # a helper module: those that import it
        stem = Path(rel).stem
        needles += [f"import {stem}", f"from {stem} import"]
    return [
        mod
        for mod, text in _test_modules().items()
        # test_examples_run names the trainers; it is reached node by node (example_run)
        if mod not in (rel, EXAMPLES_RUN.split("::")[0]) and any(n in text for n in needles)
    ]


def pages_including(rel: str) -> list[str]:
    target = (ROOT / rel).resolve()
    return sorted(
        {page.rel for page in _pages() for b in page.blocks if b.include_path() == target}
    )


def _site_scheduler() -> dict[str, str]:
    """Each site's scheduler; for a profile that does not load (yet), as its YAML says."""
    out = {s.name: s.scheduler for s in all_sites()}
    for path in sorted((ROOT / "examples").iterdir()):
        data = raw_profile(path.name) if path.name not in out else None
        kind = (data or {}).get("scheduler", {}) if isinstance(data, dict) else {}
        if isinstance(kind, dict) and kind.get("kind") in ("slurm", "lsf"):
            out[path.name] = kind["kind"]
    return out


def example_run(rel: str) -> str | None:
    """The node of tests/test_examples_run.py that runs this job script, if it has one (a job
    that runs a converter has its own test)."""
    path = ROOT / rel
    parts = Path(rel).parts
    if len(parts) != 3 or parts[0] != "examples" or path.suffix not in JOB_SUFFIXES:
        return None
    if _site_scheduler().get(parts[1]) != "slurm" or not path.is_file():
        return None
    text = path.read_text(encoding="utf-8", errors="replace")
    if not re.search(r"^#SBATCH\s", text, re.M) or path.suffix == ".lsf":
        return None
    if any(re.search(rf"python\s+{re.escape(c)}\s", text) for c in CONVERTERS):
        return CONVERSION_RUN.format(f"{parts[1]}/{parts[2]}")
    if not any(re.search(rf"\b{re.escape(t)}\b", text) for t in TRAINERS):
        return None
    return EXAMPLES_RUN.format(f"{parts[1]}/{parts[2]}")


def scripts_starting(program: str) -> list[str]:
    out = []
    for path in sorted((ROOT / "examples").glob("*/*")):
        if path.is_file() and path.suffix in JOB_SUFFIXES:
            text = path.read_text(encoding="utf-8", errors="replace")
            if re.search(rf"(?<![\w-]){re.escape(program)}\b", text):
                out.append(str(path.relative_to(ROOT)))
    return out


def option_page(program: str) -> str | None:
    for page in _pages():
        if re.search(rf"^:prog:\s*{re.escape(program)}\s*$", page.text, re.M):
            return page.rel
    return None


def pages_of_site(name: str) -> list[str]:
    """Pages that hold anything judged against the site."""
    out = set()
    for page in _pages():
        rel = page.rel
        if (
            rel.startswith(f"docs/howto/{name}/")
            or rel == f"docs/reference/sites/{name}.md"
            or P.block_site(page) == name
            or any(P.block_site(page, b) == name for b in page.blocks)
            or any(P.block_site(page, s) == name for s in page.inline)
            or any(str(s).startswith(f"{name}/") for s in page.front_matter.get("stacks") or [])
            or re.search(rf"\{{(site-facts|site-status|last-verified)\}}\s+{name}\b", page.text)
        ):
            out.add(rel)
    return sorted(out)


def needs_ml(target: str) -> str:
    """Why a pytest target needs PyTorch and TensorFlow; empty when the small environment
    runs it."""
    if target.startswith(EXAMPLES_RUN.split("::")[0]):
        return "a scaled-down run of a job script trains"
    if target.startswith("tests/horovod/"):
        return "the Horovod examples train"
    from clusterkit.runs.stack_ci import TESTS

    if target.split("::")[0] in TESTS.values():
        return "a trainer's own tests train"
    path = ROOT / target.split("::")[0]
    if not path.is_file():
        return ""
    text = path.read_text(encoding="utf-8", errors="replace")
    if m := _IMPORTS_FRAMEWORK.search(text):
        return f"it uses a framework ({m[0].strip()})"
    if m := _RUNS_PROGRAM.search(text):
        return f"it runs {m[0]}"
    if path.suffix == ".md" and _FRAGMENT.search(text):
        return "it checks fragments against upstream code"
    if path.suffix == ".py" and (m := _RUNS_TRAINER.search(text)):
        return f"it runs a training program ({m[0]})"
    return ""


# --------------------------------------------------------------------------- the plan
def plan(changed: list[str]) -> Plan:
    out = Plan(sorted(changed))
    for rel in out.changed:
        if rel.startswith(EVERYTHING) or Path(rel).name == "conftest.py":
            out.everything.append(rel)
            continue
        parts = Path(rel).parts
        top = parts[0]
        if top != "tests":
            out.static = True
        if top == "docs" and rel.endswith(".md"):
            if (ROOT / rel).is_file():
                out.add(rel, rel)
        elif top == "examples" and len(parts) == 3:
            program = rel.endswith(".py")
            for page in pages_including(rel):
                out.add(page, rel)
            if (node := example_run(rel)) is not None:
                out.add(node, rel)
            if program:
                from clusterkit.runs.stack_ci import TESTS

                if rel in TESTS:
                    out.add(TESTS[rel], rel)
                for script in scripts_starting(parts[-1]):
                    if (node := example_run(script)) is not None:
                        out.add(node, rel)
                if (page := option_page(parts[-1])) is not None:
                    out.add(page, rel)
                for page in _pages():  # its options named in commands and sentences
                    if re.search(rf"(?<![\w-]){re.escape(parts[-1])}\b", page.text):
                        out.add(page.rel, rel)
        elif top == "sites" and rel.endswith(".yaml") and len(parts) == 2:
            name = Path(rel).stem
            for page in pages_of_site(name):
                out.add(page, rel)
            for script in sorted((ROOT / "examples" / name).glob("*")):
                if (node := example_run(str(script.relative_to(ROOT)))) is not None:
                    out.add(node, rel)
            for mod, text in _test_modules().items():
                if re.search(rf"""["']{re.escape(name)}["']""", text):
                    out.add(mod, rel)
        elif top == "results":
            for page in _pages():
                if RESULT_DIRECTIVES.search(page.text):
                    out.add(page.rel, rel)
        elif top in ("contracts", "lint"):
            for page in _pages():
                out.add(page.rel, rel)
        elif top == "tests" and Path(rel).name.startswith("test_") and rel.endswith(".py"):
            if (ROOT / rel).is_file() and not rel.startswith(OTHER_SESSIONS):
                out.add(rel, rel)  # a test module reaches itself
            else:
                out.reaches_nothing.append(rel)
            continue
        for mod in tests_naming(rel):
            out.add(mod, rel)
        if not any(rel in why for why in out.targets.values()):
            out.reaches_nothing.append(rel)
    out.ml = {t: why for t in pytest_args(out) if (why := needs_ml(t))}
    return out


def pytest_args(p: Plan) -> list[str]:
    """The targets, a whole module instead of its nodes when the module is selected too."""
    modules = {t for t in p.targets if "::" not in t}
    return sorted(t for t in p.targets if t.split("::")[0] not in modules or "::" not in t)


def describe(p: Plan) -> str:
    lines = [f"{len(p.changed)} file(s) changed"]
    if p.everything:
        lines.append(f"reaches everything (nox -t ci): {', '.join(p.everything)}")
        return "\n".join(lines)
    if p.static:
        lines.append("the fast static pass (python -m clusterkit.pages.fast)")
    for target in pytest_args(p):
        lines.append(f"pytest {target}  <- {', '.join(p.targets[target])}")
    for rel in p.reaches_nothing:
        where = "nox -t ci runs it" if rel.startswith(OTHER_SESSIONS) else "no test reads it"
        lines.append(f"{rel}: {where}")
    if p.ml:
        lines.append(f"needs PyTorch and TensorFlow (.nox/_ml) for {len(p.ml)} target(s):")
        lines += [f"  {t}: {why}" for t, why in sorted(p.ml.items())]
    elif p.targets:
        lines.append("needs no PyTorch or TensorFlow: the small environment runs every test")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base", nargs="?", default="HEAD", help="the commit to compare with")
    ap.add_argument("--json", action="store_true", help="the plan as JSON (for nox -s affected)")
    args = ap.parse_args(argv)
    p = plan(changed_files(args.base))
    if args.json:
        print(json.dumps({**p.as_dict(), "pytest": pytest_args(p)}))
    else:
        print(describe(p))
    return 0


if __name__ == "__main__":
    sys.exit(main())
