"""The code blocks of any documentation page, each with the page lines it came from.

:func:`page_blocks` reads a page as its renderer would and lists every code block a reader can
copy, with the page line of each line of its text:

* Markdown (``.md``, ``.markdown``), with markdown-it-py (CommonMark): fenced and indented code
  blocks; the content of MyST directives (```` ```{code-block} bash ````, its options taken
  off; container directives such as ``{tab-set}``, ``{tabs}`` or ``{note}`` read again as
  Markdown; ``{eval-rst}`` as reStructuredText); and MkDocs containers -- content tabs
  (``=== "Title"``), admonitions (``!!! note``) and collapsible blocks (``??? note``) --
  whose indented content is read as Markdown, as their extensions read it;
* reStructuredText (``.rst``), with docutils: ``code-block``, ``code``, ``sourcecode`` and
  ``code-tab`` directives, ``::`` literal blocks, ``parsed-literal``, and in every other
  directive (``tabs``, ``tab``, ``tab-set``, ``tab-item``, admonitions, ...) its content read
  again as reStructuredText; also a script spelled out down a grid table's column, one
  ``literal`` per cell (how OLCF laid out scripts side by side). Nothing is included from other
  files (``include``, ``raw`` and ``literalinclude`` are not followed);
* HTML (``.html``, ``.htm``), with the standard library's parser: ``<pre>`` elements.

The text of a block is what the reader copies: the indentation of its container taken off,
everything else as written (trailing blanks included). ``literalinclude`` directives are listed
too, as blocks of kind ``include`` with no text: the file they show is judged on its own.
:func:`job_script` says whether a block's text is a job script, and why, or why not.
"""

from __future__ import annotations

import html.parser
import io
import re
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import cache

MARKDOWN_SUFFIXES = {".md", ".markdown"}
RST_SUFFIXES = {".rst", ".rest"}
HTML_SUFFIXES = {".html", ".htm"}
PAGE_SUFFIXES = MARKDOWN_SUFFIXES | RST_SUFFIXES | HTML_SUFFIXES

CODE_DIRECTIVES = {
    "code-block",
    "code",
    "sourcecode",
    "code-tab",  # sphinx-tabs
    "code-cell",  # MyST-NB
    "parsed-literal",
    "prompt",  # sphinx-prompt
    "testcode",
    "jupyter-execute",
}
INCLUDE_DIRECTIVES = {"literalinclude"}
# Directives whose content is neither code a reader copies nor markup holding some.
OPAQUE_DIRECTIVES = {
    "include",
    "raw",
    "math",
    "toctree",
    "csv-table",
    "image",
    "mermaid",
    "graphviz",
    "digraph",
    "plot",
    "highlight",
    "contents",
    "meta",
}


@dataclass(frozen=True)
class PageBlock:
    """One code block of a page."""

    line: int  # page line of the first line of ``text`` (of the directive, for an include)
    text: str
    lang: str = ""  # the language the fence or directive names
    kind: str = "fence"  # fence | indented | directive | literal | table | pre | include
    column: int = 0  # for a script down a grid table: its column, from 1
    lines: tuple[int, ...] = ()  # page line of each line of text, where they are not in a row
    end: int = 0  # page line of the block's last line of text
    source: str = ""  # for an include: the file it shows

    def page_line(self, n: int) -> int:
        """The page line of line ``n`` (from 1) of the text; 0 (the block as a whole) gives
        the block's first line."""
        if n <= 0:
            return self.line
        if self.lines:
            return self.lines[min(n, len(self.lines)) - 1]
        return self.line + n - 1


def page_blocks(text: str, suffix: str) -> list[PageBlock]:
    """Every code block of a page of the given kind (``.md``, ``.rst``, ``.html``), in page
    order."""
    suffix = suffix.lower()
    if suffix in MARKDOWN_SUFFIXES:
        found = markdown_blocks(text)
    elif suffix in RST_SUFFIXES:
        found = rst_blocks(text)
    elif suffix in HTML_SUFFIXES:
        found = html_blocks(text)
    else:
        raise ValueError(f"not a page: {suffix}")
    return sorted(found, key=lambda b: (b.line, b.column))


# --------------------------------------------------------------------------- Markdown
MKDOCS_MARKER = re.compile(r"(?:===[+!]*|!!!\+?|\?\?\?\+?)[ \t]+\S")


