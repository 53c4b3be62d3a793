"""Option grammars of IBM Spectrum LSF ``bsub`` and IBM Job Step Manager ``jsrun``.

Pure parsing, no site knowledge: :mod:`clusterkit.emulate.bsub` and
:mod:`clusterkit.emulate.jsrun` judge the values.

bsub parses its options as LSF's own ``my_getopt`` does (openlava, LSF's open-source ancestor,
``lsf/lib/misc.c``): an option is a whole word (``-nnodes``, ``-alloc_flags``), a value either
follows as the next word or is glued to the option (``-n85``, ``-W02:00``, ``-Pprj123``; the OLCF
Summit guide shows ``bsub -nnodes 2 -Pprj123 -W02:00``), the first word that is not an option
starts the command, a word starting with ``--`` ends the options, and errors read
``bsub: illegal option -- Z``, ``bsub: option requires an argument -- W`` and
``bsub: option cannot have an argument -- B``; bsub then prints its usage and exits with
status 255 (``exit(-1)``).

jsrun takes GNU-style options (the option table below is JSM's, as LLNL Spindle's launcher parser
lists it): short options with glued or separate values (``-r1``, ``-r 1``, ``-bpacked:7``), long
options as ``--opt value`` or ``--opt=value``; the first non-option word is the program.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field


class LsfOptionError(Exception):
    """An option error, worded as the real tool words it."""


# --------------------------------------------------------------------------- bsub
# bsub options of LSF 10.1 (IBM "bsub" reference: option list) plus the CSM options of Summit
# (-nnodes, -csm, -alloc_flags, -ln_slots, -ln_mem, -cn_cu, -cn_mem, -step_cgroup, -jsm, -smt).
BSUB_FLAGS = frozenset("B H I Ip Is IS ISp ISs IX K N Ne r rn ul x XF Zs h V tty hl ar".split())
BSUB_VALUES = frozenset(
    """a alloc_flags app b C c clusters cn_cu cn_mem core_isolation csm cwd D data datagrp E Ep
    e eo eptl env ext extsched F f freq G g gpu hostfile i is J Jd jsdl jsdl_strict jsm k L Lp
    ln_mem ln_slots M m mig n nnodes network notify o oo outdir P p pack ptl Q q R rcacct rnc S s
    sla smt sp stage step_cgroup T t U u v W We w wa wt""".split()
)
BSUB_USAGE = (
    "Usage: bsub [-h] [-V] [-H] [-x] [-r] [-N] [-B] [-I | -Ip | -Is | -K] [-P project_name]\n"
    "\t\t[-q queue_name] [-W [hour:]minute] [-nnodes num_nodes | -csm y -n slots -R res_req]\n"
    "\t\t[-J job_name] [-o out_file] [-e err_file] [-alloc_flags flags] [-w depend_cond]\n"
    "\t\t[command [argument ...] | job_script]"
)


@dataclass
class BsubArgs:
    """Options in the order given (name without dash, value or True) and the command words."""

    options: list[tuple[str, str | bool]] = field(default_factory=list)
    command: list[str] = field(default_factory=list)
    stopped_by: str | None = None  # the "--..." word that ended the options, if one did

    def get(self, name: str) -> str | bool | None:
        vals = [v for k, v in self.options if k == name]
        return vals[-1] if vals else None


def parse_bsub(words: list[str], prog: str = "bsub") -> BsubArgs:
    """Parse ``bsub`` words the way LSF's getopt does; raise LsfOptionError on a bad option."""
    out = BsubArgs()
    i = 0
    while i < len(words):
        word = words[i]
        if not word.startswith("-") or word == "-":
            break
        if word.startswith("--"):
            out.stopped_by = word  # LSF: a word starting with "--" ends the options
            i += 1
            break
        name = word[1:]
        if name in BSUB_FLAGS:
            out.options.append((name, True))
            i += 1
            continue
        if name in BSUB_VALUES:
            if i + 1 >= len(words):
                raise LsfOptionError(f"{prog}: option requires an argument -- {name}")
            out.options.append((name, words[i + 1]))
            i += 2
            continue
        prefix = max(
            (o for o in BSUB_FLAGS | BSUB_VALUES if name.startswith(o)), key=len, default=None
        )
        if prefix is None:
            raise LsfOptionError(f"{prog}: illegal option -- {name}")
        if prefix in BSUB_FLAGS:
            raise LsfOptionError(f"{prog}: option cannot have an argument -- {prefix}")
        out.options.append((prefix, name[len(prefix) :]))
        i += 1
    out.command = list(words[i:])
    return out


