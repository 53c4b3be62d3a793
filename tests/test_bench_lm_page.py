"""docs/benchmarks/language-models.md quotes the records of benchmarks/bench_lm.py: each row of
its table holds the figures of the record it names, as the record holds them."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "benchmarks" / "language-models.md"
ROW = re.compile(r"^\| (?P<cells>.*`results/bench/(?P<record>[^`]+\.json)`) \|$", re.M)


def rows() -> list[tuple[list[str], dict]]:
    out = []
    for m in ROW.finditer(PAGE.read_text(encoding="utf-8")):
        cells = [c.strip() for c in m["cells"].split(" | ")]
        record = json.loads((ROOT / "results" / "bench" / m["record"]).read_text())
        out.append((cells, record))
    return out


def test_each_row_gives_its_record_s_figures():
    found = rows()
    assert len(found) >= 3, "the page's table of records is missing"
    for cells, rec in found:
        date, procs, rounds, precision, ours, theirs, ratio, cpu_ratio, load = cells[:9]
        assert date == rec["date"][:16].replace("T", " "), (date, rec["date"])
        assert int(procs) == rec["settings"]["nproc"]
        assert int(rounds) == len(rec["rounds"])
        assert precision == rec["model"]["precision"]["train_lm.py"]
        assert float(ours.replace(",", "")) == rec["median_tokens_s"]["train_lm.py"]
        assert float(theirs.replace(",", "")) == rec["median_tokens_s"]["transformers Trainer"]
        low, high = rec["ratio_range"]
        assert ratio == f"{rec['median_ratio']:.3f} ({low:.3f}-{high:.3f})", ratio
        assert cpu_ratio == f"{rec['median_cpu_ratio']:.3f}", cpu_ratio
        assert load == f"{rec['load_average']['start'][0]:.1f}", load


def test_every_record_of_the_benchmark_is_on_the_page():
    named = {m[1] for m in ROW.findall(PAGE.read_text(encoding="utf-8"))}
    kept = {p.name for p in (ROOT / "results" / "bench").glob("*lm-tiny*.json")}
    assert kept == named, sorted(kept ^ named)
