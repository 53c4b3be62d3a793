"""Option grammars of the MPI launchers that wrap a program: IBM DDL's ``ddlrun`` (and Bede's
``bede-ddlrun``) and Bede's ``bede-mpirun``.

``ddlrun [options] PROGRAM [ARGS]`` (IBM WML CE 1.6 "Using the ddlrun tool"): every option may
be written with one or two dashes; the program is the first argument ddlrun does not recognise.
It ran one rank per GPU of every host. The topology options ``--aisles``, ``--racks`` (per
aisle) and ``--nodes`` (per rack) multiply to the node count.

``bede-mpirun [--bede-par RANKS[:THREADS]] [mpirun options] PROGRAM`` (Bede documentation, "Usage":
Multiple nodes (MPI)): ``RANKS`` is ``1ppn`` (one process per node), ``1ppg`` (per GPU),
``1ppc`` (per CPU core) or ``1ppt`` (per hardware thread); ``THREADS`` sets ``OMP_NUM_THREADS``
to the cores (``1tpc``) or hardware threads (``1tpt``) of each process, or to 1 (``none``); the
default is ``1ppc:1tpt``. On nodes without SMT (aarch64) ``1ppt`` is the same as ``1ppc``.

Pure parsing: :mod:`clusterkit.emulate.ddl` judges the lines against a job.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from clusterkit.sites.profiles import NodeType

# --------------------------------------------------------------------------- ddlrun
DDL_TOOLS = ("ddlrun", "bede-ddlrun")

# ddlrun's options, each accepted with one or two dashes. Documented (WML CE 1.6.2): mode,
# ddlarg/ddloption, no_ddloptions, rf/rankfile, H/host, hostfile, aisles, racks; the rest as
# IBM's ddlrun --help listed them (nodes per rack as used by OLCF's 144-node example).
_DDL_VALUE = {
    "m": "mode",
    "mode": "mode",
    "ddlarg": "ddlarg",
    "ddloption": "ddlarg",
    "rf": "rankfile",
    "rankfile": "rankfile",
    "H": "hosts",
    "host": "hosts",
    "hostfile": "hostfile",
    "aisles": "aisles",
    "racks": "racks",
    "nodes": "nodes",
    "accelerators": "accelerators",
    "mpiarg": "mpiarg",
    "cores": "cores",
}
_DDL_FLAGS = {
    "no_ddloptions": "no_ddloptions",
    "tcp": "tcp",
    "s": "skipchecks",
    "skipchecks": "skipchecks",
    "v": "verbose",
    "verbose": "verbose",
    "h": "help",
    "help": "help",
}


@dataclass
class DdlArgs:
    values: dict[str, str]
    command: list[str]


def parse_ddlrun(tool: str, args: list[str]) -> tuple[DdlArgs, list[str]]:
    """(options and program, problems) of ``ddlrun`` words."""
    values: dict[str, str] = {}
    problems: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        if not word.startswith("-") or word == "-":
            break
        name, eq, glued = word.lstrip("-").partition("=")
        if name in _DDL_VALUE:
            if eq:
                values[_DDL_VALUE[name]] = glued
                i += 1
            elif i + 1 < len(args):
                values[_DDL_VALUE[name]] = args[i + 1]
                i += 2
            else:
                problems.append(f"{tool}: option {word} requires a value")
                i += 1
            continue
        if name in _DDL_FLAGS:
            values[_DDL_FLAGS[name]] = "1"
            i += 1
            continue
        problems.append(
            f"{tool}: {word!r} is not a ddlrun option; ddlrun would run it as the program"
        )
        break
    return DdlArgs(values, list(args[i:])), problems


# --------------------------------------------------------------------------- bede-mpirun
RANK_DISTRIB = ("1ppn", "1ppg", "1ppc", "1ppt")
THREAD_DISTRIB = ("1tpc", "1tpt", "none")
DEFAULT_PAR = "1ppc:1tpt"

# Open MPI mpirun options that take a value (two for --mca/--gmca); flags need no table: an
# unknown option is taken to be a flag, with a warning.
_MPIRUN_VALUE = {
    "-np", "--np", "-n", "-c", "--n", "-N", "-npernode", "--npernode", "-npersocket",
    "--npersocket", "--map-by", "-map-by", "--rank-by", "-rank-by", "--bind-to", "-bind-to",
    "-x", "-H", "-host", "--host", "-hostfile", "--hostfile", "-machinefile", "--machinefile",
    "--prefix", "-wdir", "--wdir", "-wd", "--app", "--output-filename", "-output-filename",
    "--cpus-per-proc", "--cpus-per-rank", "-rf", "--rankfile", "--personality", "--tune",
    "--preload-files", "--path", "--default-hostfile", "-am", "--am", "--report-bindings-to",
    "--timeout", "--report-pid", "--report-uri", "--stdin", "-tv",
}  # fmt: skip
_MPIRUN_TWO = {"--mca", "-mca", "--gmca", "-gmca"}
_MPIRUN_FLAGS = {
    "--oversubscribe", "-oversubscribe", "--report-bindings", "-report-bindings",
    "--tag-output", "-tag-output", "--timestamp-output", "--display-map", "-display-map",
    "--display-allocation", "-v", "--verbose", "-q", "--quiet", "--allow-run-as-root",
    "--use-hwthread-cpus", "--nolocal", "--noprefix", "-V", "--version", "-h", "--help",
    "--merge-stderr-to-stdout", "--xml", "-disable_gdr", "-gpu",
}  # fmt: skip


@dataclass
class BedeMpirun:
    ranks: str
    threads: str
    np: int | None
    exports: dict[str, str]
    command: list[str]


def parse_bede_mpirun(
    args: list[str], env: dict[str, str] | None = None
) -> tuple[BedeMpirun | None, list[tuple[str, str, str]]]:
    """(parsed line, [(rule, level, message)])."""
    reader = _MpirunReader(args, env if env is not None else dict(os.environ))
    i = reader.options()
    problems = reader.problems
    ranks, _, threads = reader.par.partition(":")
    threads = threads or DEFAULT_PAR.split(":")[1]
    bad_par = _bede_par_problems(reader.par, ranks, threads)
    problems += bad_par
    command = list(args[i:])
    if not command:
        problems.append(("mpirun-command", "error", "bede-mpirun: no program to run"))
    if bad_par:
        return None, problems
    return BedeMpirun(ranks, threads, reader.np, reader.exports, command), problems


class _MpirunReader:
    """The options before the program: --bede-par, then mpirun's own."""

    def __init__(self, args: list[str], env: dict[str, str]):
        self.args, self.env = args, env
        self.par, self.np = DEFAULT_PAR, None
        self.exports: dict[str, str] = {}
        self.problems: list[tuple[str, str, str]] = []

    def options(self) -> int:
        """Read them; the index of the program."""
        i, args = 0, self.args
        while i < len(args):
            word = args[i]
            if word == "--":
                return i + 1
            if not word.startswith("-") or word == "-":
                return i
            step = self.option(i)
            if step is None:
                return i
            i += step
        return i

    def option(self, i: int) -> int | None:
        """Read the option at ``i``; how many words it took (None: stop reading)."""
        word = self.args[i]
        name, eq, glued = word.partition("=")
        following = self.args[i + 1] if i + 1 < len(self.args) else None
        if name == "--bede-par":
            value = glued if eq else following
            if value is None:
                self.problems.append(("bede-par", "error", "bede-mpirun: --bede-par needs a value"))
                return 1
            self.par = value
            return 1 if eq else 2
        if name in _MPIRUN_VALUE:
            value = glued if eq else following
            if value is None:
                msg = f"bede-mpirun: mpirun option {name} needs a value"
                self.problems.append(("mpirun-option", "error", msg))
                return None
            self.value(name, value)
            return 1 if eq else 2
        if name in _MPIRUN_TWO:
            return 3
        if name not in _MPIRUN_FLAGS:
            msg = f"bede-mpirun: {word} is not an mpirun option the emulator knows; taken as a flag"
            self.problems.append(("mpirun-option", "warning", msg))
        return 1

    def value(self, name: str, value: str) -> None:
        if name in {"-np", "--np", "-n", "--n", "-c"}:
            if value.isascii() and value.isdigit() and int(value) > 0:
                self.np = int(value)
            else:
                msg = f"bede-mpirun: {name} takes a positive number, not {value!r}"
                self.problems.append(("mpirun-option", "error", msg))
        if name == "-x":
            k, has, v = value.partition("=")
            self.exports[k] = v if has else self.env.get(k, "")


