"""What a comment or a page says an option counts, against the trainer's own ``--help``.

A trainer's help says what an option counts: ``--batch-size`` is "images per GPU (per
replica)" for the Keras trainer and "images per rank per step" for the PyTorch one. A job
script comment or a page sentence that calls the same option per node, split between GPUs,
or global contradicts it, and a reader who trusts the sentence sets the wrong value. This
check finds such sentences (rule ``option-unit``):

* in job scripts under ``examples/<site>/``: comment sentences that mention the option's topic
  (``batch`` for ``--batch-size``), in scripts that pass the option to that trainer;
* on pages: prose sentences that name the option (```--batch-size```), or, on a page whose
  front matter names one framework, its topic.

Each clause of a sentence (split at ``;``, ``:``, ``(`` and ``, and``/``, but``) that names the
option or its topic is judged by the units it states; it passes when one of them agrees with
the help, and when it states none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from clusterkit.grammars import myst as P
from clusterkit.grammars import trainer_help as H
from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import ROOT

# unit -> the phrases that state it
UNITS: dict[str, re.Pattern] = {
    "device": re.compile(
        r"\bper[ -](?:GPU|replica|device)\b|\b(?:on )?(?:each|every) (?:GPU|replica|V100|H100|"
        r"MI210|GH200)\b|\ba GPU\b",
        re.I,
    ),
    "process": re.compile(r"\bper (?:rank|process|task|worker)\b|\beach (?:rank|worker)\b", re.I),
    "node": re.compile(r"\bper node\b|\bwhole node\b|\bfor the node\b|\bon the node\b", re.I),
    "divided": re.compile(
        r"\b(?:split|splits|divided|divides|shared out|spread)\b[^.;:]*?\b(?:between|among|over)\b",
        re.I,
    ),
}
# Ranks of these trainers each drive one device, so "per rank" and "per GPU" agree.
EQUIVALENT = {"process": {"process", "device"}, "device": {"device"}}
# What marks a sentence as being about an option, beyond its flag.
TOPICS: dict[str, re.Pattern] = {
    "--batch-size": re.compile(
        r"(?<![\w-])batch(?:es)?\b(?!\s*(?:shell|script|job|system|scheduler|partition|queue|"
        r"node|file|size of))",
        re.I,
    ),
    "--workers": re.compile(r"\bloader (?:workers?|processes)\b", re.I),
    "--lr": re.compile(r"\blearning rate\b", re.I),
}
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`*(\[])")
_CLAUSE = re.compile(r"[;:(]\s|\s\(|,\s(?:and|but|so|while)\s")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+\.)\s")


@dataclass(frozen=True)
class Claim:
    path: Path
    line: int
    text: str


def units_in(text: str) -> set[str]:
    return {name for name, pat in UNITS.items() if pat.search(text)}


@cache
def allowed_units(help_text: str) -> frozenset[str]:
    """The units the help states, widened by :data:`EQUIVALENT`; empty when it states none."""
    out: set[str] = set()
    for unit in units_in(help_text):
        out |= EQUIVALENT.get(unit, {unit})
    return frozenset(out)


def sentences(lines: list[tuple[int, str]]) -> list[Claim]:
    """Sentences of consecutive text lines, each with the line it starts on."""
    out: list[Claim] = []
    para: list[tuple[int, str]] = []

    def flush() -> None:
        if not para:
            return
        text, starts = "", []
        for n, t in para:
            starts.append((len(text), n))
            text += t.strip() + " "
        pos = 0
        for piece in _SENTENCE_END.split(text):
            at = text.find(piece, pos)
            line = max((n for off, n in starts if off <= at), default=para[0][0])
            out.append(Claim(Path(), line, piece.strip()))
            pos = at + len(piece)
        para.clear()

    for n, t in lines:
        if _LIST_ITEM.match(t):
            flush()
        if t.strip():
            para.append((n, t))
        else:
            flush()
    flush()
    return out


def _about(clause: str, flag: str, by_flag: bool) -> bool:
    if re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", clause):
        return True
    topic = TOPICS.get(flag)
    return not by_flag and topic is not None and bool(topic.search(clause))


def judge(path: Path, claim: Claim, option: H.Option, by_flag: bool) -> Finding | None:
    flag = next(f for f in option.flags if f.startswith("--"))
    allowed = allowed_units(option.help)
    if not allowed:
        return None
    for clause in _CLAUSE.split(claim.text):
        if not _about(clause, flag, by_flag):
            continue
        stated = units_in(clause)
        if stated and not stated & allowed:
            break
    else:
        return None
    return Finding(
        path,
        claim.line,
        "option-unit",
        f"says {flag} counts {' / '.join(sorted(stated))}, but {option.trainer.name} --help "
        f"says {option.help!r}: {claim.text[:120]!r}",
    )


# --------------------------------------------------------------------------- job scripts
def _comment_lines(text: str) -> list[tuple[int, str]]:
    out = []
    for n, raw in enumerate(text.splitlines(), 1):
        s = raw.strip()
        if s.startswith("#!") or re.match(r"^#(SBATCH|BSUB)\b", s):
            tail = re.search(r"\s#\s(.*)$", s)
            out.append((n, tail[1] if tail else ""))
        elif s.startswith("#"):
            out.append((n, s.lstrip("#").strip()))
        else:
            out.append((n, ""))
    return out


def check_script(path: Path, root: Path = ROOT) -> list[Finding]:
    text = path.read_text(encoding="utf-8", errors="replace")
    trainers = H.trainers_named_in(text, root)
    if not trainers:
        return []
    passed = set(re.findall(r"(?<![\w-])(--[a-z][\w-]*)", text))
    claims = sentences(_comment_lines(text))
    out = []
    for trainer in trainers:
        for flag, option in H.options(trainer).items():
            if flag not in passed or not flag.startswith("--"):
                continue
            for claim in claims:
                f = judge(path, claim, option, by_flag=False)
                if f:
                    out.append(f)
    return _unique(out)


# --------------------------------------------------------------------------- pages
def _prose_lines(page: P.Page) -> list[tuple[int, str]]:
    """The page's prose, code blocks, directives' options and headings blanked."""
    lines = page.text.splitlines()
    blank = set()
    for b in page.blocks:
        blank.update(range(b.line, (b.end or b.line) + 1))
    out = []
    for n, raw in enumerate(lines, 1):
        s = raw.strip()
        code = n in blank or s.startswith(("```", ":::", "%", "#", ":")) or s == "---"
        out.append((n, "" if code else raw))
    return out


def _page_trainers(page: P.Page, root: Path) -> tuple[list[Path], bool]:
    """(trainers the page is about, whether only named flags count)."""
    frameworks = page.front_matter.get("frameworks") or []
    every = H.trainer_files(root)
    if isinstance(frameworks, list) and len(frameworks) == 1:
        mine = [t for t in every if t.parent.name == frameworks[0] and "hvd" not in t.stem]
        if mine:
            return mine, False
    return every, True


def check_page(page: P.Page, root: Path = ROOT) -> list[Finding]:
    trainers, by_flag = _page_trainers(page, root)
    claims = sentences(_prose_lines(page))
    # each flag's options; a flag with one whose help states no unit is never wrong
    judged: dict[str, list[H.Option]] = {}
    for trainer in trainers:
        for flag, option in H.options(trainer).items():
            if flag.startswith("--"):
                judged.setdefault(flag, []).append(option)
    judged = {f: opts for f, opts in judged.items() if all(allowed_units(o.help) for o in opts)}
    out = []
    for claim in claims:
        # a flag both trainers have is wrong only if it is wrong for every one that has it
        for options in judged.values():
            found = [judge(page.path, claim, option, by_flag) for option in options]
            if all(found):
                out.append(found[0])
    return _unique(out)


def _unique(findings: list[Finding]) -> list[Finding]:
    seen, out = set(), []
    for f in findings:
        key = (str(f.path), f.line, f.message.split(":")[0])
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def lint_all(root: Path = ROOT) -> list[Finding]:
    out: list[Finding] = []
    for page in P.scan_pages(root / "docs"):
        out += check_page(page, root)
    for path in P.example_files(root / "examples"):
        if P.example_site(path) and P.file_kind(path, path.read_text(encoding="utf-8")) == "shell":
            out += check_script(path, root)
    return out
