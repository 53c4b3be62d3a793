"""Judge one job script file against a site: what ``python -m clusterkit check-job`` runs."""

from __future__ import annotations

from pathlib import Path

from clusterkit.emulate import jobcheck, lsf
from clusterkit.profiles import Site


def check_job_file(path: Path | str, site: Site, argv: list[str] | None = None) -> jobcheck.Report:
    """Findings and plan of the script at ``path`` under the site's scheduler."""
    if site.scheduler == "lsf":
        return lsf.check_lsf_script(Path(path), site, argv)
    return jobcheck.check_slurm_script(Path(path), site, argv)