def lsf_walltime(text: str) -> int:
    """Seconds in ``-W [hour:]minute[/host_spec]`` (LSF: minutes alone may exceed 59)."""
    m = re.fullmatch(r"(?:(\d+):)?(\d+)(?:/\S+)?", text.strip())
    if not m:
        raise ValueError(f"bad run limit {text!r}: the format is [hours:]minutes")
    return (int(m[1] or 0) * 60 + int(m[2])) * 60


def slot_range(text: str) -> tuple[int, int]:
    """``-n min[,max]``."""
    m = re.fullmatch(r"(\d+)(?:,(\d+))?", text.strip())
    if not m:
        raise ValueError(f"Bad argument for option -n: {text!r}")
    lo = int(m[1])
    return lo, int(m[2] or lo)


# --------------------------------------------------------------------------- -R strings
_SECTIONS = ("select", "order", "rusage", "span", "same", "cu", "affinity")


@dataclass(frozen=True)
class RTerm:
    """One term ``count*{select[..] order[..] span[..] cu[..]}`` of a compound resource string.

    ``count`` is None for a simple (non-compound) string, whose slots are ``-n``.
    """

    count: int | None
    sections: tuple[tuple[str, str], ...] = ()

    def section(self, name: str) -> str | None:
        return next((v for k, v in self.sections if k == name), None)

    @property
    def select(self) -> str:
        return re.sub(r"\s", "", self.section("select") or "")

    def _kv(self, name: str) -> dict[str, str]:
        text = self.section(name) or ""
        out = {}
        for part in re.split(r"[:\s]+", text.strip()):
            if "=" in part:
                k, _, v = part.partition("=")
                out[k.strip()] = v.strip()
        return out

    @property
    def span(self) -> dict[str, str]:
        return self._kv("span")

    @property
    def cu(self) -> dict[str, str]:
        return self._kv("cu")

    def _int(self, where: dict[str, str], key: str) -> int | None:
        v = where.get(key)
        return int(v) if v is not None and v.isascii() and v.isdigit() else None

    @property
    def ptile(self) -> int | None:
        return self._int(self.span, "ptile")

    @property
    def hosts(self) -> int | None:
        return self._int(self.span, "hosts")

    @property
    def maxcus(self) -> int | None:
        return self._int(self.cu, "maxcus")

    def selects(self, word: str) -> bool:
        """Whether the select expression names ``word`` (LN: launch node, CN: compute node)."""
        return re.search(rf"(?<![A-Za-z0-9_]){word}(?![A-Za-z0-9_])", self.select) is not None


def _sections(body: str, where: str) -> tuple[tuple[str, str], ...]:
    out = []
    i = 0
    while i < len(body):
        if body[i].isspace():
            i += 1
            continue
        m = re.match(r"([a-z_]+)\s*\[", body[i:])
        if not m or m[1] not in _SECTIONS:
            raise ValueError(
                f"cannot read the resource string near {body[i : i + 30]!r} in {where}: "
                f"expected one of {', '.join(s + '[...]' for s in _SECTIONS)}"
            )
        j = i + m.end()
        depth = 1
        start = j
        while j < len(body) and depth:
            depth += {"[": 1, "]": -1}.get(body[j], 0)
            j += 1
        if depth:
            raise ValueError(f"unbalanced [ in {m[1]}[...] of {where}")
        out.append((m[1], body[start : j - 1].strip()))
        i = j
    return tuple(out)


