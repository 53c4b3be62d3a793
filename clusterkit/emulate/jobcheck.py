"""Dry run of a whole Slurm job script: directives, then every command of the body.

The body is read, not run: ``module`` lines are judged against the inventory, each ``srun`` step
against the allocation, ``torchrun`` against the GPUs of the node, historical launchers against
the profile, and ``python script.py --flags`` against the script's own command-line contract.
The result is a plan (nodes, steps, ranks and their environment) plus findings.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from clusterkit import contracts
from clusterkit.emulate import containers, launch_env, slurm, torchrun
from clusterkit.emulate.modules import check_module_command
from clusterkit.emulate.script import Command, JobScript, expand, read_script
from clusterkit.errors import Finding
from clusterkit.profiles import Site

ROOT = Path(__file__).resolve().parent.parent.parent


# name -> function(path, line, args, site) -> (inner command words, findings).
# Emulators of wrapping launchers (containers, MPI wrappers) register themselves here.
WRAPPERS: dict = {**containers.WRAPPERS}  # ddlrun, bede-ddlrun, bede-mpirun: see the end


@dataclass
class Report:
    path: Path
    site: str
    findings: list[Finding] = field(default_factory=list)
    plan: dict = field(default_factory=dict)
    text: str = ""  # the script, to point a finding at the continuation line that holds it

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.level != "error"]


def plan_nodes(partition: str, count: int) -> list[str]:
    """Node names for a dry-run plan: the partition's name and a 3-digit index."""
    stem = re.sub(r"[^a-z0-9]", "", partition.lower()) or "node"
    return [f"{stem}{i:03d}" for i in range(1, count + 1)]


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
    script = read_script(path, text, prefix="#SBATCH")
    report = Report(path, site.name, text=script.text)
    req = slurm.job_request(script, argv)
    findings, shape = slurm.check_job(req, site)
    report.findings.extend(findings)
    if shape is None:
        return _shift(report, first_line)
    nodes = plan_nodes(shape.partition.name, shape.nodes)
    env = launch_env.slurm_job_env(
        job_id=1000,
        job_name=req.get("job_name") or path.name,
        nodes=nodes,
        partition=shape.partition.name,
        account=req.get("account"),
        ntasks=shape.ntasks,
        tasks_per_node=shape.tasks_per_node,
        cpus_per_task=shape.cpus_per_task,
        gpus_per_node=shape.gpus_per_node,
        cpus_per_node=shape.node.cpus,
        submit_dir="$SLURM_SUBMIT_DIR",
        cluster=site.name,
        cpus_per_task_given=req.has("cpus_per_task"),
        qos=req.get("qos"),
    )
    report.plan = {
        "site": site.name,
        "script": str(path),
        "partition": shape.partition.name,
        "node_type": shape.node.name,
        "nodes": nodes,
        "ntasks": shape.ntasks,
        "tasks_per_node": shape.tasks_per_node,
        "cpus_per_task": shape.cpus_per_task,
        "gpus_per_node": shape.gpus_per_node,
        "time_limit_s": shape.time_s,
        "account": req.get("account"),
        "qos": req.get("qos"),
        "job_env": env,
        "steps": [],
    }
    if script.parse_error:
        report.findings.append(
            Finding(
                path,
                0,
                "bash-parse",
                f"bashlex could not parse the body ({script.parse_error}); read line by line",
                level="warning",
            )
        )
    walk_body(script, site, shape, env, report)
    return _shift(report, first_line)


def _shift(report: Report, first_line: int) -> Report:
    if first_line != 1:
        report.findings = [
            Finding(f.path, f.line + first_line - 1 if f.line else 0, f.rule, f.message, f.level)
            for f in report.findings
        ]
    return report