def _mkdocs_container(state, start: int, end: int, silent: bool) -> bool:
    """markdown-it block rule: an MkDocs content tab, admonition or collapsible block
    (pymdownx.tabbed, admonition, pymdownx.details); its content, indented four columns
    past the marker, is read as Markdown."""
    if state.sCount[start] - state.blkIndent >= 4:
        return False
    pos = state.bMarks[start] + state.tShift[start]
    if not MKDOCS_MARKER.match(state.src, pos, state.eMarks[start]):
        return False
    if silent:
        return True
    indent = state.sCount[start] + 4
    last, nxt = start, start + 1
    while nxt < end and (state.isEmpty(nxt) or state.sCount[nxt] >= indent):
        last = nxt if not state.isEmpty(nxt) else last
        nxt += 1
    close = last + 1
    saved = state.parentType, state.lineMax, state.blkIndent
    state.parentType, state.lineMax, state.blkIndent = "mkdocs", close, indent
    token = state.push("mkdocs_open", "div", 1)
    token.map = [start, close]
    state.md.block.tokenize(state, start + 1, close)
    state.push("mkdocs_close", "div", -1)
    state.parentType, state.lineMax, state.blkIndent = saved
    state.line = close
    return True


@cache
def _markdown_parser(html: bool = True):
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark").disable("inline")  # blocks only: spans are not code blocks
    md.block.ruler.before(
        "fence",
        "mkdocs_container",
        _mkdocs_container,
        {"alt": ["paragraph", "reference", "blockquote", "list"]},
    )
    return md if html else md.disable("html_block")


FENCE_OPEN = re.compile(r"^[ \t]*(`{3,}|~{3,})")


def markdown_blocks(text: str, offset: int = 0, depth: int = 0) -> list[PageBlock]:
    """The code blocks of a Markdown page; ``offset``: page lines before ``text``.

    Two readings follow MkDocs' Markdown (pymdownx.superfences) where CommonMark differs: a
    fence indented further than its container (an indented block that holds a fence) is a
    fence, and a fence inside raw HTML (a table's cell) is one too. ``<pre>`` elements of raw
    HTML are code blocks."""
    out: list[PageBlock] = []
    for token in _markdown_parser().parse(text):
        if token.map is None:
            continue
        first = offset + token.map[0] + 1  # page line of the fence or the block's first line
        if token.type == "code_block":
            inner = textwrap.dedent(token.content)
            if depth < 4 and (FENCE_OPEN.match(inner) or inner.startswith("<pre")):
                out += markdown_blocks(inner, first - 1, depth + 1)
            else:
                out.append(_block(first, token.content, "", "indented"))
        elif token.type == "fence":
            out += _fence(token.info.strip(), token.content, first, depth)
        elif token.type == "html_block" and not token.content.lstrip().startswith("<!--"):
            out += [_shift(b, first - 1) for b in html_blocks(token.content)]
            if depth < 4 and ("```" in token.content or "~~~" in token.content):
                out += _fences_in_html(token.content, first - 1, depth + 1)
    return out


def _fences_in_html(text: str, offset: int, depth: int) -> list[PageBlock]:
    """The fences among raw HTML lines (what superfences' preprocessor finds there)."""
    out = []
    for token in _markdown_parser(html=False).parse(text):
        first = offset + token.map[0] + 1 if token.map else 0
        if token.type == "fence":
            out += _fence(token.info.strip(), token.content, first, depth)
        elif token.type == "code_block" and FENCE_OPEN.match(textwrap.dedent(token.content)):
            out += markdown_blocks(textwrap.dedent(token.content), first - 1, depth + 1)
    return out


def _fence(info: str, content: str, opener: int, depth: int) -> list[PageBlock]:
    """A fenced block: code, or a MyST directive (code, include, container or opaque)."""
    m = re.match(r"\{([\w:.-]+)\}\s*(.*)", info)
    if not m:
        return [_block(opener + 1, content, _language(info), "fence")]
    name, arg = m[1].split(":")[-1], m[2].strip()
    if name in INCLUDE_DIRECTIVES:
        return [PageBlock(opener, "", "", "include", end=opener, source=arg)]
    if name in CODE_DIRECTIVES:
        body, skipped = _myst_options(content)
        return [_block(opener + 1 + skipped, body, arg.split()[0] if arg else "", "directive")]
    if name in OPAQUE_DIRECTIVES:
        return []
    body, skipped = _myst_options(content)
    if name == "eval-rst":
        return rst_blocks(body, opener + skipped)
    return markdown_blocks(body, opener + skipped, depth)


def _language(info: str) -> str:
    """The language a fence's info string names: its first word, or the first class of an
    attribute list (MkDocs' ```` ```{.yaml .annotate} ````)."""
    m = re.match(r"\{\s*\.([\w+#-]+)", info)
    if m:
        return m[1]
    return info.split()[0] if info else ""


