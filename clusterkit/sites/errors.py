"""Findings: what a check reports, always with the file, the line and the rule broken."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Finding:
    """One problem (or, with ``level="warning"``, one notice) in a file."""

    path: Path | str
    line: int
    rule: str
    message: str
    level: str = "error"

    def __str__(self) -> str:
        where = f"{_display(self.path)}:{self.line}" if self.line else f"{_display(self.path)}"
        tag = "" if self.level == "error" else f"{self.level}: "
        return f"{where}: {tag}[{self.rule}] {self.message}"


def _display(path: Path | str) -> str:
    p = Path(path)
    try:
        return str(p.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(p)


# Python module -> the distribution pip installs it from, where the names differ.
DISTRIBUTIONS = {
    "yaml": "pyyaml",
    "hostlist": "python-hostlist",
    "myst_parser": "myst-parser",
    "sphinx_tabs": "sphinx-tabs",
    "sphinx_copybutton": "sphinx-copybutton",
    "sphinxarg": "sphinx-argparse",
}
# What the project's optional dependency groups bring (pyproject.toml), by module.
EXTRAS = {"sphinx": "docs", "docutils": "docs", "myst_parser": "docs", "matplotlib": "docs",
          "sybil": "test", "pytest": "test"}  # fmt: skip


def missing_package(exc: ModuleNotFoundError) -> str:
    """One line for a check that stopped at a package that is not installed: which, and how
    to install it."""
    module = (exc.name or str(exc)).split(".")[0]
    dist = DISTRIBUTIONS.get(module, module)
    extra = f" (or pip install -e '.[{EXTRAS[module]}]')" if module in EXTRAS else ""
    return f"needs the Python package {dist}, which is not installed here: install {dist}{extra}"


class CheckError(Exception):
    """Raised with one or more findings; str() lists them, one per line."""

    def __init__(self, findings: list[Finding]):
        self.findings = list(findings)
        super().__init__("\n".join(str(f) for f in self.findings))


class ProfileError(CheckError):
    """A site profile is malformed or inconsistent."""
