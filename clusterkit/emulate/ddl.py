"""IBM DDL's ``ddlrun`` (WML CE, Summit), Bede's ``bede-ddlrun`` wrapper, and ``bede-mpirun``.

``ddlrun [options] PROGRAM [ARGS]`` (IBM WML CE 1.6 "Using the ddlrun tool"): every option may
be written with one or two dashes; the program is the first argument ddlrun does not recognise.
It generated a rank file for one rank per GPU of every host and ran ``mpirun``. The topology
options ``--aisles``, ``--racks`` (per aisle) and ``--nodes`` (per rack) multiply to the node
count. ``bede-ddlrun`` was Bede's wrapper that fed it the Slurm allocation. Both are historical:
the profile's ``launchers`` entry names what replaces them, and every use says so.

``bede-mpirun [--bede-par RANKS[:THREADS]] [mpirun options] PROGRAM`` (Bede documentation, "Usage":
Multiple nodes (MPI)): ``RANKS`` is ``1ppn`` (one process per node), ``1ppg`` (per GPU),
``1ppc`` (per CPU core) or ``1ppt`` (per hardware thread); ``THREADS`` sets ``OMP_NUM_THREADS``
to the cores (``1tpc``) or hardware threads (``1tpt``) of each process, or to 1 (``none``); the
default is ``1ppc:1tpt``. On nodes without SMT (aarch64) ``1ppt`` is the same as ``1ppc``.

Each launcher registers itself in :data:`clusterkit.emulate.jobcheck.WRAPPERS`, so that a dry run
also judges the command it starts; in run mode the command runs once per (scaled-down) rank with
the environment Open MPI gives each rank.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass

from clusterkit.emulate import jobcheck, launch_env
from clusterkit.emulate.launch_env import NodeSet
from clusterkit.errors import Finding
from clusterkit.profiles import NodeType, Site

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


def _notice(tool: str, site: Site) -> str | None:
    launcher = site.launcher(tool)
    if launcher is None:
        return None
    if launcher["status"] == "current":
        return None
    return f"{tool} is {launcher['status']} on {site.title}; use {launcher.get('replacement')}"


def ddl_wrapper(tool: str):
    """WRAPPERS entry: the command ``tool`` starts, and problems with its own options."""

    def inner(path, line, args, site):
        parsed, problems = parse_ddlrun(tool, list(args))
        findings = [Finding(path, line, "ddl-option", p) for p in problems]
        if site.launcher(tool) is None:
            findings.append(
                Finding(
                    path,
                    line,
                    "launcher-unknown",
                    f"{tool} is not a launcher of {site.title} (its profile lists "
                    f"{', '.join(x['name'] for x in site.data['launchers'])})",
                )
            )
        if not parsed.command and not problems:
            findings.append(Finding(path, line, "ddl-command", f"{tool}: no program to run"))
        return (parsed.command if not problems else []), findings

    return inner


def _int(values: dict[str, str], key: str, tool: str, problems: list[str]) -> int | None:
    if key not in values:
        return None
    text = values[key]
    if not text.isdigit() or int(text) < 1:
        problems.append(f"{tool}: --{key} takes a positive number, not {text!r}")
        return None
    return int(text)


def check_ddl_step(
    path, line: int, tool: str, args: list[str], site: Site, nodes: NodeSet, gpus: int
) -> tuple[list[Finding], dict | None]:
    """Judge a ddlrun line against the job's nodes; the step it makes (one rank per GPU)."""
    parsed, problems = parse_ddlrun(tool, args)
    findings = []
    if problems:
        return findings, None
    vals = parsed.values
    bad: list[str] = []
    aisles = _int(vals, "aisles", tool, bad)
    racks = _int(vals, "racks", tool, bad)
    per_rack = _int(vals, "nodes", tool, bad)
    accel = _int(vals, "accelerators", tool, bad)
    for msg in bad:
        findings.append(Finding(path, line, "ddl-option", msg))
    if per_rack is not None or racks is not None or aisles is not None:
        topo = (aisles or 1) * (racks or 1) * (per_rack or 1)
        if topo != nodes.count:
            findings.append(
                Finding(
                    path,
                    line,
                    "ddl-topology",
                    f"{tool}: --aisles {aisles or 1} x --racks {racks or 1} x --nodes "
                    f"{per_rack or 1} = {topo} nodes, the job has {nodes.count}",
                )
            )
    if "hosts" in vals:
        hosts = [h for h in vals["hosts"].split(",") if h]
        if len(hosts) != nodes.count:
            findings.append(
                Finding(
                    path,
                    line,
                    "ddl-topology",
                    f"{tool}: -H lists {len(hosts)} host(s), the job has {nodes.count} node(s)",
                    level="warning",
                )
            )
    per_node = accel or gpus
    if accel and gpus and accel > gpus:
        findings.append(
            Finding(
                path,
                line,
                "ddl-accelerators",
                f"{tool}: --accelerators {accel}, a node has {gpus} GPUs",
            )
        )
    if not per_node:
        findings.append(
            Finding(
                path,
                line,
                "ddl-accelerators",
                f"{tool}: DDL runs one rank per GPU; the job's nodes have none",
            )
        )
        per_node = 1
    ntasks = per_node * nodes.count
    step = {
        "launcher": tool,
        "line": line,
        "nodes": nodes.count,
        "nodelist": nodes.compressed,
        "ntasks": ntasks,
        "tasks_per_host": per_node,
        "command": parsed.command,
        "notice": _notice(tool, site),
    }
    return findings, step


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
    problems: list[tuple[str, str, str]] = []
    par = DEFAULT_PAR
    np_ = None
    exports: dict[str, str] = {}
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--":
            i += 1
            break
        if not word.startswith("-") or word == "-":
            break
        name, eq, glued = word.partition("=")
        if name == "--bede-par":
            if eq:
                par = glued
                i += 1
            elif i + 1 < len(args):
                par = args[i + 1]
                i += 2
            else:
                problems.append(("bede-par", "error", "bede-mpirun: --bede-par needs a value"))
                i += 1
            continue
        if name in _MPIRUN_VALUE:
            value = glued if eq else (args[i + 1] if i + 1 < len(args) else None)
            if value is None:
                problems.append(
                    ("mpirun-option", "error", f"bede-mpirun: mpirun option {name} needs a value")
                )
                break
            if name in {"-np", "--np", "-n", "--n", "-c"}:
                if value.isdigit() and int(value) > 0:
                    np_ = int(value)
                else:
                    problems.append(
                        (
                            "mpirun-option",
                            "error",
                            f"bede-mpirun: {name} takes a positive number, not {value!r}",
                        )
                    )
            if name == "-x":
                k, has, v = value.partition("=")
                exports[k] = v if has else (env or os.environ).get(k, "")
            i += 1 if eq else 2
            continue
        if name in _MPIRUN_TWO:
            i += 3
            continue
        if name not in _MPIRUN_FLAGS:
            problems.append(
                (
                    "mpirun-option",
                    "warning",
                    f"bede-mpirun: {word} is not an mpirun option the emulator knows; "
                    "taken as a flag",
                )
            )
        i += 1
    ranks, _, threads = par.partition(":")
    threads = threads or DEFAULT_PAR.split(":")[1]
    ok = True
    if ranks not in RANK_DISTRIB:
        problems.append(
            (
                "bede-par",
                "error",
                f"bede-mpirun: --bede-par {par}: the rank distribution is one of "
                f"{', '.join(RANK_DISTRIB)} (per node, GPU, core, hardware thread)",
            )
        )
        ok = False
    if threads not in THREAD_DISTRIB:
        problems.append(
            (
                "bede-par",
                "error",
                f"bede-mpirun: --bede-par {par}: the thread distribution is one of "
                f"{', '.join(THREAD_DISTRIB)}",
            )
        )
        ok = False
    command = list(args[i:])
    if not command:
        problems.append(("mpirun-command", "error", "bede-mpirun: no program to run"))
    if not ok:
        return None, problems
    return BedeMpirun(ranks, threads, np_, exports, command), problems


