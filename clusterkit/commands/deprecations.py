"""Stale commands: the registry ``lint/deprecations.yaml`` and a lint over pages and examples.

Every code block and inline code span of ``docs/**/*.md`` and every file under ``examples/``
is searched for each registry entry. A match fails with the file, the line, the rule
(``deprecated:<id>``) and the replacement, unless it is covered by a visible historical marker
that names the entry and says what replaced it:

* on a page, an admonition the reader sees, with the class ``historical`` and the words
  "Replaced by"; it covers the rest of the section it stands in (nested sections included)::

      :::{admonition} Historical: ddlrun
      :class: historical
      IBM DDL's launcher, archived with WMLCE. Replaced by: srun or jsrun starting Horovod ranks.
      :::

* in an example file, a comment block at the top with ``HISTORICAL:`` and ``Replaced by``.

A marker covers only the entries it names (an entry's ``names``, e.g. "ddlrun" or "WMLCE"),
so a box about WMLCE does not excuse a ``pip --install-option`` below it. A historical marker
that does not name a replacement is itself an error (``historical-marker``).

``python -m clusterkit.commands.deprecations`` lints the tree; ``--list`` prints the registry.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from clusterkit.grammars import myst as P
from clusterkit.grammars.stale_commands import (  # noqa: F401 (the registry's API, named here too)
    REGISTRY,
    SCHEMA,
    CommandMatch,
    Entry,
    Marker,
    RegistryError,
    file_header,
    file_marker,
    lint_lines,
    load_registry,
    match_command,
    match_line,
    match_shell,
    registry,
    validate,
)
from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import ROOT


def page_markers(page: P.Page) -> tuple[list[Marker], list[Finding]]:
    markers, problems = [], []
    for adm in page.admonitions:
        if not adm.historical:
            continue
        if not re.search(r"\bReplaced by\b", adm.text):
            problems.append(
                Finding(
                    page.path,
                    adm.start,
                    "historical-marker",
                    "a historical admonition must name the replacement after 'Replaced by'",
                )
            )
            continue
        markers.append(Marker(adm.start, page.section_end(adm.start), adm.text))
    return markers, problems


# --------------------------------------------------------------------------- pages and files
def lint_page(path: Path, text: str | None = None) -> list[Finding]:
    page = P.scan_page(Path(path), text)
    markers, out = page_markers(page)

    def covered(entry: Entry, line: int) -> bool:
        return any(m.covers(entry, line) for m in markers)

    for block in page.blocks:
        if block.is_include:
            continue  # the included file is linted as an example
        lines = list(block.body)
        if block.is_python:
            kind = "python"
        elif block.lang.lower() == "console":
            kind = "console"
        elif block.is_shell:
            kind = "shell"
        else:
            kind = "text"
        out += lint_lines(path, lines, kind, covered)
    for span in page.inline:
        out += lint_lines(path, [(span.line, span.code)], "text", covered)
    out += lint_lines(path, prose_lines(page), "prose", covered)
    return _dedupe(out)


def prose_lines(page: P.Page) -> list[tuple[int, str]]:
    """The page's sentences, line by line, outside code blocks, with code spans and link
    targets blanked (code spans are linted on their own; a URL is not a command)."""
    from clusterkit.grammars import prose

    out = []
    for para in prose.paragraphs(page):
        for off, n in para.line_starts:
            raw = para.text[off : para.text.index("\n", off)]
            raw = P._INLINE.sub(lambda m: " " * len(m.group(0)), raw)
            raw = re.sub(r"\]\([^)]*\)|<https?://[^>]*>", " ", raw)
            out.append((n, raw))
    return out


def lint_file(path: Path, text: str | None = None) -> list[Finding]:
    path = Path(path)
    text = text if text is not None else path.read_text(encoding="utf-8", errors="replace")
    marker, out = file_marker(path, text)

    def covered(entry: Entry, line: int) -> bool:
        return marker is not None and marker.covers(entry, line)

    kind = P.file_kind(path, text)
    out += lint_lines(path, list(enumerate(text.splitlines(), 1)), kind, covered)
    return _dedupe(out)


def _dedupe(findings: list[Finding]) -> list[Finding]:
    seen, out = set(), []
    for f in findings:
        key = (str(f.path), f.line, f.rule)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return sorted(out, key=lambda f: (str(f.path), f.line, f.rule))


def lint_all(root: Path = ROOT) -> list[Finding]:
    out: list[Finding] = []
    for page in sorted((root / "docs").rglob("*.md")):
        if "_build" not in page.parts:
            out += lint_page(page)
    for f in P.example_files(root / "examples"):
        out += lint_file(f)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", type=Path, help="pages or example files (default: all)")
    ap.add_argument("--list", action="store_true", help="print the registry and exit")
    args = ap.parse_args(argv)
    try:
        entries = registry()
    except RegistryError as exc:
        print(exc, file=sys.stderr)
        return 1
    if args.list:
        for e in entries:
            print(f"{e.id:28} {e.status:10} {e.date}  {e.replacement}")
        return 0
    if args.files:
        found = []
        for f in args.files:
            found += lint_page(f) if f.suffix == ".md" else lint_file(f)
    else:
        found = lint_all()
    for f in found:
        print(f, file=sys.stderr)
    print(f"deprecation lint: {len(found)} problem(s) in docs/ and examples/")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
