"""``python -m clusterkit``: maintainer commands (validate profiles, check a job script, ...)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from clusterkit.sites.errors import CheckError, missing_package


def cmd_profiles(args: argparse.Namespace) -> int:
    from clusterkit.sites.profiles import load_profile, profile_paths

    paths = [Path(p) for p in args.files] or profile_paths()
    bad = 0
    for path in paths:
        try:
            site = load_profile(path)
        except CheckError as exc:
            print(exc, file=sys.stderr)
            bad += 1
            continue
        print(
            f"{path}: ok ({site.title}, {site.status}, {len(site.partitions)} partitions, "
            f"{len(site.modules)} modules, {len(site.stacks)} stacks)"
        )
    if not args.files:  # the recorded channels the stacks install from
        bad += _check_channel_manifests()
    return 1 if bad else 0


def _check_channel_manifests() -> int:
    from clusterkit.sites.channels import CHANNELS_DIR, load_manifest

    bad = 0
    for path in sorted(p for p in CHANNELS_DIR.glob("*.yaml") if p.name != "schema.yaml"):
        try:
            m = load_manifest(path)
        except CheckError as exc:
            print(exc, file=sys.stderr)
            bad += 1
            continue
        seen = "listing read" if m.listing_seen else "listing not read"
        print(f"{path}: ok ({m.data['kind']}, {len(m.data['packages'])} entries, {seen})")
    return bad


def cmd_check_job(args: argparse.Namespace) -> int:
    """Judge every script named (files or glob patterns; a page's code blocks): one line per
    finding, then one exit status for them all -- 2 when a path held nothing to read, else 1
    when any script has an error, else 0."""
    from clusterkit.emulate import foreign
    from clusterkit.emulate.checkjob import check_job_file, check_job_page, is_page
    from clusterkit.emulate.report import with_ranks
    from clusterkit.sites.profiles import load_site

    site = load_site(args.site)
    run = CheckJobRun(site.name)
    allow = foreign.allow if args.allow_foreign else (lambda report: report)
    for path in expand_paths(args.scripts):
        if is_page(path) and path.is_file():
            page = check_job_page(path, site)
            for b in page.blocks:
                if b.report is not None:
                    allow(b.report)
            reports = run.add_page(page)
            _print_findings(page.findings, args.format)
            for b in page.blocks:
                if args.verbose:
                    what = "judged" if b.report is not None else "skipped"
                    where = _where(path, b.block.line)
                    print(f"{where}: {what}: {b.verdict.reason}", file=sys.stderr)
                _print_findings(b.report.findings if b.report else [], args.format)
        else:
            reports = [run.add_file(path, allow(check_job_file(path, site)))]
            _print_findings(reports[0].findings, args.format)
        if args.plan:
            run.plans += [with_ranks(r, args.ranks) for r in reports]
    if args.format == "json":
        print(json.dumps(run.record(), indent=2))
    if args.plan:
        print(json.dumps(run.plans[0] if len(run.plans) == 1 else run.plans, indent=2))
    if args.format == "text":
        for line in run.summary(site.title):
            print(line, file=sys.stderr)
    return run.status


def _print_findings(findings: list, form: str) -> None:
    """The findings as text lines on standard error, or as GitHub annotations."""
    for f in findings:
        if form == "text":
            print(finding_line(f), file=sys.stderr)
        elif form == "github":
            print(github_annotation(f))


def _where(path, line: int | None) -> str:
    return f"{_display_of(path)}:{line}" if line else _display_of(path)


class CheckJobRun:
    """What one check-job run judged: script files, pages and their blocks, for the summary,
    the JSON record and the exit status."""

    def __init__(self, site: str):
        self.site = site
        self.scripts: list[dict] = []  # every script judged: files and pages' blocks
        self.blocks: list[dict] = []  # every code block of every page, judged or skipped
        self.pages: dict = {}  # page -> its findings (a page that could not be read)
        self.plans: list[dict] = []
        self.status = 0

    def add_file(self, path, report):
        code = 2 if report.unusable else 1 if report.errors else 0
        self.scripts.append({"file": _display_of(path), "status": code, **_findings(report)})
        self.status = max(self.status, code)
        return report

    def add_page(self, page) -> list:
        self.pages[page.path] = page.findings
        if page.findings:
            self.status = 2
        for b in page.blocks:
            where = {"file": _display_of(page.path), "line": b.block.line}
            about = {"language": b.block.lang, "kind": b.block.kind, "reason": b.verdict.reason}
            if b.block.column:
                about["column"] = b.block.column
            if b.report is None:
                self.blocks.append({**where, **about, "judged": False})
                continue
            self.blocks.append({**where, **about, "judged": True, "status": b.status})
            self.scripts.append({**where, **about, "status": b.status, **_findings(b.report)})
            self.status = max(self.status, b.status)
        return [b.report for b in page.judged]

    def record(self) -> dict:
        """check-job --format json: every script judged with its findings and its own exit
        status; every code block of every page, judged or skipped, with the reason."""
        out = {"site": self.site, "status": self.status, "scripts": self.scripts}
        if self.pages:
            out["blocks"] = self.blocks
            out["pages"] = [
                {
                    "file": _display_of(path),
                    "blocks": sum(b["file"] == _display_of(path) for b in self.blocks),
                    **({"findings": [_finding(f) for f in found]} if found else {}),
                }
                for path, found in self.pages.items()
            ]
        return out

    def summary(self, title: str) -> list[str]:
        lines = []
        if self.pages:
            judged = sum(b["judged"] for b in self.blocks)
            lines.append(
                f"{_count(len(self.pages), 'page')}: {_count(len(self.blocks), 'code block')}, "
                f"{_count(judged, 'job script')} judged, {len(self.blocks) - judged} skipped "
                "(-v lists each block)"
            )
        if len(self.scripts) > 1 or self.pages:
            lines.append(f"{_count(len(self.scripts), 'script')} judged against {title}")
        return lines


def _count(n: int, thing: str) -> str:
    return f"{n} {thing}" + ("" if n == 1 else "s")


def _display_of(path) -> str:
    from clusterkit.sites.errors import _display

    return _display(path)


def _finding(f) -> dict:
    return {"line": f.line or None, "level": f.level, "rule": f.rule, "message": f.message}


def _findings(report) -> dict:
    return {"findings": [_finding(f) for f in report.findings]}


def github_annotation(f) -> str:
    """A GitHub Actions workflow command (``::error file=F,line=N,title=[rule]::message``), so
    that the finding shows on the line of the pull request's diff."""
    from clusterkit.sites.errors import _display

    def data(text: str) -> str:
        return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")

    def prop(text: str) -> str:
        return data(text).replace(":", "%3A").replace(",", "%2C")

    where = f"file={prop(_display(f.path))}" + (f",line={f.line}" if f.line else "")
    kind = "error" if f.level == "error" else "warning"
    return f"::{kind} {where},title={prop(f'check-job [{f.rule}]')}::{data(f.message)}"


def expand_paths(patterns: list[str]) -> list[Path]:
    """Each argument as a path, or the files its glob pattern matches (for a pattern the shell
    did not expand, quoted or on Windows), in order; a pattern that matches nothing stays as
    written, so that it is reported as a file that is not there."""
    import glob

    out: list[Path] = []
    for pattern in patterns:
        hits = sorted(glob.glob(pattern, recursive=True)) if glob.has_magic(pattern) else []
        out += [Path(h) for h in hits if not Path(h).is_dir()] or [Path(pattern)]
    return out


def finding_line(f) -> str:
    """``FILE:LINE: level: [rule] message`` (no ``:LINE`` for a finding about the whole
    file), the level always named."""
    text = str(f)
    if f.level == "error":
        where, sep, rest = text.partition(": [")
        return f"{where}: error: [{rest}" if sep else text
    return text


def cmd_shims(args: argparse.Namespace) -> int:
    from clusterkit.runs import shimdir

    print(shimdir.ensure(Path(args.dir) if args.dir else None))
    return 0


def cmd_modulefiles(args: argparse.Namespace) -> int:
    from clusterkit.sites.lmod import write_modulefiles
    from clusterkit.sites.profiles import load_site

    print(write_modulefiles(load_site(args.site), Path(args.out)))
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    """Every static check, without training runs: what writers run before each commit."""
    from clusterkit.pages import fast

    return fast.main([])


def cmd_new_site(args: argparse.Namespace) -> int:
    """The files of a new site, its facts left as fill-in markers (clusterkit.pages.scaffold)."""
    from clusterkit.pages import scaffold

    extra = ["--title", args.title] if args.title else []
    return scaffold.main([args.name, *extra, *(["--dry-run"] if args.dry_run else [])])


def cmd_plan(args: argparse.Namespace) -> int:
    """The memory a language-model run takes on each GPU (clusterkit.emulate.memory_plan)."""
    from clusterkit.emulate import memory_plan

    return memory_plan.main(args)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="clusterkit", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("profiles", help="validate site profiles (default: all of sites/)")
    s.add_argument("files", nargs="*")
    s.set_defaults(func=cmd_profiles)
    s = sub.add_parser(
        "check-job",
        help="judge job scripts against a site (dry run); --site generic: any Slurm site",
        description="Judge job scripts as the site's scheduler and shell would take them: "
        "script files, and the job scripts in the code blocks of Markdown, reStructuredText "
        "and HTML pages. One line per finding (FILE:LINE: LEVEL: [RULE] MESSAGE, a page's "
        "own line numbers for its blocks); exit status 1 when any script has an error, 2 when "
        "a path holds nothing to read.",
    )
    s.add_argument(
        "--site",
        required=True,
        help="a profile of sites/, or generic: every rule that needs no site facts",
    )
    s.add_argument("--plan", action="store_true", help="print the plan as JSON")
    s.add_argument(
        "--allow-foreign",
        action="store_true",
        help="judge a script that holds another scheduler's directives (#PBS or #BSUB under "
        "a Slurm site, #SBATCH under an LSF site) as it stands: a warning, not an error",
    )
    s.add_argument(
        "--format",
        choices=("text", "json", "github"),
        default="text",
        help="text: one line per finding on standard error (default); json: one record of "
        "every script and finding, and of every code block of the pages, on standard output; "
        "github: GitHub Actions annotations on standard output, shown on the lines of a pull "
        "request",
    )
    s.add_argument(
        "--ranks",
        type=int,
        default=16,
        metavar="N",
        help="with --plan: ranks written out per step, with their environment (default 16)",
    )
    s.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="list every code block of the pages named, judged or skipped, with the reason",
    )
    s.add_argument(
        "scripts",
        nargs="+",
        metavar="FILE",
        help="job scripts, or pages (.md, .rst, .html) whose code blocks hold job scripts; "
        "files or glob patterns (quoted: 'docs/**/*.md')",
    )
    s.set_defaults(func=cmd_check_job)
    s = sub.add_parser("check", help="every static check (profiles, job scripts, lint)")
    s.set_defaults(func=cmd_check)
    s = sub.add_parser("shims", help="write the shim executables; print their directory")
    s.add_argument("--dir")
    s.set_defaults(func=cmd_shims)
    s = sub.add_parser("modulefiles", help="write Lmod modulefiles for a site")
    s.add_argument("--site", required=True)
    s.add_argument("--out", required=True)
    s.set_defaults(func=cmd_modulefiles)
    s = sub.add_parser(
        "new-site", help="write a new site's profile, pages and job scripts with fill-in markers"
    )
    s.add_argument("name", help="lowercase words joined by hyphens (isambard-ai)")
    s.add_argument("--title", help="the site's name as its documentation writes it")
    s.add_argument("--dry-run", action="store_true", help="list the files; write nothing")
    s.set_defaults(func=cmd_new_site)
    s = sub.add_parser(
        "plan",
        help="the memory fine-tuning a language model takes on each GPU, and the GPUs it needs",
    )
    from clusterkit.emulate import memory_plan

    memory_plan.add_arguments(s)
    s.set_defaults(func=cmd_plan)
    return p


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        sys.exit(args.func(args))
    except CheckError as exc:
        print(exc, file=sys.stderr)
        sys.exit(1)
    except ModuleNotFoundError as exc:
        print(f"clusterkit {args.command}: {missing_package(exc)}", file=sys.stderr)
        sys.exit(1)
