"""Slurm's command-line grammar for sbatch, srun and salloc, as data for argparse.

Slurm parses options with getopt_long: short options take their value attached (``-N1``) or as
the next word (``-N 1``), long options take ``--opt=value`` or ``--opt value``, and a long option
may be abbreviated to any unique prefix. argparse implements the same grammar, so each tool's
option table below becomes an ArgumentParser. Only the options' names and arities are modelled
here; what the values mean is checked in :mod:`clusterkit.emulate.slurm`.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

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


def build_parser(tool: str) -> argparse.ArgumentParser:
    """An ArgumentParser that accepts exactly the options of ``tool``."""
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