def walk_body(
    script: JobScript, site: Site, shape: slurm.Shape, env: dict[str, str], report: Report
) -> None:
    env = dict(env)
    step_id = 0
    for cmd in script.commands:
        for a in cmd.assignments:
            k, _, v = a.partition("=")
            env[k] = expand(v, env)
        if not cmd.words:
            continue
        name = Path(cmd.name).name
        words = list(cmd.words[1:])
        if name == "export":
            for w in words:
                if "=" in w:
                    k, _, v = w.partition("=")
                    env[k] = expand(v, env)
            continue
        if name in {"module", "ml"}:
            report.findings.extend(check_module_command(script.path, cmd.line, name, words, site))
            continue
        if name == "srun":
            findings, step = slurm.check_step(script.path, cmd.line, words, shape, env)
            report.findings.extend(findings)
            if step is not None:
                report.plan["steps"].append(_step_plan(step_id, step, report.plan, shape))
                step_id += 1
                check_command(
                    script.path,
                    cmd.line,
                    step.command,
                    site,
                    shape,
                    env,
                    report,
                    ranks_per_node=step.tasks_per_node,
                )
            continue
        check_command(
            script.path, cmd.line, [cmd.name, *words], site, shape, env, report, ranks_per_node=None
        )


def _step_plan(step_id: int, step: slurm.Step, plan: dict, shape: slurm.Shape) -> dict:
    nodes = plan["nodes"][: step.nodes]
    ranks = []
    for rank, (node, idx, local) in enumerate(
        launch_env.layout(nodes, step.ntasks, step.tasks_per_node, launch_env.RANKS_SHOWN)
    ):
        ranks.append(
            {
                "rank": rank,
                "node": node,
                "local_rank": local,
                "env": launch_env.srun_rank_env(
                    step_id=step_id,
                    nodes=nodes,
                    ntasks=step.ntasks,
                    tasks_per_node=step.tasks_per_node,
                    rank=rank,
                    node_index=idx,
                    local_rank=local,
                    cpus_per_task=step.cpus_per_task,
                    gpus_per_node=shape.gpus_per_node,
                ),
            }
        )
    return {
        "line": step.line,
        "launcher": "srun",
        "nodes": nodes,
        "ntasks": step.ntasks,
        "tasks_per_node": step.tasks_per_node,
        "cpus_per_task": step.cpus_per_task,
        "command": step.command,
        "ranks": ranks,
        "ranks_shown": len(ranks),
    }


def check_command(
    path: Path,
    line: int,
    words: list[str],
    site: Site,
    shape: slurm.Shape,
    env: dict[str, str],
    report: Report,
    ranks_per_node: int | None,
) -> None:
    """A launcher or program started by the body (directly or by srun)."""
    if not words:
        return
    name = Path(words[0]).name
    launcher = site.launcher(name)
    if launcher and launcher["status"] != "current":
        report.findings.append(
            Finding(
                path,
                line,
                "launcher-historical",
                f"{name} is {launcher['status']} on {site.title}; use {launcher['replacement']}",
                level="warning" if launcher["status"] == "historical" else "error",
            )
        )
    if name == "torchrun":
        _check_torchrun(path, line, words[1:], site, shape, env, report, ranks_per_node)
        return
    if name in WRAPPERS:
        # a launcher that starts another command (ddlrun, mpirun, singularity exec, ...):
        # judge the launcher's own options, then the command it starts
        inner, findings = WRAPPERS[name](path, line, [expand(w, env) for w in words[1:]], site)
        report.findings.extend(findings)
        if inner:
            check_command(path, line, inner, site, shape, env, report, ranks_per_node)
        return
    if name.startswith("python"):
        args = [expand(w, env) for w in words[1:]]
        if args[:2] == ["-m", "torch.distributed.run"]:
            _check_torchrun(path, line, args[2:], site, shape, env, report, ranks_per_node)
            return
        if args and args[0].endswith(".py"):
            check_python_invocation(path, line, args[0], args[1:], report)


