"""The prose of a page: paragraphs, sentences, inline code spans and the tools a sentence names.

Readers copy inline code as readily as blocks, so each span is sorted into what it is:

* ``command``: its first word is a scheduler, launcher or installer (``srun --ntasks=8 ...``,
  ``module load ...``, ``pip install ...``, ``python -m ...``);
* ``option``: it starts with a dash (``--gres=gpu:4``, ``-g 6``): an option of some tool, which
  :func:`candidate_tools` finds from the sentence around it;
* ``tool``: a tool's bare name (`` `srun` ``), which tells the options near it whose they are;
* ``other``: file names, variables, values: nothing to run.

Nothing here runs a check; :mod:`clusterkit.pages.inline_check` judges the spans.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from clusterkit.grammars import myst as P
from clusterkit.sites import substitutions

# First words that make a span a command a reader would run.
COMMANDS = {
    "sbatch",
    "srun",
    "salloc",
    "squeue",
    "sacct",
    "scontrol",
    "bsub",
    "jsrun",
    "torchrun",
    "accelerate",
    "deepspeed",
    "mpirun",
    "mpiexec",
    "module",
    "ml",
    "pip",
    "pip3",
    "conda",
    "mamba",
    "apptainer",
    "singularity",
    "reframe",
}
PYTHONS = {"python", "python3"}
# Tools whose options a sentence can mention without the command around them.
TOOLS = COMMANDS - {"module", "ml", "pip", "pip3", "conda", "mamba"}
_TOOL_WORD = re.compile(
    r"(?<![\w./-])(?P<tool>" + "|".join(sorted(TOOLS, key=len, reverse=True)) + r")(?![\w-])"
)
_PROGRAM = re.compile(r"(?<![\w/.-])(?P<tool>[\w-]+\.py)\b")
# Tools a sentence names by a word that is not a command of its own: pip (also in
# ``python -m pip``), the ``venv`` module ("a venv", "venvs", "the venv-on-top-of-a-module
# pattern") and IBM DDL's historical launcher.
_NAMED = {
    "pip": re.compile(r"(?<![\w./-])pip3?(?![\w-])"),
    "python -m venv": re.compile(r"(?<![\w./-])venvs?(?!\w)"),
    "ddlrun": re.compile(r"(?<![\w./-])(?:bede-)?ddlrun(?![\w-])"),
}
_PAST = re.compile(
    r"\b(?:removed|deprecated|dropped|was|were|used|old|older|original|originally|formerly|"
    r"no longer|historical|retired)\b",
    re.I,
)
_OPTION = re.compile(r"^--?[A-Za-z]")
_STRUCTURE = re.compile(r"^\s*(`{3,}|~{3,}|:{3,}|%|#{1,6}\s|:[\w-]+:)")
_RULE_ROW = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")
_ITEM = re.compile(r"^\s*([-*+]|\d+[.)])\s+")
_SENTENCE_END = re.compile(r"[.!?](?=\s)")


@dataclass(frozen=True)
class Mention:
    """A tool named in the prose (in a code span or not), at an offset of its paragraph."""

    tool: str
    offset: int


@dataclass
class Span:
    line: int
    code: str
    offset: int  # into the paragraph's text (the opening backtick)
    end: int  # after the closing backtick
    sentence: tuple[int, int]  # the sentence's (start, end) offsets in the paragraph
    paragraph: Paragraph = field(repr=False, compare=False)
    tab: str | None = None

    @property
    def kind(self) -> str:
        return classify(self.code)

    @property
    def words(self) -> list[str]:
        """The span's words as the reader sees them: site facts substituted."""
        return split_words(substitutions.resolve(self.code)[0])

    @property
    def unknown_substitutions(self) -> list[str]:
        return substitutions.resolve(self.code)[1]


@dataclass
class Paragraph:
    first_line: int
    text: str
    line_starts: list[tuple[int, int]]  # (offset, line)
    spans: list[Span] = field(default_factory=list)
    mentions: list[Mention] = field(default_factory=list)
    heading_tools: tuple[str, ...] = ()  # tools the section's heading names
    table_row: bool = False
    table_header: str = ""  # a table row's header row
    section_line: int = 0  # the line of the heading the paragraph is under (0: none)

    def line_at(self, offset: int) -> int:
        line = self.first_line
        for off, n in self.line_starts:
            if off <= offset:
                line = n
        return line


# --------------------------------------------------------------------------- classification
def split_words(code: str) -> list[str]:
    code = re.sub(r"^\s*(?:\([\w.-]+\)\s*)?\$ ", "", code)  # a console prompt
    try:
        return shlex.split(code)
    except ValueError:
        return code.split()


def command_word(words: list[str]) -> int:
    """The index of the program in ``words`` (after VAR=value assignments)."""
    i = 0
    while i < len(words) and re.match(r"^[A-Za-z_]\w*=", words[i]):
        i += 1
    return i


def classify(code: str) -> str:
    words = split_words(code)
    if not words:
        return "other"
    if _OPTION.match(words[0]):
        return "option"
    i = command_word(words)
    if i >= len(words):
        return "other"
    name = Path(words[i]).name
    rest = words[i + 1 :]
    if name in COMMANDS:
        return "command" if rest else "tool"
    if name in PYTHONS:
        return "command" if rest else "tool"
    return "other"


