"""Slurm's grammars: the options of sbatch, srun and salloc, their values, and directives.

Slurm parses options with getopt_long: short options take their value attached (``-N1``) or as
the next word (``-N 1``), long options take ``--opt=value`` or ``--opt value``, and a long option
may be abbreviated to any unique prefix. argparse implements the same grammar, so each tool's
option table below becomes an ArgumentParser. Only the options' names and arities are modelled
here; the grammars of their values (times, memory, GPU counts, node ranges) follow, then the
way sbatch reads ``#SBATCH`` lines. What the values mean for a site is judged in
:mod:`clusterkit.emulate.slurm`.
"""

from __future__ import annotations

import argparse
import math
import re
from dataclasses import dataclass
from functools import cache

# (short, long, takes_value, tools) -- tools: b = sbatch, r = srun, a = salloc
# Names and arities from the sbatch(1), srun(1) and salloc(1) manual pages of Slurm 22.05-24.05.
_V, _F = True, False
OPTIONS: list[tuple[str | None, str, bool, str]] = [
    ("-A", "--account", _V, "bra"),
    (None, "--acctg-freq", _V, "bra"),
    ("-a", "--array", _V, "b"),
    (None, "--batch", _V, "b"),
    (None, "--bb", _V, "bra"),
    (None, "--begin", _V, "bra"),
    ("-D", "--chdir", _V, "bra"),
    (None, "--cluster-constraint", _V, "ba"),
    ("-M", "--clusters", _V, "bra"),
    (None, "--comment", _V, "bra"),
    ("-C", "--constraint", _V, "bra"),
    (None, "--container", _V, "br"),
    (None, "--contiguous", _F, "bra"),
    ("-S", "--core-spec", _V, "bra"),
    (None, "--cores-per-socket", _V, "bra"),
    (None, "--cpu-bind", _V, "r"),
    (None, "--cpu-freq", _V, "bra"),
    (None, "--cpus-per-gpu", _V, "bra"),
    ("-c", "--cpus-per-task", _V, "bra"),
    (None, "--deadline", _V, "bra"),
    (None, "--delay-boot", _V, "bra"),
    ("-d", "--dependency", _V, "bra"),
    ("-m", "--distribution", _V, "bra"),
    ("-e", "--error", _V, "br"),
    ("-x", "--exclude", _V, "bra"),
    (None, "--exact", _F, "r"),
    (None, "--export", _V, "br"),
    (None, "--export-file", _V, "b"),
    ("-B", "--extra-node-info", _V, "bra"),
    (None, "--get-user-env", _F, "ba"),
    (None, "--gid", _V, "bra"),
    (None, "--gpu-bind", _V, "bra"),
    (None, "--gpu-freq", _V, "bra"),
    ("-G", "--gpus", _V, "bra"),
    (None, "--gpus-per-node", _V, "bra"),
    (None, "--gpus-per-socket", _V, "bra"),
    (None, "--gpus-per-task", _V, "bra"),
    (None, "--gres", _V, "bra"),
    (None, "--gres-flags", _V, "bra"),
    (None, "--het-group", _V, "r"),
    ("-H", "--hold", _F, "ba"),
    (None, "--hint", _V, "bra"),
    (None, "--ignore-pbs", _F, "b"),
    ("-i", "--input", _V, "br"),
    ("-J", "--job-name", _V, "bra"),
    (None, "--jobid", _V, "r"),
    (None, "--kill-on-invalid-dep", _V, "b"),
    ("-K", "--kill-command", _V, "a"),
    ("-l", "--label", _F, "r"),
    ("-L", "--licenses", _V, "bra"),
    (None, "--mail-type", _V, "bra"),
    (None, "--mail-user", _V, "bra"),
    (None, "--mcs-label", _V, "bra"),
    (None, "--mem", _V, "bra"),
    (None, "--mem-bind", _V, "bra"),
    (None, "--mem-per-cpu", _V, "bra"),
    (None, "--mem-per-gpu", _V, "bra"),
    (None, "--mincpus", _V, "bra"),
    (None, "--mpi", _V, "r"),
    (None, "--multi-prog", _F, "r"),
    (None, "--network", _V, "bra"),
    (None, "--nice", _V, "bra"),
    ("-k", "--no-kill", _F, "bra"),
    (None, "--no-requeue", _F, "b"),
    ("-F", "--nodefile", _V, "bra"),
    ("-w", "--nodelist", _V, "bra"),
    ("-N", "--nodes", _V, "bra"),
    ("-n", "--ntasks", _V, "bra"),
    (None, "--ntasks-per-core", _V, "bra"),
    (None, "--ntasks-per-gpu", _V, "bra"),
    (None, "--ntasks-per-node", _V, "bra"),
    (None, "--ntasks-per-socket", _V, "bra"),
    (None, "--open-mode", _V, "br"),
    ("-o", "--output", _V, "br"),
    ("-O", "--overcommit", _F, "bra"),
    (None, "--overlap", _F, "r"),
    ("-s", "--oversubscribe", _F, "bra"),
    (None, "--parsable", _F, "b"),
    ("-p", "--partition", _V, "bra"),
    (None, "--power", _V, "bra"),
    (None, "--prefer", _V, "bra"),
    (None, "--priority", _V, "bra"),
    (None, "--profile", _V, "bra"),
    (None, "--propagate", _V, "br"),
    (None, "--pty", _F, "r"),
    ("-q", "--qos", _V, "bra"),
    ("-Q", "--quiet", _F, "bra"),
    (None, "--reboot", _F, "bra"),
    (None, "--requeue", _F, "b"),
    (None, "--reservation", _V, "bra"),
    (None, "--signal", _V, "bra"),
    (None, "--sockets-per-node", _V, "bra"),
    (None, "--spread-job", _F, "bra"),
    (None, "--switches", _V, "bra"),
    ("-T", "--threads", _V, "r"),
    (None, "--test-only", _F, "br"),
    (None, "--thread-spec", _V, "bra"),
    (None, "--threads-per-core", _V, "bra"),
    ("-t", "--time", _V, "bra"),
    (None, "--time-min", _V, "bra"),
    (None, "--tmp", _V, "bra"),
    (None, "--tres-per-task", _V, "bra"),
    (None, "--uid", _V, "bra"),
    (None, "--unbuffered", _F, "r"),
    (None, "--use-min-nodes", _F, "bra"),
    ("-v", "--verbose", _F, "bra"),
    ("-W", "--wait", _F, "b"),
    (None, "--wait-all-nodes", _V, "ba"),
    (None, "--wckey", _V, "bra"),
    (None, "--wrap", _V, "b"),
    ("-X", "--disable-status", _F, "r"),
    # the emulator's own option: never sent to a real Slurm
    (None, "--dry-run", _F, ""),
]

