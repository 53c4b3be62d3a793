"""How Slurm's ``sbcast`` reads its command line: ``sbcast [OPTIONS] SOURCE DEST``.

The option table is that of Slurm 22.05.8, the ``slurm-client`` Debian 12 ships
(22.05.8-4+deb12u3, the package ``nox -s slurm`` installs): ``sbcast --help`` and the sbcast(1)
manual page of August 2022. sbcast reads its options with getopt_long, as the other Slurm clients
do: short options cluster (``-pf``), a short option's required value comes attached or as the
next word (``-s 1m``, ``-s1m``), a long option's as ``--opt=value`` or the next word, and a long
option may be shortened to any prefix that names one option. Two options take an optional value,
which must then be attached (``-Clz4``, ``--compress=lz4``, ``--send-libs=no``): a value in the
next word is a file name. Options may also follow the file names (GNU getopt permutes). The
messages are the real tool's, as 22.05.8 prints them.

Later releases added options (``src/sbcast/opts.c`` of SchedMD/slurm at each release's last
tag: ``--autocomplete`` in 23.02, ``--treewidth`` in 23.11, ``-Z``/``--no-allocation`` and
``-w``/``--nodelist`` in 24.11) and raised the largest fanout from eight to 64, with ``off``
(sbcast(1) of 23.11). :func:`parse` and :func:`value_problems` take the release of the site's
Slurm; without one, 22.05's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

SOURCE = "slurm-client 22.05.8-4+deb12u3 (Debian 12): sbcast --help and sbcast(1), August 2022"

# long name -> (short letter or None, value: "none" | "required" | "optional")
OPTIONS: dict[str, tuple[str | None, str]] = {
    "compress": ("C", "optional"),
    "exclude": (None, "required"),
    "force": ("f", "none"),
    "fanout": ("F", "required"),
    "jobid": ("j", "required"),
    "preserve": ("p", "none"),
    "send-libs": (None, "optional"),
    "size": ("s", "required"),
    "timeout": ("t", "required"),
    "verbose": ("v", "none"),
    "version": ("V", "none"),
    "help": (None, "none"),
    "usage": (None, "none"),
}
SHORT = {short: name for name, (short, _) in OPTIONS.items() if short}
# options added after 22.05: long name -> (short letter, the long form's value, the short
# form's value, the first release that has it); --no-allocation and --nodelist take their long
# form's value only attached, -w its value as -w NODES too, -Z none
LATER: dict[str, tuple[str | None, str, str, str]] = {
    "autocomplete": (None, "required", "required", "23.02"),
    "treewidth": (None, "required", "required", "23.11"),
    "no-allocation": ("Z", "optional", "none", "24.11"),
    "nodelist": ("w", "optional", "required", "24.11"),
}
BASE_RELEASE = "22.05"
TRY = 'Try "sbcast --help" for more information'
USAGE = "Usage: sbcast [--exclude] [-CfFjpvV] [--send-libs] SOURCE DEST"
HELP = """\
Usage: sbcast [OPTIONS] SOURCE DEST
  -C, --compress[=lib]  compress the file being transmitted
  --exclude=<path_list> shared object paths to be excluded
  -f, --force           replace destination file as required
  -F, --fanout=num      specify message fanout
  -j, --jobid=#[+#][.#] specify job ID with optional hetjob offset and/or step ID
  -p, --preserve        preserve modes and times of source file
  --send-libs[=yes|no]  autodetect and broadcast executable's shared objects
  -s, --size=num        block size in bytes (rounded off)
  -t, --timeout=secs    specify message timeout (seconds)
  -v, --verbose         provide detailed event logging
  -V, --version         print version information and exit