# --------------------------------------------------------------------------- reading a page
def paragraphs(page: P.Page) -> list[Paragraph]:
    """Prose paragraphs of a page (outside code blocks), each list item its own paragraph."""
    lines = page.text.splitlines()
    code = set()
    for b in page.blocks:
        code.update(range(b.line, (b.end or b.line) + 1))
    start = 1
    if page.text.startswith("---\n"):
        end = page.text.find("\n---", 4)
        if end >= 0:
            start = page.text.count("\n", 0, end + 1) + 2
    tabs = {s.line: s.tab for s in page.inline}
    out: list[Paragraph] = []
    cur: list[tuple[int, str]] = []
    heading: tuple[str, ...] = ()
    section_line = 0

    header = ""

    def flush() -> None:
        if cur:
            para = _paragraph(cur, tabs)
            para.heading_tools = heading
            para.section_line = section_line
            para.table_row = cur[0][1].lstrip().startswith("|")
            para.table_header = header if para.table_row else ""
            out.append(para)
            cur.clear()

    for n in range(start, len(lines) + 1):
        raw = lines[n - 1]
        if n not in code and re.match(r"^#{1,6}\s", raw):
            heading = tuple(m.tool for m in tool_mentions(raw))
            section_line = n
        if raw.lstrip().startswith("|") and n < len(lines) and _RULE_ROW.match(lines[n]):
            header = raw  # the row above a |---| rule heads the table
        if n in code or not raw.strip() or _STRUCTURE.match(raw):
            flush()
            continue
        if _ITEM.match(raw) or raw.lstrip().startswith("|"):
            flush()
        cur.append((n, raw))
    flush()
    return out


def _paragraph(lines: list[tuple[int, str]], tabs: dict[int, str | None]) -> Paragraph:
    text, starts = "", []
    for n, raw in lines:
        starts.append((len(text), n))
        text += raw + "\n"
    para = Paragraph(lines[0][0], text, starts)
    sentences = _sentences(text)
    for off, n in starts:
        raw = text[off : text.index("\n", off)]
        for m in P._INLINE.finditer(raw):
            if m.start() > 0 and raw[m.start() - 1] == "}":
                continue  # a role ({doc}`...`), not code
            pos = off + m.start()
            sent = next((s for s in sentences if s[0] <= pos < s[1]), (0, len(text)))
            para.spans.append(
                Span(n, m["code"].strip(), pos, off + m.end(), sent, para, tabs.get(n))
            )
    para.mentions = tool_mentions(text)
    return para


def tool_mentions(text: str) -> list[Mention]:
    """The tools ``text`` names (in code spans or not), in order."""
    found = [Mention(m["tool"], m.start()) for m in _TOOL_WORD.finditer(text)]
    found += [Mention(m["tool"], m.start()) for m in _PROGRAM.finditer(text)]
    for tool, pattern in _NAMED.items():
        found += [Mention(tool, m.start()) for m in pattern.finditer(text)]
    return sorted(found, key=lambda x: x.offset)


def _sentences(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence; a full stop inside a code span ends nothing."""
    masked = P._INLINE.sub(lambda m: "x" * len(m.group(0)), text)
    out, start = [], 0
    for m in _SENTENCE_END.finditer(masked):
        out.append((start, m.end()))
        start = m.end()
    out.append((start, len(text)))
    return out


def spans(page: P.Page) -> list[Span]:
    return [s for para in paragraphs(page) for s in para.spans]


# --------------------------------------------------------------------------- whose option
def candidate_tools(span: Span) -> list[str]:
    """Tools an option span may belong to, most likely first: one named before it in its
    sentence (the nearest), then one named after it in the sentence, then the rest of the
    paragraph by distance. The caller adds the scripts the page includes above."""
    para = span.paragraph
    lo, hi = span.sentence
    mentions = [m for m in para.mentions if not span.offset <= m.offset < span.end]
    before = [m for m in mentions if lo <= m.offset < span.offset]
    after = [m for m in mentions if span.offset < m.offset < hi]
    rest = [m for m in mentions if not lo <= m.offset < hi]
    order = (
        sorted(before, key=lambda m: span.offset - m.offset)
        + sorted(after, key=lambda m: m.offset - span.offset)
        + sorted(rest, key=lambda m: abs(m.offset - span.offset))
    )
    out: list[str] = []
    for m in order:
        if m.tool not in out:
            out.append(m.tool)
    return out


def sentence_spans(span: Span) -> list[Span]:
    """The option spans of the same sentence that come before ``span``."""
    lo, _hi = span.sentence
    return [
        s
        for s in span.paragraph.spans
        if lo <= s.offset < span.offset and s.kind == "option" and s.sentence == span.sentence
    ]


def column_tools(span: Span, other: bool = False) -> list[str]:
    """For a span in a table row, the tools its column's header names ("WMLCE `main.py`
    option"), which say whose options the column lists; with ``other``, the tools the other
    columns' headers name, whose options this column's are not."""
    para = span.paragraph
    if not para.table_row or not para.table_header:
        return []
    column = _cells_before(para.text[: span.offset])
    cells = _cells(para.table_header)
    picked = [c for i, c in enumerate(cells) if (i != column) == other]
    return [m.tool for cell in picked for m in tool_mentions(cell)]


def _masked(text: str) -> str:
    text = P._INLINE.sub(lambda m: "x" * len(m.group(0)), text)
    return text.replace("\\|", "xx")


def _cells_before(row_prefix: str) -> int:
    """The index of the cell that the text after ``row_prefix`` is in."""
    text = row_prefix.lstrip()
    return _masked(text).count("|") - (1 if text.startswith("|") else 0)


def _cells(row: str) -> list[str]:
    text = row.strip()
    cells, start = [], 0
    for i, c in enumerate(_masked(text)):
        if c == "|":
            cells.append(text[start:i])
            start = i + 1
    cells.append(text[start:])
    return cells[1:] if text.startswith("|") else cells


def told_as_past(span: Span) -> bool:
    """Whether the span's sentence speaks of the past ("was", "removed", "the original used")."""
    lo, hi = span.sentence
    text = P._INLINE.sub(" ", span.paragraph.text[lo:hi])
    return bool(_PAST.search(text))