def bede_mpirun_wrapper(path, line, args, site):
    parsed, problems = parse_bede_mpirun(list(args))
    findings = [Finding(path, line, rule, msg, level) for rule, level, msg in problems]
    if site.launcher("bede-mpirun") is None:
        findings.append(
            Finding(
                path,
                line,
                "launcher-unknown",
                f"bede-mpirun is Bede's wrapper; {site.title} does not have it",
            )
        )
    return (parsed.command if parsed else []), findings


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


# --------------------------------------------------------------------------- run mode
def _allocation(tool: str):
    """(site, node type, run nodes, nodes asked for, GPUs per node) of the job running here."""
    from clusterkit.emulate.entry import ALLOC_VAR, current_site

    site = current_site(tool)
    lsf = json.loads(os.environ.get("CLUSTERKIT_LSF") or "null")
    if lsf:
        node = site.partitions[lsf["queue"]].node_type
        return site, node, lsf["run_nodes"], lsf["plan_nodes"], node.gpus
    alloc = json.loads(os.environ.get(ALLOC_VAR) or "null")
    if alloc:
        plan = alloc["plan"]
        node = site.partitions[plan["partition"]].node_type
        return site, node, alloc["run_nodes"], plan["nodes"], plan["gpus_per_node"]
    return site, None, [], 0, 0