def parse_rstring(text: str) -> list[RTerm]:
    """Terms of a ``-R`` string: compound ``N*{...}+M*{...}`` or a simple ``select[..] span[..]``.

    Whitespace between and inside sections is tolerated (the OLCF example quotes the string
    with spaces: ``"1*{select[((LN) && (type == any))] order[r15s:pg] span[hosts=1] ...}"``).
    """
    body = text.strip()
    if len(body) >= 2 and body[0] == body[-1] and body[0] in "'\"":
        body = body[1:-1].strip()
    if not body:
        raise ValueError("empty resource string")
    if "{" not in body:
        return [RTerm(None, _sections(body, "the resource string"))]
    terms = []
    pos = 0
    while True:
        m = re.compile(r"\s*(\d+)\s*\*\s*\{").match(body, pos)
        if not m:
            raise ValueError(
                f"cannot read the resource string near {body[pos : pos + 30]!r}: "
                "expected N*{...} terms joined by +"
            )
        close = body.find("}", m.end())
        if close < 0:
            raise ValueError("unbalanced { in the resource string")
        terms.append(RTerm(int(m[1]), _sections(body[m.end() : close], f"term {len(terms) + 1}")))
        pos = close + 1
        rest = body[pos:].lstrip()
        if not rest:
            return terms
        if not rest.startswith("+"):
            raise ValueError(f"cannot read the resource string near {rest[:30]!r}: expected +")
        pos = body.index("+", pos) + 1


def render_rstring(terms: list[RTerm], spaced: bool = False) -> str:
    """The text of a resource string (inverse of parse_rstring)."""
    sep = " " if spaced else ""
    parts = []
    for t in terms:
        inner = sep.join(f"{k}[{v}]" for k, v in t.sections)
        parts.append(inner if t.count is None else f"{t.count}*{{{inner}}}")
    return "+".join(parts)


# --------------------------------------------------------------------------- jsrun
# (short, long, takes a value) -- JSM's jsrun options (LLNL Spindle, JSRUN_OPTIONS table)
JSRUN_OPTIONS = [
    ("a", "tasks_per_rs", True),
    ("p", "np", True),
    ("c", "cpu_per_rs", True),
    ("d", "launch_distribution", True),
    ("g", "gpu_per_rs", True),
    ("K", "rs_per_socket", True),
    ("l", "latency_priority", True),
    ("m", "memory_per_rs", True),
    ("n", "nrs", True),
    ("r", "rs_per_host", True),
    ("e", "stdio_mode", True),
    ("f", "appfile", True),
    ("I", "stdin_rank", True),
    ("k", "stdio_stderr", True),
    ("o", "stdio_stdout", True),
    ("t", "stdio_input", True),
    ("h", "chdir", True),
    ("A", "allocate_only", True),
    (None, "erf_input", True),
    (None, "erf_output", True),
    (None, "erf_output_pidx", True),
    ("H", "launch_node_task", True),
    ("i", "immediate", False),
    ("J", "use_reservation", True),
    ("L", "use_spindle", True),
    ("M", "smpiargs", True),
    ("P", "pre_post_exec", True),
    ("S", "save_resources", True),
    ("U", "use_resources", True),
    ("x", "exclude_hosts", True),
    ("X", "exit_on_error", True),
    ("Z", "progress", True),
    (None, "print_placement", True),
    ("b", "bind", True),
    ("D", "env_no_propagate", True),
    ("E", "env", True),
    ("F", "env_eval", True),
    ("?", "help", False),
    (None, "usage", False),
    ("V", "version", False),
]
_JS_SHORT = {s: (lng, val) for s, lng, val in JSRUN_OPTIONS if s}
_JS_LONG = {lng: val for _s, lng, val in JSRUN_OPTIONS}


@dataclass
class JsrunArgs:
    """Values by long option name (in order given), and the command."""

    values: dict[str, list[str]] = field(default_factory=dict)
    command: list[str] = field(default_factory=list)

    def get(self, name: str) -> str | None:
        vals = self.values.get(name)
        return vals[-1] if vals else None

    def all(self, name: str) -> list[str]:
        return list(self.values.get(name, []))


