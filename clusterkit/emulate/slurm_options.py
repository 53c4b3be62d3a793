"""Slurm's grammars: the options of sbatch, srun and salloc, their values, and directives.

Slurm parses options with getopt_long (optstring ``"+..."``): short options take their value
attached (``-N1``) or as the next word (``-N 1``), and may be clustered (``-ul`` is ``-u -l``);
long options take ``--opt=value`` or ``--opt value``, an optional argument only attached
(``--exclusive=user``), and may be abbreviated to any unique prefix; the first word that is not
an option (or ``--``) ends the options. :func:`parse` implements that grammar over the tables of
:mod:`clusterkit.emulate.slurm_option_table`, read from Slurm's own sources for each release
from 22.05 on; an option is known when any of those releases has it. The grammars of the
values (times, memory, GPU counts, node ranges) follow, then the way sbatch reads ``#SBATCH``
lines. What the values mean for a site is judged in :mod:`clusterkit.emulate.slurm`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cache

from clusterkit.emulate.script import heredoc_lines
from clusterkit.emulate.slurm_option_table import OPTIONS as SLURM_OPTIONS
from clusterkit.grammars.placeholders import ANGLE, SQUARE
from clusterkit.sites import spank
from clusterkit.sites.spank import PluginOption

TOOLS = ("sbatch", "srun", "salloc")
TOOL_LETTER = {"sbatch": "b", "srun": "r", "salloc": "a"}
# Long names that Slurm's getopt table gives the same meaning (the same ``val``) as another
ALIASES = {"tasks-per-node": "ntasks-per-node", "cpu_bind": "cpu-bind", "pack-group": "het-group"}
# The emulator's own options: never sent to a real Slurm
OWN_OPTIONS = (("dry-run", None, "F"),)
# What an optional argument stands for when none is attached
OPTIONAL_DEFAULT = {"exclusive": "node"}


class OptionError(Exception):
    """An option the tool does not know, one missing its value, or an ambiguous prefix; the
    message is getopt_long's own."""


class SlurmValueError(ValueError):
    """An option value Slurm would refuse to parse."""


@dataclass(frozen=True)
class OptionSpec:
    short: str | None  # "-A"
    long: str  # "--account"
    takes_value: bool  # a value, required or optional
    optional: bool = False  # the value only attached (--opt=value)
    releases: str = ""  # the Slurm releases that have it ("22.05:", "" for the emulator's own)

    @property
    def dest(self) -> str:
        name = self.long[2:]
        return ALIASES.get(name, name).replace("-", "_")

    def in_release(self, release: str) -> bool:
        """Whether Slurm ``release`` (``"23.11"``) has this option."""
        return in_spans(self.releases, release)


def in_spans(spans: str, release: str) -> bool:
    """Whether ``release`` falls in ``"22.05:"``, ``"22.05:23.11,24.05:"``, ..."""
    key = _release_key(release)
    for span in filter(None, spans.split(",")):
        since, _, until = span.partition(":")
        if _release_key(since) <= key and (not until or key < _release_key(until)):
            return True
    return False


