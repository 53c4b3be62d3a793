"""``squeue``, ``sacct``, ``scontrol`` and ``seff``: their options as data, for checking commands
a page shows. Names and arities from the squeue(1), sacct(1) and scontrol(1) manual pages of
Slurm 23.02-24.05. Like the other Slurm tools they parse with getopt_long (a long option may be
abbreviated to a unique prefix), which argparse reproduces. sacct's ``--format`` fields are its
field table (``src/sacct/sacct.c``, Slurm 24.05), matched as sacct matches them
(``src/sacct/options.c``: a case-insensitive prefix, the first in the table wins, ``%N`` sets a
width); ``seff`` is Slurm's contributed script (``contribs/seff/seff``, Slurm 24.05:
``getopts('hvdf:')`` and exactly one job id). What such a command answers depends on the live
queue; its command line does not, and that is what is judged here. A job id is the reader's
own, so any job id is taken as a placeholder: a number (``123456``, ``123456_7``,
``123456.batch``), a shell variable or a ``<...>`` word.
"""

from __future__ import annotations

import argparse
import re

from clusterkit.sites.errors import Finding

_V, _F = True, False
# (short, long, takes a value)
SQUEUE = [
    ("-A", "--account", _V), ("-a", "--all", _F), ("-r", "--array", _F),
    (None, "--array-unique", _F), (None, "--federation", _F), ("-h", "--noheader", _F),
    (None, "--help", _F), (None, "--hide", _F), ("-i", "--iterate", _V), ("-j", "--jobs", _V),
    (None, "--local", _F), ("-L", "--licenses", _V), ("-l", "--long", _F),
    ("-M", "--clusters", _V), (None, "--me", _F), ("-n", "--name", _V),
    (None, "--noconvert", _F), ("-O", "--Format", _V), ("-o", "--format", _V),
    ("-p", "--partition", _V), ("-P", "--priority", _F), ("-q", "--qos", _V),
    ("-R", "--reservation", _V), (None, "--sibling", _F), ("-S", "--sort", _V),
    (None, "--start", _F), ("-t", "--states", _V), ("-s", "--steps", _F),
    ("-u", "--user", _V), (None, "--usage", _F), ("-v", "--verbose", _F),
    ("-V", "--version", _F), ("-w", "--nodelist", _V), (None, "--json", _F),
    (None, "--yaml", _F),
]  # fmt: skip
SACCT = [
    ("-a", "--allusers", _F), ("-A", "--accounts", _V), (None, "--array", _F),
    ("-b", "--brief", _F), ("-c", "--completion", _F), (None, "--delimiter", _V),
    ("-D", "--duplicates", _F), ("-E", "--endtime", _V), ("-e", "--helpformat", _F),
    (None, "--env-vars", _F), ("-f", "--file", _V), ("-g", "--gid", _V), ("-h", "--help", _F),
    ("-i", "--nnodes", _V), ("-I", "--ncpus", _V), ("-j", "--jobs", _V),
    ("-k", "--timelimit-min", _V), ("-K", "--timelimit-max", _V),
    ("-L", "--allclusters", _F), ("-l", "--long", _F), ("-M", "--clusters", _V),
    ("-N", "--nodelist", _V), ("-n", "--noheader", _F), (None, "--name", _V),
    (None, "--noconvert", _F), ("-o", "--format", _V), ("-p", "--parsable", _F),
    ("-P", "--parsable2", _F), ("-q", "--qos", _V), ("-r", "--partition", _V),
    ("-R", "--reason", _V), ("-S", "--starttime", _V), ("-s", "--state", _V),
    ("-T", "--truncate", _F), ("-u", "--user", _V), (None, "--units", _V),
    (None, "--usage", _F), ("-v", "--verbose", _F), ("-V", "--version", _F),
    ("-W", "--wckeys", _V), ("-X", "--allocations", _F), (None, "--whole-hetjob", _V),
    (None, "--json", _F), (None, "--yaml", _F),
]  # fmt: skip
SCONTROL = [
    ("-a", "--all", _F), ("-d", "--details", _F), ("-h", "--help", _F), (None, "--hide", _F),
    (None, "--local", _F), ("-M", "--clusters", _V), ("-o", "--oneliner", _F),
    ("-Q", "--quiet", _F), (None, "--sibling", _F), ("-u", "--uid", _V),
    ("-v", "--verbose", _F), ("-V", "--version", _F), (None, "--json", _F),
    (None, "--yaml", _F),
]  # fmt: skip
# scontrol's commands, and the entities ``show`` knows
SCONTROL_COMMANDS = {
    "show", "hold", "uhold", "release", "requeue", "requeuehold", "update", "suspend",
    "resume", "top", "listpids", "wait_job", "create", "delete", "reconfigure", "ping",
    "version", "token", "notify", "power", "reboot", "setdebug", "setdebugflags",
    "shutdown", "takeover", "write", "getaddrs", "listjobs", "liststeps", "help",
}  # fmt: skip
SHOW_ENTITIES = {
    "aliases", "assoc_mgr", "bbstat", "burstbuffer", "config", "daemons", "dwstat",
    "federation", "frontend", "hostlist", "hostlistsorted", "hostnames", "job", "jobs",
    "licenses", "node", "nodes", "partition", "partitions", "reservation", "reservations",
    "slurmd", "step", "steps", "topology", "topo", "assoc",
}  # fmt: skip
TABLES = {"squeue": SQUEUE, "sacct": SACCT, "scontrol": SCONTROL}
# sacct's field table, in its order (src/sacct/sacct.c, Slurm 24.05)
SACCT_FIELDS = (
    "Account AdminComment AllocCPUS AllocNodes AllocTRES AssocID AveCPU AveCPUFreq AveDiskRead "
    "AveDiskWrite AvePages AveRSS AveVMSize BlockID Cluster Comment Constraints ConsumedEnergy "
    "ConsumedEnergyRaw Container CPUTime CPUTimeRAW DBIndex DerivedExitCode Elapsed ElapsedRaw "
    "Eligible End ExitCode Extra FailedNode Flags GID Group JobID JobIDRaw JobName Layout "
    "Licenses MaxDiskRead MaxDiskReadNode MaxDiskReadTask MaxDiskWrite MaxDiskWriteNode "
    "MaxDiskWriteTask MaxPages MaxPagesNode MaxPagesTask MaxRSS MaxRSSNode MaxRSSTask MaxVMSize "
    "MaxVMSizeNode MaxVMSizeTask McsLabel MinCPU MinCPUNode MinCPUTask NCPUS NNodes NodeList "
    "NTasks Partition Planned PlannedCPU PlannedCPURAW Priority QOS QOSRAW Reason ReqCPUFreq "
    "ReqCPUFreqGov ReqCPUFreqMax ReqCPUFreqMin ReqCPUS ReqMem ReqNodes ReqTRES Reservation "
    "ReservationId Start State StdErr StdIn StdOut Submit SubmitLine Suspended SystemComment "
    "SystemCPU Timelimit TimelimitRaw TotalCPU TRESUsageInAve TRESUsageInMax TRESUsageInMaxNode "
    "TRESUsageInMaxTask TRESUsageInMin TRESUsageInMinNode TRESUsageInMinTask TRESUsageInTot "
    "TRESUsageOutAve TRESUsageOutMax TRESUsageOutMaxNode TRESUsageOutMaxTask TRESUsageOutMin "
    "TRESUsageOutMinNode TRESUsageOutMinTask TRESUsageOutTot UID User UserCPU WCKey WCKeyID "
    "WorkDir"
).split()
SACCT_REMOVED = {"allocgres": "AllocTRES", "reqgres": "ReqTRES"}
SEFF_OPTIONS = {"-h": False, "-v": False, "-d": False, "-f": True}  # getopts('hvdf:')
JOB_ID = re.compile(r"^(\d+([_+]\d+)?(\.(\d+|batch|extern|interactive))?|\$\{?\w+\}?|<[^<>]+>)$")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        raise ValueError(message)