def _myst_options(content: str) -> tuple[str, int]:
    """A MyST directive's content without its options (``:key: value`` lines, or a YAML block
    between ``---`` lines) and the blank lines after them; and how many lines went."""
    lines = content.split("\n")
    i = 0
    if lines and lines[0].strip() == "---":
        close = next((k for k in range(1, len(lines)) if lines[k].strip() == "---"), None)
        i = close + 1 if close is not None else 0
    else:
        while i < len(lines) and re.match(r"^:[\w-]+:", lines[i]):
            i += 1
    if i:
        while i < len(lines) - 1 and not lines[i].strip():
            i += 1
    return "\n".join(lines[i:]), i


def _block(first: int, content: str, lang: str, kind: str) -> PageBlock:
    text = content[:-1] if content.endswith("\n") else content
    return PageBlock(first, text, lang, kind, end=first + text.count("\n"))


# --------------------------------------------------------------------------- reStructuredText
def rst_blocks(text: str, offset: int = 0) -> list[PageBlock]:
    """The code blocks of a reStructuredText page; ``offset``: page lines before ``text``."""
    from docutils import nodes
    from docutils.core import publish_doctree

    raw = text.splitlines()
    found: list[PageBlock] = []
    settings = {
        "report_level": 5,
        "halt_level": 5,
        "warning_stream": io.StringIO(),
        "file_insertion_enabled": False,
        "raw_enabled": False,
        "tab_width": 8,
    }
    with _directives(found, raw):
        try:
            doctree = publish_doctree(text, settings_overrides=settings)
        except Exception as exc:  # docutils' own failure on this markup, named in a finding
            raise PageUnreadable(f"docutils could not read the page: {exc}") from exc
    for node in doctree.findall(nodes.literal_block):
        block = _literal(node, raw)
        if block is not None:
            found.append(block)
    found += _table_columns(doctree, raw)
    return [_shift(b, offset) for b in found]


class PageUnreadable(Exception):
    """The page's markup could not be read at all."""


def _shift(block: PageBlock, offset: int) -> PageBlock:
    if not offset:
        return block
    lines = tuple(n + offset for n in block.lines)
    return replace(block, line=block.line + offset, lines=lines, end=block.end + offset)


def _literal(node, raw: list[str]) -> PageBlock | None:
    """A ``::`` literal block (or one another extension made): its text taken from the page's
    own lines where they match docutils' reading (which drops trailing blanks)."""
    text = node.astext()
    if node.line is None or not text.strip():
        return None
    return _from_source(node.line, text, raw, "literal", "")


def _from_source(line: int, text: str, raw: list[str], kind: str, lang: str) -> PageBlock:
    """The block of ``text`` that docutils read starting at page ``line``, with the page's own
    characters (trailing blanks kept) where its lines are there."""
    n = text.count("\n") + 1
    source = textwrap.dedent("\n".join(raw[line - 1 : line - 1 + n]).expandtabs(8))
    same = [a.rstrip() for a in source.split("\n")] == [b.rstrip() for b in text.split("\n")]
    text = source if same else text
    return PageBlock(line, text, lang, kind, end=line + n - 1)


class _AnyOptions(dict):
    """Every option a directive may be given, kept as written (extensions' directives have
    options this reader cannot know)."""

    def __contains__(self, key) -> bool:
        return True

    def __getitem__(self, key):
        from docutils.parsers.rst import directives

        return directives.unchanged


@contextmanager
def _directives(found: list[PageBlock], raw: list[str]) -> Iterator[None]:
    """docutils' look-up of directives, for one parse: code directives record their content,
    includes their place, opaque ones nothing, and every other directive has its content read
    again as reStructuredText. docutils' own table is left as it was."""
    from docutils import nodes
    from docutils.parsers.rst import Directive, directives

    class Any(Directive):
        has_content = True
        optional_arguments = 64
        final_argument_whitespace = True
        option_spec = _AnyOptions()

    class Code(Any):
        def run(self):
            if self.content:
                lang = self.arguments[0].split()[0] if self.arguments else ""
                text = "\n".join(self.content)
                first = self.content_offset + 1
                kind = "directive"
                found.append(_from_source(first, text, raw, kind, lang))
            return []

    class Include(Any):
        def run(self):
            source = self.arguments[0] if self.arguments else ""
            found.append(PageBlock(self.lineno, "", "", "include", end=self.lineno, source=source))
            return []

    class Opaque(Any):
        def run(self):
            return []

    class Container(Any):
        def run(self):
            node = nodes.container()
            self.state.nested_parse(self.content, self.content_offset, node)
            return [node]

    def lookup(name: str, language, document):
        name = name.lower().split(":")[-1]
        if name in CODE_DIRECTIVES:
            return Code, []
        if name in INCLUDE_DIRECTIVES:
            return Include, []
        if name in OPAQUE_DIRECTIVES:
            return Opaque, []
        return Container, []

    saved = directives.directive
    directives.directive = lookup
    try:
        yield
    finally:
        directives.directive = saved


