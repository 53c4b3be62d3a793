"""``python -m clusterkit``: maintainer commands (validate profiles, check a job script, ...)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from clusterkit.sites.errors import CheckError


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
    """Judge every script named (files or glob patterns): one line per finding, then one exit
    status for them all -- 2 when a path held no script to read, else 1 when any script has an
    error, else 0."""
    from clusterkit.emulate import foreign
    from clusterkit.emulate.checkjob import check_job_file
    from clusterkit.emulate.report import with_ranks
    from clusterkit.sites.profiles import load_site

    site = load_site(args.site)
    paths = expand_paths(args.scripts)
    status, plans, judged = 0, [], []
    for path in paths:
        report = check_job_file(path, site)
        if args.allow_foreign:
            foreign.allow(report)
        code = 2 if report.unusable else 1 if report.errors else 0
        judged.append((path, report.findings, code))
        if args.format == "text":
            for f in report.findings:
                print(finding_line(f), file=sys.stderr)
        elif args.format == "github":
            for f in report.findings:
                print(github_annotation(f))
        if args.plan:
            plans.append(with_ranks(report, args.ranks))
        status = max(status, code)
    if args.format == "json":
        print(json.dumps(json_record(site.name, judged, status), indent=2))
    if args.plan:
        print(json.dumps(plans[0] if len(plans) == 1 else plans, indent=2))
    if len(paths) > 1 and args.format == "text":
        print(f"{len(paths)} scripts judged against {site.title}", file=sys.stderr)
    return status


def json_record(site: str, judged: list, status: int) -> dict:
    """check-job --format json: every script with its findings and its own exit status."""
    from clusterkit.sites.errors import _display

    return {
        "site": site,
        "status": status,
        "scripts": [
            {
                "file": _display(path),
                "status": code,
                "findings": [
                    {
                        "line": f.line or None,
                        "level": f.level,
                        "rule": f.rule,
                        "message": f.message,
                    }
                    for f in findings
                ],
            }
            for path, findings, code in judged
        ],
    }


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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="clusterkit", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("profiles", help="validate site profiles (default: all of sites/)")
    s.add_argument("files", nargs="*")
    s.set_defaults(func=cmd_profiles)
    s = sub.add_parser(
        "check-job",
        help="judge job scripts against a site (dry run); --site generic: any Slurm site",
        description="Judge job scripts as the site's scheduler and shell would take them. "
        "One line per finding (FILE:LINE: LEVEL: [RULE] MESSAGE); exit status 1 when any "
        "script has an error, 2 when a path holds no script.",
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
        "every script and finding on standard output; github: GitHub Actions annotations on "
        "standard output, shown on the lines of a pull request",
    )
    s.add_argument(
        "--ranks",
        type=int,
        default=16,
        metavar="N",
        help="with --plan: ranks written out per step, with their environment (default 16)",
    )
    s.add_argument("scripts", nargs="+", metavar="SCRIPT", help="files or glob patterns")
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
    return p


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        sys.exit(args.func(args))
    except CheckError as exc:
        print(exc, file=sys.stderr)
        sys.exit(1)