def _check_torchrun(
    path: Path,
    line: int,
    words: list[str],
    site: Site,
    shape: slurm.Shape,
    env: dict[str, str],
    report: Report,
    ranks_per_node: int | None,
) -> None:
    args = [expand(w, env) for w in words]
    try:
        ns, script_argv = torchrun.parse(args)
    except torchrun.TorchrunError as exc:
        report.findings.append(Finding(path, line, "torchrun-option", f"torchrun: error: {exc}"))
        return
    gpus = shape.gpus_per_node
    nproc = torchrun.nproc_per_node(ns, gpus)
    if ranks_per_node and ranks_per_node > 1:
        report.findings.append(
            Finding(
                path,
                line,
                "torchrun-per-node",
                f"srun starts {ranks_per_node} torchrun agents per "
                "node; start one per node (--ntasks-per-node=1) and let torchrun start the workers",
            )
        )
    if shape.node.gpus and nproc is not None:
        if nproc > gpus:
            report.findings.append(
                Finding(
                    path,
                    line,
                    "nproc-per-gpu",
                    f"torchrun --nproc_per_node={nproc} starts more workers than the {gpus} "
                    f"GPU(s) the job holds per node on {shape.partition.name} "
                    f"({shape.node.gpus} x {shape.node.gpu_model} per node)",
                )
            )
        elif nproc < gpus:
            report.findings.append(
                Finding(
                    path,
                    line,
                    "nproc-per-gpu",
                    f"torchrun --nproc_per_node={nproc} leaves "
                    f"{gpus - nproc} of the job's {gpus} GPU(s) per node idle",
                    level="warning",
                )
            )
    if script_argv and script_argv[0].endswith(".py") and not ns.module:
        check_python_invocation(path, line, script_argv[0], script_argv[1:], report)


def _token_line(text: str, line: int, message: str) -> int:
    """The line, within a command continued with backslashes, that holds the offending word."""
    m = (
        re.search(r"unrecognized arguments: (\S+)", message)
        or re.search(r"invalid choice: '([^']+)'", message)
        or re.search(r"argument (--?[\w-]+)", message)
    )
    lines = text.splitlines()
    if not m or not 0 < line <= len(lines):
        return line
    token = m[1]
    i = line - 1
    while i < len(lines):
        if token in lines[i]:
            return i + 1
        if not lines[i].rstrip().endswith("\\"):
            break
        i += 1
    return line


def resolve_script(script: str, base: Path) -> Path | None:
    """Find a project example named on a command line (relative to the job script, or by name)."""
    for cand in (base.parent / script, ROOT / script):
        if cand.is_file():
            return cand.resolve()
    name = Path(script).name
    hits = sorted((ROOT / "examples").rglob(name))
    if len(hits) == 1:
        return hits[0]
    if hits:  # several examples share the name: the one whose framework the job script names
        from clusterkit.lint.contracts_tool import own_script

        text = base.read_text(errors="replace") if base.is_file() else ""
        return own_script(script, ROOT, f"{base}\n{text}")
    return None


def check_python_invocation(
    path: Path, line: int, script: str, args: list[str], report: Report
) -> None:
    """Flags given to a Python script must exist in its argument parser."""
    if os.environ.get("CLUSTERKIT_NO_CONTRACTS"):
        return
    target = resolve_script(script, Path(path))
    contract = contracts.find_third_party(script, report.text)
    if contract is None and target is not None:
        # a script we can read (the project's examples, or a copy next to the job script)
        try:
            contract = contracts.own_contract(target)
        except contracts.ContractError as exc:
            report.findings.append(Finding(path, line, "script-contract", str(exc)))
            return
    if contract is None:
        report.findings.append(
            Finding(
                path,
                line,
                "script-contract",
                f"no command-line contract for {script}: "
                "add one under contracts/ (see docs/contributing.md)",
                level="warning",
            )
        )
        return
    for f in contracts.check_invocation(path, line, contract, args):
        report.findings.append(
            Finding(f.path, _token_line(report.text, line, f.message), f.rule, f.message, f.level)
        )
    report.plan.setdefault("scripts_checked", []).append(
        {"line": line, "script": script, "contract": contract.source or contract.name}
    )


def check_command_line(path: Path | str, line: int, words: list[str], site: Site) -> Report:
    """A launch line shown on its own (a page snippet) judged on the site's default partition."""
    report = Report(Path(path), site.name)
    part = site.default_partition or next(iter(site.partitions.values()))
    shape = slurm.Shape(part, 1, 1, 1, 1, part.node_type.gpus, None, False)
    cmd = Command(line, tuple(words))
    script = JobScript(Path(path), " ".join(words), None, [], line, [cmd])
    report.plan = {"nodes": plan_nodes(part.name, 1), "steps": []}
    walk_body(script, site, shape, {}, report)
    return report


# IBM DDL and Bede's MPI wrappers register their WRAPPERS entries when imported.
from clusterkit.emulate import ddl as _ddl  # noqa: E402, F401
