"""Judge the MPI launchers that wrap a program: IBM DDL's ``ddlrun`` (WML CE, Summit), Bede's
``bede-ddlrun`` wrapper, and Bede's ``bede-mpirun``.

``ddlrun`` ran one rank per GPU of every host of the job: started from the batch script it is
a step of the plan, its topology options must describe the job's nodes, and it is historical
on both sites (the profile's ``launchers`` entry names what replaces it). ``bede-mpirun``'s
``--bede-par`` and mpirun options are judged. Either way the program they start is judged in
turn. The grammars are in :mod:`clusterkit.emulate.launcher_options`.
"""

from __future__ import annotations

from pathlib import Path

from clusterkit.emulate.body import Context, Placement
from clusterkit.emulate.launch_env import NodeSet
from clusterkit.emulate.launcher_options import DdlArgs, parse_bede_mpirun, parse_ddlrun
from clusterkit.emulate.registry import register_command
from clusterkit.emulate.report import add_step
from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import Site


def notice(tool: str, site: Site) -> str | None:
    """What the profile says of a launcher that is not current, or None."""
    launcher = site.launcher(tool)
    if launcher is None or launcher["status"] == "current":
        return None
    return f"{tool} is {launcher['status']} on {site.title}; use {launcher.get('replacement')}"


def _not_a_launcher(ctx: Context, line: int, tool: str) -> None:
    site = ctx.site
    if site.launcher(tool) is None and not site.generic:
        ctx.add(
            line,
            "launcher-unknown",
            f"{tool} is not a launcher of {site.title} (its profile lists "
            f"{', '.join(x['name'] for x in site.data['launchers'])})",
        )


@register_command("ddlrun", "bede-ddlrun")
def judge_ddlrun(ctx: Context, line: int, words: list[str], placement: Placement | None) -> None:
    tool, args = Path(words[0]).name, ctx.expanded(words[1:])
    parsed, problems = parse_ddlrun(tool, args)
    ctx.extend([Finding(ctx.path, line, "ddl-option", p) for p in problems])
    _not_a_launcher(ctx, line, tool)
    if problems:
        return
    if not parsed.command:
        ctx.add(line, "ddl-command", f"{tool}: no program to run")
    if placement is None and not ctx.site.generic:  # a step of one rank per GPU
        gpus = ctx.partition.node_type.gpus
        findings, step = check_ddl_step(ctx.path, line, tool, args, ctx.site, ctx.nodes[0], gpus)
        ctx.extend(findings)
        if step:
            add_step(ctx.report, step, None)
    ctx.judge(line, parsed.command, placement)


@register_command("bede-mpirun")
def judge_bede_mpirun(
    ctx: Context, line: int, words: list[str], placement: Placement | None
) -> None:
    parsed, problems = parse_bede_mpirun(ctx.expanded(words[1:]), ctx.env)
    ctx.extend([Finding(ctx.path, line, rule, msg, level) for rule, level, msg in problems])
    if ctx.site.launcher("bede-mpirun") is None and not ctx.site.generic:
        ctx.add(
            line,
            "launcher-unknown",
            f"bede-mpirun is Bede's wrapper; {ctx.site.title} does not have it",
        )
    if parsed:
        ctx.judge(line, parsed.command, placement)


def check_ddl_step(
    path, line: int, tool: str, args: list[str], site: Site, nodes: NodeSet, gpus: int
) -> tuple[list[Finding], dict | None]:
    """Judge a ddlrun line against the job's nodes; the step it makes (one rank per GPU)."""
    parsed, problems = parse_ddlrun(tool, args)
    if problems:
        return [], None
    findings: list[Finding] = []

    def bad(rule: str, msg: str, level: str = "error") -> None:
        findings.append(Finding(path, line, rule, msg, level))

    numbers = {k: _number(parsed, k, tool, bad) for k in ("aisles", "racks", "nodes")}
    accel = _number(parsed, "accelerators", tool, bad)
    _topology(bad, tool, numbers, parsed, nodes)
    per_node = _per_node(bad, tool, accel, gpus)
    step = {
        "launcher": tool,
        "line": line,
        "nodes": nodes.count,
        "nodelist": nodes.compressed,
        "ntasks": per_node * nodes.count,
        "tasks_per_host": per_node,
        "command": parsed.command,
        "notice": notice(tool, site),
    }
    return findings, step


def _number(parsed: DdlArgs, key: str, tool: str, bad) -> int | None:
    text = parsed.values.get(key)
    if text is None:
        return None
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        bad("ddl-option", f"{tool}: --{key} takes a positive number, not {text!r}")
        return None
    return int(text)


def _topology(bad, tool: str, numbers: dict, parsed: DdlArgs, nodes: NodeSet) -> None:
    """--aisles x --racks x --nodes, and -H, must describe the job's nodes."""
    if any(v is not None for v in numbers.values()):
        aisles, racks, per_rack = (numbers[k] or 1 for k in ("aisles", "racks", "nodes"))
        topo = aisles * racks * per_rack
        if topo != nodes.count:
            bad(
                "ddl-topology",
                f"{tool}: --aisles {aisles} x --racks {racks} x --nodes {per_rack} = {topo} "
                f"nodes, the job has {nodes.count}",
            )
    hosts = [h for h in parsed.values.get("hosts", "").split(",") if h]
    if "hosts" in parsed.values and len(hosts) != nodes.count:
        bad(
            "ddl-topology",
            f"{tool}: -H lists {len(hosts)} host(s), the job has {nodes.count} node(s)",
            level="warning",
        )


def _per_node(bad, tool: str, accel: int | None, gpus: int) -> int:
    """Ranks per node: one per GPU (--accelerators, or all the node has)."""
    if accel and gpus and accel > gpus:
        bad("ddl-accelerators", f"{tool}: --accelerators {accel}, a node has {gpus} GPUs")
    if not (accel or gpus):
        bad("ddl-accelerators", f"{tool}: DDL runs one rank per GPU; the job's nodes have none")
        return 1
    return accel or gpus
