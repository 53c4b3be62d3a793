"""Judge a whole LSF job script, as ``bsub`` would take it and the job would run it (Summit).

The request comes first (:mod:`clusterkit.emulate.bsub`), then the body, command by command
(:mod:`clusterkit.emulate.body`): ``jsrun`` steps, ``ddlrun``, modules, programs. The batch
script itself runs on a launch node, not on the job's compute nodes, so a program started
straight from it is said to run there. The plan counts: nodes as a compressed list, slots per
node, the LSF environment (its host lists abbreviated for large jobs), the steps.
"""

from __future__ import annotations

from pathlib import Path

from clusterkit.emulate import foreign, stale
from clusterkit.emulate.body import Context, walk
from clusterkit.emulate.bsub import LsfShape, bsub_request, check_request
from clusterkit.emulate.launch_env import NodeSet
from clusterkit.emulate.registry import register_scheduler, register_snippet_job
from clusterkit.emulate.report import PLAN_HOSTS_SHOWN, Report, shift_lines, unreadable
from clusterkit.emulate.script import JobScript, UnreadableScript, read_script
from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import Site

LAUNCH_NODE = "batch1"  # the node a Summit batch script runs on (launch nodes: batch1..batch5)


@register_scheduler("lsf")
def check_lsf_script(
    path: Path | str,
    site: Site,
    argv: list[str] | None = None,
    text: str | None = None,
    first_line: int = 1,
) -> Report:
    """Judge an LSF job script (or a page snippet, with ``text``) against ``site``.

    ``first_line`` shifts reported lines, for a snippet that starts inside a page.
    """
    path = Path(path)
    try:
        script = read_script(path, text)
    except UnreadableScript as exc:
        return unreadable(path, site.name, exc, "bsub")
    report = Report(path, site.name, text=script.text)
    report.findings += script.reading_findings() + _dos_line_breaks(script)
    report.findings += foreign.findings(script, "lsf") + stale.findings(script)
    req = bsub_request(path, script.text, argv, site.placeholders)
    findings, shape = check_request(req, site)
    report.findings.extend(findings)
    if shape is None:
        return shift_lines(report, first_line)
    nodes = NodeSet.of("node", shape.nodes)
    report.plan = lsf_plan(site, path, shape, nodes)
    report.findings += script.parse_findings()
    queue = site.partitions[shape.queue]
    ctx = Context(
        site,
        report,
        [shape],
        [nodes],
        queue,
        queue.node_type.gpus,
        env=dict(report.plan["job_env"]),
        launch_node=LAUNCH_NODE,
    )
    walk(script, ctx)
    return shift_lines(report, first_line)


def job_env(
    shape: LsfShape,
    job_id: int,
    job_name: str,
    nodes: list[str],
    subcwd: str,
    hostfile: str,
) -> dict[str, str]:
    """What LSF puts in a Summit batch job's environment (the launch node listed first)."""
    slots = shape.slots_per_node or shape.usable_cores
    hosts = [LAUNCH_NODE] + [n for n in nodes for _ in range(slots)]
    env = {
        "LSB_JOBID": str(job_id),
        "LSB_JOBNAME": job_name,
        "LSB_QUEUE": shape.queue,
        "LSB_HOSTS": " ".join(hosts),
        "LSB_MCPU_HOSTS": " ".join([LAUNCH_NODE, "1"] + [f"{n} {slots}" for n in nodes]),
        "LSB_DJOB_NUMPROC": str(len(hosts)),
        "LSB_MAX_NUM_PROCESSORS": str(len(hosts)),
        "LSB_DJOB_HOSTFILE": hostfile,
        "LS_SUBCWD": subcwd,
        "LSB_JOBINDEX": "0",
    }
    if shape.info.get("project"):
        env["LSB_PROJECT_NAME"] = shape.info["project"]
    if shape.interactive:
        env["LSB_INTERACTIVE"] = "Y"
    return env


def _dos_line_breaks(script: JobScript) -> list[Finding]:
    """bsub takes a script with DOS line breaks; bash then reads each \\r as part of the
    last word of its line."""
    if not script.source.crlf_line:
        return []
    return [
        Finding(
            script.path,
            script.source.crlf_line,
            "script-dos-line-breaks",
            "DOS line breaks (\\r\\n): LSF takes the script, but bash reads each \\r as part of "
            "the last word of its line ('hostname\\r: command not found'); convert it with "
            "dos2unix",
            level="warning",
        )
    ]


def lsf_plan(site: Site, path: Path, shape: LsfShape, nodes: NodeSet) -> dict:
    name = shape.info.get("job_name") or path.name
    node = site.partitions[shape.queue].node_type
    return {
        "site": site.name,
        "scheduler": "lsf",
        "script": str(path),
        "queue": shape.queue,
        "mode": shape.mode,
        "node_type": node.name,
        "launch_node": LAUNCH_NODE,
        "nodes": nodes.count,
        "nodelist": nodes.compressed,
        "slots_per_node": shape.slots_per_node,
        "racks": shape.racks,
        "walltime_s": shape.walltime_s,
        "smt": shape.smt,
        "project": shape.info.get("project"),
        "job_name": name,
        "output": shape.info.get("output"),
        "error": shape.info.get("error"),
        "alloc_flags": shape.info.get("alloc_flags", []),
        "interactive": shape.interactive,
        "queue_given": shape.info.get("queue_given", False),
        "output_overwrite": shape.info.get("output_overwrite", False),
        "error_overwrite": shape.info.get("error_overwrite", False),
        "job_env": _plan_env(shape, name, nodes),
        "steps": [],
    }


def _plan_env(shape: LsfShape, name: str, nodes: NodeSet) -> dict[str, str]:
    """The job's LSF variables for a plan; the host lists (LSB_HOSTS one word per slot,
    LSB_MCPU_HOSTS one pair per node) are abbreviated for jobs of more than PLAN_HOSTS_SHOWN
    nodes."""
    shown = nodes.names(PLAN_HOSTS_SHOWN)
    env = job_env(shape, 1000, name, shown, "$LS_SUBCWD", "$LSB_DJOB_HOSTFILE")
    if nodes.count > PLAN_HOSTS_SHOWN:
        slots = shape.slots_per_node or shape.usable_cores
        first, last = nodes.name(0), nodes.name(nodes.count - 1)
        env["LSB_HOSTS"] = (
            f"{LAUNCH_NODE} then each of {first} ... {last} {slots} times (abbreviated)"
        )
        env["LSB_MCPU_HOSTS"] = (
            f"{LAUNCH_NODE} 1 {first} {slots} ... {last} {slots} (abbreviated: one pair for "
            f"each of the {nodes.count} nodes {nodes.compressed})"
        )
        env["LSB_DJOB_NUMPROC"] = env["LSB_MAX_NUM_PROCESSORS"] = str(1 + slots * nodes.count)
    return env


@register_snippet_job("lsf")
def snippet_job(site: Site, report: Report) -> Context:
    """The allocation of a snippet is unknown: as many nodes of the default queue as it
    allows, so that a jsrun line is judged by its per-node arithmetic."""
    queue = site.default_partition or next(iter(site.partitions.values()))
    node = queue.node_type
    shape = LsfShape(queue.name, queue.max_nodes or 1, None, node.usable_cores, node.gpus,
                     smt=node.threads_per_core)  # fmt: skip
    report.plan["nodes"] = shape.nodes
    nodes = NodeSet.of("node", shape.nodes)
    return Context(site, report, [shape], [nodes], queue, node.gpus, launch_node=LAUNCH_NODE)
