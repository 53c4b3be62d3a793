"""Recorded results (results/*.yaml): figures sources report and figures our runs measured.

Pages render them with ``{results-table}`` and ``{last-verified}``; the ReFrame importer adds
measured entries. A measured result older than ``STALE_AFTER_DAYS`` is shown as stale.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import jsonschema
import yaml

from clusterkit.sites.errors import CheckError, Finding
from clusterkit.sites.profiles import ROOT, line_of, load_yaml

RESULTS_DIR = ROOT / "results"
STALE_AFTER_DAYS = 183  # about six months


@dataclass(frozen=True)
class Result:
    data: dict
    path: Path

    def __getattr__(self, name: str):
        if name.startswith("__") or name == "data":
            # copy/pickle probe dunders on an instance whose `data` is not set yet
            raise AttributeError(name)
        try:
            return self.data[name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def when(self) -> dt.date:
        return dt.date.fromisoformat(self.data["date"])

    def is_stale(self, today: dt.date | None = None) -> bool:
        today = today or dt.date.today()
        return (today - self.when).days > STALE_AFTER_DAYS


@cache
def _schema() -> dict:
    return yaml.safe_load((RESULTS_DIR / "schema.yaml").read_text())


def load_file(path: Path) -> list[Result]:
    data = load_yaml(path)
    validator = jsonschema.Draft202012Validator(
        _schema(), format_checker=jsonschema.FormatChecker()
    )
    errors = [
        Finding(
            path,
            line_of(data, list(e.absolute_path)),
            f"schema:{e.validator}",
            f"{'.'.join(map(str, e.absolute_path))}: {e.message}",
        )
        for e in validator.iter_errors(data)
    ]
    for i, r in enumerate(data["results"]):
        if r["kind"] in {"measured", "example"} and "date" not in r:
            errors.append(
                Finding(
                    path,
                    line_of(data, ["results", i]),
                    "result-date",
                    f"result {r['id']}: a measured result needs its date",
                )
            )
    if errors:
        raise CheckError(errors)
    return [Result(dict(r), path) for r in data["results"]]


def load_all(results_dir: Path = RESULTS_DIR) -> list[Result]:
    out: list[Result] = []
    seen: dict[str, Path] = {}
    for path in sorted(results_dir.glob("*.yaml")):
        if path.name == "schema.yaml":
            continue
        for r in load_file(path):
            if r.id in seen:
                raise CheckError(
                    [
                        Finding(
                            path, 0, "result-id", f"result id {r.id!r} is also used in {seen[r.id]}"
                        )
                    ]
                )
            seen[r.id] = path
            out.append(r)
    return out


def select(
    results: list[Result],
    benchmark: str | None = None,
    site: str | None = None,
    kind: str | None = None,
) -> list[Result]:
    return [
        r
        for r in results
        if (benchmark is None or r.benchmark == benchmark)
        and (site is None or r.site == site)
        and (kind is None or r.kind == kind)
    ]


def last_verified(results: list[Result], site: str, benchmark: str | None = None) -> Result | None:
    """The newest measured result for a site (and benchmark); examples never count."""
    hits = select(results, benchmark, site, "measured")
    return max(hits, key=lambda r: r.when, default=None)
