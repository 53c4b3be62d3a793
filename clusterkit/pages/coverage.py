"""Code-block coverage: every code block and included file of the pages, and how it was tested.

The pages are read here (:mod:`clusterkit.grammars.myst`), independently of Sybil, so a block that
Sybil failed to collect still shows up, as untested. The page tests record one result per block
(``clusterkit.pages.pagetest.BlockResult``, JSON lines in ``$CLUSTERKIT_COVERAGE_LOG``: page, line,
kind, how, detail); other runs (the real-Slurm session, ...) may append theirs to other logs,
and a result whose ``page`` is an example file (``examples/bede/x.sbatch``, line 0) applies to
every page block that includes that file.

``python -m clusterkit.pages.coverage --log FILE [--log FILE] --write PAGE --check`` writes the
report page (tables only, no code blocks) and fails on:

* a block with no result and no stated reason (``block-untested``);
* a result that claims a pass while its test ran nothing, e.g. ``command-checked`` with no
  command named, an output block with no record parsed (``block-ran-nothing``);
* a skip without a reason (``skip-reason``); a result with an unknown ``how``.

``--static`` needs no log: it predicts each block's route from its language and markers, as
the page tests will take it, and fails on blocks no route will test (the fast check runs this).

The report holds figures of the machine that ran the tests, so it is written under ``_build/``
(:data:`DEFAULT_PAGE`), never over a tracked file: ``docs/project/test-coverage.md`` holds a
``{block-coverage}`` block, which the Sphinx extension (:mod:`clusterkit.pages.sphinxext`)
replaces with the report of the last test run, or with the statically predicted routes
(:func:`report_text`) when no run has written one.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from clusterkit.grammars import myst as P
from clusterkit.runs import line_reasons as LR
from clusterkit.runs import program_lines as PL
from clusterkit.sites.profiles import ROOT

DEFAULT_PAGE = ROOT / "_build" / "coverage" / "test-coverage.md"
# The tracked page that shows the report, and the block in it that the report replaces.
SHOWN_ON = ROOT / "docs" / "project" / "test-coverage.md"
PLACEHOLDER = re.compile(r"^```\{block-coverage\}[^\n]*\n```[ \t]*$", re.M)
HOWS = {
    "executed": "run (Python, one namespace per page; a shell block marked `% test: run`, "
    "once its commands are checked, in bash from the repository root)",
    "emulated-job": "job script judged by the scheduler emulator against its site's profile",
    "real-slurm": "job script submitted to a real Slurm configured from the site's profile",
    "command-checked": "each command checked (modules, launch lines, submissions, installs, "
    "environments, images, paths, downloads, tool options)",
    "contract-checked": "program whose command line was read and checked",
    "compiled": "compiled only, with the reason it cannot run here",
    "fragment-checked": "a fragment of another project's code: compiled, its names found in the "
    "upstream function it goes into, its calls bound to the real signatures",
    "output-parsed": "sample output read by the log parser",
    "data-parsed": "YAML or JSON parsed",
    "skipped": "not run here, for the stated reason",
}
# Inline code spans (kind "inline" in the log): how each was judged.
INLINE_HOWS = {
    "command-checked": "a command in a sentence, through the checker its block would get",
    "option-checked": "an option in a sentence, judged by the grammar of its tool and, where "
    "the value depends on the site, against the profile",
    "not-a-command": "a file name, variable, value or a tool's bare name: nothing to run",
    "skipped": "not judged, for the stated reason",
}
MIN_REASON = 8


@dataclass
class Row:
    block: P.Block
    records: list[dict] = field(default_factory=list)
    predicted: str | None = None  # --static: the route the page tests will take

    @property
    def page(self) -> str:
        return P.rel(self.block.page)

    @property
    def hows(self) -> list[str]:
        seen: list[str] = []
        for r in self.records:
            if r["how"] not in seen:
                seen.append(r["how"])
        return seen

    @property
    def detail(self) -> str:
        parts = []
        for r in self.records:
            d = str(r.get("detail", "")).strip()
            if d and d not in parts:
                parts.append(d)
        return "; ".join(parts)

    @property
    def what(self) -> str:
        b = self.block
        if b.is_include:
            return f"include {P.rel(b.include_path() or b.arg)}"
        return b.lang or "(no language)" if not b.directive else f"{b.directive} {b.lang}".strip()


def all_blocks(docs: Path | None = None) -> list[P.Block]:
    return [b for page in P.scan_pages(docs) for b in page.blocks]


def read_logs(paths: list[Path]) -> list[dict]:
    out = []
    for path in paths:
        if not path.is_file():
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                rec = {"page": str(path), "line": n, "how": "unreadable", "detail": line[:60]}
            out.append(rec)
    return out


@dataclass
class InlineRow:
    page: str
    line: int
    code: str
    kind: str  # command, option, tool, other (clusterkit.grammars.prose.classify)
    records: list[dict] = field(default_factory=list)

    @property
    def how(self) -> str:
        if self.kind not in {"command", "option"}:
            return "not-a-command"
        return self.records[-1]["how"] if self.records else "untested"

    @property
    def detail(self) -> str:
        return str(self.records[-1].get("detail", "")) if self.records else ""


def inline_rows(docs: Path | None = None) -> list[InlineRow]:
    from clusterkit.grammars import prose

    return [
        InlineRow(page.rel, s.line, s.code, s.kind)
        for page in P.scan_pages(docs)
        for s in prose.spans(page)
    ]


def match_inline(rows: list[InlineRow], records: list[dict]) -> list[dict]:
    """Attach inline records to their spans; return those that match no span."""
    by_key: dict[tuple, list[InlineRow]] = {}
    for r in rows:  # the same code twice on a line: its results in order
        by_key.setdefault((r.page, r.line, r.code), []).append(r)
    orphans = []
    for rec in records:
        same = by_key.get((str(rec.get("page")), int(rec.get("line", 0)), rec.get("code", "")))
        if not same:
            orphans.append(rec)
            continue
        row = next((r for r in same if not r.records), same[-1])
        row.records.append(rec)
    return orphans


def inline_problems(rows: list[InlineRow]) -> list[str]:
    out = []
    for row in rows:
        if row.how == "untested":
            out.append(
                f"{row.page}:{row.line}: [inline-untested] `{row.code}` is a "
                f"{row.kind} in a sentence that the page tests did not judge"
            )
        elif row.how == "skipped" and len(row.detail) < MIN_REASON:
            out.append(f"{row.page}:{row.line}: [skip-reason] `{row.code}` skipped without reason")
    return out


def match(blocks: list[P.Block], records: list[dict]) -> tuple[list[Row], list[dict]]:
    """Rows (a block and its results) and the records that point at no block."""
    by_key: dict[tuple[str, int], Row] = {}
    rows = []
    for b in blocks:
        row = Row(b)
        rows.append(row)
        by_key.setdefault((row.page, b.line), row)
        by_key.setdefault((row.page, b.line + 1), row)
    includes: dict[str, list[Row]] = {}
    for row in rows:
        if row.block.is_include and row.block.include_path():
            includes.setdefault(P.rel(row.block.include_path()), []).append(row)
    orphans = []
    for r in records:
        if r.get("kind") == "inline":
            continue  # matched to spans by match_inline
        page = str(r.get("page"))
        if page.startswith("examples/") and page in includes:
            for row in includes[page]:  # a result for a file: every page that includes it
                row.records.append(r)
            continue
        row = by_key.get((page, int(r.get("line", 0))))
        if row is None:
            orphans.append(r)
        else:
            row.records.append(r)
    return rows, orphans


# --------------------------------------------------------------------------- static routes
def predict(page: P.Page, block: P.Block) -> tuple[str | None, str]:
    """The route the page tests will take for ``block``, and a detail (or why none)."""
    marker = block.marker
    if marker and marker[0] == "skip":
        return ("skipped", marker[1]) if len(marker[1]) >= MIN_REASON else (None, "no reason")
    if block.is_include:
        target = block.include_path()
        if target is None or not target.is_file():
            return None, f"{block.arg} does not exist"
        if ROOT / "examples" not in target.parents:
            return None, "pages include files from examples/ only"
        text = target.read_text(encoding="utf-8", errors="replace")
        if target.suffix == ".py":
            return "contract-checked", P.rel(target)
        if "#SBATCH" in text or "#BSUB" in text:
            return "emulated-job", P.rel(target)
        if P.file_kind(target, text) == "shell":
            return "command-checked", P.rel(target)
        if target.suffix in {".yaml", ".yml"}:
            return "data-parsed", P.rel(target)
        return None, f"no test for included {P.rel(target)}"
    if marker and marker[0] == "output":
        return "output-parsed", marker[1]
    if marker and marker[0] == "fragment":
        return "fragment-checked", marker[1]
    lang = block.lang.lower()
    if block.is_python:
        return "executed", ""
    if block.is_shell:
        if "#SBATCH" in block.text or "#BSUB" in block.text:
            return "emulated-job", ""
        if marker and marker[0] == "run":
            return "executed", "bash from the repository root"
        return "command-checked", ""
    if lang in {"yaml", "yml", "json"}:
        return "data-parsed", lang
    return None, f"a {lang or '(no language)'} block needs `% test: output ...` or `% test: skip`"


def static_rows(docs: Path | None = None) -> list[Row]:
    rows = []
    for page in P.scan_pages(docs):
        for b in page.blocks:
            how, detail = predict(page, b)
            row = Row(b, predicted=how)
            if how is not None:
                row.records.append({"how": how, "detail": detail})
            else:
                row.records = []
                row.predicted = detail
            rows.append(row)
    return rows


# --------------------------------------------------------------------------- problems
def problems(rows: list[Row], static: bool = False) -> list[str]:
    out = []
    for row in rows:
        where = f"{row.page}:{row.block.line}"
        if not row.records:
            why = f" ({row.predicted})" if static and row.predicted else ""
            out.append(
                f"{where}: [block-untested] this {row.what} block was not tested and gives no "
                f"reason{why}: mark it `% test: skip <reason>` or route it (docs/contributing.md)"
            )
            continue
        for r in row.records:
            how, detail = r.get("how", ""), str(r.get("detail", "")).strip()
            if how not in HOWS:
                out.append(
                    f"{where}: [block-how-unknown] result {how!r} is not one of {sorted(HOWS)}"
                )
            elif how == "skipped" and len(detail) < MIN_REASON:
                out.append(f"{where}: [skip-reason] skipped without a reason")
            elif static:
                continue
            elif (
                how in {"command-checked", "contract-checked", "compiled", "fragment-checked"}
                and not detail
            ):
                out.append(
                    f"{where}: [block-ran-nothing] the test of this block recorded {how} "
                    "but named nothing it checked"
                )
            elif how == "output-parsed" and re.match(r"^0\b", detail):
                out.append(f"{where}: [block-ran-nothing] the log parser found no record")
    return out


# --------------------------------------------------------------------------- the page
def _cell(text: str) -> str:
    text = " ".join(str(text).split())
    for ch, rep in (
        ("\\", "\\\\"),
        ("|", "\\|"),
        ("`", "'"),
        ("*", "\\*"),
        ("_", "\\_"),
        ("[", "\\["),
        ("]", "\\]"),
        ("{", "\\{"),
        ("}", "\\}"),
        ("<", "&lt;"),
        (">", "&gt;"),
        ("$", "\\$"),
    ):
        text = text.replace(ch, rep)
    return text


def render(
    rows: list[Row],
    examples: list[Path] | None = None,
    inline: list[InlineRow] | None = None,
    programs: LineReport | None = None,
    static: bool = False,
) -> str:
    counts: Counter = Counter()
    for row in rows:
        counts.update(row.hows or ["untested"])
    if static:
        source = (
            "No test run has recorded its results for this build, so each block shows the "
            "route the page tests will take, predicted from its language and markers "
            "(`python -m clusterkit.pages.coverage --static`); `nox -s tests` records the "
            "results and the next build of the site shows them."
        )
    else:
        source = (
            "Generated by `python -m clusterkit.pages.coverage` from the results the page tests "
            "recorded in the last test run."
        )
    lines = [
        "# How each code block is tested",
        "",
        f"{source} Every code block and included file of the pages is listed with how CI "
        "tested it. CI fails on a block that was not tested and gives no reason, and on a "
        "test that claims to pass while checking nothing.",
        "",
        "| how tested | what it means | blocks |",
        "| --- | --- | --- |",
    ]
    for how, meaning in HOWS.items():
        if counts.get(how):
            lines.append(f"| {how} | {_cell(meaning)} | {counts[how]} |")
    if counts.get("untested"):
        lines.append(f"| untested | no result and no reason | {counts['untested']} |")
    inline = inline or []
    inline_by_page: dict[str, list[InlineRow]] = {}
    for irow in inline:
        inline_by_page.setdefault(irow.page, []).append(irow)
    if inline:
        icounts = Counter(r.how for r in inline)
        lines += [
            "",
            "Inline code in the sentences of the pages is judged too: commands as blocks are, "
            "options by the tool the sentence gives them to.",
            "",
            "| inline code | what it means | spans |",
            "| --- | --- | --- |",
        ]
        for how, meaning in {**INLINE_HOWS, "untested": "not judged, no reason"}.items():
            if icounts.get(how):
                lines.append(f"| {how} | {_cell(meaning)} | {icounts[how]} |")
    if programs is not None:
        lines += program_lines_section(programs)
    by_page: dict[str, list[Row]] = {}
    for row in rows:
        by_page.setdefault(row.page, []).append(row)
    for page, page_rows in by_page.items():
        target = Path(page).relative_to("docs") if page.startswith("docs/") else Path(page)
        link = "../" + str(target)
        lines += [
            "",
            f"## {_cell(page)}",
            "",
            f"[Open the page]({link})",
            "",
            "| line | block | how tested | detail |",
            "| --- | --- | --- | --- |",
        ]
        for row in page_rows:
            hows = ", ".join(row.hows) or "untested"
            lines.append(f"| {row.block.line} | {_cell(row.what)} | {hows} | {_cell(row.detail)} |")
        lines += _inline_summary(inline_by_page.get(page, []))
    if examples is not None:
        shown: dict[str, list[str]] = {}
        for row in rows:
            if row.block.is_include and row.block.include_path():
                shown.setdefault(P.rel(row.block.include_path()), []).append(row.page)
        lines += [
            "",
            "## Example files",
            "",
            "Every file under examples/ and the pages that include it; files no page shows "
            "are still checked by the fast check and the tests under tests/.",
            "",
            "| file | shown on |",
            "| --- | --- |",
        ]
        for ex in examples:
            rel = P.rel(ex)
            pages = ", ".join(sorted(set(shown.get(rel, [])))) or "no page"
            lines.append(f"| {_cell(rel)} | {_cell(pages)} |")
    return "\n".join(lines) + "\n"


@dataclass
class LineReport:
    """Line coverage of the example programs, and the runs of lines that did not run."""

    measurement: PL.Measurement
    runs: list[LR.Run]


def line_report(data_dir: Path, reasons: Path = LR.REASONS) -> tuple[LineReport, list[str]]:
    """Measure the programs from the data in data_dir; the report and its problems."""
    measurement = PL.measure(data_dir)
    entries, findings = LR.load(reasons)
    findings += LR.check(measurement, entries, reasons)
    problems = [str(f) for f in findings if f.level == "error"]
    problems += [f"[copy-differs] {p}" for p in measurement.problems]
    if measurement.data_files == 0:
        problems.append(
            f"{data_dir}: [lines-unmeasured] no coverage data: was CLUSTERKIT_LINES set "
            "and the hook installed (python -m clusterkit.runs.program_lines start DIR)?"
        )
    return LineReport(measurement, LR.runs(measurement, entries)), problems


def program_lines_section(report: LineReport) -> list[str]:
    lines = [
        "",
        "## Example programs, line by line",
        "",
        "Every Python program under examples/, measured by coverage.py in each process the "
        "tests start that runs one: the programs, torchrun's workers, the ranks of the "
        "emulated srun and of mpirun, TensorFlow's workers, Horovod's ranks, and the tests "
        "that load a program in their own process. Each line "
        "that ran in none of them gives its reason from tests/coverage-reasons.yaml; CI fails "
        f"on a line with no reason, on a reason whose lines all ran, and on a program below "
        f"{LR.MIN_PERCENT:.0f} % of its statements, except for the programs whose reasons are "
        "not all written yet: these may not fall below the floor given here, and their lines "
        "without a reason are listed as such.",
        "",
        "| program | statements | ran | % | floor % | processes |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for p in report.measurement.programs:
        floor = LR.FLOORS.get(p.rel, LR.MIN_PERCENT)
        elsewhere = LR.tested_elsewhere(p.rel)
        if elsewhere:
            lines.append(
                f"| {_cell(p.rel)} | {len(p.statements)} | not judged here: "
                f"{_cell(elsewhere)} runs its tests | - | {floor:.0f} | {p.processes} |"
            )
            continue
        lines.append(
            f"| {_cell(p.rel)} | {len(p.statements)} | {p.covered} | {p.percent:.1f} | "
            f"{floor:.0f} | {p.processes} |"
        )
    for p in report.measurement.programs:
        mine = [r for r in report.runs if r.program is p]
        if not mine or LR.tested_elsewhere(p.rel):
            continue
        lines += [
            "",
            f"### {_cell(p.rel)}",
            "",
            "| lines | in | starting with | why it does not run here |",
            "| --- | --- | --- | --- |",
        ]
        for r in mine:
            span = str(r.first) if r.first == r.last else f"{r.first}-{r.last}"
            why = r.reason.reason if r.reason else "no reason given"
            lines.append(f"| {span} | {_cell(r.function)} | {_cell(r.source)} | {_cell(why)} |")
    return lines


def _inline_summary(rows: list[InlineRow]) -> list[str]:
    if not rows:
        return []
    counts = Counter(r.how for r in rows)
    said = ", ".join(f"{counts[h]} {h}" for h in (*INLINE_HOWS, "untested") if counts.get(h))
    out = ["", f"Inline code: {len(rows)} span(s): {said}."]
    odd = [r for r in rows if r.how in {"skipped", "untested"}]
    if odd:
        out += ["", "| line | inline code | how tested | reason |", "| --- | --- | --- | --- |"]
        out += [f"| {r.line} | {_cell(r.code)} | {r.how} | {_cell(r.detail)} |" for r in odd]
    return out


def report_text(page: Path = DEFAULT_PAGE, docs: Path | None = None) -> tuple[str, str]:
    """The report to show on the site, without its title, and where it came from: the page the
    last test run wrote, or the statically predicted routes when there is none or when it lists
    other pages than those of docs/ that now hold code blocks (it predates a change)."""
    pages = {P.rel(p.path) for p in P.scan_pages(docs) if p.blocks}  # the report lists these
    why = "no test run has written it"
    if page.is_file():
        text = page.read_text(encoding="utf-8")
        listed = set(re.findall(r"^## (\S+\.md)$", text.replace("\\_", "_"), re.M))
        if listed == pages:
            return _untitled(text), f"recorded: {P.rel(page)}"
        why = f"{P.rel(page)} lists other pages than docs/ holds now"
    text = render(static_rows(docs), P.example_files(), static=True)
    return _untitled(text), f"predicted ({why})"


def _untitled(text: str) -> str:
    return re.sub(r"\A# [^\n]*\n+", "", text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--log", type=Path, action="append", default=[], help="BlockResult log(s)")
    ap.add_argument(
        "--write", type=Path, help=f"write the report page (e.g. {P.rel(DEFAULT_PAGE)})"
    )
    ap.add_argument("--check", action="store_true", help="exit 1 on any problem")
    ap.add_argument("--static", action="store_true", help="predict routes; no log needed")
    ap.add_argument("--docs", type=Path, default=ROOT / "docs")
    ap.add_argument(
        "--lines",
        type=Path,
        metavar="DIR",
        help="coverage.py data of the example programs (clusterkit.runs.program_lines): add their "
        "line coverage to the page and check it against tests/coverage-reasons.yaml",
    )
    args = ap.parse_args(argv)
    if not args.static and not args.log:
        ap.error("give --log FILE (the page tests' results) or --static")
    if args.static:
        rows, orphans, inline = static_rows(args.docs), [], []
    else:
        missing = [p for p in args.log if not p.is_file()]
        if missing:
            print(f"no such log: {', '.join(map(str, missing))}", file=sys.stderr)
            return 1
        records = read_logs(args.log)
        rows, orphans = match(all_blocks(args.docs), records)
        inline = inline_rows(args.docs)
        orphans += match_inline(inline, [r for r in records if r.get("kind") == "inline"])
    programs, line_problems = line_report(args.lines) if args.lines else (None, [])
    if args.write:
        if args.static:
            ap.error("--write needs the recorded results (--log), not --static")
        args.write.parent.mkdir(parents=True, exist_ok=True)
        page = render(rows, P.example_files(), inline, programs)
        args.write.write_text(page, encoding="utf-8")
    bad = problems(rows, static=args.static) + inline_problems(inline) + line_problems
    for r in orphans:
        print(
            f"{r.get('page')}:{r.get('line')}: warning: [record-orphan] a result for no block "
            "(is the log from an older version of the page?)",
            file=sys.stderr,
        )
    for line in bad:
        print(line, file=sys.stderr)
    tested = sum(1 for r in rows if r.records)
    mode = "routed" if args.static else "tested or skipped with a reason"
    print(f"coverage: {tested} of {len(rows)} code blocks {mode}; {len(bad)} problem(s)")
    if programs is not None:
        for p in programs.measurement.programs:
            print(f"  {p.rel}: {p.covered} of {len(p.statements)} lines ran ({p.percent:.1f} %)")
    return 1 if (bad and (args.check or args.static)) else 0


if __name__ == "__main__":
    sys.exit(main())
