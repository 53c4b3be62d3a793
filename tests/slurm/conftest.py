"""A real Slurm for the tests in this directory: one throw-away cluster per site, at a time.

The tests need root and Debian's Slurm (slurmctld, slurmd, slurm-client, munge). Without them
they are skipped, with the reason -- unless ``CLUSTERKIT_REQUIRE_SLURM=1`` (set by ``nox -s
slurm`` and CI), where a missing Slurm is a failure: a CI run must not pass by skipping.

Tests ask for ``slurm_env(site)``: the environment in which ``sbatch`` and friends talk to a
cluster configured from ``sites/<site>.yaml`` (ci/slurm/start.sh). Starting one stops the
previous one, and the tests are ordered by site, so each site's cluster starts once per session.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from clusterkit.sites.profiles import all_sites

ROOT = Path(__file__).resolve().parents[2]
START = ROOT / "ci" / "slurm" / "start.sh"
STOP = ROOT / "ci" / "slurm" / "stop.sh"
REQUIRED = os.environ.get("CLUSTERKIT_REQUIRE_SLURM") == "1"
# every site scheduled by Slurm, from its profile: a new site's cluster is made the same way
SITES = tuple(s.name for s in all_sites() if s.scheduler == "slurm")
TOOLS = ("slurmctld", "slurmd", "sbatch", "scontrol", "sinfo", "srun", "munged")
SBIN_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


def unavailable() -> str | None:
    """Why a real Slurm cannot run here, or None."""
    if os.geteuid() != 0:
        return "a real Slurm cluster needs root"
    missing = [t for t in TOOLS if shutil.which(t, path=SBIN_PATH) is None]
    if missing:
        return (
            f"Slurm is not installed ({', '.join(missing)} missing): apt-get install "
            "slurmctld slurmd slurm-client munge, or run `nox -s slurm`"
        )
    return None


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    mine = {it for it in items if Path(str(it.path)).is_relative_to(here)}
    reason = unavailable()
    if reason and not REQUIRED:
        for it in mine:
            it.add_marker(pytest.mark.skip(reason=f"{reason} (CLUSTERKIT_REQUIRE_SLURM unset)"))
    # one cluster start per site: run every test of a site together
    order = {site: i for i, site in enumerate(SITES)}

    def key(it) -> int:
        if it not in mine:
            return -1
        params = getattr(getattr(it, "callspec", None), "params", {})
        return order.get(params.get("site"), len(SITES))

    items.sort(key=key)


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without SBATCH_*/SLURM_* settings that would change a job."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SBATCH_", "SLURM_", "SALLOC_", "SRUN_"))
    }
    env["PATH"] = SBIN_PATH
    env.update(extra or {})
    return env


class Clusters:
    """At most one running cluster; ``env(site)`` switches to that site's."""

    def __init__(self) -> None:
        self.site: str | None = None
        self.state: Path | None = None
        self._env: dict[str, str] = {}

    def env(self, site: str) -> dict[str, str]:
        if site == self.site:
            return self._env
        self.stop()
        # short path: slurmd keeps UNIX sockets in its spool directory (108-byte limit)
        state = Path(tempfile.mkdtemp(prefix=f"ck-{site}-", dir="/tmp"))
        r = subprocess.run(
            ["bash", str(START), site, str(state)],
            env=clean_env({"PYTHON": sys.executable}),
            capture_output=True,
            text=True,
            timeout=300,
        )
        if r.returncode:
            subprocess.run(["bash", str(STOP), str(state)], capture_output=True, timeout=60)
            pytest.fail(
                f"could not start Slurm for {site} (rc {r.returncode}):\n{r.stdout}\n{r.stderr}"
            )
        self.site, self.state = site, state
        self._env = clean_env({"SLURM_CONF": str(state / "etc" / "slurm.conf")})
        return self._env

    def stop(self) -> None:
        if self.state is None:
            return
        subprocess.run(["bash", str(STOP), str(self.state)], capture_output=True, timeout=60)
        if os.environ.get("CLUSTERKIT_SLURM_KEEP") != "1":
            shutil.rmtree(self.state, ignore_errors=True)
        self.site = self.state = None
        self._env = {}


@pytest.fixture(scope="session")
def _clusters() -> Iterator[Clusters]:
    reason = unavailable()
    if reason:  # only reached with CLUSTERKIT_REQUIRE_SLURM=1: absence is a failure
        pytest.fail(f"CLUSTERKIT_REQUIRE_SLURM=1 but {reason}")
    clusters = Clusters()
    yield clusters
    clusters.stop()


@pytest.fixture
def slurm_env(_clusters: Clusters) -> Callable[[str], dict[str, str]]:
    """``slurm_env(site)``: environment whose SLURM_CONF points at that site's running cluster."""
    return _clusters.env
