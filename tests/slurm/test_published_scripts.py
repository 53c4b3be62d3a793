"""The sites' own published job scripts (tests/corpus/published) against the real Slurm.

Every Slurm script of the corpus is submitted with ``sbatch --test-only`` to the cluster
generated from its site's profile twice: as published, and with its account placeholders
filled in with the profile's example account (``fill_placeholders``). The second verdict is
the expected one the emulator is held to (tests/test_published_corpus.py); both, with Slurm's
words, must be those the manifest records. A change of verdict means the profile, the
cluster generator or the corpus changed: re-record with

    CLUSTERKIT_RECORD_PUBLISHED=/tmp/verdicts.jsonl nox -s slurm -- -k published
    python -m clusterkit.sites.published_manifest --record /tmp/verdicts.jsonl
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from clusterkit.sites import published_manifest as M
from clusterkit.sites.profiles import load_site
from tests.slurm.test_real_slurm import real_verdict

MANIFEST = M.load()
ENTRIES = [e for e in MANIFEST.get("scripts", []) if e["scheduler"] == "slurm"]
RECORD = os.environ.get("CLUSTERKIT_RECORD_PUBLISHED")


def _record(entry: dict, observed: dict) -> None:
    if RECORD:
        with open(RECORD, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"file": entry["file"], **observed}) + "\n")


def test_corpus_has_slurm_scripts_of_each_site():
    sites = {e["site"] for e in ENTRIES}
    assert {"bede", "archer2"} <= sites, sites


@pytest.mark.parametrize(
    ("site", "entry"), [pytest.param(e["site"], e, id=e["file"]) for e in ENTRIES]
)
def test_slurm_verdict_is_the_recorded_one(site, entry, slurm_env, tmp_path):
    script = M.script_path(entry)
    if not script.is_file():
        pytest.skip(f"the script's text is not kept here; rebuild it: {M.rebuild_command()}")
    env = slurm_env(site)
    # the test cluster runs none of the site's SPANK plugins (Shifter): their options are
    # taken out first, and the emulator judges them against the plugin's own table
    text, plugin_options = M.strip_plugin_options(
        script.read_text(encoding="utf-8"), load_site(site)
    )
    if plugin_options:
        script = Path(tmp_path) / f"as-published-{script.name}"
        script.write_text(text, encoding="utf-8")
    ok, says = real_verdict(script, env)
    observed = {"as_published": {"verdict": M.verdict(ok), "says": M.normalise(says)}}
    text, filled = M.fill_placeholders(text, load_site(site))
    if filled:
        copy = Path(tmp_path) / script.name
        copy.write_text(text, encoding="utf-8")
        ok, says = real_verdict(copy, env)
    observed.update(verdict=M.verdict(ok), says=M.normalise(says), placeholders=filled)
    if plugin_options:
        observed["plugin_options"] = plugin_options
    _record(entry, observed)
    recorded = entry.get("slurm", {})
    assert M.verdict(ok) == entry["expected"], (
        f"{entry['file']}: Slurm now says {observed['says']!r}; the manifest expects "
        f"{entry['expected']} ({recorded.get('says')!r})"
    )
    assert observed["says"] == recorded.get("says"), entry["file"]
    if filled:
        assert observed["as_published"] == recorded.get("as_published"), entry["file"]
    assert observed.get("plugin_options") == recorded.get("plugin_options"), entry["file"]
