"""Placeholders: what documentation writes where the reader's own value goes.

Sites' pages print job scripts with values the reader is meant to replace -- ``<project>``,
``[budget code]``, ``XXXYYY``, ``bdXXXYY``, ``project_xxx``, ``your_project``, ``myproject`` --
and whole lines that stand for the reader's own (``#SBATCH ...``, ``[...]``). Such a value is
not wrong, only unfinished: a checker asks for it to be filled in, and judges nothing else of
it. :func:`placeholder_in` recognises the forms; a site profile adds its own
(``placeholders:``, e.g. ``[budget code]``).
"""

from __future__ import annotations

import re

# <project>, <ACCOUNT>, <#sockets * s>, <api key>: angle brackets around words
ANGLE = re.compile(r"<[A-Za-z_#.][^<>\n]*?>|<[A-Za-z]>")
# [budget code], [...], [project]: square brackets around a phrase (with a blank), an ellipsis
# or a lowercase word, standing on their own -- not a hostlist or range (node[01-04], [1-10]),
# a constraint ([rack1|rack2]), LSF's select[LN] or a shell test ([ -f x ])
SQUARE = re.compile(r"(?<![\w\]])\[(?:\.\.\.|[A-Za-z_][\w./-]* [\w ./-]*[\w.]|[a-z_]+)\]")
# XXXYYY, bdXXXYY, project_xxx, project_200XXXX, XXXX: runs of X (and Y) standing for digits
XRUN = re.compile(r"(?<![A-Za-z])(?:[a-z]{0,4})?(?:X{3,}Y*|x{3,}|X{2,}Y{2,})(?![a-z])")
# your_project, yourproject, YourProject, your-project, my-project, myproject, my_account,
# myAmazingProject, projectnumber, project_name, username@site
WORD = re.compile(
    r"^(?:(?i:your|my)(?:[-_][\w-]+|[A-Z]\w*|(?i:project|account|group|alloc|budget|proj|app|"
    r"user|name|lab|team)\w*)|(?i:project)[-_]?(?i:number|name|id|code)|"
    r"(?i:user_?name|your[-_.]?\w*)@\S+)$"
)
# a line that stands for the reader's own lines
ELLIPSIS = re.compile(r"^\s*(?:\.\.\.|…|\[\.\.\.\]|<\.\.\.>)\s*$")


def placeholder_in(value: str, extra: tuple[str, ...] = (), words: bool = True) -> str | None:
    """The placeholder ``value`` holds (the docs' own words for the reader's value), or None.

    ``extra``: a site's own placeholders (``[budget code]``). ``words``: also take the
    ``your_project``/``myproject`` words as placeholders -- right for a value that names what
    the reader owns (an account, a partition, an address), not for a name the reader may keep
    (a job called ``my_job``)."""
    if not isinstance(value, str):
        return None  # a flag's value (True)
    text = value.strip().strip("'\"")
    if not text:
        return None
    for p in extra:
        if p and p in text:
            return p
    for pattern in (ANGLE, SQUARE):
        m = pattern.search(text)
        if m:
            return m[0]
    m = XRUN.search(text)
    if m and not text.startswith(("-", "/dev/")):
        return text
    if words and WORD.match(text):
        return text
    if ELLIPSIS.match(text):
        return text
    return None


def is_ellipsis(text: str) -> bool:
    """A line (or the words of a directive) that only says "the rest goes here"."""
    return ELLIPSIS.match(text) is not None


def mask(text: str, extra: tuple[str, ...] = ()) -> tuple[str, dict[str, str]]:
    """``text`` with each ``<...>`` placeholder (and each of ``extra``) replaced by a plain word
    on the same line, so that a shell or a parser reads the script around it; and the map from
    the words back to the placeholders."""
    found: dict[str, str] = {}

    def word(original: str) -> str:
        key = f"__clusterkit_placeholder_{len(found)}__"
        found[key] = original
        return key

    for p in extra:
        if p and "\n" not in p:
            text = text.replace(p, word(p)) if p in text else text
    out = []
    for line in text.split("\n"):
        if line.lstrip().startswith("#") or "<<" in line:
            out.append(line)  # comments stay; a here-document's marker is not a placeholder
            continue
        out.append(ANGLE.sub(lambda m: word(m[0]) if _standalone(m) else m[0], line))
    return "\n".join(out), found


def _standalone(m: re.Match) -> bool:
    """``<name>`` that reads as a placeholder, not a redirection: ``cmd <in >out`` has blanks
    around its arrows; ``<in>`` or ``<api key>`` ends on a word."""
    inner = m[0][1:-1]
    return not inner.endswith(" ") and not inner.startswith(" ")