def parse(tool: str, argv: list[str]) -> argparse.Namespace:
    """Parse ``argv`` as ``tool`` does; raises ValueError with the tool's complaint."""
    p = _Parser(prog=tool, add_help=False, allow_abbrev=True)
    for short, long, takes in TABLES[tool]:
        names = [n for n in (short, long) if n]
        if takes:
            p.add_argument(*names, action="append")
        else:
            p.add_argument(*names, action="store_true")
    if tool == "sacct":
        p.add_argument("--group", dest="gid", action="append")
        p.add_argument("--uid", dest="user", action="append")
    if tool == "scontrol":
        p.add_argument("command", nargs="?")
        p.add_argument("args", nargs=argparse.REMAINDER)
    return p.parse_args(argv)


def check(path, line: int, words: list[str], site=None) -> list[Finding]:
    """Findings for a ``squeue``/``sacct``/``scontrol``/``seff`` command (``words`` include it)."""
    tool = words[0].rsplit("/", 1)[-1]
    if tool == "seff":
        problem = seff_problem(list(words[1:]))
        return [Finding(path, line, "query-option", f"seff: {problem}")] if problem else []
    try:
        ns = parse(tool, list(words[1:]))
    except ValueError as exc:
        return [Finding(path, line, "query-option", f"{tool}: {exc}")]
    if tool == "sacct":
        problem = sacct_problem(ns)
        return [Finding(path, line, "query-option", f"sacct: {problem}")] if problem else []
    if tool != "scontrol" or ns.command is None:
        return []
    if ns.command not in SCONTROL_COMMANDS:
        return [Finding(path, line, "query-option", f"scontrol: invalid keyword: {ns.command}")]
    if ns.command == "show" and ns.args and ns.args[0].lower() not in SHOW_ENTITIES:
        return [Finding(path, line, "query-option", f"scontrol: invalid entity: {ns.args[0]}")]
    return []


def sacct_problem(ns: argparse.Namespace) -> str | None:
    """What sacct refuses in its ``--format`` fields or ``--jobs`` ids, if anything."""
    for given in ns.format or []:
        for item in filter(None, (x.strip() for x in given.split(","))):
            name = item.split("%")[0]
            if name.lower() in SACCT_REMOVED:
                return f"{name} has been removed, please use {SACCT_REMOVED[name.lower()]}"
            if not any(f.lower().startswith(name.lower()) for f in ("ALL", *SACCT_FIELDS)):
                return f'error: Invalid field requested: "{name}"'
    for given in ns.jobs or []:
        bad = [j for j in given.split(",") if not JOB_ID.match(j)]
        if bad:
            return f"invalid job id {bad[0]!r}"
    return None


def seff_problem(argv: list[str]) -> str | None:
    """What seff's ``getopts('hvdf:')`` and its one-job-id rule refuse, if anything."""
    args, i = [], 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            args += argv[i + 1 :]
            break
        if not word.startswith("-") or word == "-":
            args.append(word)
        else:
            for k, letter in enumerate(word[1:], 1):
                flag = f"-{letter}"
                if flag not in SEFF_OPTIONS:
                    return f"unknown option: {letter}"
                if SEFF_OPTIONS[flag]:
                    i += 0 if word[k + 1 :] else 1  # the value is the rest, or the next word
                    break
        i += 1
    if len(args) != 1:
        return f"takes exactly one job id; given {len(args)}"
    if not JOB_ID.match(args[0]):
        return f"invalid job id {args[0]!r}"
    return None