def _release_key(release: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", release)[:2])


@cache
def specs(tool: str, release: str | None = None) -> tuple[OptionSpec, ...]:
    """The options of ``tool`` in Slurm ``release`` (None: in any release of the table), with
    the emulator's own."""
    column = TOOLS.index(tool)
    out = []
    for name, short, arity, *spans in SLURM_OPTIONS:
        span = spans[column]
        if not span or (release is not None and not in_spans(span, release)):
            continue
        letter = f"-{short}" if short else None
        out.append(OptionSpec(letter, f"--{name}", arity != "F", arity == "O", span))
    out += [OptionSpec(None, f"--{name}", arity != "F") for name, _s, arity in OWN_OPTIONS]
    return tuple(out)


@cache
def _tables(
    tool: str, release: str | None = None
) -> tuple[dict[str, OptionSpec], dict[str, OptionSpec]]:
    longs = {spec.long[2:]: spec for spec in specs(tool, release)}
    shorts = {spec.short[1:]: spec for spec in specs(tool, release) if spec.short}
    return longs, shorts


def _long(tool: str, word: str, release: str | None = None) -> tuple[OptionSpec, str | None]:
    """The option a ``--name[=value]`` word names (exact, else a unique prefix), and its
    attached value."""
    name, eq, value = word[2:].partition("=")
    longs, _ = _tables(tool, release)
    if name in longs:
        return longs[name], value if eq else None
    hits = [spec for n, spec in longs.items() if n.startswith(name)] if name else []
    # getopt_long takes a prefix of several names that mean the same (an alias) as one
    if len({(h.dest, h.takes_value, h.optional) for h in hits}) > 1:
        names = " ".join(f"'{h.long}'" for h in hits)
        raise OptionError(f"option '--{name}' is ambiguous; possibilities: {names}")
    if not hits:
        raise OptionError(f"unrecognized option '{word}'{_other_releases(tool, name, release)}")
    return hits[0], value if eq else None


def _other_releases(tool: str, name: str, release: str | None) -> str:
    """For an option ``tool`` of Slurm ``release`` lacks: the releases that have it."""
    if release is None:
        return ""
    spec = next((s for s in specs(tool) if s.long == f"--{name}"), None)
    if spec is None or not spec.releases:
        return ""
    spans = []
    for span in spec.releases.split(","):
        since, _, until = span.partition(":")
        spans.append(f"{since} up to {until} (not {until})" if until else f"{since} and later")
    return f" (Slurm {release}'s {tool} has no --{name}; Slurm {', '.join(spans)} has it)"


PLUGIN = "plugin_options"  # where parse(..., plugins=True) puts options Slurm does not have
# where parse puts the options of known SPANK plugins: (option, value, declared by the site)
PLUGIN_KNOWN = "plugin_known"


@dataclass(frozen=True)
class Plugins:
    """The SPANK plugins a site's clients take the options of.

    ``declared``: those the site runs (its profile's ``plugins:``); their options are parsed
    like Slurm's own. ``generic``: a site whose plugins are not known (``--site generic``):
    the options of the plugins the registry knows (:mod:`clusterkit.sites.spank`) are taken
    with a warning, and any other long option that is not a misspelling of one of Slurm's is
    set aside unjudged. On a site with a profile, a known plugin's option that the profile does
    not declare is refused, as the site's Slurm would refuse it."""

    declared: tuple[spank.Plugin, ...] = ()
    generic: bool = False

    def table(self, tool: str) -> dict[str, tuple[PluginOption, bool]]:
        """name -> (option, declared) for ``tool``: the site's plugins, and the registry's
        (not declared) where the site's are not known."""
        known = spank.option_table(list(spank.REGISTRY.values()), tool)
        out = {n: (o, False) for n, o in known.items()}
        out.update((n, (o, True)) for n, o in spank.option_table(list(self.declared), tool).items())
        return out


def _plugin_long(
    tool: str, word: str, plugins: Plugins
) -> tuple[PluginOption, bool, str | None] | None:
    """The plugin option a ``--name[=value]`` word names (exact, else a unique prefix), with
    whether the site declares it; None if it names none."""
    name, eq, value = word[2:].partition("=")
    table = plugins.table(tool)
    if name not in table:
        hits = [n for n in table if n.startswith(name)] if name else []
        if len(hits) != 1:
            return None
        name = hits[0]
    option, declared = table[name]
    return option, declared, value if eq else None


def parse(
    tool: str, argv: list[str], plugins: bool | Plugins = False, release: str | None = None
) -> dict[str, list]:
    """Parse ``argv`` as ``tool``'s getopt_long does; return {dest: [values in order]} for the
    options given (a flag's value is True). What follows the options is returned as
    ``command`` (srun, salloc: a list) or ``script`` and ``script_args`` (sbatch).

    ``release``: the options of that Slurm release only (a site that records the release it
    runs); None: those of any release of the table.

    ``plugins``: the SPANK plugins whose options the site's clients take (:class:`Plugins`;
    ``True`` is a site whose plugins are not known, such as the generic one). Options of known
    plugins are collected under ``PLUGIN_KNOWN`` as (option, value, declared); on a site whose
    plugins are not known, a long option Slurm does not have and that is not a misspelling of
    one (:func:`close_options`) is collected under ``PLUGIN`` as written, its value taken only
    when attached (``--uenv=name``), instead of refused."""
    plugins = Plugins(generic=True) if plugins is True else plugins or Plugins()
    out: dict[str, list] = {}
    words = list(argv)
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--":
            i += 1
            break
        if not word.startswith("-") or word == "-":
            break
        i += 1
        if word.startswith("--"):
            try:
                spec, value = _long(tool, word, release)
            except OptionError as exc:
                if not str(exc).startswith("unrecognized") or "; Slurm " in str(exc):
                    raise  # ambiguous, or an option of another release
                i = _plugin_word(tool, word, words, i, plugins, out, exc, release)
                continue
            if not spec.takes_value and value is not None:
                raise OptionError(f"option '{spec.long}' doesn't allow an argument")
            if spec.takes_value and not spec.optional and value is None:
                if i >= len(words):
                    raise OptionError(f"option '{spec.long}' requires an argument")
                value, i = words[i], i + 1
            _add(out, spec, value)
            continue
        _, shorts = _tables(tool, release)
        k = 1
        while k < len(word):
            spec = shorts.get(word[k])
            if spec is None:
                raise OptionError(f"invalid option -- '{word[k]}'")
            rest = word[k + 1 :]
            if not spec.takes_value:
                _add(out, spec, None)
                k += 1
                continue
            if rest or spec.optional:
                _add(out, spec, rest or None)
            elif i < len(words):
                _add(out, spec, words[i])
                i += 1
            else:
                raise OptionError(f"option requires an argument -- '{word[k]}'")
            break
    rest = words[i:]
    if tool == "sbatch":
        if rest:
            out["script"] = rest[0]
            out["script_args"] = rest[1:]
    elif rest:
        out["command"] = rest
    return out


def _plugin_word(
    tool: str,
    word: str,
    words: list[str],
    i: int,
    plugins: Plugins,
    out: dict[str, list],
    exc: OptionError,
    release: str | None = None,
) -> int:
    """An option Slurm's ``tool`` does not have: a known plugin's (its value read by the
    plugin's arity), one set aside on a site whose plugins are not known, or refused (with the
    option it is a misspelling of, on any site)."""
    found = _plugin_long(tool, word, plugins)
    if found and (found[1] or plugins.generic):
        option, declared, value = found
        if not option.takes_value and value is not None:
            raise OptionError(f"option '{option.name}' doesn't allow an argument")
        if option.value == "required" and value is None:
            if i >= len(words):
                raise OptionError(f"option '{option.name}' requires an argument")
            value, i = words[i], i + 1
        out.setdefault(PLUGIN_KNOWN, []).append((option, value, declared))
        return i
    if found:  # a plugin this site's profile does not say it runs
        raise OptionError(
            f"{exc} ({found[0].name} is an option of the {found[0].plugin} SPANK plugin, which "
            "the site's profile does not list under plugins:)"
        )
    near = close_options(tool, word, release)
    if near:  # a misspelling, with a profile or without
        raise OptionError(f"{exc} (did you mean {near[0]}?)") from None
    if not plugins.generic:
        raise exc
    out.setdefault(PLUGIN, []).append(word)
    return i


def _add(out: dict[str, list], spec: OptionSpec, value: str | None) -> None:
    if value is None:
        value = OPTIONAL_DEFAULT.get(spec.dest, True) if spec.takes_value else True
    out.setdefault(spec.dest, []).append(value)


def option_message(exc: Exception) -> str:
    """An OptionError in the words getopt_long (and so sbatch, srun) uses."""
    return str(exc)


def close_options(tool: str, word: str, release: str | None = None) -> list[str]:
    """Options of ``tool`` (in Slurm ``release``) a misspelt ``word`` (``--partion=gpu``) is
    near, for a hint."""
    longs, _ = _tables(tool, release)
    return close_words(word, [f"--{n}" for n in longs])


def close_words(word: str, options: list[str]) -> list[str]:
    """Of ``options`` (``--num_processes``, ...), those a misspelt ``word`` (``--num_proceses=8``)
    is near, nearest first: the hint of "did you mean ...?" for any tool's options."""
    import difflib

    name = word.split("=", 1)[0].lstrip("-")
    by_name = {o.lstrip("-"): o for o in options}
    return [by_name[n] for n in difflib.get_close_matches(name, list(by_name), n=3, cutoff=0.8)]


# --------------------------------------------------------------------------- value grammars
def is_count(text: str) -> bool:
    """ASCII digits only, as Slurm's strtol reads them (str.isdigit takes '²' too)."""
    return re.fullmatch(r"[0-9]+", text) is not None


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
    if not all(is_count(p) for p in parts) or not 1 <= len(parts) <= 3:
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
    if len(parts) == 1 and is_count(parts[0]):
        return None, int(parts[0])
    if len(parts) == 2 and is_count(parts[1]):
        return parts[0], int(parts[1])
    raise SlurmValueError(f"Invalid {what} specification {text!r}")


def gres_gpus(text: str, other_names: bool = False) -> tuple[str | None, int]:
    """GPUs per node in a ``--gres`` list: ``gpu``, ``gpu:N``, ``gpu:type:N``.

    Another name (``nvme:1``) raises: the profiles describe GPUs only, as the generated
    gres.conf does, and Slurm refuses a generic resource no node has. With ``other_names``
    (a site whose resources are not known) other names are passed over.
    """
    gpus_type, gpus = None, 0
    for item in text.split(","):
        fields = item.strip().split(":")
        if fields[0] != "gpu" and other_names:
            continue
        if fields[0] != "gpu":
            raise SlurmValueError(
                f"Invalid generic resource (gres) specification {text!r}: no node has "
                f"a generic resource named {fields[0]!r} (only gpu)"
            )
        if len(fields) == 1:
            gpus = 1
        elif len(fields) == 2:
            if is_count(fields[1]):
                gpus = int(fields[1])
            else:
                gpus_type, gpus = fields[1], 1
        elif len(fields) == 3 and is_count(fields[2]):
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


HINTS = ("compute_bound", "memory_bound", "multithread", "nomultithread", "help")


def check_hint(text: str) -> None:
    """``--hint`` values, as Slurm's verify_hint reads them (src/common/proc_args.c): a list
    split at commas not followed by a digit, each one of HINTS in any case."""
    for token in re.split(r",(?![0-9])", text):
        if token.lower() not in HINTS:
            raise SlurmValueError(f'unrecognized --hint argument "{token}", see --hint=help')


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
    ``#`` ends the line. A placeholder of the site's docs, one in angle brackets
    (``<#sockets * s>``) or a phrase in square brackets (``[budget code]``) is one word.
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
            angle = None if quote or hit else ANGLE.match(rest, i) or SQUARE.match(rest, i)
            hit = angle[0] if angle else hit
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
    ``  #SBATCH`` (indented), ``#sbatch``. A comment that shows the command
    (``#   sbatch --nodes=N job.sh``, a usage note) is none."""
    m = re.match(r"\s*#(\s*)(sbatch)(\s+-|\s*$)", raw, re.IGNORECASE)
    return m is not None and (not m[1] or m[2] == "SBATCH")


def read_directives(text: str, placeholders: tuple[str, ...] = ()) -> Directives:
    """The directives sbatch reads (``_opt_batch_script``): lines that start with ``#SBATCH``
    (or the old ``#SLURM``) in the first column, up to the first line that is neither blank nor
    a comment; ``hetjob`` starts the next component of a heterogeneous job. Lines of a
    here-document after that (the script of a job the body submits) are not looked at."""
    out = Directives([], [])
    component, body = 0, 0
    heredocs = heredoc_lines(text)  # text a command reads (a nested job's script), not ours
    for n, raw in enumerate(text.split("\n"), start=1):
        if n in heredocs:
            continue
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
