#!/usr/bin/env python3
"""The job-script checker against a corpus of expert verdicts: agreement, false alarms, misses.

Reads a corpus manifest (``tests/corpus/untuned/manifest.yaml`` by default; the published
corpus ``tests/corpus/published/manifest.yaml`` works too), judges every script whose verdict is
known with the command line a user types, ``python -m clusterkit check-job --site PROFILE FILE``
(run as a subprocess, so the figures do not depend on where the checker's modules live), and
compares what it says with the recorded verdict. Prints the figures and, with ``--output``,
writes them as a JSON record (date, commit, machine, and one row per script).

Which profile judges a script: ``--site`` for all of them when given (``--site generic`` for
sites that have no profile); otherwise the entry's ``profile``, else ``measure_with`` of its
system in the manifest's ``systems`` table, else its ``site`` (the published corpus, whose sites
are profiles).

What is counted, for every group (all, each part, each site, each part and site):

* agreement: the checker reports an error exactly when the verdict is ``refuse``;
* class agreement: the same three classes, the checker's being ``refuse`` (an error), ``warn``
  (a warning other than a fill-in notice: a rule whose name holds "placeholder" or "fill-in")
  or ``accept``;
* false alarms: verdict ``accept`` or ``warn``, the checker reports an error;
* misses: verdict ``refuse``, the checker reports none;
* right reason: of the agreed refusals, those where a checker error sits on a line the verdict
  names as an error (a verdict error on line 0, the script as a whole, cannot be matched);
* generic agreement: the same as agreement, against ``expected_generic`` (the verdict from the
  problems that need no site facts), where the manifest has it;
* generic estimate: what a generic mode could reach with today's rules -- the checker's errors
  under the rules that need a site profile (``SITE_FACT_RULES``: partitions, accounts, QoS, node
  sizes, time limits, module inventories) set aside, compared with ``expected_generic``: its
  agreement, false alarms and misses. An estimate from today's output, not a run of a mode.

Then the causes of disagreement: the checker's error rules on false alarms, the verdict's
problem kinds on misses, and the checker's warning rules on scripts the verdict accepts.

The untuned corpus keeps its manifest in the repository but not the scripts' text: rebuild
them first with ``benchmarks/collect_corpus.py`` (into ``_build/corpus/untuned/``, where this
program looks for them; ``--scripts DIR`` names another folder).

    python benchmarks/collect_corpus.py && python benchmarks/check_corpus.py
    python benchmarks/check_corpus.py tests/corpus/published/manifest.yaml --jobs 2
    python benchmarks/check_corpus.py --site generic --output results/bench/after.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MANIFEST = ROOT / "tests" / "corpus" / "untuned" / "manifest.yaml"
LIMIT_S = 60.0
CLASSES = ("accept", "warn", "refuse")
SEVERITY_CLASS = {"error": "refuse", "warning": "warn", "fill-in": "accept"}
FILL_IN_RULE = re.compile(r"placeholder|fill-in")
# checker rules that judge a request against a site profile's facts (set aside by the estimate)
SITE_FACT_RULES = frozenset(
    {
        "account-form",
        "account-required",
        "cpus-per-node",
        "gpu-type",
        "gpus-per-node",
        "gpus-per-task",
        "memory-per-node",
        "module-historical",
        "module-known",
        "module-removed",
        "node-count",
        "partition-exists",
        "partition-required",
        "partition-status",
        "qos-exists",
        "qos-gpu-limit",
        "qos-node-limit",
        "qos-partition",
        "qos-required",
        "qos-time-limit",
        "reservation-unknown",
        "step-cpus",
        "tasks-per-node",
        "time-limit",
    }
)
# path[:line]: [level: ][rule] message -- what check-job prints (clusterkit.cli.finding_line;
# an error's level was not written before it took many files)
FINDING = re.compile(
    r"^(?P<path>\S.*?)(?::(?P<line>\d+))?: "
    r"(?:(?P<level>[a-z]+): )?\[(?P<rule>[^\]]+)\] (?P<msg>.*)$"
)


@dataclass
class Outcome:
    """What the checker said about one script."""

    file: str
    profile: str
    rc: int | None
    seconds: float
    errors: list[tuple[int, str]] = field(default_factory=list)
    warnings: list[tuple[int, str]] = field(default_factory=list)
    failure: str = ""  # crash or timeout, with the last line of its output

    @property
    def verdict(self) -> str:
        if self.failure:
            return "failure"
        if self.errors or self.rc == 1:
            return "refuse"
        return self._warn_or_accept()

    @property
    def generic_verdict(self) -> str:
        """The verdict with the errors of site-fact rules set aside (see SITE_FACT_RULES)."""
        if self.failure:
            return "failure"
        if any(rule not in SITE_FACT_RULES for _, rule in self.errors):
            return "refuse"
        return self._warn_or_accept()

    def _warn_or_accept(self) -> str:
        if any(not FILL_IN_RULE.search(rule) for _, rule in self.warnings):
            return "warn"
        return "accept"


# --------------------------------------------------------------------------- the manifest
def load(manifest: Path) -> tuple[dict, list[dict]]:
    data = yaml.safe_load(manifest.read_text(encoding="utf-8")) or {}
    judged = [e for e in data.get("scripts", []) if e.get("expected") in CLASSES]
    return data, judged


def scripts_folder(manifest: Path, entries: list[dict]) -> Path:
    """The manifest's own folder when it holds the scripts (the published corpus), else the
    ignored folder that benchmarks/collect_corpus.py fills (the untuned corpus)."""
    if entries and (manifest.parent / entries[0]["file"]).is_file():
        return manifest.parent
    return ROOT / "_build" / "corpus" / manifest.parent.name


def profile_for(entry: dict, data: dict, override: str | None) -> str:
    if override:
        return override
    if entry.get("profile"):
        return entry["profile"]
    system = data.get("systems", {}).get(entry.get("system", ""), {})
    return system.get("measure_with") or entry["site"]


def problems_of(entry: dict) -> list[dict]:
    """The verdict's problems; the published corpus writes its refusals as ``errors``."""
    if "problems" in entry:
        return entry["problems"]
    return [
        {"kind": (e.get("rules") or ["?"])[0], "line": e.get("line", 0), "severity": "error"}
        for e in entry.get("errors", [])
    ]


