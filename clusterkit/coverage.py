"""Code-block coverage: every code block and included file of the pages, and how it was tested.

The pages are read here independently of Sybil, so a block Sybil failed to collect still shows
up, as untested. ``python -m clusterkit.coverage --log FILE`` compares that list with the
results the page tests recorded (``$CLUSTERKIT_COVERAGE_LOG``) and fails on a block with no
result, or on one whose test claims to have checked commands but names none.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from clusterkit.profiles import ROOT

CODE_DIRECTIVES = {"code-block", "code", "literalinclude", "code-tab", "sourcecode"}
_OPEN = re.compile(r"^(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    kind: str  # the fence's language or directive


def blocks_of(page: Path, text: str) -> list[Block]:
    rel = str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else str(page)
    out: list[Block] = []
    stack: list[tuple[str, str]] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if stack:
            fence, info = stack[-1]
            if line and set(line) == {fence[0]} and len(line) >= len(fence):
                stack.pop()
                continue
            if not info.startswith("{"):
                continue
        m = _OPEN.match(line)
        if not m:
            continue
        info = m["info"].strip()
        stack.append((m["fence"], info))
        word = info.split()[0] if info else ""
        if word.startswith("{"):
            directive = word.strip("{}")
            if directive in CODE_DIRECTIVES:
                out.append(Block(rel, n, directive))
        else:
            out.append(Block(rel, n, word or "text"))
    return out


def all_blocks(docs: Path = ROOT / "docs") -> list[Block]:
    out = []
    for page in sorted(docs.rglob("*.md")):
        if "_build" in page.parts:
            continue
        out.extend(blocks_of(page, page.read_text(encoding="utf-8")))
    return out


def read_log(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def match(blocks: list[Block], records: list[dict]) -> list[tuple[Block, dict | None]]:
    by_page: dict[str, list[dict]] = {}
    for r in records:
        by_page.setdefault(r["page"], []).append(r)
    out = []
    for b in blocks:
        hit = next((r for r in by_page.get(b.page, []) if r["line"] in (b.line, b.line + 1)), None)
        out.append((b, hit))
    return out


def problems(pairs: list[tuple[Block, dict | None]]) -> list[str]:
    out = []
    for b, r in pairs:
        if r is None:
            out.append(
                f"{b.page}:{b.line}: [block-untested] this {b.kind} block was not tested "
                "and gives no reason (is it collected? see docs/contributing.md)"
            )
        elif r["how"] == "command-checked" and not r.get("detail"):
            out.append(
                f"{b.page}:{b.line}: [block-ran-nothing] the test of this block checked no command"
            )
        elif r["how"] == "skipped" and len(r.get("detail", "")) < 8:
            out.append(f"{b.page}:{b.line}: [skip-reason] skipped without a reason")
    return out


def render(pairs: list[tuple[Block, dict | None]]) -> str:
    counts: dict[str, int] = {}
    for _, r in pairs:
        key = r["how"] if r else "untested"
        counts[key] = counts.get(key, 0) + 1
    lines = ["| how tested | blocks |", "| --- | --- |"]
    lines += [f"| {k} | {v} |" for k, v in sorted(counts.items())]
    lines += [
        "",
        "| page | line | block | how tested | detail |",
        "| --- | --- | --- | --- | --- |",
    ]
    for b, r in pairs:
        detail = (r.get("detail", "") if r else "").replace("|", "\\|")
        lines.append(
            f"| {b.page} | {b.line} | {b.kind} | {r['how'] if r else 'untested'} | {detail} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--log", type=Path, required=True)
    p.add_argument("--write", type=Path, help="write the report (Markdown) here")
    args = p.parse_args(argv)
    pairs = match(all_blocks(), read_log(args.log))
    if args.write:
        args.write.parent.mkdir(parents=True, exist_ok=True)
        args.write.write_text(render(pairs))
    bad = problems(pairs)
    for line in bad:
        print(line, file=sys.stderr)
    tested = sum(1 for _, r in pairs if r)
    print(
        f"{tested} of {len(pairs)} code blocks tested or skipped with a reason; "
        f"{len(bad)} problem(s)"
    )
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
