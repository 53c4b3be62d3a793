"""Judge job scripts against a site: what ``python -m clusterkit check-job`` runs.

A script file is judged whole (:func:`check_job_file`). A documentation page (Markdown,
reStructuredText or HTML) is read for its code blocks (:mod:`clusterkit.grammars.page_blocks`);
each block that is a job script is judged as a script of its own, its findings placed on the
page's lines, and every other block is listed with the reason it was left alone
(:func:`check_job_page`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from clusterkit.emulate import registry
from clusterkit.emulate.report import Report
from clusterkit.grammars import page_blocks
from clusterkit.grammars.page_blocks import PageBlock, Verdict
from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import Site


def check_job_file(path: Path | str, site: Site, argv: list[str] | None = None) -> Report:
    """Findings and plan of the script at ``path`` under the site's scheduler."""
    return registry.scheduler(site.scheduler)(Path(path), site, argv)


def is_page(path: Path | str) -> bool:
    """Whether check-job reads the file as a page of code blocks rather than as a script."""
    return Path(path).suffix.lower() in page_blocks.PAGE_SUFFIXES


@dataclass
class BlockResult:
    """One code block of a page: judged as a job script (with its report), or left alone."""

    block: PageBlock
    verdict: Verdict
    report: Report | None = None

    @property
    def status(self) -> int:
        if self.report is None:
            return 0
        return 1 if self.report.errors else 0


@dataclass
class PageReport:
    """Every code block of a page, and what the page itself gave (a page that cannot be read)."""

    path: Path
    blocks: list[BlockResult] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    @property
    def judged(self) -> list[BlockResult]:
        return [b for b in self.blocks if b.report is not None]

    @property
    def skipped(self) -> list[BlockResult]:
        return [b for b in self.blocks if b.report is None]


def check_job_page(path: Path | str, site: Site) -> PageReport:
    """Each code block of the page at ``path``, the job scripts among them judged against the
    site with the page's line numbers."""
    path = Path(path)
    page = PageReport(path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
        blocks = page_blocks.page_blocks(text, path.suffix)
    except (OSError, page_blocks.PageUnreadable) as exc:
        page.findings.append(Finding(path, 0, "page-readable", f"cannot read the page: {exc}"))
        return page
    for block in blocks:
        verdict = page_blocks.job_script(block)
        report = check_job_block(path, block, site) if verdict.judged else None
        page.blocks.append(BlockResult(block, verdict, report))
    return page


def check_job_block(path: Path, block: PageBlock, site: Site) -> Report:
    """One block of a page judged as a job script; its findings on the page's lines (a finding
    about the whole script on the block's first line)."""
    judge = registry.scheduler(site.scheduler)
    try:
        report = judge(path, site, None, text=block.text + "\n")
    except Exception as exc:  # one block must not end the reading of every other page
        what = f"{type(exc).__name__}: {exc}"
        message = f"check-job failed on this block ({what}); please report it with the block"
        return Report(path, site.name, [Finding(path, block.line, "check-job-failed", message)])
    report.findings = [
        Finding(f.path, block.page_line(f.line), f.rule, _page_lines(f.message, block), f.level)
        for f in report.findings
    ]
    return report


LINE_IN_MESSAGE = re.compile(r"\b(line )(\d+)\b")


def _page_lines(message: str, block: PageBlock) -> str:
    """A message that names a line of the script (``after the first command (line 7)``)
    names it by the page's line number instead."""
    count = block.text.count("\n") + 1

    def page(m: re.Match) -> str:
        n = int(m[2])
        return f"{m[1]}{block.page_line(n)}" if 1 <= n <= count else m[0]

    return LINE_IN_MESSAGE.sub(page, message)
