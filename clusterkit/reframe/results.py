"""Import a ReFrame run report into the recorded results (``results/*.yaml``).

``python -m clusterkit.reframe.results REPORT.json --out results/measured.yaml`` reads the JSON
report that ``reframe ... --report-file REPORT.json`` writes (ReFrame 4.x, report data version
4.x: ``session_info``, ``runs[].testcases[]`` with ``system``, ``partition``, ``environ``,
``scheduler``, ``result``, ``fail_phase``, ``perfvalues`` keyed ``system:partition:variable``
holding ``[value, reference, lower, upper, unit, result]``, ``job_completion_time`` and the
checks' loggable variables) and turns every performance value of every test case into one
result entry: site, partition, nodes, GPUs, metric, value and unit, the date the job
finished, the project's commit and the software versions the check recorded.

Entries are merged into the output file; an entry whose id is already in any results file
of that directory is left alone, so importing the same report twice changes nothing.

A report is imported as ``kind: example`` when it says it is one (a top-level
``clusterkit_example`` note) or when its jobs ran with ReFrame's ``local`` scheduler (a
rehearsal made with ``clusterkit.reframe.config --local``): such figures are not measurements
of the site they are named after, and ``{last-verified}`` ignores them.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from clusterkit.sites import results as recorded
from clusterkit.sites.errors import CheckError, Finding
from clusterkit.sites.profiles import ROOT

EXAMPLE_KEY = "clusterkit_example"
PASSED = {"pass", "success"}  # ReFrame 4.x says pass, older 4.x reports success
REHEARSAL_SCHEDULERS = {"local"}
# settings worth keeping from a test case's loggable variables
SETTINGS = (
    "scale",
    "target",
    "steps",
    "example",
    "executable_opts",
    "num_tasks",
    "num_tasks_per_node",
    "num_cpus_per_task",
    "tiny",
)


@dataclass
class ImportResult:
    added: list[dict] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (case, why)


def read_report(path: Path) -> dict:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckError([Finding(path, 0, "report-read", str(exc))]) from None
    missing = [k for k in ("session_info", "runs") if k not in data]
    if missing:
        raise CheckError(
            [
                Finding(
                    path,
                    0,
                    "report-format",
                    f"not a ReFrame run report: no {', '.join(missing)}",
                )
            ]
        )
    version = str(data["session_info"].get("data_version", ""))
    if not version.startswith("4."):
        raise CheckError(
            [
                Finding(
                    path,
                    0,
                    "report-version",
                    f"report data version {version or '?'}; this importer reads ReFrame 4.x "
                    "reports (data version 4.x)",
                )
            ]
        )
    return data


def last_attempts(report: dict) -> list[dict]:
    """Each test case once: its last run (ReFrame retries failed cases in later runs)."""
    cases: dict[tuple, dict] = {}
    for run in report.get("runs", []):
        for tc in run.get("testcases", []):
            key = (tc.get("unique_name") or tc.get("name"), tc.get("system"), tc.get("partition"))
            key += (tc.get("environ"),)
            cases[key] = tc
    return list(cases.values())


def _date(tc: dict, report: dict) -> str:
    when = tc.get("job_completion_time_unix") or report["session_info"].get("time_end_unix")
    if when:
        return dt.datetime.fromtimestamp(float(when), tz=dt.UTC).date().isoformat()
    text = tc.get("job_completion_time") or ""
    if re.match(r"\d{4}-\d{2}-\d{2}", text):
        return text[:10]
    raise ValueError("the report gives no completion time")


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9_.-]+", "-", text.lower()).strip("-")


def _shape(tc: dict) -> tuple[int | None, int | None]:
    nodes = tc.get("nodes_used") or None
    gpus = tc.get("gpus_used")
    if not nodes and tc.get("num_tasks") and tc.get("num_tasks_per_node"):
        nodes = max(1, int(tc["num_tasks"]) // int(tc["num_tasks_per_node"]))
    if gpus in (None, 0):
        res = (tc.get("extra_resources") or {}).get("gpu") or {}
        gpus = res.get("num_gpus") or gpus
    return (int(nodes) if nodes else None), (int(gpus) if gpus is not None else None)


def entries(report: dict, report_path: Path, kind: str | None = None) -> ImportResult:
    """Result entries for every performance value of the report's test cases."""
    out = ImportResult()
    info = report["session_info"]
    marked = EXAMPLE_KEY in report
    session = str(info.get("uuid") or info.get("session_uuid") or "")[:8]
    try:
        file_ref = str(Path(report_path).resolve().relative_to(ROOT))
    except ValueError:
        file_ref = Path(report_path).name
    for tc in last_attempts(report):
        name = tc.get("display_name") or tc.get("name") or "?"
        where = f"{tc.get('system')}:{tc.get('partition')}"
        label = f"{name} @{where}+{tc.get('environ')}"
        if tc.get("fixture"):
            continue
        if tc.get("result") not in PASSED and tc.get("fail_phase") != "performance":
            out.skipped.append((label, f"{tc.get('result')} in {tc.get('fail_phase')}"))
            continue
        rehearsal = tc.get("scheduler") in REHEARSAL_SCHEDULERS
        this_kind = kind or ("example" if marked or rehearsal else "measured")
        if this_kind == "measured" and (marked or rehearsal):
            why = (
                "the report is marked as an example"
                if marked
                else (
                    f"it ran with ReFrame's {tc.get('scheduler')} scheduler (a rehearsal), not on "
                    f"{tc.get('system')}"
                )
            )
            raise CheckError([Finding(report_path, 0, "report-not-measured", f"{label}: {why}")])
        try:
            date = _date(tc, report)
        except ValueError as exc:
            out.skipped.append((label, str(exc)))
            continue
        nodes, gpus = _shape(tc)
        benchmark = tc.get("benchmark") or _slug(str(tc.get("name", "")).split()[0])
        for key, values in (tc.get("perfvalues") or {}).items():
            metric = key.split(":")[-1]
            value, ref, lower, upper, unit, *verdict = (list(values) + [None] * 6)[:6]
            if value is None:
                out.skipped.append((f"{label} {metric}", "no value"))
                continue
            shape = f"{nodes or 0}n{gpus or 0}g"
            rid = _slug(
                f"{tc['system']}-{benchmark}-{tc['partition']}-{shape}-{metric}-{date}-{session}"
            )
            if this_kind == "example":
                rid = _slug(f"example-{rid}")
            entry: dict = {
                "id": rid,
                "benchmark": benchmark,
                "kind": this_kind,
                "site": tc["system"],
                "partition": tc["partition"],
            }
            if nodes:
                entry["nodes"] = nodes
            if gpus is not None:
                entry["gpus"] = gpus
            entry.update(metric=metric, value=float(value), unit=unit or "", date=date)
            if tc.get("software"):
                entry["software"] = {str(k): str(v) for k, v in tc["software"].items()}
            settings = {k: tc[k] for k in SETTINGS if tc.get(k) not in (None, "", [], {})}
            settings["environ"] = tc.get("environ")
            entry["settings"] = settings
            if tc.get("clusterkit_commit"):
                entry["commit"] = str(tc["clusterkit_commit"])
            entry["source"] = {
                "title": f"ReFrame {info.get('version', '')} run {session} on {where}".strip(),
                "file": file_ref,
            }
            verdict = verdict[0] if verdict else None
            if ref:
                bounds = ", ".join(
                    f"{name} {bound:+.0%}"
                    for name, bound in (("lower", lower), ("upper", upper))
                    if bound is not None
                )
                entry["note"] = (
                    f"ReFrame {verdict or tc.get('result')} against the reference "
                    f"{ref:g} {unit} ({bounds or 'no bounds'})"
                )
            if this_kind == "example":
                why = (
                    f"the report is marked as an example ({EXAMPLE_KEY})"
                    if marked
                    else f"a rehearsal with ReFrame's {tc.get('scheduler')} scheduler on "
                    f"{info.get('hostname', 'another machine')}"
                )
                entry["note"] = f"EXAMPLE, not a measurement: {why}. {entry.get('note', '')}"
                entry["note"] = entry["note"].strip()
            out.added.append(entry)
    return out


