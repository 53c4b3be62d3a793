"""Stale commands: a registry (lint/deprecations.yaml) and a lint over pages and examples.

A page's code blocks and every file in examples/ are searched for each registry pattern. A
match fails with the file, the line, the rule and the replacement, unless the page or file is
marked historical where a reader sees it: a page holds an admonition with ``:class:
historical`` whose text says "Replaced by"; an example file starts with a comment block that
has ``HISTORICAL:`` and ``Replaced by:``.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from clusterkit.coverage import blocks_of
from clusterkit.errors import Finding
from clusterkit.profiles import ROOT

REGISTRY = ROOT / "lint" / "deprecations.yaml"


@dataclass(frozen=True)
class Entry:
    id: str
    pattern: re.Pattern
    status: str
    date: str
    replacement: str
    source: dict


@cache
def registry() -> tuple[Entry, ...]:
    data = yaml.safe_load(REGISTRY.read_text())
    return tuple(
        Entry(
            e["id"], re.compile(e["pattern"]), e["status"], e["date"], e["replacement"], e["source"]
        )
        for e in data["entries"]
    )


def _finding(path, line: int, entry: Entry) -> Finding:
    return Finding(
        path,
        line,
        f"deprecated:{entry.id}",
        f"{entry.id} is {entry.status} (since {entry.date}); use {entry.replacement}",
    )


def page_is_marked(text: str) -> bool:
    for m in re.finditer(r":::+\{admonition\}[^\n]*\n(?P<body>.*?)\n:::+", text, re.S):
        body = m["body"]
        if ":class: historical" in body and "Replaced by" in body:
            return True
    return False


def file_is_marked(text: str) -> bool:
    head = "\n".join(text.splitlines()[:12])
    return "HISTORICAL:" in head and "Replaced by:" in head


def lint_text(path, lines: list[tuple[int, str]]) -> list[Finding]:
    out = []
    for n, line in lines:
        for entry in registry():
            if entry.pattern.search(line):
                out.append(_finding(path, n, entry))
    return out


def lint_page(path: Path, text: str | None = None) -> list[Finding]:
    text = text if text is not None else path.read_text(encoding="utf-8")
    if page_is_marked(text):
        return []
    lines = text.splitlines()
    in_code: list[tuple[int, str]] = []
    for block in blocks_of(path, text):
        if block.kind in {"literalinclude"}:
            continue  # the included file is linted itself
        for n in range(block.line, len(lines)):
            if n > block.line - 1 and re.match(r"^(`{3,}|~{3,})\s*$", lines[n]):
                break
            in_code.append((n + 1, lines[n]))
    return lint_text(path, in_code)


def lint_file(path: Path, text: str | None = None) -> list[Finding]:
    text = text if text is not None else path.read_text(encoding="utf-8", errors="replace")
    if file_is_marked(text):
        return []
    return lint_text(path, list(enumerate(text.splitlines(), 1)))


def lint_all(root: Path = ROOT) -> list[Finding]:
    out = []
    for page in sorted((root / "docs").rglob("*.md")):
        out += lint_page(page)
    for f in sorted((root / "examples").rglob("*")):
        if f.is_file() and f.suffix in {".py", ".sh", ".sbatch", ".slurm", ".lsf", ".def"}:
            out += lint_file(f)
    return out


def main() -> None:
    found = lint_all()
    for f in found:
        print(f, file=sys.stderr)
    print(f"{len(found)} stale command(s)")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
