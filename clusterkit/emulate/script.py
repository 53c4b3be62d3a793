"""Read a job script: its bytes, its lines, and the commands of its body with their lines.

A file is read as bytes, so that what a scheduler refuses (NUL bytes, DOS line breaks, an empty
file) and bytes that are not UTF-8 are known, and a path that holds no file is one finding.
The body is parsed with bashlex, so a command continued over several lines, or nested in
``if``/``for``, is still one command with the line it starts on. Each scheduler reads its own
directives (:mod:`clusterkit.emulate.slurm_options`, :mod:`clusterkit.emulate.lsf`).
"""

from __future__ import annotations

import ast
import operator
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import bashlex
import bashlex.ast
import bashlex.errors

from clusterkit.grammars.placeholders import mask
from clusterkit.sites.errors import Finding


class UnreadableScript(Exception):
    """The path names no readable file: a finding, and nothing to judge."""

    def __init__(self, finding: Finding):
        self.finding = finding
        super().__init__(str(finding))


@dataclass(frozen=True)
class Source:
    """What a script file held, byte by byte, that a scheduler may refuse or a reader miss."""

    from_file: bool = False  # False: text given by the caller (a page snippet)
    size: int = 0  # bytes
    nul_line: int = 0  # first line with a NUL byte (0: none)
    crlf_line: int = 0  # first line ending in \r\n
    bad_utf8_line: int = 0  # first line with bytes that are not UTF-8
    bad_utf8: str = ""  # those bytes, in hex

    @property
    def empty(self) -> bool:
        return self.size == 0


def _line_of(data: bytes, pos: int) -> int:
    return data.count(b"\n", 0, pos) + 1


def decode(data: bytes) -> tuple[str, Source]:
    """Text to judge (UTF-8; other bytes become U+FFFD, NUL too; \r\n becomes \n) and what
    the bytes held."""
    try:
        text = data.decode("utf-8")
        bad_line, bad = 0, ""
    except UnicodeDecodeError as exc:
        text = data.decode("utf-8", errors="replace")
        bad_line, bad = _line_of(data, exc.start), data[exc.start : exc.end].hex(" ")
    nul = data.find(b"\0")
    crlf = data.find(b"\r\n")
    source = Source(
        from_file=True,
        size=len(data),
        nul_line=_line_of(data, nul) if nul >= 0 else 0,
        crlf_line=_line_of(data, crlf) if crlf >= 0 else 0,
        bad_utf8_line=bad_line,
        bad_utf8=bad,
    )
    return text.replace("\0", "\ufffd").replace("\r\n", "\n"), source


def read_bytes(path: Path) -> bytes:
    """The file's bytes; UnreadableScript (with the finding) when there is no file to read."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        why = "no such file"
    except IsADirectoryError:
        why = "a directory, not a job script"
    except PermissionError:
        why = "permission denied"
    except OSError as exc:
        why = exc.strerror or str(exc)
    raise UnreadableScript(
        Finding(path, 0, "script-readable", f"Unable to open file {path}: {why}")
    )


@dataclass(frozen=True)
class Directive:
    line: int
    words: tuple[str, ...]


@dataclass(frozen=True)
class Command:
    """One simple command of the body: its words (unexpanded) and where it starts."""

    line: int
    words: tuple[str, ...]
    assignments: tuple[str, ...] = ()  # VAR=value words before the command name

    @property
    def name(self) -> str:
        return self.words[0] if self.words else ""


@dataclass
class JobScript:
    path: Path
    text: str
    shebang: str | None
    commands: list[Command] = field(default_factory=list)
    parse_error: str | None = None
    source: Source = field(default_factory=Source)  # the file's bytes (empty for page text)
    # the parameter expansions bash would make, as bashlex reads them: (line, "name" or
    # "name:-default", ...); empty when bashlex could not parse the body
    parameters: list[tuple[int, str]] = field(default_factory=list)

    def parse_findings(self) -> list[Finding]:
        """A body bashlex could not parse is read line by line: say so."""
        if not self.parse_error:
            return []
        return [
            Finding(
                self.path,
                0,
                "bash-parse",
                f"bashlex could not parse the body ({self.parse_error}); read line by line",
                level="warning",
            )
        ]

    def reading_findings(self) -> list[Finding]:
        """Warnings about bytes read other than as written."""
        out = []
        if self.source.bad_utf8_line:
            out.append(
                Finding(
                    self.path,
                    self.source.bad_utf8_line,
                    "script-encoding",
                    f"bytes that are not UTF-8 ({self.source.bad_utf8}): read as U+FFFD; "
                    "a name or value holding them would not be what it seems",
                    level="warning",
                )
            )
        return out


def text_lines(text: str) -> list[str]:
    """The lines of ``text`` as shells and schedulers count them: split at newlines only
    (str.splitlines also splits at \\r, \\f, \\x1c... and would miscount)."""
    lines = text.split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


_HEREDOC = re.compile(r"(?<!<)<<(?!<)(-?)\s*(['\"]?)([A-Za-z_][\w]*)\2")


def heredoc_lines(text: str) -> set[int]:
    """The line numbers of the bodies of here-documents (``cat <<EOF`` ... ``EOF``): text a
    command reads, not lines of the script's own. A marker on a comment line starts none."""
    out, until, tabs = set(), None, False
    for n, line in enumerate(text_lines(text), start=1):
        if until is not None:
            if line.rstrip() == until or (tabs and line.lstrip("\t").rstrip() == until):
                until = None
            else:
                out.add(n)
            continue
        m = _HEREDOC.search(line)
        if m and not line.lstrip().startswith("#"):
            tabs, until = m[1] == "-", m[3]
    return out


