"""Pages name the software stacks they use, and say so in words.

A recipe page lists its stacks in its front matter (``stacks: [bede/opence-1.11-pytorch]``, keys
``site/name`` of the site profiles) and renders them with the ``{page-stacks}`` directive. This
module reads those names with their lines, finds the training programs each page runs (a
``literalinclude`` of a program, or a program started by an included job script) and checks
that every named stack exists, that a page naming stacks says so, and that every page that runs
a program names a stack.
"""

from __future__ import annotations

import re
from pathlib import Path

from clusterkit.grammars.myst import Page, file_kind, scan_pages
from clusterkit.sites import stacks as S
from clusterkit.sites.errors import CheckError, Finding
from clusterkit.sites.profiles import ROOT

DIRECTIVE = "page-stacks"
_PROGRAM_WORD = re.compile(r"(?<![\w/$.-])(?:[\w.-]+/)*(?P<name>[\w-]+\.py)\b")


# --------------------------------------------------------------------------- front matter
def named_stacks(page: Page) -> list[tuple[str, int]]:
    """(key, line) for each stack in the page's front matter, in order."""
    value = page.front_matter.get("stacks")
    if value is None:
        return []
    keys = value if isinstance(value, list) else [value]
    head = _front_matter_lines(page.text)
    start = next((n for n, text in head if text.startswith("stacks:")), 1)
    out = []
    for key in keys:
        key = str(key)
        line = next((n for n, text in head if n >= start and key in text), start)
        out.append((key, line))
    return out


def _front_matter_lines(text: str) -> list[tuple[int, str]]:
    if not text.startswith("---\n"):
        return []
    end = text.find("\n---", 4)
    return list(enumerate(text[:end].splitlines(), start=1)) if end > 0 else []


# --------------------------------------------------------------------------- programs
def training_programs() -> dict[str, Path]:
    """The training programs under examples/ (those that use a framework), by file name."""
    return {p.name: p for p in sorted((ROOT / "examples").rglob("*.py")) if S.frameworks_of(p)}


def page_programs(page: Page) -> list[Path]:
    """The training programs a reader of the page runs: included ones, and those that the
    page's included job scripts and its shell blocks start (they name them by file name)."""
    programs = training_programs()
    out: list[Path] = []
    for block in page.blocks:
        path = block.include_path()
        if path is None and block.is_shell and not block.is_include:
            names = [m["name"] for m in _PROGRAM_WORD.finditer(_commands(block.text))]
        elif path is None or not path.is_file():
            continue
        elif path.suffix == ".py":
            names = [path.name]
        elif file_kind(path, path.read_text(encoding="utf-8", errors="replace")) == "shell":
            text = path.read_text(encoding="utf-8", errors="replace")
            names = [m["name"] for m in _PROGRAM_WORD.finditer(_commands(text))]
        else:
            names = []
        for name in names:
            if name in programs and programs[name] not in out:
                out.append(programs[name])
    return out


def _commands(text: str) -> str:
    """Shell text without its comment lines (which may name other programs)."""
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def programs_by_stack(pages: list[Page] | None = None) -> dict[str, list[Path]]:
    """For each stack key named by some page: the programs of those pages that are for the
    stack's frameworks (the PyTorch trainer for a PyTorch stack, and so on)."""
    out: dict[str, list[Path]] = {}
    stacks = S.all_stacks()
    for page in pages if pages is not None else scan_pages():
        programs = page_programs(page)
        for key, _ in named_stacks(page):
            if key not in stacks:
                continue
            mine = out.setdefault(key, [])
            mine += [p for p in programs if S.uses(p, stacks[key]) and p not in mine]
    return out


# --------------------------------------------------------------------------- checks
def check_page(page: Page) -> list[Finding]:
    """Unknown stacks; stacks named but not shown in words; a page that runs a program or
    uses a framework (``frameworks:`` in its front matter) without naming a stack."""
    findings = []
    named = named_stacks(page)
    for key, line in named:
        try:
            stack = S.find(key, page.path, line)
        except CheckError as exc:
            findings += exc.findings
            continue
        findings += too_old(page, stack, line)
    if named and f"{{{DIRECTIVE}}}" not in page.text:
        findings.append(
            Finding(
                page.path,
                named[0][1],
                "stack-words",
                f"the page names stacks in its front matter but does not show them: add a "
                f"```{{{DIRECTIVE}}}``` block where the page says which environment it uses",
            )
        )
    if not named and (page_programs(page) or page.front_matter.get("frameworks")):
        uses = ", ".join(p.name for p in page_programs(page)) or "a framework (frameworks:)"
        findings.append(
            Finding(
                page.path,
                1,
                "stack-missing",
                f"the page uses {uses} but names no stack: add `stacks: [site/name, ...]` "
                "to its front matter",
            )
        )
    return findings


def too_old(page: Page, stack, line: int) -> list[Finding]:
    """A program the page runs (in its job scripts or commands) that stops at start-up on a
    stack the page names: a framework of the stack older than the program's MINIMUM_VERSIONS.
    An error for a stack in service; a warning for a historical one (the page's
    ``{page-stacks}`` says the program does not run there)."""
    out = []
    for program in page_programs(page):
        if not S.uses(program, stack):
            continue
        for name, oldest in S.minimum_versions(program).items():
            have = stack.frameworks.get(name)
            if have is None or S.version_tuple(have) >= S.version_tuple(oldest):
                continue
            historical = stack.status == "historical"
            out.append(
                Finding(
                    page.path,
                    line,
                    "stack-minimum",
                    f"stack {stack.key} has {name} {have}, older than the {name} {oldest} "
                    f"{program.name} needs (its MINIMUM_VERSIONS): the program stops at start-up "
                    + (
                        "on it (a historical stack: the page says so)"
                        if historical
                        else "on it; name a stack with a newer release, or run another program"
                    ),
                    "warning" if historical else "error",
                )
            )
    return out


def check_all(pages: list[Page] | None = None) -> list[Finding]:
    pages = pages if pages is not None else scan_pages()
    return [finding for page in pages for finding in check_page(page)]
