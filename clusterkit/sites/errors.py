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


class CheckError(Exception):
    """Raised with one or more findings; str() lists them, one per line."""

    def __init__(self, findings: list[Finding]):
        self.findings = list(findings)
        super().__init__("\n".join(str(f) for f in self.findings))


class ProfileError(CheckError):
    """A site profile is malformed or inconsistent."""