def _table_columns(doctree, raw: list[str]) -> list[PageBlock]:
    """Scripts spelled down a table's columns, one ``literal`` per cell, the first cell a
    ``#!`` line."""
    from docutils import nodes

    out = []
    for table in doctree.findall(nodes.table):
        columns: dict[int, list[tuple[int, str]]] = {}
        below: dict[int, int] = {}  # column -> rows still taken by a cell from above
        for row in table.findall(nodes.row):
            col = 0
            for entry in row.children:
                while below.get(col, 0) > 0:
                    col += 1
                for para in entry.findall(nodes.paragraph):
                    for lit in para.findall(nodes.literal):
                        columns.setdefault(col, []).append((para.line or 0, lit.astext()))
                span = 1 + int(entry.get("morecols", 0))
                for c in range(col, col + span):
                    below[c] = int(entry.get("morerows", 0)) + 1
                col += span
            below = {c: n - 1 for c, n in below.items() if n > 1}
        for col, cells in sorted(columns.items()):
            if cells and cells[0][1].startswith("#!") and all(n for n, _ in cells):
                text = "\n".join(t for _, t in cells)
                lines = tuple(n for n, _ in cells)
                out.append(PageBlock(lines[0], text, "", "table", col + 1, lines, lines[-1]))
    return out


# --------------------------------------------------------------------------- HTML
class _PreReader(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[PageBlock] = []
        self._depth = 0
        self._start = 0
        self._parts: list[str] = []

    def handle_starttag(self, tag, attrs) -> None:
        if tag == "pre":
            if not self._depth:
                self._start, self._parts = self.getpos()[0], []
            self._depth += 1

    def handle_endtag(self, tag) -> None:
        if tag == "pre" and self._depth:
            self._depth -= 1
            if not self._depth:
                text = "".join(self._parts)
                first = self._start
                if text.startswith("\n"):  # HTML drops a newline right after <pre>
                    text, first = text[1:], first + 1
                text = text.rstrip("\n")
                if text.strip():
                    self.blocks.append(_block(first, text, "", "pre"))

    def handle_data(self, data) -> None:
        if self._depth:
            self._parts.append(data)


def html_blocks(text: str) -> list[PageBlock]:
    """The ``<pre>`` elements of an HTML page (markup inside them, such as a highlighter's
    ``<span>``, taken off)."""
    reader = _PreReader()
    reader.feed(text)
    reader.close()
    return reader.blocks


# --------------------------------------------------------------------------- job scripts
DIRECTIVE = re.compile(r"^[ \t]*#(SBATCH|BSUB|PBS)\b", re.M)
SCHEDULER_OF = {"SBATCH": "slurm", "BSUB": "lsf", "PBS": "pbs"}
LAUNCHERS = {"srun": "slurm", "jsrun": "lsf", "blaunch": "lsf", "pbsdsh": "pbs"}
SKIP_REASON = "no #SBATCH/#PBS/#BSUB directive and no scheduler command"


@dataclass(frozen=True)
class Verdict:
    """Whether a block is a job script, and why (or why not)."""

    judged: bool
    reason: str
    scheduler: str = ""  # slurm | lsf | pbs, as its directives or launcher say


def job_script(block: PageBlock) -> Verdict:
    """A block is a job script when it holds a scheduler directive (``#SBATCH``, ``#BSUB``,
    ``#PBS``), or when it is a script (``#!`` on its first line) that starts a scheduler's
    launcher (``srun``, ``jsrun``)."""
    if block.kind == "include":
        shown = block.source or "another file"
        return Verdict(False, f"an include of {shown}: pass that file to check-job")
    if not block.text.strip():
        return Verdict(False, "empty")
    kinds = [m[1] for m in DIRECTIVE.finditer(block.text)]
    if kinds:
        kind = max(set(kinds), key=kinds.count)
        return Verdict(True, f"#{kind} directives", SCHEDULER_OF[kind])
    first = block.text.lstrip().split("\n", 1)[0]
    launcher = _launcher(block.text)
    if launcher and first.startswith("#!"):
        return Verdict(True, f"a script (#!) that starts {launcher}", LAUNCHERS[launcher])
    if launcher:
        why = "no #! line, no #SBATCH/#PBS/#BSUB directive"
        return Verdict(False, f"{launcher} typed at a prompt, not a job script ({why})")
    return Verdict(False, SKIP_REASON)


def _launcher(text: str) -> str:
    """The first scheduler launcher a line of the text starts with (after a prompt)."""
    for line in text.split("\n"):
        words = re.sub(r"^\s*[\w@.:~/()-]*[$>]\s+", "", line).split()
        if words and words[0] in LAUNCHERS:
            return words[0]
    return ""