# --------------------------------------------------------------------------- judging
def judge(path: Path, profile: str, python: str, limit: float) -> Outcome:
    cmd = [python, "-m", "clusterkit", "check-job", "--site", profile, str(path)]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    start = time.perf_counter()
    try:
        r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        return Outcome(
            str(path), profile, None, limit, failure=f"still judging after {limit:.0f} s"
        )
    seconds = time.perf_counter() - start
    out = Outcome(str(path), profile, r.returncode, round(seconds, 2))
    text = r.stderr + r.stdout
    for line in text.splitlines():
        m = FINDING.match(line)
        if not m:
            continue
        where = (int(m["line"] or 0), m["rule"])
        (out.errors if m["level"] in (None, "error") else out.warnings).append(where)
    if r.returncode not in (0, 1) or "Traceback (most recent call last)" in text:
        last = text.strip().splitlines()[-1] if text.strip() else ""
        out.failure = f"exit {r.returncode}: {last}"
    return out


def judge_all(
    entries: list[dict],
    base: Path,
    data: dict,
    override: str | None,
    python: str,
    jobs: int,
    limit: float,
) -> dict[str, Outcome]:
    def one(e: dict) -> tuple[str, Outcome]:
        return e["file"], judge(base / e["file"], profile_for(e, data, override), python, limit)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return dict(pool.map(one, entries))


# --------------------------------------------------------------------------- comparing
def right_reason(entry: dict, outcome: Outcome) -> bool:
    lines = {
        p["line"] for p in problems_of(entry) if p.get("severity", "error") == "error" and p["line"]
    }
    return any(line in lines for line, _ in outcome.errors)


def figures(rows: list[dict]) -> dict:
    n = len(rows)
    refuse = [r for r in rows if r["expected"] == "refuse"]
    others = [r for r in rows if r["expected"] != "refuse"]
    agreed = sum((r["expected"] == "refuse") == (r["checker"] == "refuse") for r in rows)
    exact = sum(r["expected"] == r["checker"] for r in rows)
    false_alarms = sum(r["checker"] == "refuse" for r in others)
    misses = sum(r["checker"] != "refuse" for r in refuse)
    caught = [r for r in refuse if r["checker"] == "refuse"]
    generic = [r for r in rows if r.get("expected_generic")]
    g_agreed = sum(
        (r["expected_generic"] == "refuse") == (r["checker"] == "refuse") for r in generic
    )
    g_refuse = [r for r in generic if r["expected_generic"] == "refuse"]
    g_others = [r for r in generic if r["expected_generic"] != "refuse"]
    e_agreed = sum(
        (r["expected_generic"] == "refuse") == (r["checker_generic"] == "refuse") for r in generic
    )
    e_fa = sum(r["checker_generic"] == "refuse" for r in g_others)
    e_miss = sum(r["checker_generic"] != "refuse" for r in g_refuse)

    def pct(a: int, b: int) -> float | None:
        return round(100 * a / b, 1) if b else None

    return {
        "scripts": n,
        "expected": dict(Counter(r["expected"] for r in rows)),
        "checker": dict(Counter(r["checker"] for r in rows)),
        "agreement": agreed,
        "agreement_pct": pct(agreed, n),
        "class_agreement": exact,
        "class_agreement_pct": pct(exact, n),
        "false_alarms": false_alarms,
        "false_alarm_pct": pct(false_alarms, n),
        "false_alarm_pct_of_not_refused": pct(false_alarms, len(others)),
        "misses": misses,
        "miss_pct_of_refused": pct(misses, len(refuse)),
        "refusals_caught": len(caught),
        "refusals_caught_right_line": sum(r["right_reason"] for r in caught),
        "failures": sum(r["checker"] == "failure" for r in rows),
        "generic_agreement": g_agreed if generic else None,
        "generic_agreement_pct": pct(g_agreed, len(generic)),
        "generic_estimate": {
            "agreement": e_agreed,
            "agreement_pct": pct(e_agreed, len(generic)),
            "false_alarms": e_fa,
            "false_alarm_pct": pct(e_fa, len(generic)),
            "misses": e_miss,
            "expected_generic_refuse": len(g_refuse),
        }
        if generic
        else None,
    }


