"""The stale-command registry (``lint/deprecations.yaml``): its schema, its entries, and how an
entry is found in shell commands and other lines.

Each entry names a command or API that has gone stale, since when, what replaced it and the
source that says so; ``command`` matches a shell command word by word (the program, also
after ``srun``, ``sudo`` or ``VAR=value``; its sub-command, flags and arguments), ``pattern``
any line. A file can say at its top that it is kept as history (``HISTORICAL:`` with
``Replaced by``), which covers the entries it names. The lint over pages and examples is
:mod:`clusterkit.commands.deprecations`; the job-script checker reports the same entries as
warnings (:mod:`clusterkit.emulate.sbatch`, :mod:`clusterkit.emulate.lsf`).
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import jsonschema

from clusterkit.grammars import myst as P
from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import ROOT

REGISTRY = ROOT / "lint" / "deprecations.yaml"

_COMMAND = {
    "type": "object",
    "additionalProperties": False,
    "required": ["names"],
    "properties": {
        "names": {"type": "array", "minItems": 1, "items": {"type": "string"}},
        "subcommand": {"type": "array", "items": {"type": "string"}},
        "flags": {"type": "array", "items": {"type": "string", "pattern": "^-"}},
        "args": {"type": "string", "format": "regex"},
    },
}
SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "Deprecation registry",
    "type": "object",
    "additionalProperties": False,
    "required": ["entries"],
    "properties": {
        "entries": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["id", "status", "date", "replacement", "source", "examples"],
                "anyOf": [{"required": ["pattern"]}, {"required": ["command"]}],
                "properties": {
                    "id": {"type": "string", "pattern": "^[a-z0-9][a-z0-9-]*$"},
                    "status": {"enum": ["deprecated", "removed", "archived"]},
                    "date": {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"},
                    "replacement": {"type": "string", "minLength": 3},
                    "source": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["title", "url"],
                        "properties": {
                            "title": {"type": "string"},
                            "url": {"type": "string", "pattern": "^https?://"},
                        },
                    },
                    "note": {"type": "string"},
                    "pattern": {"type": "string", "format": "regex"},
                    "command": {
                        "oneOf": [_COMMAND, {"type": "array", "minItems": 1, "items": _COMMAND}]
                    },
                    "names": {"type": "array", "minItems": 1, "items": {"type": "string"}},
                    "examples": {"type": "array", "minItems": 1, "items": {"type": "string"}},
                    "counterexamples": {"type": "array", "items": {"type": "string"}},
                },
            },
        }
    },
}


class RegistryError(Exception):
    def __init__(self, findings: list[Finding]):
        self.findings = findings
        super().__init__("\n".join(map(str, findings)))


@dataclass(frozen=True)
class CommandMatch:
    names: tuple[str, ...]
    subcommand: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    args: re.Pattern | None = None


@dataclass(frozen=True)
class Entry:
    id: str
    status: str
    date: str
    replacement: str
    source: dict
    pattern: re.Pattern | None
    commands: tuple[CommandMatch, ...]
    names: tuple[str, ...]
    examples: tuple[str, ...]
    counterexamples: tuple[str, ...]
    note: str = ""

    @property
    def rule(self) -> str:
        return f"deprecated:{self.id}"

    def message(self, what: str) -> str:
        return (
            f"`{what}` is {self.status} since {self.date}; replaced by: {self.replacement} "
            f"(source: {self.source['url']})"
        )

    def named_in(self, text: str) -> bool:
        low = text.lower()
        return any(n.lower() in low for n in self.names)


def validate(data: object, path: Path = REGISTRY) -> list[Finding]:
    """Schema errors of a registry, each with the file and the line of the entry."""
    from clusterkit.sites.profiles import line_of

    validator = jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.FormatChecker())
    out = []
    for err in validator.iter_errors(data):
        where = ".".join(str(p) for p in err.absolute_path) or "(top level)"
        out.append(
            Finding(
                path,
                line_of(data, list(err.absolute_path)),
                f"registry-schema:{err.validator}",
                f"{where}: {err.message}",
            )
        )
    if out:
        return out
    seen: set[str] = set()
    for i, e in enumerate(data["entries"]):  # type: ignore[index]
        if e["id"] in seen:
            out.append(
                Finding(
                    path, line_of(data, ["entries", i]), "registry-unique", f"id {e['id']} twice"
                )
            )
        seen.add(e["id"])
    return out


def load_registry(path: Path = REGISTRY) -> tuple[Entry, ...]:
    from clusterkit.sites.profiles import load_yaml

    data = load_yaml(path)
    problems = validate(data, path)
    if problems:
        raise RegistryError(problems)
    out = []
    for e in data["entries"]:
        cmds = e.get("command") or []
        if isinstance(cmds, dict):
            cmds = [cmds]
        out.append(
            Entry(
                id=e["id"],
                status=e["status"],
                date=e["date"],
                replacement=" ".join(e["replacement"].split()),
                source=dict(e["source"]),
                pattern=re.compile(e["pattern"]) if e.get("pattern") else None,
                commands=tuple(
                    CommandMatch(
                        tuple(c["names"]),
                        tuple(c.get("subcommand", ())),
                        tuple(c.get("flags", ())),
                        re.compile(c["args"]) if c.get("args") else None,
                    )
                    for c in cmds
                ),
                names=tuple(e.get("names") or [e["id"]]),
                examples=tuple(e["examples"]),
                counterexamples=tuple(e.get("counterexamples", ())),
                note=e.get("note", ""),
            )
        )
    return tuple(out)


@cache
def registry() -> tuple[Entry, ...]:
    return load_registry(REGISTRY)


# --------------------------------------------------------------------------- matching
def _name_at(words: tuple[P.Word, ...], i: int, name: str) -> int:
    """How many words starting at ``i`` spell ``name`` (0 if they do not)."""
    parts = name.split()
    if i + len(parts) > len(words):
        return 0
    for k, part in enumerate(parts):
        word = words[i + k].text
        base = word.rsplit("/", 1)[-1] if k == 0 else word
        if not fnmatch.fnmatchcase(base, part):
            return 0
    return len(parts)


def match_command(cm: CommandMatch, words: tuple[P.Word, ...]) -> P.Word | None:
    """The word at which ``cm`` matches a simple command (the program may follow a wrapper)."""
    for i in range(len(words)):
        for name in cm.names:
            k = _name_at(words, i, name)
            if not k:
                continue
            rest = words[i + k :]
            positional = [w for w in rest if not w.text.startswith("-")]
            if cm.subcommand:
                if not positional or positional[0].text not in cm.subcommand:
                    continue
                sub_index = rest.index(positional[0])
                rest = rest[sub_index + 1 :]
                positional = positional[1:]
            if not cm.flags and cm.args is None:
                return words[i]
            for w in rest:
                if any(w.text == f or w.text.startswith(f + "=") for f in cm.flags):
                    return w
                if cm.args is not None and not w.text.startswith("-") and cm.args.match(w.text):
                    return w
    return None


def match_shell(entry: Entry, cmd: P.Logical) -> list[tuple[int, str]]:
    """(line, matched text) for each place ``entry`` matches a logical shell command."""
    hits: dict[int, str] = {}
    for simple in P.split_commands(cmd.words):
        for cm in entry.commands:
            w = match_command(cm, simple)
            if w is not None:
                hits.setdefault(w.line, " ".join(x.text for x in simple))
    if not hits and entry.pattern is not None:  # the word-by-word match points more precisely
        for m in entry.pattern.finditer(cmd.text):
            start = m.start() + (len(m.group(0)) - len(m.group(0).lstrip()))
            hits.setdefault(cmd.line_at(start), m.group(0).strip())
    return sorted(hits.items())


def match_line(entry: Entry, text: str) -> str | None:
    """The match of ``entry`` in one line of Python or other text (regex only)."""
    if entry.pattern is None:
        return None
    m = entry.pattern.search(text)
    return m.group(0).strip() if m else None


def lint_lines(
    path: Path | str,
    lines: list[tuple[int, str]],
    kind: str,
    covered=None,
    entries: tuple[Entry, ...] | None = None,
) -> list[Finding]:
    """Findings for ``lines`` of ``kind`` (shell, console, python, text, prose: a page's
    sentences, searched with each entry's pattern only, where a match must be a command with
    its arguments: a tool's bare name in a sentence is not flagged).

    ``covered(entry, line)`` says whether a historical marker covers the match.
    """
    entries = registry() if entries is None else entries
    out: list[Finding] = []
    if kind in {"shell", "console"}:
        cmds = P.logical_commands(lines, console=kind == "console")
        for entry in entries:
            for cmd in cmds:
                for line, what in match_shell(entry, cmd):
                    if not (covered and covered(entry, line)):
                        out.append(Finding(path, line, entry.rule, entry.message(_short(what))))
        return out
    for n, raw in lines:
        stripped = raw.strip()
        if kind == "python" and stripped.startswith("#"):
            continue
        cmds = None  # the line's shell commands, split once, when an entry asks for them
        for entry in entries:
            what = match_line(entry, raw)
            if kind == "prose" and what is not None and len(what.split()) < 2:
                continue  # a tool's name in a sentence is talk about it, not a command
            if what is None and entry.commands and kind == "text":
                cmds = P.logical_commands([(n, raw)]) if cmds is None else cmds
                what = next((w for c in cmds for _, w in match_shell(entry, c)), None)
            if what is not None and not (covered and covered(entry, n)):
                out.append(Finding(path, n, entry.rule, entry.message(_short(what))))
    return out


def _short(text: str, limit: int = 70) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------- markers
@dataclass(frozen=True)
class Marker:
    start: int
    end: int
    text: str

    def covers(self, entry: Entry, line: int) -> bool:
        return self.start <= line <= self.end and entry.named_in(self.text)


def file_header(text: str) -> tuple[str, int]:
    """The comment block at the top of a file (after a shebang) and its last line."""
    lines = text.splitlines()
    out, last = [], 0
    for n, raw in enumerate(lines, 1):
        s = raw.strip()
        if n == 1 and s.startswith("#!"):
            continue
        if s.startswith("#"):
            out.append(s.lstrip("#").strip())
            last = n
            continue
        break
    return "\n".join(out), last


def file_marker(path: Path | str, text: str) -> tuple[Marker | None, list[Finding]]:
    header, _last = file_header(text)
    if "HISTORICAL:" not in header:
        return None, []
    if not re.search(r"\bReplaced by\b", header):
        line = next((n for n, raw in enumerate(text.splitlines(), 1) if "HISTORICAL:" in raw), 1)
        return None, [
            Finding(
                path,
                line,
                "historical-marker",
                "a HISTORICAL: header must name the replacement after 'Replaced by'",
            )
        ]
    return Marker(1, text.count("\n") + 1, header), []