Help options:
  --help                show this help message
  --usage               display brief usage message"""

COMPRESSION = ("lz4", "none")  # sbcast(1): "lz4" (the default) and "none"
MAX_FANOUT = 8  # sbcast(1) of 22.05 and 23.02: "Maximum value is currently eight."
MAX_TREEWIDTH = 64  # sbcast(1) of 23.11 on: "Maximum value is currently 64", "off" disables it


def _key(release: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", release)[:2])


def options(release: str | None = None) -> dict[str, tuple[str | None, str, str]]:
    """long name -> (short letter, long form's value, short form's value) of sbcast in Slurm
    ``release`` (None: 22.05)."""
    out = {name: (short, kind, kind) for name, (short, kind) in OPTIONS.items()}
    for name, (short, long_kind, short_kind, since) in LATER.items():
        if _key(release or BASE_RELEASE) >= _key(since):
            out[name] = (short, long_kind, short_kind)
    return out


class SbcastUsageError(ValueError):
    """What sbcast prints, before its "Try ..." line, for a command line it will not run."""


@dataclass
class SbcastArgs:
    """The options given (long name -> values in order; True for one without a value) and the
    file names."""

    options: dict[str, list] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)

    def has(self, name: str) -> bool:
        return name in self.options

    def last(self, name: str):
        values = self.options.get(name)
        return values[-1] if values else None


def _long(word: str, table: dict) -> tuple[str, str | None]:
    """(the option a ``--word`` names, its attached value)."""
    body, eq, value = word[2:].partition("=")
    if body in table:
        return body, value if eq else None
    hits = [name for name in table if name.startswith(body)] if body else []
    if len(hits) == 1:
        return hits[0], value if eq else None
    if not hits:
        raise SbcastUsageError(f"sbcast: unrecognized option '--{body}'")
    names = " ".join(f"'--{h}'" for h in hits)
    raise SbcastUsageError(f"sbcast: option '--{body}' is ambiguous; possibilities: {names}")


def parse(argv: list[str], release: str | None = None) -> SbcastArgs:
    """The options and file names of an sbcast command line (without ``sbcast`` itself), as
    sbcast of Slurm ``release`` (None: 22.05) reads them; SbcastUsageError with the real tool's
    message when getopt would refuse it. The count of file names is checked by
    :func:`check_files`, after ``--help`` and ``--version``."""
    table = options(release)
    short_names = {short: name for name, (short, _l, _s) in table.items() if short}
    out = SbcastArgs()
    i = 0
    while i < len(argv):
        word = argv[i]
        i += 1
        if word == "--":
            out.files.extend(argv[i:])
            break
        if word.startswith("--"):
            name, value = _long(word, table)
            kind = table[name][1]
            if kind == "none" and value is not None:
                raise SbcastUsageError(f"sbcast: option '--{name}' doesn't allow an argument")
            if kind == "required" and value is None:
                if i >= len(argv):
                    raise SbcastUsageError(f"sbcast: option '--{name}' requires an argument")
                value, i = argv[i], i + 1
            out.options.setdefault(name, []).append(True if value is None else value)
            continue
        if word.startswith("-") and word != "-":
            k = 1
            while k < len(word):
                letter = word[k]
                if letter not in short_names:
                    raise SbcastUsageError(f"sbcast: invalid option -- '{letter}'")
                name = short_names[letter]
                kind = table[name][2]
                rest = word[k + 1 :]
                if kind == "none":
                    out.options.setdefault(name, []).append(True)
                    k += 1
                    continue
                if kind == "optional":
                    out.options.setdefault(name, []).append(rest or True)
                elif rest:
                    out.options.setdefault(name, []).append(rest)
                elif i < len(argv):
                    out.options.setdefault(name, []).append(argv[i])
                    i += 1
                else:
                    raise SbcastUsageError(f"sbcast: option requires an argument -- '{letter}'")
                break
            continue
        out.files.append(word)
    return out


def check_files(args: SbcastArgs) -> None:
    """sbcast wants exactly a SOURCE and a DEST."""
    if len(args.files) != 2:
        raise SbcastUsageError(f"Need two file names, have {len(args.files)} names")


def value_problems(args: SbcastArgs, release: str | None = None) -> list[str]:
    """What is wrong with the options' values, by the manual page of Slurm ``release``'s
    sbcast (None: 22.05)."""
    out = []
    wide = _key(release or BASE_RELEASE) >= _key(LATER["treewidth"][3])
    largest = MAX_TREEWIDTH if wide else MAX_FANOUT

    for value in args.options.get("compress", ()):
        if value is not True and value.lower() not in COMPRESSION:
            out.append(
                f"--compress={value}: sbcast compresses with {' or '.join(COMPRESSION)} (sbcast(1))"
            )
    for value in args.options.get("send-libs", ()):
        if value is not True and value.lower() not in {"yes", "no"}:
            out.append(f"--send-libs={value}: takes yes or no")
    for value in [*args.options.get("fanout", ()), *args.options.get("treewidth", ())]:
        if wide and value.lower() == "off":
            continue
        if not value.isdigit() or int(value) < 1:
            out.append(f"--fanout={value}: not a number of messages")
        elif int(value) > largest:
            out.append(
                f"--fanout={value}: the largest fanout of sbcast in Slurm "
                f"{release or BASE_RELEASE} is {largest} (sbcast(1))"
            )
    for value in args.options.get("size", ()):
        if not re.fullmatch(r"\d+[kKmM]?", value):
            out.append(f"--size={value}: a block size in bytes, with k or m for kilo or mega")
    for value in args.options.get("timeout", ()):
        if not value.isdigit():
            out.append(f"--timeout={value}: a number of seconds")
    for value in args.options.get("jobid", ()):
        if not re.fullmatch(r"\d+(\+\d+)?(\.\d+)?", value):
            out.append(f"--jobid={value}: a job ID, with an optional +offset and .step")
    for value in args.options.get("exclude", ()):
        paths = value.split(",")
        if value != "NONE" and any(not p.startswith("/") for p in paths):
            out.append(f"--exclude={value}: NONE or absolute directory paths, comma-separated")
    return out
