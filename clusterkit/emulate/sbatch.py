"""Judge a whole Slurm job script, as ``sbatch`` would take it and the job would run it.

sbatch's refusals of the script itself come first (:mod:`clusterkit.emulate.slurm_request`),
then the request of each component (:mod:`clusterkit.emulate.slurm`), then the body, command by
command (:mod:`clusterkit.emulate.body`). The plan counts: nodes as a compressed list, tasks per
node, the batch environment, the steps.
"""

from __future__ import annotations

from pathlib import Path

from clusterkit.emulate import foreign, launch_env, shell_checks, slurm, stale, storage
from clusterkit.emulate.body import Context, walk
from clusterkit.emulate.launch_env import NodeSet
from clusterkit.emulate.registry import register_scheduler, register_snippet_job
from clusterkit.emulate.report import Report, shift_lines, unreadable
from clusterkit.emulate.script import UnreadableScript, read_script
from clusterkit.emulate.slurm_request import (
    JobRequest,
    job_requests,
    script_refusals,
    site_plugins,
)
from clusterkit.sites.profiles import Site


@register_scheduler("slurm")
def check_slurm_script(
    path: Path | str,
    site: Site,
    argv: list[str] | None = None,
    text: str | None = None,
    first_line: int = 1,
) -> Report:
    """Judge a Slurm job script (or a page snippet, with ``text``) against ``site``.

    ``first_line`` shifts reported lines, for a snippet that starts inside a page.
    """
    path = Path(path)
    try:
        script = read_script(path, text)
    except UnreadableScript as exc:
        return unreadable(path, site.name, exc, "sbatch")
    report = Report(path, site.name, text=script.text)
    report.findings += script.reading_findings() + script_refusals(script)
    report.findings += foreign.findings(script, "slurm")
    shell, asked_bash = shell_checks.checks(script, site.placeholders)
    report.findings += shell + stale.findings(script)
    reqs = job_requests(
        script,
        argv,
        placeholders=site.placeholders,
        plugins=site_plugins(site),
        release=site.slurm_release,
        options_release=site.slurm_options_release,
    )
    # the account the site's own pages write (bdXXXYY) is a placeholder too, but a known one
    example = site.account.get("example")
    reqs[0].findings = [
        f
        for f in reqs[0].findings
        if not (f.rule == "placeholder" and example and f"{example!r}" in f.message)
    ]
    shapes = _shapes(reqs, site, report)
    if shapes:
        nodesets = component_nodes(shapes)
        env = job_env(site, path, reqs, shapes, nodesets)
        report.plan = job_plan(site, path, reqs, shapes, nodesets, env)
        if not asked_bash:  # bash has said what it makes of the text; bashlex's trouble is its own
            report.findings += script.parse_findings()
        ctx = _context(site, report, shapes, nodesets, env)
        ctx.features = storage.features(reqs[0].get("constraint"))
        walk(script, ctx)
    return shift_lines(report, first_line)


def _shapes(reqs: list[JobRequest], site: Site, report: Report) -> list[slurm.Shape]:
    """The allocation of each component; none unless every component can be had."""
    shapes = []
    for k, req in enumerate(reqs):
        findings, shape = slurm.check_job(req, site)
        report.findings.extend(findings)
        if shape is not None:
            shape.component = k
            shapes.append(shape)
    return shapes if len(shapes) == len(reqs) else []


def _context(
    site: Site,
    report: Report,
    shapes: list[slurm.Shape],
    nodesets: list[NodeSet],
    env: dict[str, str],
) -> Context:
    first = shapes[0]
    ctx = Context(site, report, shapes, nodesets, first.partition, first.gpus_per_node, dict(env))
    if env:  # a whole job: what sbatch sets only on request is known to be missing
        ctx.conditional = CONDITIONAL
    return ctx