TOOL_LETTER = {"sbatch": "b", "srun": "r", "salloc": "a"}


class OptionError(Exception):
    """An option the tool does not know, or one missing its value."""


class SlurmValueError(ValueError):
    """An option value Slurm would refuse to parse."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse would print usage and exit(2)
        raise OptionError(message)


@dataclass(frozen=True)
class OptionSpec:
    short: str | None
    long: str
    takes_value: bool

    @property
    def dest(self) -> str:
        return self.long[2:].replace("-", "_")


def specs(tool: str) -> list[OptionSpec]:
    letter = TOOL_LETTER[tool]
    return [OptionSpec(s, lo, v) for s, lo, v, tools in OPTIONS if letter in tools or not tools]


@cache
def build_parser(tool: str) -> argparse.ArgumentParser:
    """An ArgumentParser that accepts exactly the options of ``tool`` (built once per tool;
    parsing leaves it unchanged)."""
    parser = _Parser(prog=tool, add_help=False, allow_abbrev=True)
    for spec in specs(tool):
        names = [n for n in (spec.short, spec.long) if n]
        if spec.long == "--ntasks-per-node":
            names.append("--tasks-per-node")
        if spec.takes_value:
            parser.add_argument(*names, dest=spec.dest, action="append")
        else:
            parser.add_argument(*names, dest=spec.dest, action="append_const", const=True)
    # --exclusive takes an optional value (user, mcs, topo)
    parser.add_argument("--exclusive", dest="exclusive", action="append", nargs="?", const="node")
    if tool == "srun":
        parser.add_argument("command", nargs=argparse.REMAINDER)
    elif tool == "sbatch":
        parser.add_argument("script", nargs="?")
        parser.add_argument("script_args", nargs=argparse.REMAINDER)
    else:
        parser.add_argument("command", nargs=argparse.REMAINDER)
    return parser


def parse(tool: str, argv: list[str]) -> dict[str, list]:
    """Parse ``argv`` as ``tool`` would; return {dest: [values in order]} for options given.

    Positional parts (``script``, ``command``) are returned under their own keys.
    """
    parser = build_parser(tool)
    ns = parser.parse_args(argv)
    return {k: v for k, v in vars(ns).items() if v not in (None, [])}


def option_message(exc: Exception) -> str:
    """An OptionError in the words getopt_long (and so sbatch, srun) would use."""
    msg = str(exc)
    m = re.match(r"unrecognized arguments: (.*)", msg)
    if m:
        return f"unrecognized option '{m[1].split()[0]}'"
    m = re.match(r"argument (\S+?)(?:/\S+)?: expected one argument", msg)
    if m:
        return f"option '{m[1]}' requires an argument"
    m = re.match(r"ambiguous option: (\S+) could match (.*)", msg)
    if m:
        return f"option '{m[1]}' is ambiguous; possibilities: {m[2]}"
    return msg


# --------------------------------------------------------------------------- value grammars
def slurm_time(text: str) -> int | None:
    """Seconds in a Slurm time limit; None for UNLIMITED/INFINITE.

    Accepted forms (sbatch(1)): "minutes", "minutes:seconds", "hours:minutes:seconds",
    "days-hours", "days-hours:minutes" and "days-hours:minutes:seconds".
    """
    t = text.strip()
    if t.lower() in {"infinite", "unlimited", "-1"}:
        return None
    if re.fullmatch(r"[0:-]+", t) and re.search(r"\d", t):
        return None  # "A time limit of zero requests that no time limit be imposed" (sbatch(1))
    m = re.fullmatch(r"(\d+)-(\d+)(?::(\d+))?(?::(\d+))?", t)
    if m:
        d, h = int(m[1]), int(m[2])
        mi, s = int(m[3] or 0), int(m[4] or 0)
        return ((d * 24 + h) * 60 + mi) * 60 + s
    parts = t.split(":")
    if not all(p.isdigit() for p in parts) or not 1 <= len(parts) <= 3:
        raise SlurmValueError(f"Invalid time specification {text!r}")
    nums = [int(p) for p in parts]
    if len(nums) == 1:
        return nums[0] * 60
    if len(nums) == 2:
        return nums[0] * 60 + nums[1]
    return nums[0] * 3600 + nums[1] * 60 + nums[2]


_MEM_UNITS = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def slurm_mem_mb(text: str) -> int:
    """Megabytes in a ``--mem`` value (default unit M; suffixes K, M, G, T)."""
    m = re.fullmatch(r"(\d+)([KMGT]?)B?", text.strip(), re.IGNORECASE)
    if not m:
        raise SlurmValueError(f"Invalid --mem specification {text!r}")
    return math.ceil(int(m[1]) * _MEM_UNITS[(m[2] or "M").upper()])


def count_with_type(text: str, what: str) -> tuple[str | None, int]:
    """``[type:]N`` as used by --gpus, --gpus-per-node, --gpus-per-task."""
    parts = text.split(":")
    if len(parts) == 1 and parts[0].isdigit():
        return None, int(parts[0])
    if len(parts) == 2 and parts[1].isdigit():
        return parts[0], int(parts[1])
    raise SlurmValueError(f"Invalid {what} specification {text!r}")


def gres_gpus(text: str) -> tuple[str | None, int]:
    """GPUs per node in a ``--gres`` list: ``gpu``, ``gpu:N``, ``gpu:type:N``.

    Another name (``nvme:1``) raises: the profiles describe GPUs only, as the generated
    gres.conf does, and Slurm refuses a generic resource no node has.
    """
    gpus_type, gpus = None, 0
    for item in text.split(","):
        fields = item.strip().split(":")
        if fields[0] != "gpu":
            raise SlurmValueError(
                f"Invalid generic resource (gres) specification {text!r}: no node has "
                f"a generic resource named {fields[0]!r} (only gpu)"
            )
        if len(fields) == 1:
            gpus = 1
        elif len(fields) == 2:
            if fields[1].isdigit():
                gpus = int(fields[1])
            else:
                gpus_type, gpus = fields[1], 1
        elif len(fields) == 3 and fields[2].isdigit():
            gpus_type, gpus = fields[1], int(fields[2])
        else:
            raise SlurmValueError(f"Invalid generic resource (gres) specification {text!r}")
    return gpus_type, gpus


def node_range(text: str) -> tuple[int, int]:
    """``--nodes=N`` or ``--nodes=min-max``."""
    m = re.fullmatch(r"(\d+)(?:-(\d+))?", text.strip())
    if not m:
        raise SlurmValueError(f"Invalid node count specification {text!r}")
    lo = int(m[1])
    return lo, int(m[2] or lo)


def positive_int(text: str, what: str) -> int:
    if not re.fullmatch(r"\d+", text.strip()) or int(text) < 1:
        raise SlurmValueError(f"Invalid {what} specification {text!r}")
    return int(text)


def literal_hint(text: str) -> str:
    """A note for a directive value that looks like shell: sbatch does not expand it."""
    if "$" not in text and "`" not in text:
        return ""
    return (
        " (sbatch reads #SBATCH lines as written: no variable, $((...)) or command in them "
        "is expanded)"
    )


# --------------------------------------------------------------------------- script directives
DIRECTIVE = "#SBATCH"
HET_SEPARATORS = ("hetjob", "packjob")


@dataclass(frozen=True)
class SbatchDirective:
    """The words of one ``#SBATCH`` line, the line, and the het-job component it belongs to."""

    line: int
    words: tuple[str, ...]
    component: int = 0
    problem: str = ""  # what sbatch says of a line it cannot split (unmatched quote, ...)


