"""The real Lmod loads modulefiles generated from the profiles, with the same verdicts as the
dry-run module checker."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from clusterkit.emulate.modules import check_module
from clusterkit.sites.lmod import write_modulefiles
from clusterkit.sites.profiles import all_sites

LMOD_INIT = Path("/usr/share/lmod/lmod/init/bash")
pytestmark = pytest.mark.skipif(
    not LMOD_INIT.is_file() or not shutil.which("bash"),
    reason="Lmod is not installed (apt-get install lmod); the nox tests session installs it",
)


def _module(root: Path, *args: str) -> subprocess.CompletedProcess:
    script = f"source {LMOD_INIT}\nmodule use {root}\nmodule {' '.join(args)}\n"
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True)


@pytest.mark.parametrize("site", list(all_sites()), ids=lambda s: s.name)
def test_lmod_agrees_with_the_dry_run_checker(site, tmp_path):
    root = write_modulefiles(site, tmp_path)
    probes = [m.full_name for m in site.modules] + [
        f"{m.name}/0.0.0-nosuch" for m in site.modules[:2]
    ]
    probes.append("definitely-not-a-module")
    for spec in probes:
        lmod = _module(root, "load", spec)
        # an unlisted module is a warning where the inventory is partial (the modulefiles hold
        # only what it lists, so Lmod refuses it): either way the dry run flags it
        dry = [
            f
            for f in check_module("p", 1, spec, site)
            if f.level == "error" or f.rule == "module-unlisted"
        ]
        assert (lmod.returncode != 0) == bool(dry), (
            f"{site.name} {spec}: Lmod rc={lmod.returncode} ({lmod.stderr.strip()[:300]}) but "
            f"dry-run says {[str(f) for f in dry]}"
        )


def test_removed_and_historical_modules(tmp_path):
    """A removed module fails with its replacement; a historical one loads with a notice."""
    import copy

    from clusterkit.sites.profiles import Site, load_site

    base = load_site("bede")
    data = copy.deepcopy(dict(base.data))
    data["modules"] = [
        *data["modules"],
        {
            "name": "wmlce",
            "version": "1.7.0",
            "status": "removed",
            "replacement": "open-ce conda channel",
        },
        {"name": "oldcuda", "version": "10.1", "status": "historical", "replacement": "cuda"},
    ]
    site = Site("bede", base.path, data)
    root = write_modulefiles(site, tmp_path)
    r = _module(root, "load", "wmlce/1.7.0")
    assert r.returncode != 0 and "open-ce conda channel" in r.stderr
    r = _module(root, "load", "oldcuda/10.1")
    assert r.returncode == 0 and "historical" in r.stderr