def causes(rows: list[dict]) -> dict:
    """What the disagreements come from; each rule or kind counted once per script."""
    fa, miss, noise = Counter(), Counter(), Counter()
    g_fa, g_miss = Counter(), Counter()
    fa_files, miss_files = defaultdict(list), defaultdict(list)
    for r in rows:
        if r.get("expected_generic"):
            if r["expected_generic"] != "refuse" and r["checker_generic"] == "refuse":
                g_fa.update({rule for _, rule in r["errors"] if rule not in SITE_FACT_RULES})
            if r["expected_generic"] == "refuse" and r["checker_generic"] != "refuse":
                g_miss.update(
                    {
                        p["kind"]
                        for p in r["problems"]
                        if p.get("severity") == "error" and not p.get("site_facts")
                    }
                )
        if r["expected"] != "refuse" and r["checker"] == "refuse":
            for rule in sorted({rule for _, rule in r["errors"]}):
                fa[rule] += 1
                fa_files[rule].append(r["file"])
        if r["expected"] == "refuse" and r["checker"] != "refuse":
            for kind in sorted({p["kind"] for p in r["problems"] if p.get("severity") == "error"}):
                miss[kind] += 1
                miss_files[kind].append(r["file"])
        if r["expected"] == "accept":
            for rule in sorted({rule for _, rule in r["warnings"]}):
                noise[rule] += 1
    return {
        "false_alarms_by_checker_rule": dict(fa.most_common()),
        "misses_by_verdict_kind": dict(miss.most_common()),
        "warnings_on_accepted_scripts_by_rule": dict(noise.most_common()),
        "generic_estimate_false_alarms_by_rule": dict(g_fa.most_common()),
        "generic_estimate_misses_by_kind": dict(g_miss.most_common()),
        "false_alarm_files": {k: v for k, v in fa_files.items()},
        "miss_files": {k: v for k, v in miss_files.items()},
    }


def rows_of(entries: list[dict], outcomes: dict[str, Outcome]) -> list[dict]:
    rows = []
    for e in entries:
        o = outcomes[e["file"]]
        rows.append(
            {
                "file": e["file"],
                "site": e["site"],
                "system": e.get("system", e["site"]),
                "part": e.get("part", "all"),
                "gpu_ml": e.get("gpu_ml"),
                "profile": o.profile,
                "expected": e["expected"],
                "expected_generic": e.get("expected_generic"),
                "checker": o.verdict,
                "checker_generic": o.generic_verdict,
                "rc": o.rc,
                "seconds": o.seconds,
                "errors": o.errors,
                "warnings": o.warnings,
                "failure": o.failure,
                "right_reason": o.verdict == "refuse" and right_reason(e, o),
                "problems": [
                    {k: p.get(k) for k in ("kind", "line", "severity", "site_facts")}
                    for p in problems_of(e)
                ],
            }
        )
    return rows


def grouped(rows: list[dict]) -> dict:
    out = {"all": figures(rows)}
    keys = {
        "part": lambda r: r["part"],
        "site": lambda r: r["site"],
        "part_site": lambda r: f"{r['part']}/{r['site']}",
        "profile": lambda r: r["profile"],
    }
    for name, key in keys.items():
        groups = defaultdict(list)
        for r in rows:
            groups[key(r)].append(r)
        out[f"by_{name}"] = {k: figures(v) for k, v in sorted(groups.items())}
    return out


