"""Judge IBM Job Step Manager's ``jsrun`` steps against an LSF allocation, as on Summit.

A step is made of resource sets (``-n`` of them, ``-r`` per host) of ``-a`` tasks, ``-c`` cores
and ``-g`` GPUs, bound to cores with ``-b`` and placed with ``-d``; the arithmetic is judged
against the node type of the site profile (cores the jobs may use, GPUs), and every task gets
the environment JSM and Spectrum MPI give it. A value not evaluable here (``-c
$(($NCORES/$NRS))``) is said to be so and leaves the sums it enters unjudged.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from clusterkit.emulate import launch_env
from clusterkit.emulate.body import Context, Placement, check_command_line
from clusterkit.emulate.bsub import LsfShape
from clusterkit.emulate.launch_env import NodeSet
from clusterkit.emulate.lsf_options import JSRUN_OPTIONS, JsrunArgs, LsfOptionError, parse_jsrun
from clusterkit.emulate.registry import register_command
from clusterkit.emulate.report import PLAN_HOSTS_SHOWN, PLAN_RANKS_SHOWN, add_step
from clusterkit.emulate.script import expand, not_evaluable
from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import Site

LATENCY = {"gpu-cpu", "cpu-mem", "cpu-cpu", "gpu-gpu", "mem-mem"}


@dataclass
class JsrunStep:
    nrs: int
    rs_per_host: int
    tasks_per_rs: int
    ntasks: int
    cores: int
    gpus: int
    bind: str
    distribution: str
    env: dict[str, str]
    unset: list[str]
    stdio_mode: str
    command: list[str]

    @property
    def nodes_used(self) -> int:
        return max(1, -(-self.nrs // max(self.rs_per_host, 1)))


@dataclass
class _Sets:
    """The resource sets asked for; None where not given or not evaluable here."""

    cores: int | None
    gpus: int | None
    tasks: int | None
    per_host: int | None
    nrs: int | None
    np: int | None
    cores_known: bool = True
    tasks_known: bool = True


class _Judge:
    def __init__(self, path: Path | str, line: int, shape: LsfShape, env: dict[str, str]):
        self.path, self.line, self.shape, self.env = path, line, shape, env
        self.findings: list[Finding] = []

    def bad(self, rule: str, msg: str, level: str = "error") -> None:
        self.findings.append(Finding(self.path, self.line, rule, msg, level))

    @property
    def errors(self) -> int:
        return sum(f.level == "error" for f in self.findings)

    def number(self, ns: JsrunArgs, name: str, special: dict[str, int], low: int) -> int | None:
        text = ns.get(name)
        if text is None:
            return None
        if text in special:
            return special[text]
        why = not_evaluable(text)
        if why:
            short = next((f"-{s}/" for s, lng, _v in JSRUN_OPTIONS if lng == name and s), "")
            self.bad(
                "value-not-evaluable",
                f"jsrun {short}--{name} {text}: not evaluable here ({why}); not judged",
                level="warning",
            )
            return None
        if not (text.isascii() and text.isdigit()) or int(text) < low:
            what = "a positive number" if low else "a number"
            extra = f" or {' / '.join(special)}" if special else ""
            self.bad("jsrun-value", f"jsrun: --{name} takes {what}{extra}, not {text!r}")
            return None
        return int(text)


def parse_step(
    path: Path | str, line: int, words: list[str], shape: LsfShape, env: dict[str, str]
) -> tuple[list[Finding], JsrunStep | None]:
    """Judge a jsrun line against the allocation; the resolved step, or None."""
    judge = _Judge(path, line, shape, env)
    try:
        ns = parse_jsrun([expand(w, env) for w in words])
    except LsfOptionError as exc:
        judge.bad("jsrun-option", str(exc))
        return judge.findings, None
    sets = _sets(judge, ns)
    if judge.errors:
        return judge.findings, None
    cores, gpus = sets.cores or 1, sets.gpus or 0
    per_host = _fit(judge, sets, cores, gpus)
    nrs, tasks, ntasks = _tasks(judge, sets, per_host)
    bind = _bind(judge, ns, sets, cores, tasks)
    step = JsrunStep(
        nrs=nrs,
        rs_per_host=per_host,
        tasks_per_rs=tasks,
        ntasks=ntasks,
        cores=cores,
        gpus=gpus,
        bind=bind,
        distribution=_distribution(judge, ns),
        env=_env(ns, env),
        unset=ns.all("env_no_propagate"),
        stdio_mode=(ns.get("stdio_mode") or "collected").lower(),
        command=list(ns.command),
    )
    _latency(judge, ns)
    if not ns.command:
        judge.bad("jsrun-command", "jsrun: no program to launch")
    return judge.findings, step


def _sets(judge: _Judge, ns: JsrunArgs) -> _Sets:
    shape, nodes = judge.shape, max(judge.shape.nodes, 1)
    sets = _Sets(
        cores=judge.number(ns, "cpu_per_rs", {"ALL_CPUS": shape.usable_cores}, 1),
        gpus=judge.number(ns, "gpu_per_rs", {"ALL_GPUS": shape.gpus}, 0),
        tasks=judge.number(ns, "tasks_per_rs", {}, 1),
        per_host=judge.number(ns, "rs_per_host", {}, 1),
        nrs=judge.number(ns, "nrs", {"ALL_HOSTS": nodes}, 1),
        np=judge.number(ns, "np", {}, 1),
    )
    # a value not evaluable here (-c $(($NCORES/$NRS))) leaves the sums it enters unjudged
    sets.cores_known = sets.cores is not None or ns.get("cpu_per_rs") is None
    sets.tasks_known = sets.tasks is not None or ns.get("tasks_per_rs") is None
    return sets


def _fit(judge: _Judge, sets: _Sets, cores: int, gpus: int) -> int:
    """Resource sets on a node: each must fit it, and -r of them together; the sets per host."""
    shape, rph = judge.shape, sets.per_host
    if sets.cores_known and cores > shape.usable_cores:
        judge.bad(
            "rs-cores",
            f"jsrun: a resource set of {cores} cores does not fit a node of "
            f"{shape.usable_cores} usable cores",
        )
    if gpus > shape.gpus:
        judge.bad(
            "rs-gpus",
            f"jsrun: a resource set of {gpus} GPUs does not fit a node of {shape.gpus} GPUs",
        )
    if rph is None:
        fit = shape.usable_cores // cores
        return max(min(fit, shape.gpus // gpus) if gpus else fit, 1)
    if sets.cores_known and rph * cores > shape.usable_cores >= cores:
        judge.bad(
            "rs-cores",
            f"jsrun: {rph} resource sets per host x {cores} cores = {rph * cores}; a node has "
            f"{shape.usable_cores} usable cores",
        )
    if gpus and rph * gpus > shape.gpus >= gpus:
        judge.bad(
            "rs-gpus",
            f"jsrun: {rph} resource sets per host x {gpus} GPUs = {rph * gpus}; a node has "
            f"{shape.gpus} GPUs",
        )
    return rph


def _tasks(judge: _Judge, sets: _Sets, per_host: int) -> tuple[int, int, int]:
    """(resource sets, tasks per set, tasks): -n within the nodes, -p against -n x -a."""
    nodes, nrs, tasks = max(judge.shape.nodes, 1), sets.nrs, sets.tasks
    if nrs is None:
        nrs = per_host * nodes
    elif nrs > per_host * nodes:
        how = (
            f"at -r {sets.per_host} per host"
            if sets.per_host is not None
            else f"{per_host} fit a node"
        )
        judge.bad(
            "rs-count",
            f"jsrun: {nrs} resource sets do not fit the job's {nodes} node(s) ({how}: at most "
            f"{per_host * nodes})",
        )
    if tasks is None and sets.np is not None:
        tasks = -(-sets.np // nrs)
    elif tasks is not None and sets.np is not None and sets.np != nrs * tasks:
        judge.bad(
            "jsrun-tasks",
            f"jsrun: -p {sets.np} disagrees with {nrs} resource sets x -a {tasks} tasks",
            level="warning",
        )
    tasks = tasks or 1
    return nrs, tasks, sets.np if sets.np is not None else nrs * tasks


def _bind(judge: _Judge, ns: JsrunArgs, sets: _Sets, cores: int, tasks: int) -> str:
    """packed:N cores per task (default packed:1), rs (all the set's cores), or none."""
    bind = (ns.get("bind") or "packed:1").lower()
    why = not_evaluable(bind)
    if why:
        judge.bad(
            "value-not-evaluable",
            f"jsrun --bind {bind}: not evaluable here ({why}); not judged",
            level="warning",
        )
        return bind
    m = re.fullmatch(r"packed:(\d+)", bind)
    if not m and bind not in {"rs", "none"}:
        judge.bad("jsrun-bind", f"jsrun: unknown binding {ns.get('bind')!r} (packed:N, rs or none)")
    elif m and int(m[1]) < 1:
        judge.bad("jsrun-bind", f"jsrun: bad binding {bind!r}")
    elif sets.cores_known and sets.tasks_known:
        _bound_cores(judge, bind, ns.get("bind") is None, cores, tasks)
        _check_omp_threads(judge, bind, cores, ns)
    return bind


def _bound_cores(judge: _Judge, bind: str, default: bool, cores: int, tasks: int) -> None:
    m = re.fullmatch(r"packed:(\d+)", bind)
    if m and int(m[1]) * tasks > cores:
        msg = (
            f"jsrun: -b {bind} x {tasks} tasks = {int(m[1]) * tasks} cores; a resource set has "
            f"{cores} (-c {cores})"
        )
        if default:
            msg += ": more than 1 task/rank assigned to a core (default binding)"
        judge.bad("bind-cores", msg, level="warning" if default else "error")
    elif bind == "rs" and tasks > 1:
        judge.bad(
            "bind-cores",
            f"jsrun: -b rs binds each of the {tasks} tasks to all {cores} cores of its resource "
            "set: more than 1 task/rank assigned to a core",
            level="warning",
        )


def _check_omp_threads(judge: _Judge, bind: str, cores: int, ns: JsrunArgs) -> None:
    """jsrun warns when a task is told to start more OpenMP threads than it has hardware
    threads (OLCF Summit guide, "Be careful with assigning threads to tasks")."""
    text = _env(ns, judge.env).get("OMP_NUM_THREADS", judge.env.get("OMP_NUM_THREADS", ""))
    m = re.fullmatch(r"packed:(\d+)", bind)
    bound = int(m[1]) if m else cores if bind == "rs" else None
    smt = judge.shape.smt
    if text.isascii() and text.isdigit() and bound and int(text) > bound * smt:
        judge.bad(
            "jsrun-omp-threads",
            f"jsrun: Warning: OMP_NUM_THREADS={text} is greater than available PU's (each task "
            f"is bound to {bound} core(s) x {smt} hardware thread(s) with -b {bind})",
            level="warning",
        )


def _distribution(judge: _Judge, ns: JsrunArgs) -> str:
    dist = (ns.get("launch_distribution") or "packed").lower()
    if re.fullmatch(r"packed|cyclic|plane:[1-9]\d*", dist):
        return dist
    judge.bad(
        "jsrun-distribution",
        f"jsrun: unknown launch distribution {dist!r} (packed, cyclic or plane:N)",
    )
    return "packed"


def _latency(judge: _Judge, ns: JsrunArgs) -> None:
    for item in (ns.get("latency_priority") or "").lower().split(","):
        if item and item not in LATENCY:
            judge.bad(
                "jsrun-latency",
                f"jsrun: latency priority {item!r} is not one of {', '.join(sorted(LATENCY))}",
                level="warning",
            )


def _env(ns: JsrunArgs, env: dict[str, str]) -> dict[str, str]:
    """The variables -E/-F set for the tasks (a bare name passes this shell's value on)."""
    out: dict[str, str] = {}
    for item in ns.all("env") + ns.all("env_eval"):
        k, eq, v = item.partition("=")
        out[k] = v if eq else env.get(k, "")
    return out


# --------------------------------------------------------------------------- the tasks
def omp_threads(step: JsrunStep, smt: int) -> int | None:
    """OMP_NUM_THREADS jsrun sets when the user has not: bound cores x SMT level."""
    m = re.fullmatch(r"packed:(\d+)", step.bind)
    if m:
        return int(m[1]) * smt
    if step.bind == "rs":
        return step.cores * smt
    return None


def layout(step: JsrunStep, node_limit: int | None = None) -> list[dict]:
    """Tasks of a step on its nodes: rank, node index, resource set (global and on its node).

    Resource sets fill a node (``rs_per_host`` of them) before the next; tasks go to resource
    sets packed (default), cyclic, or ``plane:N``. Only nodes below ``node_limit`` are listed.
    """
    out = []
    last = step.nodes_used if node_limit is None else min(step.nodes_used, node_limit)
    per = step.tasks_per_rs
    plane = int(step.distribution.split(":")[1]) if step.distribution.startswith("plane") else 0
    for node in range(last):
        first_rs = node * step.rs_per_host
        for rs in range(first_rs, min(step.nrs, first_rs + step.rs_per_host)):
            for k in range(per):
                if step.distribution == "cyclic":
                    rank = rs + k * step.nrs
                elif plane:
                    rank = ((k // plane) * step.nrs + rs) * plane + k % plane
                else:
                    rank = rs * per + k
                if rank < step.ntasks:
                    out.append(
                        {"rank": rank, "node_index": node, "rs": rs, "rs_local": rs - first_rs}
                    )
    out.sort(key=lambda r: (r["node_index"], r["rank"]))
    local: dict[int, int] = {}
    for r in out:
        r["local_rank"] = local.get(r["node_index"], 0)
        local[r["node_index"]] = r["local_rank"] + 1
    for r in out:
        r["local_size"] = local[r["node_index"]]
    return sorted(out, key=lambda r: r["rank"])


def rank_env(
    step: JsrunStep, task: dict, hosts: str, ntasks: int, smt: int, base: dict[str, str]
) -> dict[str, str]:
    """The environment jsrun gives one task (on top of ``base``); ``hosts`` is LSB_HOSTS."""
    env = launch_env.jsm_rank_env(
        hosts=hosts,
        ntasks=ntasks,
        rank=task["rank"],
        node_index=task["node_index"],
        local_rank=task["local_rank"],
        local_size=task["local_size"],
        gpus_per_rs=step.gpus,
    )
    if step.gpus:
        first = task["rs_local"] * step.gpus
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(first + i) for i in range(step.gpus))
    threads = omp_threads(step, smt)
    if threads and "OMP_NUM_THREADS" not in base and "OMP_NUM_THREADS" not in step.env:
        env["OMP_NUM_THREADS"] = str(threads)
    env.update(step.env)
    return env


# --------------------------------------------------------------------------- in a job script
def step_plan(
    step: JsrunStep, line: int, shape: LsfShape, nodes: NodeSet, env: dict[str, str]
) -> tuple[dict, Callable[[int], list[dict]]]:
    """The step in counts, and the function that writes out its first ranks."""
    used = nodes.head(step.nodes_used)
    per_host = step.rs_per_host * step.tasks_per_rs
    hosts = (
        " ".join(used.names())
        if used.count <= PLAN_HOSTS_SHOWN
        else f"{used.name(0)} ... {used.name(used.count - 1)} (abbreviated)"
    )

    def ranks(limit: int) -> list[dict]:
        first_nodes = min(used.count, -(-limit // max(per_host, 1)) + 1)
        return [
            {
                "rank": t["rank"],
                "node": used.name(t["node_index"]),
                "resource_set": t["rs"],
                "local_rank": t["local_rank"],
                "env": rank_env(step, t, hosts, step.ntasks, shape.smt, env),
            }
            for t in layout(step, node_limit=first_nodes)[:limit]
        ]

    plan = {
        "launcher": "jsrun",
        "line": line,
        "resource_sets": step.nrs,
        "rs_per_host": step.rs_per_host,
        "nodes": used.count,
        "nodelist": used.compressed,
        "tasks_per_rs": step.tasks_per_rs,
        "cores_per_rs": step.cores,
        "gpus_per_rs": step.gpus,
        "bind": step.bind,
        "launch_distribution": step.distribution,
        "ntasks": step.ntasks,
        "tasks_per_host": per_host,
        "omp_num_threads": omp_threads(step, shape.smt),
        "command": step.command,
    }
    return plan, ranks


@register_command("jsrun", scheduler="lsf")
def judge_jsrun(ctx: Context, line: int, words: list[str], placement: Placement | None) -> None:
    """A ``jsrun`` line of a batch script: its step joins the plan, and the program it starts
    is judged with the tasks and GPUs of a node's resource sets."""
    shape = ctx.allocation[0]
    findings, step = parse_step(ctx.path, line, words[1:], shape, ctx.env)
    ctx.extend(findings)
    if step is None:
        return
    add_step(ctx.report, *step_plan(step, line, shape, ctx.nodes[0], ctx.env))
    ctx.judge(
        line, step.command, Placement("jsrun", step.rs_per_host * step.tasks_per_rs, step.gpus)
    )


def check_jsrun(
    path: Path | str, line: int, words: list[str], shape: LsfShape, env: dict[str, str]
) -> tuple[list[Finding], dict | None, list[str]]:
    """(findings, the step as a plan dict with its first ranks, the command it starts)."""
    findings, step = parse_step(path, line, words, shape, env)
    if step is None:
        return findings, None, []
    plan, ranks = step_plan(step, line, shape, NodeSet.of("node", shape.nodes), env)
    plan["ranks"] = ranks(PLAN_RANKS_SHOWN)
    return findings, plan, step.command


def check_jsrun_line(page, line: int, words: list[str], site: Site) -> list[Finding]:
    """A ``jsrun ...`` line shown on its own (a page snippet): the per-node arithmetic against
    the default queue's node type, then the command it starts. ``words`` include ``jsrun``."""
    return check_command_line(page, line, list(words), site).findings
