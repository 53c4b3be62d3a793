"""benchmarks/bench_jobcheck.py runs on small sizes and prints a row per site and node count,
for every profile, or says why a site is not benchmarked (the figures themselves are not
judged: they depend on the machine)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from clusterkit.sites.profiles import profile_paths

ROOT = Path(__file__).resolve().parent.parent


def test_jobcheck_benchmark_prints_a_table(tmp_path):
    out = tmp_path / "rows.json"
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_jobcheck.py"),
            "--nodes",
            "1",
            "2",
            "--output",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    record = json.loads(out.read_text())
    rows, left = record["rows"], record["not_benchmarked"]
    timed = {x["site"] for x in rows}
    assert {"bede", "archer2", "summit", "frontier"} <= timed
    assert not timed & set(left) and timed | set(left) == {p.stem for p in profile_paths()}
    assert all("no node count" in why for why in left.values()), left
    assert {(x["site"], x["nodes"]) for x in rows} == {(s, n) for s in timed for n in (1, 2)}
    # every generated script is one the site accepts, judged within the limit
    assert all(x["errors"] == 0 and x["seconds"] is not None for x in rows), rows
    assert r.stdout.splitlines()[0].split()[:4] == ["site", "partition", "nodes", "ranks"]
    assert len(r.stdout.splitlines()) == 2 + len(rows) + len(left)
