"""Read pages and example files for the static checks, independently of Sybil.

:func:`scan_page` lists everything a reader of a MyST page sees as code: fenced blocks (also
inside tabs and admonitions), ``{code-block}``/``{code-tab}`` directives, ``{literalinclude}``
files and inline code spans, each with its line; plus the page's front matter, headings,
admonitions and the site each block belongs to. :func:`logical_commands` turns shell text into
commands (backslash continuations joined, console prompts dropped) whose words keep their lines.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import yaml

from clusterkit.sites.profiles import ROOT, SITES_DIR, all_sites

CODE_DIRECTIVES = {"code-block", "code", "sourcecode", "code-tab", "literalinclude"}
# Directives whose body is not Markdown, and holds no code a reader copies.
OPAQUE_DIRECTIVES = {
    "toctree",
    "math",
    "eval-rst",
    "raw",
    "csv-table",
    "list-table",
    "site-facts",
    "site-status",
    "results-table",
    "results-plot",
    "last-verified",
    "page-stacks",
    "recipes-running",
    "block-coverage",
    "mermaid",
    "figure",
    "image",
}
SHELL_LANGS = {"bash", "sh", "shell", "console", "shell-session", "zsh"}
PYTHON_LANGS = {"python", "py", "python3", "pycon", "ipython"}
MARKER = re.compile(r"^%\s*test:\s*(?P<verb>[\w-]+)\b\s*(?P<arg>.*)$")
_OPEN = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,}|:{3,})(?P<info>.*)$")
_HEADING = re.compile(r"^(?P<hashes>#{1,6})\s+(?P<title>.+?)\s*#*\s*$")
_OPTION = re.compile(r"^\s*:(?P<key>[\w-]+):\s*(?P<value>.*)$")
_INLINE = re.compile(r"(?<!`)(?P<ticks>`+)(?!`)(?P<code>.+?)(?<!`)(?P=ticks)(?!`)")
SHELL_SUFFIXES = {".sh", ".bash", ".sbatch", ".slurm", ".lsf", ".bsub", ".pbs"}
# shellcheck rules that do not apply to a page's commands, which a reader types at a prompt:
# a failed ``cd`` stops the reader there (SC2164), the files a block sources (a venv's
# ``activate``, conda's ``conda.sh``) exist only on the cluster (SC1090, SC1091), and ``$VAR``
# in single quotes is text handed to a tool that expands it later (ReFrame's --setup, SC2016).
# Scripts keep all four.
PAGE_SHELLCHECK_EXCLUDE = "SC1090,SC1091,SC2016,SC2164"


@dataclass(frozen=True)
class Block:
    """One code block (or included file) of a page."""

    page: Path
    line: int  # the line of the opening fence or directive
    directive: str  # "" for a plain fence, else the directive's name
    lang: str  # the language; for a literalinclude, its :language: option
    arg: str  # the directive's argument (the included path for a literalinclude)
    body: tuple[tuple[int, str], ...]  # (line, text) of the content, options excluded
    marker: tuple[str, str] | None  # the `% test: VERB ARG` line directly above
    tab: str | None  # the title of the innermost enclosing tab
    end: int = 0  # the line of the closing fence

    @property
    def kind(self) -> str:
        return self.directive or self.lang or "text"

    @property
    def is_include(self) -> bool:
        return self.directive == "literalinclude"

    @property
    def is_shell(self) -> bool:
        return self.lang.lower() in SHELL_LANGS

    @property
    def is_python(self) -> bool:
        return self.lang.lower() in PYTHON_LANGS

    @property
    def text(self) -> str:
        return "\n".join(t for _, t in self.body) + ("\n" if self.body else "")

    def include_path(self) -> Path | None:
        if not self.is_include:
            return None
        return (self.page.parent / self.arg.strip()).resolve()


@dataclass(frozen=True)
class Inline:
    line: int
    code: str
    tab: str | None = None  # the title of the innermost enclosing tab


@dataclass(frozen=True)
class Admonition:
    start: int
    end: int
    title: str
    classes: tuple[str, ...]
    text: str  # title and body

    @property
    def historical(self) -> bool:
        return "historical" in self.classes


@dataclass
class Page:
    path: Path
    text: str
    front_matter: dict
    blocks: list[Block] = field(default_factory=list)
    inline: list[Inline] = field(default_factory=list)
    admonitions: list[Admonition] = field(default_factory=list)
    headings: list[tuple[int, int, str]] = field(default_factory=list)  # (line, level, title)

    @property
    def rel(self) -> str:
        return rel(self.path)

    def section_end(self, line: int) -> int:
        """The last line of the section that holds ``line`` (up to the next heading of the
        same or a higher level than the one above ``line``)."""
        above = [h for h in self.headings if h[0] <= line]
        last = self.text.count("\n") + 1
        if not above:
            nxt = [h for h in self.headings if h[0] > line]
            return nxt[0][0] - 1 if nxt else last
        level = above[-1][1]
        for h_line, h_level, _ in self.headings:
            if h_line > line and h_level <= level:
                return h_line - 1
        return last

    def site_of(self, block: Block) -> str | None:
        return block_site(self, block)


def rel(path: Path | str) -> str:
    p = Path(path)
    try:
        return str(p.resolve().relative_to(ROOT))
    except ValueError:
        return str(p)


def front_matter(text: str) -> dict:
    if not text.startswith("---\n"):
        return {}
    end = text.find("\n---", 4)
    if end < 0:
        return {}
    try:
        data = yaml.safe_load(text[4:end]) or {}
    except yaml.YAMLError:
        return {}
    return data if isinstance(data, dict) else {}


def _marker_above(lines: list[str], index: int) -> tuple[str, str] | None:
    """The ``% test:`` marker directly above line ``index`` (0-based; blank lines allowed)."""
    for raw in reversed(lines[max(0, index - 3) : index]):
        m = MARKER.match(raw.strip())
        if m:
            return m["verb"], m["arg"].strip()
        if raw.strip():
            return None
    return None


def _directive(info: str) -> tuple[str, str]:
    m = re.match(r"^\{(?P<name>[\w:-]+)\}\s*(?P<arg>.*)$", info.strip())
    return (m["name"], m["arg"].strip()) if m else ("", "")


def scan_page(path: Path, text: str | None = None) -> Page:
    """Every code block, inline code span, admonition and heading of a MyST page."""
    path = Path(path)
    text = text if text is not None else path.read_text(encoding="utf-8")
    page = Page(path, text, front_matter(text))
    lines = text.splitlines()
    start = 0
    if text.startswith("---\n"):
        end = text.find("\n---", 4)
        if end >= 0:
            start = text.count("\n", 0, end + 1) + 1
    # stack of open containers: dict(fence, kind, directive, info, line, tab, ...)
    stack: list[dict] = []
    i = start
    while i < len(lines):
        raw = lines[i]
        n = i + 1
        stripped = raw.strip()
        top = stack[-1] if stack else None
        if top is not None and stripped and _closes(stripped, top["fence"]):
            stack.pop()
            _finish(page, top, lines, n)
            i += 1
            continue
        if top is not None and top["mode"] != "markdown":
            top["content"].append((n, raw))
            i += 1
            continue
        m = _OPEN.match(raw)
        if m and (m["fence"][0] != ":" or m["info"].strip().startswith("{")):
            info = m["info"].strip()
            name, arg = _directive(info)
            if m["fence"][0] == "`" and "`" in info:
                m = None  # an inline code span, not a fence
        if m:
            tab = next((c["title"] for c in reversed(stack) if c.get("title")), None)
            entry = {
                "fence": m["fence"],
                "line": n,
                "info": info,
                "directive": name,
                "arg": arg,
                "content": [],
                "marker": _marker_above(lines, i),
                "tab": tab,
            }
            if name:
                if name in CODE_DIRECTIVES:
                    entry["mode"] = "code"
                elif name in OPAQUE_DIRECTIVES:
                    entry["mode"] = "opaque"
                else:
                    entry["mode"] = "markdown"
                if name in {"tab", "group-tab"}:
                    entry["title"] = arg
                if name == "code-tab":
                    entry["title"] = arg.split(None, 1)[1] if len(arg.split()) > 1 else ""
            else:
                entry["mode"] = "code"
            stack.append(entry)
            i += 1
            continue
        h = _HEADING.match(raw)
        if h and not raw.startswith(" "):
            page.headings.append((n, len(h["hashes"]), h["title"]))
        elif not raw.lstrip().startswith("%"):
            tab = next((c["title"] for c in reversed(stack) if c.get("title")), None)
            for s in _INLINE.finditer(raw):
                if s.start() > 0 and raw[s.start() - 1] == "}":
                    continue  # a role ({doc}`...`), not code
                page.inline.append(Inline(n, s["code"].strip(), tab))
        if top is not None:
            top["content"].append((n, raw))
        i += 1
    while stack:  # unclosed fences run to the end of the page (CommonMark)
        _finish(page, stack.pop(), lines, len(lines) + 1)
    page.blocks.sort(key=lambda b: b.line)
    page.admonitions.sort(key=lambda a: a.start)
    return page


def _closes(stripped: str, fence: str) -> bool:
    return set(stripped) == {fence[0]} and len(stripped) >= len(fence)


def _split_options(content: list[tuple[int, str]]) -> tuple[dict, list[tuple[int, str]]]:
    """MyST directive options (``:key: value`` lines or a ``---`` YAML block) and the body."""
    opts: dict[str, str] = {}
    if content and content[0][1].strip() == "---":
        for k in range(1, len(content)):
            if content[k][1].strip() == "---":
                try:
                    data = yaml.safe_load("\n".join(t for _, t in content[1:k])) or {}
                except yaml.YAMLError:
                    data = {}
                if isinstance(data, dict):
                    opts = {str(a): str(b) for a, b in data.items()}
                return opts, content[k + 1 :]
    k = 0
    while k < len(content):
        m = _OPTION.match(content[k][1])
        if not m:
            break
        opts[m["key"]] = m["value"].strip()
        k += 1
    return opts, content[k:]


def _finish(page: Page, entry: dict, lines: list[str], close_line: int) -> None:
    name, mode = entry["directive"], entry["mode"]
    if mode == "opaque":
        return
    if name and mode == "markdown":
        opts, body = _split_options(entry["content"])
        if name in {"admonition", "note", "warning", "important", "tip", "caution", "attention"}:
            classes = tuple(opts.get("class", "").split())
            title = entry["arg"] if name == "admonition" else name.capitalize()
            page.admonitions.append(
                Admonition(
                    entry["line"],
                    close_line,
                    title,
                    classes,
                    "\n".join([title, *(t for _, t in body)]),
                )
            )
        return
    if name:
        opts, body = _split_options(entry["content"])
        arg = entry["arg"]
        if name == "literalinclude":
            lang = opts.get("language", "")
        else:
            lang = arg.split()[0] if arg else ""
    else:
        body = entry["content"]
        lang = entry["info"].split()[0] if entry["info"] else ""
        arg = ""
    page.blocks.append(
        Block(
            page.path,
            entry["line"],
            name,
            lang,
            arg,
            tuple(body),
            entry["marker"],
            entry["tab"],
            close_line,
        )
    )


def scan_pages(docs: Path | None = None) -> list[Page]:
    docs = docs or ROOT / "docs"
    return [scan_page(p) for p in sorted(docs.rglob("*.md")) if "_build" not in p.parts]


# --------------------------------------------------------------------------- sites
@cache
def site_names() -> dict[str, str]:
    """Lower-case site titles and names -> site name."""
    out: dict[str, str] = {}
    for s in all_sites():
        out[s.title.lower()] = s.name
        out[s.name.lower()] = s.name
    return out


def site_from_title(title: str | None) -> str | None:
    if not title:
        return None
    t = title.strip().lower()
    for key, name in sorted(site_names().items(), key=lambda kv: -len(kv[0])):
        if t == key or t.startswith((key + " ", key + "(")):
            return name
    return None


def block_site(page: Page, block: Block | Inline | None = None) -> str | None:
    """The site a block or inline span belongs to: a ``% test: site`` marker, the enclosing
    site tab, else the page's ``site:`` front matter."""
    if block is not None:
        marker = getattr(block, "marker", None)
        if marker and marker[0] == "site":
            return marker[1].split()[0] if marker[1] else None
        tab_site = site_from_title(block.tab)
        if tab_site:
            return tab_site
    fm = page.front_matter.get("site")
    return str(fm) if fm else None