def _start(
    tool: str,
    command: list[str],
    requested_per_node: int,
    nodes_asked: int,
    run_nodes: list[str],
    threads: int | None,
    exports: dict[str, str],
) -> int:
    from clusterkit.emulate.entry import max_ranks, note, scaled
    from clusterkit.emulate.lsf import run_ranks

    n_nodes, per_node = scaled(min(nodes_asked, len(run_nodes)) or 1, max(requested_per_node, 1))
    nodes = run_nodes[:n_nodes] or ["localhost"]
    total = min(len(nodes) * per_node, max_ranks())
    note(
        tool,
        f"{requested_per_node * nodes_asked} rank(s) requested, {total} started here: "
        f"{' '.join(command)}",
    )
    envs = []
    for rank, (_node, idx, local) in enumerate(launch_env.layout(nodes, total, per_node)):
        env = dict(os.environ)
        env.update(
            {
                "OMPI_COMM_WORLD_RANK": str(rank),
                "OMPI_COMM_WORLD_SIZE": str(total),
                "OMPI_COMM_WORLD_LOCAL_RANK": str(local),
                "OMPI_COMM_WORLD_LOCAL_SIZE": str(min(per_node, total - idx * per_node)),
                "OMPI_COMM_WORLD_NODE_RANK": str(idx),
                "OMPI_UNIVERSE_SIZE": str(total),
                "PMIX_RANK": str(rank),
            }
        )
        if threads:
            env["OMP_NUM_THREADS"] = str(threads)
        env.update(exports)
        envs.append(env)
    return run_ranks(command, envs, [""] * len(envs))


def ddl_shim(tool: str):
    def run(argv: list[str]) -> int:
        from clusterkit.emulate.entry import note

        site, node, run_nodes, asked, gpus = _allocation(tool)
        if site.launcher(tool) is None:
            print(f"bash: {tool}: command not found", file=sys.stderr)
            return 127
        notice = _notice(tool, site)
        if notice:
            note(tool, notice)
        parsed, problems = parse_ddlrun(tool, argv)
        for p in problems:
            print(p, file=sys.stderr)
        if problems or not parsed.command:
            if not problems:
                print(f"{tool}: no program to run", file=sys.stderr)
            return 1
        if node is None:
            print(f"{tool}: error: no allocation: run it inside a batch job", file=sys.stderr)
            return 1
        accel = parsed.values.get("accelerators")
        per_node = int(accel) if accel and accel.isdigit() else (gpus or 1)
        return _start(tool, parsed.command, per_node, asked, run_nodes, None, {})

    return run


def bede_mpirun(argv: list[str]) -> int:
    site, node, run_nodes, asked, gpus = _allocation("bede-mpirun")
    if site.launcher("bede-mpirun") is None:
        print("bash: bede-mpirun: command not found", file=sys.stderr)
        return 127
    parsed, problems = parse_bede_mpirun(argv)
    for rule, level, msg in problems:
        print(f"{msg} [{rule}]" if level == "error" else f"warning: {msg}", file=sys.stderr)
    if parsed is None or any(level == "error" for _r, level, _m in problems):
        return 1
    if node is None:
        print("bede-mpirun: error: no Slurm allocation: run it inside a job", file=sys.stderr)
        return 1
    cores = node.usable_cores
    per_node = ranks_per_node(parsed.ranks, node, gpus, cores)
    if per_node < 1:
        print(
            f"bede-mpirun: --bede-par {parsed.ranks}: the job holds no GPUs on "
            f"{node.name} nodes [bede-par]",
            file=sys.stderr,
        )
        return 1
    if parsed.np is not None:
        per_node = max(1, -(-parsed.np // max(asked, 1)))
    threads = threads_per_rank(parsed.threads, node, cores, per_node)
    return _start(
        "bede-mpirun", parsed.command, per_node, asked, run_nodes, threads, parsed.exports
    )


HANDLERS = {
    "ddlrun": ddl_shim("ddlrun"),
    "bede-ddlrun": ddl_shim("bede-ddlrun"),
    "bede-mpirun": bede_mpirun,
}

# Register the wrappers so that jobcheck judges the command each launcher starts.
jobcheck.WRAPPERS.update(
    {
        "ddlrun": ddl_wrapper("ddlrun"),
        "bede-ddlrun": ddl_wrapper("bede-ddlrun"),
        "bede-mpirun": bede_mpirun_wrapper,
    }
)

__all__ = [
    "DDL_TOOLS",
    "HANDLERS",
    "check_ddl_step",
    "parse_bede_mpirun",
    "parse_ddlrun",
    "ranks_per_node",
    "threads_per_rank",
]
