"""The untuned corpus's manifest (tests/corpus/untuned/manifest.yaml) is well formed.

The repository keeps the facts about each script, not the sites' text: every entry names its
origin (repository, commit, path, line) and digest, a verdict that follows from its problems,
evidence for each problem and a part; the parts follow the recorded split rule and are
stratified by site. The scripts themselves are rebuilt from the sites' repositories by
benchmarks/collect_corpus.py (tested in tests/test_collect_corpus.py), and agreement of the
checker with the verdicts is measured by benchmarks/check_corpus.py, not asserted here.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from pathlib import Path

import pytest
import yaml

CORPUS = Path(__file__).resolve().parent / "corpus" / "untuned"
MANIFEST = yaml.safe_load((CORPUS / "manifest.yaml").read_text(encoding="utf-8"))
ENTRIES = MANIFEST["scripts"]
CLASSES = ("accept", "warn", "refuse")
SEVERITY = {"fill-in": 0, "warning": 1, "error": 2}
SHA = re.compile(r"[0-9a-f]{40}")
DIGEST = re.compile(r"[0-9a-f]{16}")


def class_of(problems: list[dict]) -> str:
    return CLASSES[max((SEVERITY[p["severity"]] for p in problems), default=0)]


def test_every_file_is_listed_once_and_no_text_is_kept():
    listed = [e["file"] for e in ENTRIES]
    assert len(listed) == len(set(listed)), Counter(listed).most_common(3)
    digests = [e["digest"] for e in ENTRIES]
    assert len(digests) == len(set(digests)), Counter(digests).most_common(3)
    kept = sorted(p.relative_to(CORPUS).as_posix() for p in CORPUS.rglob("*") if p.is_file())
    assert kept == ["README.md", "manifest.yaml"], "the sites' scripts are rebuilt, not kept"


def test_the_sources_name_their_commits():
    repos = MANIFEST["repositories"]
    assert all(SHA.fullmatch(c) for c in repos.values()), repos
    for key, src in MANIFEST["sources"].items():
        assert src["commit"] == repos[src["repo"]], key
        assert src["path"] and src["lines"] and len(src["fact"]) > 10, key
    for name, system in MANIFEST["systems"].items():
        assert system["sources"] and set(system["sources"]) <= set(MANIFEST["sources"]), name
        assert system["measure_with"], name


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["file"] for e in ENTRIES])
def test_entry_is_complete(entry):
    for key in ("site", "system", "part", "form", "repo", "commit", "path", "line", "digest"):
        assert entry.get(key) not in (None, ""), key
    assert entry["file"].startswith(entry["site"] + "/")
    assert entry["scheduler"] == "slurm" and entry["form"] == "script"
    assert entry["commit"] == MANIFEST["repositories"][entry["repo"]]
    assert entry["system"] in MANIFEST["systems"]  # CSC's pages also cover LUMI
    assert entry["file"].endswith(".sbatch") and int(entry["line"]) >= 1
    assert DIGEST.fullmatch(entry["digest"]), entry["digest"]
    assert bool(entry.get("rendered")) == bool(entry.get("source_digest"))
    if entry.get("rendered"):
        assert DIGEST.fullmatch(entry["source_digest"]) and entry["repo"] == "eth-cscs/cscs-docs"


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["file"] for e in ENTRIES])
def test_verdict_follows_from_the_problems(entry):
    evidence = set(MANIFEST["sources"]) | set(MANIFEST["generic_evidence"])
    for p in entry["problems"]:
        assert p["severity"] in SEVERITY and p["kind"] and len(p["why"]) > 10, p
        assert isinstance(p["line"], int) and p["line"] >= 0, p
        assert p["evidence"] in evidence, p
        assert isinstance(p["site_facts"], bool), p
    assert entry["expected"] == class_of(entry["problems"])
    generic = [p for p in entry["problems"] if not p["site_facts"]]
    assert entry["expected_generic"] == class_of(generic)


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["file"] for e in ENTRIES])
def test_part_follows_the_split_rule(entry):
    name = entry["file"].split("/", 1)[1]
    digest = int(hashlib.sha256(f"{entry['site']}/{name}".encode()).hexdigest(), 16)
    assert entry["part"] == ("holdout" if digest % 2 else "tune")


def test_parts_are_large_enough_and_stratified_by_site():
    assert len(ENTRIES) >= 150
    parts = Counter(e["part"] for e in ENTRIES)
    assert set(parts) == {"tune", "holdout"} and min(parts.values()) >= 60, parts
    for part in parts:
        sites = {e["site"] for e in ENTRIES if e["part"] == part}
        assert len(sites) >= 3, (part, sites)
    for site, n in Counter(e["site"] for e in ENTRIES).items():
        tune = sum(e["site"] == site and e["part"] == "tune" for e in ENTRIES)
        assert 0.4 <= tune / n <= 0.6, (site, tune, n)