def _line_starts(text: str) -> list[int]:
    starts = [0]
    for m in re.finditer("\n", text):
        starts.append(m.end())
    return starts


def _pos_to_line(starts: list[int], pos: int) -> int:
    lo, hi = 0, len(starts)
    while lo + 1 < hi:
        mid = (lo + hi) // 2
        if starts[mid] <= pos:
            lo = mid
        else:
            hi = mid
    return lo + 1


class _Collector(bashlex.ast.nodevisitor):
    def __init__(self, starts: list[int], masked: dict[str, str]):
        self.starts = starts
        self.masked = masked
        self.commands: list[Command] = []
        self.parameters: list[tuple[int, str]] = []  # (line, what is inside ${...} or after $)

    def _unmask(self, word: str) -> str:
        for token, original in self.masked.items():
            word = word.replace(token, original)
        return word

    def visitcommand(self, node, parts):
        words, assigns = [], []
        for part in parts:
            if part.kind == "word":
                words.append(self._unmask(part.word))
            elif part.kind == "assignment":
                (assigns if not words else words).append(self._unmask(part.word))
        if words or assigns:
            line = _pos_to_line(self.starts, node.pos[0])
            self.commands.append(Command(line, tuple(words), tuple(assigns)))
        return True

    def visitparameter(self, node, value):
        self.parameters.append((_pos_to_line(self.starts, node.pos[0]), value))


def _mask_arithmetic(text: str) -> tuple[str, dict[str, str]]:
    """``$((...))`` on one line replaced by a plain token (bashlex does not implement
    arithmetic expansion), and the map back."""
    masked: dict[str, str] = {}

    def token(m: re.Match) -> str:
        if "\n" in m[0]:
            return m[0]
        key = f"__clusterkit_arith_{len(masked)}__"
        masked[key] = m[0]
        return key

    return _ARITH.sub(token, text), masked


def body_commands(text: str) -> list[Command]:
    """Every simple command in ``text`` in source order (raises bashlex errors). Arithmetic
    and ``<placeholder>`` words are read as plain words (bashlex would take ``<app>`` for a
    redirection) and given back as written."""
    return _collect(text).commands


def _collect(text: str) -> _Collector:
    text, masked = _mask_arithmetic(text)
    text, placeholders = mask(text)
    masked.update(placeholders)
    collector = _Collector(_line_starts(text), masked)
    for tree in bashlex.parse(text):
        collector.visit(tree)
    collector.commands.sort(key=lambda c: c.line)
    return collector


def _fallback_commands(text: str) -> list[Command]:
    """Line-based reading for the rare constructs bashlex cannot parse."""
    out = []
    joined, start = "", 0
    for n, raw in enumerate(text_lines(text), start=1):
        if not joined:
            start = n
        line = raw.rstrip()
        if line.endswith("\\"):
            joined += line[:-1] + " "
            continue
        joined += line
        stripped = joined.strip()
        joined = ""
        if not stripped or stripped.startswith("#"):
            continue
        try:
            words = shlex.split(stripped, comments=True)
        except ValueError:
            continue
        assigns = []
        while words and re.match(r"^[A-Za-z_]\w*=", words[0]):
            assigns.append(words.pop(0))
        if words or assigns:
            out.append(Command(start, tuple(words), tuple(assigns)))
    return out


