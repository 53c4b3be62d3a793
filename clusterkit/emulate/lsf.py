"""IBM Spectrum LSF (``bsub``) and Job Step Manager (``jsrun``), as on OLCF Summit.

bsub: options from ``#BSUB`` lines (until the first command) and the command line, which wins.
Summit had two submission modes: "easy" mode asks for whole nodes with ``-nnodes``; "expert"
mode (``-csm y``) counts slots with ``-n`` and places them with an ``-R`` resource string, whose
terms must add up to ``-n``. jsrun: resource sets (``-n``/``-r``) of ``-a`` tasks, ``-c`` cores
and ``-g`` GPUs; the arithmetic is judged against the node type of the site profile.
Also the historical IBM DDL launchers ``ddlrun`` and ``bede-ddlrun``: accepted with a notice
that names their replacement, and their command is checked like any other.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from clusterkit.emulate import jobcheck, launch_env
from clusterkit.emulate.jobcheck import Report, check_command, plan_nodes
from clusterkit.emulate.modules import check_module_command
from clusterkit.emulate.script import expand, read_script
from clusterkit.errors import Finding
from clusterkit.profiles import Site, format_seconds


class LsfOptionError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        raise LsfOptionError(message)


# bsub(1) options that the pages and Summit's documentation use (value-taking unless noted)
BSUB_VALUE = [
    "-P",
    "-W",
    "-nnodes",
    "-q",
    "-J",
    "-o",
    "-e",
    "-oo",
    "-eo",
    "-csm",
    "-n",
    "-R",
    "-alloc_flags",
    "-w",
    "-U",
    "-G",
    "-env",
    "-step_cgroup",
    "-cwd",
    "-u",
    "-b",
    "-m",
    "-E",
    "-Ep",
    "-M",
    "-c",
    "-sp",
    "-app",
    "-L",
    "-data",
]
BSUB_FLAGS = ["-B", "-N", "-I", "-Is", "-Ip", "-XF", "-r", "-rn", "-K", "-H", "-x"]


def bsub_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="bsub", add_help=False, allow_abbrev=False)
    for opt in BSUB_VALUE:
        p.add_argument(opt, dest=opt.lstrip("-"), action="append")
    for opt in BSUB_FLAGS:
        p.add_argument(opt, dest=opt.lstrip("-"), action="append_const", const=True)
    p.add_argument("command", nargs=argparse.REMAINDER)
    return p


def jsrun_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="jsrun", add_help=False, allow_abbrev=True)
    p.add_argument("-n", "--nrs", type=int)
    p.add_argument("-r", "--rs_per_host", type=int)
    p.add_argument("-a", "--tasks_per_rs", type=int)
    p.add_argument("-c", "--cpu_per_rs")
    p.add_argument("-g", "--gpu_per_rs", type=int)
    p.add_argument("-b", "--bind")
    p.add_argument("-d", "--launch_distribution")
    p.add_argument("-l", "--latency_priority")
    p.add_argument("-E", "--env", action="append")
    p.add_argument("-F", "--env_no_propagate", action="append")
    p.add_argument("-M", "--smpiargs")
    p.add_argument("-p", "--np", type=int)
    p.add_argument("-X", "--exit_on_error", type=int)
    p.add_argument("command", nargs=argparse.REMAINDER)
    return p


def lsf_walltime(text: str) -> int:
    """Seconds in ``-W [hours:]minutes``."""
    m = re.fullmatch(r"(?:(\d+):)?(\d+)", text.strip())
    if not m:
        raise ValueError(f"bad run limit {text!r}: use [hours:]minutes")
    return (int(m[1] or 0) * 60 + int(m[2])) * 60


@dataclass(frozen=True)
class RTerm:
    count: int
    select: str
    ptile: int | None
    hosts: int | None
    maxcus: int | None


_TERM = re.compile(r"(\d+)\s*\*\s*\{([^{}]*)\}")


def parse_rstring(text: str) -> list[RTerm]:
    """Terms of an expert-mode resource string ``N*{select[..]...span[ptile=K]...}+...``."""
    body = text.strip().strip('"').strip("'")
    leftover = re.sub(r"\s|\+", "", _TERM.sub("", body))
    if leftover or not _TERM.search(body):
        raise ValueError(f"cannot read the resource string near {leftover[:40] or body[:40]!r}")
    terms = []
    for m in _TERM.finditer(body):
        inner = m[2]
        sel = re.search(r"select\[(.*?)\]\s*(?:order|span|cu|rusage|same|$)", inner)
        ptile = re.search(r"span\[\s*ptile\s*=\s*(\d+)\s*\]", inner)
        hosts = re.search(r"span\[\s*hosts\s*=\s*(\d+)\s*\]", inner)
        maxcus = re.search(r"maxcus\s*=\s*(\d+)", inner)
        terms.append(
            RTerm(
                int(m[1]),
                re.sub(r"\s", "", sel[1]) if sel else "",
                int(ptile[1]) if ptile else None,
                int(hosts[1]) if hosts else None,
                int(maxcus[1]) if maxcus else None,
            )
        )
    return terms


@dataclass
class LsfShape:
    queue: str
    nodes: int
    walltime_s: int | None
    usable_cores: int
    gpus: int


def check_bsub(
    path: Path, site: Site, directives, argv: list[str] | None
) -> tuple[list[Finding], LsfShape | None, dict]:
    findings: list[Finding] = []
    opts: dict[str, tuple[str, int]] = {}

    def bad(key: str | None, rule: str, msg: str, level: str = "error") -> None:
        findings.append(Finding(path, opts[key][1] if key in opts else 0, rule, msg, level))

    for line, words in [(d.line, list(d.words)) for d in directives] + [(0, list(argv or []))]:
        if not words:
            continue
        try:
            ns = bsub_parser().parse_args(words)
        except LsfOptionError as exc:
            findings.append(
                Finding(path if line else "<command line>", line, "bsub-option", f"bsub: {exc}")
            )
            continue
        for key, val in vars(ns).items():
            if key != "command" and val:
                opts[key] = (str(val[-1]), line)

    def get(key: str) -> str | None:
        return opts[key][0] if key in opts else None

    # project
    proj = get("P")
    if proj is None:
        bad(
            None,
            "project-required",
            f"bsub: {site.title} requires a project: -P {site.account['example']}",
        )
    elif not site.account_ok(proj):
        bad(
            "P",
            "project-form",
            f"bsub: {proj!r} is not a project ID of the form "
            f"{site.account['pattern']} (e.g. {site.account['example']})",
        )
    # queue
    qname = get("q") or (site.default_partition.name if site.default_partition else None)
    if qname not in site.partitions:
        bad(
            "q",
            "queue-exists",
            f"bsub: {qname}: No such queue. Job not submitted. "
            f"({site.title} has {', '.join(site.partitions)})",
        )
        return findings, None, opts
    queue = site.partitions[qname]
    node = queue.node_type
    # walltime
    wall = None
    if get("W") is None:
        bad(None, "walltime-required", "bsub: every job needs a run limit: -W [hours:]minutes")
    else:
        try:
            wall = lsf_walltime(get("W") or "")
        except ValueError as exc:
            bad("W", "walltime-format", f"bsub: {exc}")
        if wall is not None and wall > queue.max_walltime_s:
            bad(
                "W",
                "walltime-limit",
                f"bsub: run limit {get('W')} ({format_seconds(wall)}) "
                f"exceeds queue {qname}'s {queue.max_walltime}",
            )
    # easy versus expert mode
    expert = (get("csm") or "n").lower() == "y"
    nodes = 0
    if expert:
        if get("nnodes"):
            bad(
                "nnodes",
                "expert-nnodes",
                "bsub: -nnodes cannot be used in expert mode "
                "(-csm y): count slots with -n and place them with -R",
            )
        if not get("n") or not get("R"):
            bad(
                "csm",
                "expert-slots",
                "bsub: expert mode (-csm y) needs -n (slots) and -R (resource string)",
            )
        else:
            try:
                terms = parse_rstring(get("R") or "")
            except ValueError as exc:
                bad("R", "rstring-syntax", f"bsub: {exc}")
                terms = []
            total = sum(t.count for t in terms)
            if terms and total != int(get("n") or 0):
                bad(
                    "n",
                    "expert-slot-count",
                    f"bsub: -n {get('n')} but the -R terms ask for "
                    f"{total} slots ({' + '.join(str(t.count) for t in terms)})",
                )
            for t in terms:
                if "CN" in t.select and t.ptile:
                    if t.ptile > node.usable_cores:
                        bad(
                            "R",
                            "ptile-cores",
                            f"bsub: span[ptile={t.ptile}] exceeds the "
                            f"{node.usable_cores} usable cores of a {node.name} node",
                        )
                    if t.count % t.ptile:
                        bad(
                            "R",
                            "ptile-nodes",
                            f"bsub: {t.count} compute slots are not a "
                            f"whole number of nodes of {t.ptile} slots",
                        )
                    nodes += t.count // t.ptile
    else:
        if get("n"):
            bad(
                "n",
                "easy-mode-n",
                "bsub: -n counts slots only in expert mode; ask for whole nodes with -nnodes",
                level="warning",
            )
        if not get("nnodes"):
            bad(
                None,
                "nnodes-required",
                "bsub: ask for nodes with -nnodes N (or use expert mode, -csm y, with -n and -R)",
            )
        else:
            nodes = int(get("nnodes")) if (get("nnodes") or "").isdigit() else 0
            if nodes < 1:
                bad(
                    "nnodes",
                    "nnodes-value",
                    f"bsub: -nnodes {get('nnodes')} is not a positive number",
                )
    if queue.max_nodes and nodes > queue.max_nodes:
        bad(
            "nnodes" if not expert else "R",
            "node-count",
            f"bsub: {nodes} nodes exceed queue {qname}'s {queue.max_nodes}",
        )
    return findings, LsfShape(qname, max(nodes, 1), wall, node.usable_cores, node.gpus), opts


def check_jsrun(
    path: Path | str, line: int, words: list[str], shape: LsfShape, env: dict[str, str]
) -> tuple[list[Finding], dict | None, list[str]]:
    findings: list[Finding] = []

    def bad(rule: str, msg: str) -> None:
        findings.append(Finding(path, line, rule, msg))

    try:
        ns = jsrun_parser().parse_args([expand(w, env) for w in words])
    except (LsfOptionError, ValueError) as exc:
        bad("jsrun-option", f"jsrun: {exc}")
        return findings, None, []
    rs_host = ns.rs_per_host
    nrs = ns.nrs if ns.nrs is not None else (rs_host or 1) * shape.nodes
    rs_host = rs_host or -(-nrs // shape.nodes)
    tasks = ns.tasks_per_rs or 1
    cpu = ns.cpu_per_rs or "1"
    cores = shape.usable_cores if cpu == "ALL_CPUS" else int(cpu) if cpu.isdigit() else 1
    gpus = ns.gpu_per_rs or 0
    if rs_host * cores > shape.usable_cores:
        bad(
            "rs-cores",
            f"jsrun: {rs_host} resource set(s) per host x {cores} cores = "
            f"{rs_host * cores}, a node has {shape.usable_cores} usable cores",
        )
    if rs_host * gpus > shape.gpus:
        bad(
            "rs-gpus",
            f"jsrun: {rs_host} resource set(s) per host x {gpus} GPUs = "
            f"{rs_host * gpus}, a node has {shape.gpus}",
        )
    if nrs > rs_host * shape.nodes:
        bad(
            "rs-count",
            f"jsrun: {nrs} resource sets do not fit {shape.nodes} node(s) at {rs_host} per host",
        )
    if ns.bind and ns.bind.startswith("packed:"):
        n = ns.bind.split(":", 1)[1]
        if not n.isdigit():
            bad("bind", f"jsrun: bad binding {ns.bind!r}")
        elif int(n) * tasks > cores:
            bad(
                "bind",
                f"jsrun: packed:{n} x {tasks} tasks = {int(n) * tasks} cores, a "
                f"resource set has {cores}",
            )
    elif ns.bind and ns.bind not in {"none", "rs"}:
        bad("bind", f"jsrun: unknown binding {ns.bind!r} (packed:N, rs or none)")
    if not ns.command:
        bad("jsrun-command", "jsrun: no command to launch")
    step = {
        "launcher": "jsrun",
        "line": line,
        "resource_sets": nrs,
        "rs_per_host": rs_host,
        "tasks_per_rs": tasks,
        "cores_per_rs": cores,
        "gpus_per_rs": gpus,
        "ntasks": nrs * tasks,
        "command": ns.command,
    }
    return findings, step, ns.command


def check_lsf_script(
    path: Path | str,
    site: Site,
    argv: list[str] | None = None,
    text: str | None = None,
    first_line: int = 1,
) -> Report:
    path = Path(path)
    script = read_script(path, text, prefix="#BSUB")
    report = Report(path, site.name, text=script.text)
    findings, shape, _opts = check_bsub(path, site, script.directives, argv)
    report.findings.extend(findings)
    if shape is None:
        return jobcheck._shift(report, first_line)
    nodes = plan_nodes("batch", shape.nodes)
    report.plan = {
        "site": site.name,
        "script": str(path),
        "queue": shape.queue,
        "nodes": nodes,
        "walltime_s": shape.walltime_s,
        "steps": [],
    }
    env: dict[str, str] = {"LSB_JOBID": "1000"}
    slurm_like = _slurm_shape_for(site, shape)
    for cmd in script.commands:
        if not cmd.words:
            continue
        name = Path(cmd.name).name
        words = list(cmd.words[1:])
        if name == "export":
            for w in words:
                k, _, v = w.partition("=")
                env[k] = expand(v, env)
        elif name in {"module", "ml"}:
            report.findings += check_module_command(path, cmd.line, name, words, site)
        elif name == "jsrun":
            f, step, inner = check_jsrun(path, cmd.line, words, shape, env)
            report.findings += f
            if step:
                report.plan["steps"].append(step)
                check_command(path, cmd.line, inner, site, slurm_like, env, report, None)
        else:
            check_command(path, cmd.line, list(cmd.words), site, slurm_like, env, report, None)
    return jobcheck._shift(report, first_line)


def _slurm_shape_for(site: Site, shape: LsfShape):
    from clusterkit.emulate.slurm import Shape

    part = site.partitions[shape.queue]
    return Shape(part, shape.nodes, 1, shape.nodes, 1, part.node_type.gpus, shape.walltime_s, True)


# --------------------------------------------------------------------------- shims
def bsub(argv: list[str]) -> int:
    from clusterkit.emulate.entry import current_site, note, shell_env

    site = current_site("bsub")
    dry = "--dry-run" in argv or os.environ.get("CLUSTERKIT_MODE") == "dry-run"
    argv = [a for a in argv if a != "--dry-run"]
    if not argv or not Path(argv[-1]).is_file():
        print(
            "bsub: this emulator takes a job script file as its last argument (`bsub script.lsf`)",
            file=sys.stderr,
        )
        return 255
    path = Path(argv[-1])
    report = check_lsf_script(path, site, argv[:-1])
    for f in report.findings:
        print(f, file=sys.stderr)
    if report.errors:
        return 255
    if dry:
        print(json.dumps(report.plan, indent=2))
        return 0
    print("Job <1000> is submitted to queue <{}>.".format(report.plan["queue"]), flush=True)
    from clusterkit.emulate.entry import max_ranks, run_node_names

    run_nodes = run_node_names(min(len(report.plan["nodes"]), max_ranks()))
    env = dict(
        os.environ,
        LSB_JOBID="1000",
        LSB_QUEUE=report.plan["queue"],
        LSB_HOSTS=" ".join(["batch1", *run_nodes]),
        CLUSTERKIT_LSF=json.dumps(
            {
                "site": site.name,
                "nodes": run_nodes,
                "plan_nodes": report.plan["nodes"],
                "queue": report.plan["queue"],
            }
        ),
    )
    env.update(shell_env())
    note("bsub", f"site {site.name}: job 1000 runs here now on {len(run_nodes)} local node(s)")
    return subprocess.call(["bash", str(path)], env=env)


def jsrun(argv: list[str]) -> int:
    from clusterkit.emulate.entry import _spawn, _wait_all, current_site, max_ranks, note

    site = current_site("jsrun")
    alloc = json.loads(os.environ.get("CLUSTERKIT_LSF", "null") or "null")
    if not alloc:
        print(
            "jsrun: error: the emulator runs jsrun only inside a job started by its bsub",
            file=sys.stderr,
        )
        return 1
    node = site.partitions[alloc["queue"]].node_type
    shape = LsfShape(alloc["queue"], len(alloc["plan_nodes"]), None, node.usable_cores, node.gpus)
    findings, step, command = check_jsrun("<jsrun>", 0, argv, shape, dict(os.environ))
    for f in findings:
        print(f, file=sys.stderr)
    if findings or step is None:
        return 1
    nodes = alloc["nodes"]
    ntasks = min(step["ntasks"], max_ranks())
    per_node = -(-ntasks // len(nodes))
    note(
        "jsrun", f"{step['ntasks']} task(s) requested, {ntasks} started here: {shlex.join(command)}"
    )
    procs = []
    for rank, (_node, idx, local) in enumerate(launch_env.layout(nodes, ntasks, per_node)):
        env = dict(os.environ)
        env.update(
            launch_env.jsm_rank_env(
                nodes=nodes,
                ntasks=ntasks,
                rank=rank,
                node_index=idx,
                local_rank=local,
                local_size=per_node,
                gpus_per_rs=step["gpus_per_rs"],
            )
        )
        procs.append(_spawn(command, env, ""))
    return _wait_all(procs)


def ddl(tool: str):
    def run(argv: list[str]) -> int:
        from clusterkit.emulate.entry import current_site, note

        site = current_site(tool)
        launcher = site.launcher(tool) or {
            "status": "historical",
            "replacement": "srun/jsrun with DDP or Horovod",
        }
        note(tool, f"{tool} is {launcher['status']}; use {launcher.get('replacement')}")
        inner, _ = jobcheck.ddl_inner(None, 0, argv, site)
        if not inner:
            print(f"{tool}: no command given", file=sys.stderr)
            return 1
        return subprocess.call(inner)

    return run


HANDLERS = {
    "bsub": bsub,
    "jsrun": jsrun,
    "ddlrun": ddl("ddlrun"),
    "bede-ddlrun": ddl("bede-ddlrun"),
}
