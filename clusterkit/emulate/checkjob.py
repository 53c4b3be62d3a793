"""Judge one job script file against a site: what ``python -m clusterkit check-job`` runs."""

from __future__ import annotations

from pathlib import Path

from clusterkit.emulate import registry
from clusterkit.emulate.report import Report
from clusterkit.sites.profiles import Site


def check_job_file(path: Path | str, site: Site, argv: list[str] | None = None) -> Report:
    """Findings and plan of the script at ``path`` under the site's scheduler."""
    return registry.scheduler(site.scheduler)(Path(path), site, argv)
