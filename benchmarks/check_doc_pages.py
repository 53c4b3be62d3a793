#!/usr/bin/env python3
"""``check-job`` over a centre's documentation: how many pages, code blocks and job scripts it
reads, what it finds, and how long it takes.

    python benchmarks/check_doc_pages.py N8-CIR-Bede/documentation=/tmp/bede-docs \\
        ARCHER2-HPC/archer2-docs=/tmp/archer2-docs --output results/bench/check-doc-pages.json

For each checkout (a git clone of the repository, outside this one), it runs the command a
centre would run from the checkout's root, ``python -m clusterkit check-job --site generic
--format json '**/*.md' '**/*.rst'`` (the patterns that match files there), and records facts
only -- the repository, its commit, the counts of pages, blocks judged and skipped (by
reason), findings by rule and level, the exit status, whether standard error held a
traceback, and the wall time -- never the pages' text.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from record import cpu_name, git_commit, write  # noqa: E402

PATTERNS = ("**/*.md", "**/*.rst")
PUBLISHED = ROOT / "tests" / "corpus" / "published" / "manifest.yaml"


def corpus_found(repo: str, commit: str, blocks: list[dict]) -> dict | None:
    """Of the published corpus's scripts from this repository's pages at this commit, how many
    check-job judged at the same page and line."""
    import yaml

    entries = [
        e
        for e in yaml.safe_load(PUBLISHED.read_text(encoding="utf-8"))["scripts"]
        if e["repo"] == repo and e["commit"] == commit and e["path"].endswith((".md", ".rst"))
    ]
    if not entries:
        return None
    judged = {(b["file"], b["line"]) for b in blocks if b["judged"]}
    found = [e for e in entries if (e["path"], e["line"]) in judged]
    missing = [f"{e['path']}:{e['line']}" for e in entries if e not in found]
    return {"scripts": len(entries), "judged_at_their_line": len(found), "missing": missing}


def _reason(block: dict) -> str:
    """The reason a block was skipped, without the name of the file an include shows."""
    return re.sub(r"^an include of .*?: ", "an include of a file: ", block["reason"])


def run(repo: str, checkout: Path, site: str) -> dict:
    """check-job over the checkout's pages, as its JSON record summed up."""
    patterns = [p for p in PATTERNS if glob.glob(p, root_dir=checkout, recursive=True)]
    cmd = [sys.executable, "-m", "clusterkit", "check-job", "--site", site, "--format", "json"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    r = subprocess.run(
        [*cmd, *patterns], capture_output=True, text=True, cwd=checkout, env=env, timeout=1800
    )
    wall = time.perf_counter() - start
    record = json.loads(r.stdout)
    blocks = record.get("blocks", [])
    findings: Counter = Counter()
    for script in record["scripts"]:
        for f in script["findings"]:
            findings[(f["rule"], f["level"])] += 1
    by_rule: dict[str, dict[str, int]] = {}
    for (rule, level), n in sorted(findings.items()):
        by_rule.setdefault(rule, {})[level] = n
    commit = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    return {
        "repo": repo,
        "commit": commit,
        "command": "python -m clusterkit check-job --site "
        + f"{site} --format json "
        + " ".join(f"'{p}'" for p in patterns),
        "exit_status": r.returncode,
        "traceback": "Traceback" in r.stderr,
        "wall_s": round(wall, 1),
        "pages": len(record.get("pages", [])),
        "blocks": len(blocks),
        "judged": sum(b["judged"] for b in blocks),
        "skipped": sum(not b["judged"] for b in blocks),
        "every_block_has_page_line_and_reason": all(
            b.get("file") and b.get("line") and b.get("reason") for b in blocks
        ),
        "skipped_by_reason": dict(Counter(_reason(b) for b in blocks if not b["judged"])),
        "judged_by_reason": dict(Counter(b["reason"] for b in blocks if b["judged"])),
        "scripts_with_errors": sum(s["status"] == 1 for s in record["scripts"]),
        "findings_by_rule": by_rule,
        "published_corpus": corpus_found(repo, commit, blocks),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkouts", nargs="+", metavar="OWNER/NAME=CHECKOUT")
    ap.add_argument("--site", default="generic")
    ap.add_argument("--output", type=Path, help="also write the JSON record here")
    args = ap.parse_args(argv)
    repos = []
    for item in args.checkouts:
        repo, sep, path = item.partition("=")
        if not sep:
            raise SystemExit(f"{item}: expected OWNER/NAME=CHECKOUT")
        repos.append(run(repo, Path(path).resolve(), args.site))
    record = {
        "benchmark": "check-doc-pages",
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "commit": git_commit(),
        "machine": {
            "cpu": cpu_name(),
            "cpus": os.cpu_count(),
            "load_average_1min_at_end": round(os.getloadavg()[0], 1),
        },
        "repositories": repos,
    }
    write(record, args.output)
    return 0 if all(not r["traceback"] for r in repos) else 1


if __name__ == "__main__":
    raise SystemExit(main())