def read_script(path: Path | str, text: str | None = None) -> JobScript:
    """The script at ``path`` (or ``text``, a page snippet); UnreadableScript if there is none."""
    path = Path(path)
    source = Source()
    if text is None:
        text, source = decode(read_bytes(path))
    first = text_lines(text)[0] if text else ""
    shebang = first[2:].strip() if first.startswith("#!") else None
    script = JobScript(path, text, shebang, source=source)
    if not any(ln.strip() and not ln.lstrip().startswith("#") for ln in text_lines(text)):
        return script  # no command at all (bashlex trips on text that is only comments)
    try:
        collected = _collect(text)
        script.commands, script.parameters = collected.commands, collected.parameters
    except Exception as exc:  # bashlex trips on some inputs (e.g. only comments): read by lines
        script.parse_error = str(exc)
        script.commands = _fallback_commands(text)
    return script


_VAR = re.compile(r"\$(?:\{(?P<braced>[A-Za-z_]\w*)(?P<op>[^}]*)\}|(?P<plain>[A-Za-z_]\w*))")
_ARITH = re.compile(r"\$\(\(([^()]*(?:\([^()]*\)[^()]*)*)\)\)")
_NAME = re.compile(r"[A-Za-z_]\w*")
_ARITH_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: lambda a, b: int(a / b),  # bash truncates toward zero
    ast.Mod: lambda a, b: a - b * int(a / b),
}


def _arith(expr: str) -> int | None:
    """The value of a bash arithmetic expression of integers (+ - * / % and parentheses),
    or None when it holds anything else (or divides by zero)."""
    if not re.fullmatch(r"[\d\s+\-*/%()]+", expr) or len(expr) > 200:
        return None

    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            v = value(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITH_OPS:
            return _ARITH_OPS[type(node.op)](value(node.left), value(node.right))
        raise ValueError(expr)

    try:
        return value(ast.parse(expr.replace("/", "//"), mode="eval").body)
    except (ValueError, SyntaxError, ZeroDivisionError, RecursionError):
        return None


def expand(word: str, env: dict[str, str]) -> str:
    """Expand ``$VAR``/``${VAR}``/``${VAR:-default}`` and ``$((arithmetic))`` from ``env``;
    leave what cannot be known here (variables set outside the script, command substitution)
    as written.

    Enough for reading option values in a dry run (``--cpus-per-task=${SLURM_CPUS_PER_TASK}``,
    ``-n $((SLURM_NNODES*4))``); the run mode lets bash itself expand everything.
    """

    def sub(m: re.Match) -> str:
        name = m["braced"] or m["plain"]
        op = m["op"] or ""
        if name in env:
            return env[name]
        if op.startswith((":-", "-")):
            return op.split("-", 1)[1]
        return m.group(0)

    def arith(m: re.Match) -> str:
        inner = _VAR.sub(sub, m[1])
        inner = _NAME.sub(lambda n: env.get(n[0], n[0]), inner)
        result = _arith(inner)
        return m[0] if result is None else str(result)

    word = _ARITH.sub(arith, word)
    word = _VAR.sub(sub, word)
    if len(word) >= 2 and word[0] == word[-1] and word[0] in "'\"":
        word = word[1:-1]
    return word


def not_evaluable(value: str) -> str | None:
    """Why an (expanded) option value cannot be judged here, or None when it can: it still
    holds shell variables set outside the script, arithmetic over them, or a command."""
    if "$" not in value and "`" not in value:
        return None
    names = sorted({m["braced"] or m["plain"] for m in _VAR.finditer(value)})
    for m in _ARITH.finditer(value):
        names += sorted(set(_NAME.findall(m[1])) - set(names))
    if names:
        return f"{', '.join(names)} {'is' if len(names) == 1 else 'are'} set outside the script"
    if _ARITH.search(value):
        return "it is arithmetic the emulator does not evaluate"
    return "it is the output of a command"


_UNKNOWN_OUTPUT = re.compile(r"\$\((?!\()|`")


def expand_fields(words: list[str], env: dict[str, str]) -> list[str]:
    """Expand each word, and split one whose expansion holds blanks into fields, as bash does
    with an unquoted ``$ARGS`` (``srun ${SHARED_ARGS} prog``); the quoting of the original is
    not known here, so a quoted expansion with blanks is split too."""
    out: list[str] = []
    for word in words:
        value = expand(word, env)
        if _UNKNOWN_OUTPUT.search(value):
            out.append(value)  # a command's output, not known here: one word stands for it
        elif "$" in word and value != word and any(c.isspace() for c in value):
            out.extend(value.split())
        else:
            out.append(value)
    return out