def _bede_par_problems(par: str, ranks: str, threads: str) -> list[tuple[str, str, str]]:
    out = []
    if ranks not in RANK_DISTRIB:
        out.append(
            (
                "bede-par",
                "error",
                f"bede-mpirun: --bede-par {par}: the rank distribution is one of "
                f"{', '.join(RANK_DISTRIB)} (per node, GPU, core, hardware thread)",
            )
        )
    if threads not in THREAD_DISTRIB:
        out.append(
            (
                "bede-par",
                "error",
                f"bede-mpirun: --bede-par {par}: the thread distribution is one of "
                f"{', '.join(THREAD_DISTRIB)}",
            )
        )
    return out


def ranks_per_node(ranks: str, node: NodeType, gpus: int, cores: int) -> int:
    """Processes per node for a --bede-par rank distribution."""
    if ranks == "1ppn":
        return 1
    if ranks == "1ppg":
        return max(gpus, 0)
    if ranks == "1ppt":
        return cores * node.threads_per_core
    return cores


def threads_per_rank(threads: str, node: NodeType, cores: int, per_node: int) -> int:
    """OMP_NUM_THREADS for a --bede-par thread distribution."""
    if threads == "none" or per_node < 1:
        return 1
    if threads == "1tpt":
        return max(1, cores * node.threads_per_core // per_node)
    return max(1, cores // per_node)