@dataclass
class Directives:
    """What sbatch reads from a script, and the lines that look like directives but are not."""

    read: list[SbatchDirective]
    ignored: list[tuple[int, str]]  # (line, why sbatch skips it)
    old_prefix_line: int = 0  # first #SLURM line (read, with an error message)

    @property
    def components(self) -> int:
        return 1 + max((d.component for d in self.read), default=0)


def split_directive(rest: str, placeholders: tuple[str, ...] = ()) -> tuple[list[str], str]:
    """The words of a directive after its prefix, as sbatch's get_argument() splits them:
    whitespace separates, quotes group, a backslash keeps the next character, an unquoted
    ``#`` ends the line. A placeholder of the site's docs (``[budget code]``) is one word.
    Returns (words, problem); the problem is sbatch's message for a line it cannot split."""
    words: list[str] = []
    i, n = 0, len(rest)
    while True:
        while i < n and rest[i].isspace():
            i += 1
        if i >= n:
            return words, ""
        if rest[i] == ":":
            return words, "Unexpected `:`"
        word, quote = "", ""
        while i < n and (quote or not rest[i].isspace()):
            ch = rest[i]
            hit = "" if quote else next((p for p in placeholders if rest.startswith(p, i)), "")
            if hit:
                word += hit
                i += len(hit)
            elif ch == "\\":
                word += rest[i + 1 : i + 2]
                i += 2
            elif quote:
                if ch == quote:
                    quote = ""
                else:
                    word += ch
                i += 1
            elif ch in "\"'":
                quote = ch
                i += 1
            elif ch == "#":
                if word:
                    words.append(word)
                return words, ""
            else:
                word += ch
                i += 1
        if quote:
            return words, f"Unmatched `{quote}`"
        words.append(word)