def merge(out_path: Path, new: list[dict]) -> tuple[list[dict], list[str]]:
    """Add ``new`` entries to ``out_path`` (created if missing); returns (added, duplicates).

    Ids already used in any results file of the directory are duplicates and are not added.
    The file is validated with the results schema before it is written.
    """
    out_path = Path(out_path)
    known: set[str] = set()
    for other in sorted(out_path.parent.glob("*.yaml")):
        if other.name == "schema.yaml" or other.resolve() == out_path.resolve():
            continue
        try:
            known |= {r.id for r in recorded.load_file(other)}
        except CheckError:
            continue  # that file's own problems are reported by the results checks
    if out_path.is_file():
        data = yaml.safe_load(out_path.read_text(encoding="utf-8")) or {}
    else:
        data = {}
    data.setdefault("results", [])
    if not data.get("note"):
        if new and all(e["kind"] == "example" for e in new):
            data["note"] = (
                "EXAMPLES, not measurements: entries imported from example ReFrame reports with "
                "python -m clusterkit.reframe.results. Pages never count them as verified."
            )
        else:
            data["note"] = (
                "Figures measured by this project's ReFrame checks on the sites' machines, "
                "imported from ReFrame run reports with python -m clusterkit.reframe.results."
            )
    known |= {r["id"] for r in data["results"]}
    added, dups = [], []
    for e in new:
        if e["id"] in known:
            dups.append(e["id"])
            continue
        known.add(e["id"])
        data["results"].append(e)
        added.append(e)
    ordered = {"note": data["note"], "results": data["results"]}
    ordered.update({k: v for k, v in data.items() if k not in ordered})
    text = yaml.safe_dump(ordered, sort_keys=False, allow_unicode=True, width=100)
    tmp = out_path.with_suffix(out_path.suffix + ".tmp")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp.write_text(text, encoding="utf-8")
    try:
        recorded.load_file(tmp)  # schema and date rules, with file:line on failure
    except CheckError:
        tmp.unlink()
        raise
    tmp.replace(out_path)
    return added, dups