# --------------------------------------------------------------------------- printing
def table(title: str, groups: dict[str, dict]) -> list[str]:
    head = (
        f"{title:<15} {'n':>4} {'agree':>13} {'class':>13} {'f.alarm':>7} {'miss':>5}"
        f" {'right line':>10} {'vs generic':>13} {'estimate: agree/f.a./miss':>26}"
    )
    lines = [head, "-" * len(head)]
    for name, f in groups.items():
        gen, est = "-", "-"
        if f["generic_agreement"] is not None:
            gen = f"{f['generic_agreement']} ({f['generic_agreement_pct']}%)"
            e = f["generic_estimate"]
            est = f"{e['agreement']} ({e['agreement_pct']}%) / {e['false_alarms']} / {e['misses']}"
        lines.append(
            f"{name:<15} {f['scripts']:>4} {f['agreement']:>4} ({f['agreement_pct']:>5}%)"
            f" {f['class_agreement']:>4} ({f['class_agreement_pct']:>5}%) {f['false_alarms']:>7}"
            f" {f['misses']:>5} {f['refusals_caught_right_line']:>4}/{f['refusals_caught']:<5}"
            f" {gen:>13} {est:>26}"
        )
    return lines


def report(result: dict) -> str:
    g = result["figures"]
    out: list[str] = []
    for title, key in (
        ("", None),
        ("part", "by_part"),
        ("site", "by_site"),
        ("part/site", "by_part_site"),
        ("profile", "by_profile"),
    ):
        out += [*table(title, {"all": g["all"]} if key is None else g[key]), ""]
    c = result["causes"]
    for title, key in (
        ("false alarms, by the checker's error rule", "false_alarms_by_checker_rule"),
        ("misses, by the verdict's problem kind", "misses_by_verdict_kind"),
        (
            "warnings on scripts the verdict accepts, by rule",
            "warnings_on_accepted_scripts_by_rule",
        ),
        ("generic estimate: false alarms, by rule", "generic_estimate_false_alarms_by_rule"),
        ("generic estimate: misses, by the verdict's kind", "generic_estimate_misses_by_kind"),
    ):
        out.append(f"{title}:")
        out += [f"  {n:>4}  {k}" for k, n in c[key].items()] or ["     none"]
        out.append("")
    fails = [r for r in result["rows"] if r["failure"]]
    out += [f"failure: {r['file']}: {r['failure']}" for r in fails]
    return "\n".join(out)


def machine() -> dict:
    try:
        names = re.findall(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
    except OSError:
        names = []
    return {
        "cpu": names[0] if names else platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "system": platform.platform(),
        "python": platform.python_version(),
    }


def commit() -> str | None:
    r = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    return r.stdout.strip() or None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("manifest", nargs="?", type=Path, default=DEFAULT_MANIFEST)
    ap.add_argument(
        "--scripts",
        type=Path,
        help="the folder the manifest's files are in (default: the manifest's own folder when "
        "it holds them, else _build/corpus/<its name>, where benchmarks/collect_corpus.py "
        "writes them)",
    )
    ap.add_argument("--site", help="judge every script with this profile (e.g. generic)")
    ap.add_argument("--part", help="only this part (tune or holdout)")
    ap.add_argument("--jobs", type=int, default=1, help="scripts judged at once (default 1)")
    ap.add_argument("--limit", type=float, default=LIMIT_S, help="seconds per script")
    ap.add_argument("--python", default=sys.executable, help="the Python that runs the checker")
    ap.add_argument("--output", type=Path, help="also write the JSON record here")
    args = ap.parse_args(argv)

    manifest = args.manifest.resolve()
    data, entries = load(manifest)
    if args.part:
        entries = [e for e in entries if e.get("part") == args.part]
    if not entries:
        print(f"{manifest}: no script with a known verdict", file=sys.stderr)
        return 2
    base = args.scripts or scripts_folder(manifest, entries)
    absent = [e["file"] for e in entries if not (base / e["file"]).is_file()]
    if absent:
        print(
            f"{base}: {len(absent)} of the manifest's scripts are not there (first: {absent[0]});"
            " rebuild them with benchmarks/collect_corpus.py",
            file=sys.stderr,
        )
        return 2
    start = time.perf_counter()
    outcomes = judge_all(entries, base, data, args.site, args.python, args.jobs, args.limit)
    rows = rows_of(entries, outcomes)
    try:
        shown = str(manifest.relative_to(ROOT))
    except ValueError:
        shown = str(manifest)
    result = {
        "benchmark": "check-corpus",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "commit": commit(),
        "machine": machine(),
        "manifest": shown,
        "scripts": str(base.relative_to(ROOT)) if base.is_relative_to(ROOT) else str(base),
        "settings": {
            "command": "python -m clusterkit check-job --site PROFILE FILE",
            "site_override": args.site,
            "part": args.part,
            "jobs": args.jobs,
            "limit_s": args.limit,
        },
        "wall_s": round(time.perf_counter() - start, 1),
        "figures": grouped(rows),
        "causes": causes(rows),
        "rows": rows,
    }
    print(report(result))
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(result, indent=1, default=list) + "\n", encoding="utf-8")
        print(f"written: {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