def _looks_like_directive(raw: str) -> bool:
    """A comment sbatch skips that a reader may take for a directive: ``# SBATCH``,
    ``  #SBATCH`` (indented), ``#sbatch``."""
    return re.match(r"\s*#\s*sbatch(\s+-|\s*$)", raw, re.IGNORECASE) is not None


def read_directives(text: str, placeholders: tuple[str, ...] = ()) -> Directives:
    """The directives sbatch reads (``_opt_batch_script``): lines that start with ``#SBATCH``
    (or the old ``#SLURM``) in the first column, up to the first line that is neither blank nor
    a comment; ``hetjob`` starts the next component of a heterogeneous job."""
    out = Directives([], [])
    component, body = 0, 0
    for n, raw in enumerate(text.split("\n"), start=1):
        prefix = next((p for p in (DIRECTIVE, "#SLURM") if raw.startswith(p)), "")
        if prefix and not body:
            if prefix == "#SLURM":
                out.old_prefix_line = out.old_prefix_line or n
            rest = raw[len(prefix) :].lstrip()
            first = rest.split(None, 1)[0].lower() if rest.split() else ""
            if first in HET_SEPARATORS:
                component += 1
                rest = rest[len(first) :]
            words, problem = split_directive(rest, placeholders)
            out.read.append(SbatchDirective(n, tuple(words), component, problem))
            continue
        stripped = raw.strip()
        if prefix or _looks_like_directive(raw):
            why = (
                f"after the first command (line {body})"
                if body
                else "not in the first column"
                if stripped.upper().startswith("#SBATCH")
                else f"not {DIRECTIVE} exactly"
            )
            out.ignored.append((n, why))
        elif stripped and not stripped.startswith("#") and not body:
            body = n
    return out