def import_report(
    report_path: Path, out_path: Path, kind: str | None = None
) -> tuple[ImportResult, list[str]]:
    report = read_report(report_path)
    result = entries(report, report_path, kind)
    added, dups = merge(out_path, result.added)
    result.added = added
    return result, dups


def staleness(loaded: list | None = None, today: dt.date | None = None) -> list[dict]:
    """Per site and benchmark: the newest measured result, its age, and whether pages show it
    as stale (older than ``results.STALE_AFTER_DAYS``). Benchmarks with only reported figures
    are listed as never measured. Examples never count."""
    loaded = recorded.load_all() if loaded is None else loaded
    today = today or dt.date.today()
    pairs = sorted({(r.site, r.benchmark) for r in loaded if r.kind != "example"})
    rows = []
    for site, bench in pairs:
        newest = recorded.last_verified(loaded, site, bench)
        if newest is None:
            rows.append(
                {
                    "site": site,
                    "benchmark": bench,
                    "date": None,
                    "age_days": None,
                    "status": "never measured",
                }
            )
            continue
        age = (today - newest.when).days
        rows.append(
            {
                "site": site,
                "benchmark": bench,
                "date": newest.date,
                "age_days": age,
                "status": "stale" if newest.is_stale(today) else "current",
                "id": newest.id,
            }
        )
    return rows


def print_staleness(rows: list[dict]) -> None:
    print(f"{'site':<10} {'benchmark':<22} {'last measured':<14} {'age':>6}  status")
    for r in rows:
        age = f"{r['age_days']}d" if r["age_days"] is not None else "-"
        print(
            f"{r['site']:<10} {r['benchmark']:<22} {r['date'] or '-':<14} {age:>6}  {r['status']}"
        )
    print(f"(stale: measured more than {recorded.STALE_AFTER_DAYS} days ago)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m clusterkit.reframe.results",
        description="Import a ReFrame run report (--report-file) into results/*.yaml.",
    )
    p.add_argument("report", type=Path, nargs="?", help="the JSON report ReFrame wrote")
    p.add_argument(
        "--staleness",
        action="store_true",
        help="instead of importing, list each site's benchmarks with the date of their newest "
        "measured result and whether it is stale",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=recorded.RESULTS_DIR / "measured.yaml",
        help="results file to merge into (default: results/measured.yaml)",
    )
    p.add_argument(
        "--kind",
        choices=["measured", "example"],
        help="default: measured, or example for reports marked as examples and rehearsals",
    )
    args = p.parse_args(argv)
    if args.staleness:
        try:
            print_staleness(staleness(recorded.load_all(args.out.parent)))
        except CheckError as exc:
            print(exc, file=sys.stderr)
            return 1
        return 0
    if args.report is None:
        p.error("give a report to import, or --staleness")
    try:
        result, dups = import_report(args.report, args.out, args.kind)
    except CheckError as exc:
        print(exc, file=sys.stderr)
        return 1
    for e in result.added:
        print(
            f"added {e['id']}: {e['site']}:{e['partition']} {e['metric']} "
            f"{e['value']:g} {e['unit']} ({e['kind']}, {e['date']})"
        )
    for rid in dups:
        print(f"already recorded: {rid}")
    for case, why in result.skipped:
        print(f"skipped {case}: {why}", file=sys.stderr)
    print(f"{args.out}: {len(result.added)} added, {len(dups)} already there")
    return 0


if __name__ == "__main__":
    sys.exit(main())