def example_site(path: Path) -> str | None:
    """examples/<site>/... belongs to <site>."""
    try:
        first = Path(path).resolve().relative_to(ROOT / "examples").parts[0]
    except (ValueError, IndexError):
        return None
    return first if (SITES_DIR / f"{first}.yaml").is_file() else None


def example_files(root: Path | None = None) -> list[Path]:
    root = root or ROOT / "examples"
    out = []
    for p in sorted(root.rglob("*")):
        if not p.is_file() or "__pycache__" in p.parts:
            continue
        try:
            p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        out.append(p)
    return out


def file_kind(path: Path, text: str) -> str:
    """``shell``, ``python`` or ``text``."""
    if path.suffix == ".py":
        return "python"
    first = text.splitlines()[0] if text else ""
    if path.suffix in SHELL_SUFFIXES or (first.startswith("#!") and "sh" in first):
        return "shell"
    return "text"


# --------------------------------------------------------------------------- shell text
@dataclass(frozen=True)
class Word:
    text: str
    line: int


@dataclass(frozen=True)
class Logical:
    """One logical shell line: continuations joined, comments and prompts dropped."""

    line: int
    text: str
    words: tuple[Word, ...]
    offsets: tuple[tuple[int, int], ...]  # (offset into text, line) for each physical line

    def line_at(self, offset: int) -> int:
        line = self.line
        for off, n in self.offsets:
            if off <= offset:
                line = n
        return line