# variables sbatch sets only when the job asks for what they hold (--cpus-per-task, --ntasks
# or --ntasks-per-node); launch_env.slurm_job_env leaves them out otherwise
CONDITIONAL = frozenset(
    {"SLURM_CPUS_PER_TASK", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_NTASKS_PER_NODE"}
)


def component_nodes(shapes: list[slurm.Shape]) -> list[NodeSet]:
    """The nodes of each component of a job; components in one partition get nodes in turn."""
    out, used = [], {}
    for shape in shapes:
        name = shape.partition.name
        nodes = NodeSet.of(name, shape.nodes + used.get(name, 0))
        out.append(nodes.part(used.get(name, 0), shape.nodes))
        used[name] = used.get(name, 0) + shape.nodes
    return out


def job_env(
    site: Site,
    path: Path,
    reqs: list[JobRequest],
    shapes: list[slurm.Shape],
    nodesets: list[NodeSet],
) -> dict[str, str]:
    """What the batch script sees: the first component's variables, plus per-component ones
    for a heterogeneous job."""
    req, shape = reqs[0], shapes[0]
    env = launch_env.slurm_job_env(
        job_id=1000,
        job_name=req.get("job_name") or path.name,
        nodes=nodesets[0],
        partition=shape.partition.name,
        account=req.get("account"),
        ntasks=shape.ntasks,
        tasks_per_node=shape.tasks_per_node,
        cpus_per_task=shape.cpus_per_task,
        gpus_per_node=shape.gpus_per_node,
        cpus_per_node=shape.cpus_per_node,
        submit_dir="$SLURM_SUBMIT_DIR",
        cluster=site.name,
        cpus_per_task_given=req.has("cpus_per_task"),
        qos=shape.qos or req.get("qos"),
        ntasks_given=shape.ntasks_given,
        tasks_per_node_given=shape.tasks_per_node_given,
    )
    if len(shapes) > 1:
        env["SLURM_HET_SIZE"] = str(len(shapes))
        for k, (s, nodes) in enumerate(zip(shapes, nodesets, strict=True)):
            env[f"SLURM_JOB_NUM_NODES_HET_GROUP_{k}"] = str(s.nodes)
            env[f"SLURM_JOB_NODELIST_HET_GROUP_{k}"] = nodes.compressed
            env[f"SLURM_JOB_PARTITION_HET_GROUP_{k}"] = s.partition.name
            env[f"SLURM_NTASKS_HET_GROUP_{k}"] = str(s.ntasks)
    return env


def job_plan(
    site: Site,
    path: Path,
    reqs: list[JobRequest],
    shapes: list[slurm.Shape],
    nodesets: list[NodeSet],
    env: dict[str, str],
) -> dict:
    def counts(req: JobRequest, shape: slurm.Shape, nodes: NodeSet) -> dict:
        return {
            "partition": shape.partition.name,
            "node_type": shape.node.name,
            "nodes": shape.nodes,
            "nodelist": nodes.compressed,
            "ntasks": shape.ntasks,
            "tasks_per_node": shape.tasks_per_node,
            "cpus_per_task": shape.cpus_per_task,
            "cpus_per_node": shape.cpus_per_node,
            "exclusive": shape.exclusive,
            "gpus_per_node": shape.gpus_per_node,
            "time_limit_s": shape.time_s,
            "account": req.get("account"),
            "qos": shape.qos or req.get("qos"),
        }

    plan = {"site": site.name, "script": str(path), **counts(reqs[0], shapes[0], nodesets[0])}
    if len(shapes) > 1:
        plan["het_components"] = [counts(*c) for c in zip(reqs, shapes, nodesets, strict=True)]
    return {**plan, "job_env": env, "steps": []}


@register_snippet_job("slurm")
def snippet_job(site: Site, report: Report) -> Context:
    """A one-node job on the site's default partition, holding all its GPUs."""
    part = site.default_partition or next(iter(site.partitions.values()))
    shape = slurm.Shape(part, 1, 1, 1, 1, part.node_type.gpus, None, False)
    report.plan["nodes"] = 1
    return _context(site, report, [shape], [NodeSet.of(part.name, 1)], {})