def parse_jsrun(words: list[str], prog: str = "jsrun") -> JsrunArgs:
    """Parse jsrun words (GNU getopt_long rules, stopping at the program)."""
    out = JsrunArgs()
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--":
            i += 1
            break
        if word.startswith("--"):
            i += _jsrun_long(out, words, i, prog)
        elif word.startswith("-") and len(word) > 1:
            i += _jsrun_shorts(out, words, i, prog)
        else:
            break
    out.command = list(words[i:])
    return out


def _jsrun_long(out: JsrunArgs, words: list[str], i: int, prog: str) -> int:
    """``--name[=value]`` (a unique prefix will do) at ``i``; the words it took."""
    name, eq, value = words[i][2:].partition("=")
    if name not in _JS_LONG:
        hits = [n for n in _JS_LONG if n.startswith(name)] if name else []
        if len(hits) > 1:
            raise LsfOptionError(
                f"{prog}: option '--{name}' is ambiguous; possibilities: "
                + " ".join(f"'--{h}'" for h in hits)
            )
        if not hits:
            raise LsfOptionError(f"{prog}: unrecognized option '--{name}'")
        name = hits[0]
    took = 1
    if not _JS_LONG[name]:
        if eq:
            raise LsfOptionError(f"{prog}: option '--{name}' doesn't allow an argument")
        value = ""
    elif not eq:
        if i + 1 >= len(words):
            raise LsfOptionError(f"{prog}: option '--{name}' requires an argument")
        value, took = words[i + 1], 2
    out.values.setdefault(name, []).append(value)
    return took


def _jsrun_shorts(out: JsrunArgs, words: list[str], i: int, prog: str) -> int:
    """``-abc`` or ``-r1``/``-r 1`` at ``i``; the words it took."""
    word = words[i]
    for j, ch in enumerate(word[1:], start=1):
        if ch not in _JS_SHORT:
            raise LsfOptionError(f"{prog}: invalid option -- '{ch}'")
        name, takes = _JS_SHORT[ch]
        if not takes:
            out.values.setdefault(name, []).append("")
            continue
        value, took = word[j + 1 :], 1
        if not value:
            if i + 1 >= len(words):
                raise LsfOptionError(f"{prog}: option requires an argument -- '{ch}'")
            value, took = words[i + 1], 2
        out.values.setdefault(name, []).append(value)
        return took
    return 1


# --------------------------------------------------------------------------- #BSUB lines
@dataclass(frozen=True)
class BsubDirective:
    line: int
    words: tuple[str, ...]
    problem: str = ""  # why the line cannot be split into words


@dataclass
class BsubDirectives:
    """Every ``#BSUB`` line, the first command's line (0: none), and the lines that look like
    directives but are comments to LSF (``# BSUB -W 10``)."""

    read: list[BsubDirective]
    first_command: int
    ignored: list[int]


def read_bsub_directives(text: str) -> BsubDirectives:
    """LSF reads ``#BSUB`` lines anywhere in the script; a trailing backslash continues one,
    and a word starting with ``#`` starts a comment (LSF's parseLine)."""
    out = BsubDirectives([], 0, [])
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        start, raw = i + 1, lines[i].strip()
        while raw.endswith("\\") and raw.startswith("#BSUB") and i + 1 < len(lines):
            i += 1
            raw = raw[:-1] + " " + lines[i].strip()
        i += 1
        if raw.startswith("#BSUB") and (len(raw) == 5 or raw[5] in " \t"):
            out.read.append(_bsub_words(start, raw[5:]))
        elif re.match(r"#\s+BSUB(\s+-|\s*$)", raw, re.IGNORECASE) or raw.startswith("#bsub"):
            out.ignored.append(start)
        elif raw and not raw.startswith("#") and not out.first_command:
            out.first_command = start
    return out


def _bsub_words(line: int, rest: str) -> BsubDirective:
    try:
        words = shlex.split(rest)
    except ValueError as exc:
        return BsubDirective(line, (), str(exc))
    cut = next((k for k, w in enumerate(words) if w.startswith("#")), len(words))
    return BsubDirective(line, tuple(words[:cut]))
