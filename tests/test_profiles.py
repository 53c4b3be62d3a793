"""Site profiles: every profile is valid, and a broken one is reported with file, line and rule."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from clusterkit.errors import ProfileError
from clusterkit.profiles import (
    all_sites,
    duration_seconds,
    load_profile,
    load_site,
    profile_paths,
)

ROOT = Path(__file__).resolve().parent.parent
SITES = [p.stem for p in profile_paths()]


def test_the_three_sites_have_profiles():
    assert {"bede", "summit", "archer2"} <= set(SITES)


@pytest.mark.parametrize("name", SITES)
def test_profile_is_valid(name):
    site = load_site(name)
    assert site.partitions, "a site needs partitions"
    for part in site.partitions.values():
        assert part.max_walltime_s > 0


def test_lifecycles_match_the_sites_history():
    assert load_site("summit").data["lifecycle"]["retired"] == "2024-11-15"
    assert load_site("summit").status == "retired"
    assert load_site("archer2").status in {"end-of-service", "retired"}
    assert load_site("bede").is_current
    arches = {nt.arch for nt in load_site("bede").node_types.values()}
    assert {"ppc64le", "aarch64"} <= arches, "Bede has POWER9 and Grace-Hopper nodes"


def _copy(tmp_path: Path, name: str, edit) -> Path:
    src = ROOT / "sites" / f"{name}.yaml"
    dst = tmp_path / f"{name}.yaml"
    shutil.copy(src, dst)
    text = dst.read_text()
    dst.write_text(edit(text))
    return dst


def _line_of(path: Path, needle: str) -> int:
    return next(i for i, raw in enumerate(path.read_text().splitlines(), 1) if needle in raw)


def test_unknown_node_type_is_reported_with_its_line(tmp_path):
    site = load_site("bede")
    part = next(iter(site.partitions.values()))
    old = f"node_type: {part.raw['node_type']}"
    path = _copy(tmp_path, "bede", lambda t: t.replace(old, "node_type: nosuch", 1))
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    finding = exc.value.findings[0]
    assert finding.rule == "partition-node-type"
    assert finding.line == _line_of(path, "node_type: nosuch")
    assert f"{path.name}:{finding.line}: [partition-node-type]" in str(exc.value)


def test_schema_errors_name_the_line(tmp_path):
    path = _copy(
        tmp_path,
        "bede",
        lambda t: re.sub(
            r"max_walltime: ['\"]?[^\n'\"]+['\"]?", "max_walltime: two days", t, count=1
        ),
    )
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    f = exc.value.findings[0]
    assert f.rule == "schema:pattern"
    assert f.line == _line_of(path, "max_walltime: two days")


def test_unknown_keys_are_refused(tmp_path):
    path = _copy(tmp_path, "archer2", lambda t: t + "\nfavourite_colour: blue\n")
    with pytest.raises(ProfileError, match="additionalProperties"):
        load_profile(path)


def test_removed_module_needs_a_replacement(tmp_path):
    data = yaml.safe_load((ROOT / "sites" / "bede.yaml").read_text())
    data["modules"].append({"name": "oldthing", "version": "1.0", "status": "removed"})
    path = tmp_path / "bede.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    assert exc.value.findings[0].rule == "module-replacement"


def test_yaml_syntax_error_is_a_finding_not_a_traceback(tmp_path):
    path = tmp_path / "bede.yaml"
    path.write_text("name: bede\npartitions: [unclosed\n")
    with pytest.raises(ProfileError) as exc:
        load_profile(path)
    assert exc.value.findings[0].rule == "yaml-syntax"


def test_cli_validates_and_reports(tmp_path):
    ok = subprocess.run(
        ["python", "-m", "clusterkit", "profiles"], capture_output=True, text=True, cwd=ROOT
    )
    assert ok.returncode == 0, ok.stderr
    bad = tmp_path / "bede.yaml"
    bad.write_text("name: bede\n")
    r = subprocess.run(
        ["python", "-m", "clusterkit", "profiles", str(bad)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert r.returncode == 1
    assert "[schema:required]" in r.stderr and "Traceback" not in r.stderr


def test_durations():
    assert duration_seconds("2-00:00:00") == 172800
    assert duration_seconds("00:20") == 1200
    with pytest.raises(ValueError):
        duration_seconds("forever")


def test_every_module_resolves_by_its_full_name():
    for site in all_sites():
        for mod in site.modules:
            found, _ = site.find_module(mod.full_name)
            assert found == mod