_PROMPT = re.compile(r"^\s*(?:\([\w.-]+\)\s*)?(?:\[[^\]]*\]\s*)?[$#] (?P<cmd>.*)$")


def logical_commands(
    lines: list[tuple[int, str]], console: bool = False, keep_comments: bool = False
) -> list[Logical]:
    """Logical commands of shell text given as (line, text) pairs.

    With ``console``, only lines after a ``$ `` prompt (and their continuations) are commands.
    Comment lines are dropped (``#SBATCH``/``#BSUB`` directives are kept).
    """
    if console and not any(_PROMPT.match(t) for _, t in lines):
        console = False
    out: list[Logical] = []
    parts: list[tuple[int, str]] = []
    cont = False
    for n, raw in lines:
        text = raw
        if console and not cont:
            m = _PROMPT.match(raw)
            if not m:
                continue
            text = m["cmd"]
        stripped = text.strip()
        if not cont and stripped.startswith("#") and not keep_comments:
            if not re.match(r"^#(SBATCH|BSUB)\b", stripped):
                continue
        if text.rstrip().endswith("\\"):
            parts.append((n, text.rstrip()[:-1]))
            cont = True
            continue
        parts.append((n, text))
        cont = False
        out.append(_join(parts))
        parts = []
    if parts:
        out.append(_join(parts))
    return [c for c in out if c.text.strip()]


