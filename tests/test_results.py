"""Recorded results: validation, 'last verified', staleness."""

from __future__ import annotations

import datetime as dt

import pytest
import yaml

from clusterkit.sites import results
from clusterkit.sites.errors import CheckError


def _write(tmp_path, entries):
    (tmp_path / "schema.yaml").write_text((results.RESULTS_DIR / "schema.yaml").read_text())
    (tmp_path / "r.yaml").write_text(yaml.safe_dump({"results": entries}))


def _measured(day: str, value: float = 3000.0, rid: str = "m1") -> dict:
    return {
        "id": rid,
        "benchmark": "resnet50-pytorch",
        "kind": "measured",
        "site": "bede",
        "partition": "gpu",
        "metric": "throughput",
        "value": value,
        "unit": "img/s",
        "date": day,
        "source": {"title": "ReFrame run"},
    }


def test_the_recorded_results_are_valid():
    loaded = results.load_all()
    assert any(r.kind == "reported" and r.site == "bede" for r in loaded)


def test_last_verified_follows_the_newest_measured_result(tmp_path):
    _write(tmp_path, [_measured("2026-01-10"), _measured("2026-09-01", 3100, "m2")])
    loaded = results.load_all(tmp_path)
    newest = results.last_verified(loaded, "bede")
    assert newest.id == "m2"
    assert not newest.is_stale(dt.date(2026, 11, 22))
    assert results.last_verified(loaded, "archer2") is None
    old = results.last_verified(results.load_all(tmp_path), "bede", "resnet50-pytorch")
    assert old.is_stale(dt.date(2027, 6, 1))


def test_a_measured_result_needs_a_date_and_errors_name_the_line(tmp_path):
    entry = _measured("2026-01-10")
    del entry["date"]
    _write(tmp_path, [entry])
    with pytest.raises(CheckError, match=r"r\.yaml:\d+: \[result-date\]"):
        results.load_all(tmp_path)
    _write(tmp_path, [dict(_measured("2026-01-10"), value="fast")])
    with pytest.raises(CheckError, match=r"\[schema:type\]"):
        results.load_all(tmp_path)