def _join(parts: list[tuple[int, str]]) -> Logical:
    text, offsets = "", []
    for n, t in parts:
        offsets.append((len(text), n))
        text += t + " "
    text = text.rstrip()
    return Logical(parts[0][0], text, _words(text, offsets), tuple(offsets))


def _words(text: str, offsets: list[tuple[int, int]]) -> tuple[Word, ...]:
    def line_at(pos: int) -> int:
        line = offsets[0][1]
        for off, n in offsets:
            if off <= pos:
                line = n
        return line

    lex = shlex.shlex(text, posix=True, punctuation_chars=";&|()<>")
    lex.whitespace_split = True
    lex.commenters = "#"
    out = []
    try:
        while True:
            start = lex.instream.tell()
            tok = lex.get_token()
            if tok is None or tok == lex.eof:
                break
            seg = text[start : lex.instream.tell()]
            pos = start + len(seg) - len(seg.lstrip())
            out.append(Word(tok, line_at(pos)))
    except ValueError:  # unbalanced quotes: fall back to whitespace words
        out = []
        pos = 0
        for tok in text.split():
            pos = text.find(tok, pos)
            out.append(Word(tok, line_at(pos)))
            pos += len(tok)
    return tuple(out)


def split_commands(words: tuple[Word, ...]) -> list[tuple[Word, ...]]:
    """Simple commands of a logical line (split at ; && || | and parentheses)."""
    out, cur = [], []
    for w in words:
        if w.text in {";", "&&", "||", "|", "&", "(", ")", ";;", "|&"}:
            if cur:
                out.append(tuple(cur))
            cur = []
        else:
            cur.append(w)
    if cur:
        out.append(tuple(cur))
    return out


def command_words(words: tuple[Word, ...]) -> tuple[Word, ...]:
    """Drop leading VAR=value assignments and ``sudo``/``env``/``time``/``exec`` prefixes."""
    i = 0
    while i < len(words):
        t = words[i].text
        if re.match(r"^[A-Za-z_]\w*=", t) or t in {"sudo", "env", "time", "exec", "nohup", "!"}:
            i += 1
            continue
        break
    return words[i:]
