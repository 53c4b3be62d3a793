"""Judge ``srun`` job steps inside an allocation, as srun (Slurm 22.05) judges them.

A step takes what it does not say from the allocation, through the environment sbatch sets:
the node count always, the task count and tasks per node only where the job gave them. srun
then warns where --ntasks and --ntasks-per-node disagree, refuses a step that asks for more
nodes or CPUs than the job holds (CPUs are counted as the job holds them: whole nodes when it
has them exclusively, else its tasks' CPUs rounded up to whole cores), and runs the parts of a
``srun A : B`` line on nodes of their own, or each in its component (``--het-group``) of a
heterogeneous job. Messages are srun's own.

A value that holds shell variables set outside the script (``-c $(($NCORES/$NRS))``) is not
evaluable here: it is reported as such and left out of the sums.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from clusterkit.emulate import launch_env, slurm_options
from clusterkit.emulate.body import Context, Placement
from clusterkit.emulate.launch_env import NodeSet
from clusterkit.emulate.registry import register_command
from clusterkit.emulate.report import add_step
from clusterkit.emulate.script import expand_fields, not_evaluable
from clusterkit.emulate.slurm import Shape
from clusterkit.emulate.slurm_options import (
    SlurmValueError,
    count_with_type,
    gres_gpus,
    node_range,
    option_message,
    positive_int,
)
from clusterkit.emulate.slurm_request import plugin_findings, site_plugins
from clusterkit.sites.errors import Finding

JOB_ID = 1000  # the job of a dry run
E_STEP = f"Unable to create step for job {JOB_ID}: More processors requested than permitted"


@dataclass
class Step:
    line: int
    nodes: int
    ntasks: int
    tasks_per_node: int
    cpus_per_task: int
    command: list[str]
    het_group: int = 0
    first_node: int = 0  # index in the allocation of the step's first node
    gpus_asked: int | None = None  # per node, by the step's own GPU options (None: none given)


def step_request(
    words: list[str],
    env: dict[str, str],
    expanded: bool = False,
    plugins: bool | slurm_options.Plugins = False,
    release: str | None = None,
) -> tuple[dict[str, list], list[str]]:
    """srun's options and command, after the shell's expansion (what can be known of it in a
    dry run; ``expanded``: the shell has done it, as for the srun shim of a run; ``plugins``:
    options of unknown site plugins are set aside, see :func:`slurm_options.parse`;
    ``release``: only that Slurm release's options)."""
    words = words if expanded else expand_fields(words, env)
    parsed = slurm_options.parse("srun", words, plugins, release)
    return parsed, parsed.pop("command", [])


def split_parts(words: list[str]) -> list[list[str]]:
    """The parts of ``srun A : B``: each has options and a command of its own."""
    parts: list[list[str]] = [[]]
    for w in words:
        if w == ":":
            parts.append([])
        else:
            parts[-1].append(w)
    return parts


def het_groups(text: str) -> list[int]:
    """``--het-group=0``, ``0-1``, ``0,2``."""
    try:
        out: list[int] = []
        for item in text.split(","):
            lo, _, hi = item.partition("-")
            out += range(int(lo), int(hi or lo) + 1)
    except ValueError:
        raise SlurmValueError(f"Invalid --het-group value: {text}") from None
    if not out or min(out) < 0:
        raise SlurmValueError(f"Invalid --het-group value: {text}")
    return out


class _Judge:
    """Findings of one srun line, all at its line."""

    def __init__(self, path: Path | str, line: int):
        self.path, self.line = path, line
        self.findings: list[Finding] = []

    def bad(self, rule: str, msg: str, level: str = "error") -> None:
        self.findings.append(Finding(self.path, self.line, rule, msg, level))

    def value(self, opts: dict[str, list], dest: str, what: str) -> int | None:
        """A positive integer option; None when absent or not evaluable here."""
        v = opts.get(dest)
        return None if v is None else self.number(str(v[-1]), what, nodes=dest == "nodes")

    def number(self, text: str, what: str, nodes: bool = False) -> int | None:
        why = not_evaluable(text)
        if why:
            self.bad(
                "value-not-evaluable",
                f"srun {what}={text}: not evaluable here ({why}); not judged",
                level="warning",
            )
            return None
        if not nodes:
            return positive_int(text, what)
        lo = node_range(text)[0]
        if lo == 0:
            raise SlurmValueError(f"Invalid node count specification {text!r}")
        return lo


def check_steps(
    path: Path | str,
    line: int,
    words: list[str],
    shapes: Shape | list[Shape],
    env: dict[str, str],
    expanded: bool = False,
    generic: bool = False,
    release: str = "22.05",
    plugins: slurm_options.Plugins | None = None,
    options_release: str | None = None,
) -> tuple[list[Finding], list[Step]]:
    """Judge one ``srun`` line (the words after ``srun``) inside the allocation whose
    components are ``shapes``; the steps it starts (one per part and het group).
    ``expanded``: the words come from a shell that has expanded them already. ``generic``: a
    site of which only Slurm is known (``--site generic``): its plugins' options are set aside
    with a warning. ``release``: the site's Slurm; from 23.11 on srun takes --cpus-per-task
    from the job's SLURM_CPUS_PER_TASK (22.05 and 23.02 read only SRUN_CPUS_PER_TASK).
    ``plugins``: the site's SPANK plugins (:func:`slurm_request.site_plugins`), whose
    options srun takes. ``options_release``: srun's options are those of that release (None:
    of any release)."""
    plugins = plugins or slurm_options.Plugins(generic=generic)
    shapes = shapes if isinstance(shapes, list) else [shapes]
    judge = _Judge(path, line)
    parts = split_parts(words)
    steps: list[Step] = []
    for index, part in enumerate(parts):
        try:
            opts, command = step_request(part, env, expanded, plugins, options_release)
        except slurm_options.OptionError as exc:
            judge.bad("srun-option", f"srun: {option_message(exc)}")
            return judge.findings, []
        judge.findings += plugin_findings(None, path, line, "srun", opts)
        opts.pop(slurm_options.PLUGIN, None)
        opts.pop(slurm_options.PLUGIN_KNOWN, None)
        groups = _groups(judge, opts, index, len(parts), len(shapes))
        if groups is None:
            return judge.findings, []
        for group in groups:
            step = _one_step(judge, opts, command, shapes[group], env, inherits(release))
            if step is None:
                return judge.findings, []
            step.het_group = group
            steps.append(step)
    if len(shapes) == 1 and len(steps) > 1:
        _place_parts(judge, steps, shapes[0])
    return judge.findings, steps


def check_step(
    path: Path | str, line: int, words: list[str], shape: Shape | list[Shape], env: dict[str, str]
) -> tuple[list[Finding], Step | None]:
    """``check_steps`` for a caller that runs one step: the first."""
    findings, steps = check_steps(path, line, words, shape, env)
    return findings, (steps[0] if steps else None)


def _groups(
    judge: _Judge, opts: dict[str, list], index: int, parts: int, components: int
) -> list[int] | None:
    """The het groups a part runs in: its --het-group, else its place in a het job's line."""
    given = opts.get("het_group")
    if components == 1 and parts > 1:
        return [0]  # the parts of a step in one allocation: each on nodes of its own
    try:
        groups = het_groups(str(given[-1])) if given else [index if parts > 1 else 0]
    except SlurmValueError as exc:
        judge.bad("het-group", f"srun: error: {exc}")
        return None
    if max(groups) > components - 1:
        judge.bad(
            "het-group",
            f"srun: error: Requested het-group offset exceeds highest hetjob index "
            f"({max(groups)} > {components - 1})",
        )
        return None
    return groups


def _one_step(
    judge: _Judge,
    opts: dict[str, list],
    command: list[str],
    shape: Shape,
    env: dict[str, str],
    inherit_cpus: bool = False,
) -> Step | None:
    try:
        nodes = judge.value(opts, "nodes", "--nodes")
        ntasks = judge.value(opts, "ntasks", "--ntasks")
        tpn_given = judge.value(opts, "ntasks_per_node", "--ntasks-per-node")
        cpt = judge.value(opts, "cpus_per_task", "--cpus-per-task")
        if opts.get("hint"):
            slurm_options.check_hint(str(opts["hint"][-1]))
        # Slurm 22.05 and 23.02's srun do not inherit --cpus-per-task from sbatch unless
        # SRUN_CPUS_PER_TASK is set (the ARCHER2 scripts export it for that reason); 23.11
        # went back to SLURM_CPUS_PER_TASK, which sbatch sets (SchedMD/slurm NEWS, "Changes in
        # Slurm 23.11.0rc1": "Replace SRUN_CPUS_PER_TASK with SLURM_CPUS_PER_TASK and get back
        # the previous behavior before Slurm 22.05").
        inherited = "SLURM_CPUS_PER_TASK" if inherit_cpus else "SRUN_CPUS_PER_TASK"
        if cpt is None and "cpus_per_task" not in opts:
            cpt = judge.number(env.get(inherited) or "1", inherited)
    except SlurmValueError as exc:
        judge.bad("option-value", f"srun: error: {exc}")
        return None
    nodes, ntasks, tpn = _shape_of_step(judge, shape, nodes, ntasks, tpn_given)
    _check_fit(judge, shape, nodes, tpn, cpt or 1, str((opts.get("hint") or [""])[-1]))
    _check_gpus(judge, shape, tpn, command)
    if not command:
        judge.bad("step-command", "srun: fatal: No command given to execute.")
    step = Step(judge.line, nodes, ntasks, tpn, cpt or 1, command)
    step.gpus_asked = _gpus_asked(opts, nodes, tpn)
    return step


def inherits(release: str) -> bool:
    """Whether srun of Slurm ``release`` takes --cpus-per-task from SLURM_CPUS_PER_TASK."""
    return slurm_options.in_spans("23.11:", release)


def _gpus_asked(opts: dict[str, list], nodes: int, tpn: int) -> int | None:
    """GPUs per node the step asks for itself (--gres=gpu, --gpus-per-node, --gpus-per-task,
    --gpus), or None when it names none; values not evaluable here count as none."""
    readers = {
        "gres": lambda t: gres_gpus(t)[1],
        "gpus_per_node": lambda t: count_with_type(t, "--gpus-per-node")[1],
        "gpus_per_task": lambda t: count_with_type(t, "--gpus-per-task")[1] * tpn,
        "gpus": lambda t: math.ceil(count_with_type(t, "--gpus")[1] / max(nodes, 1)),
    }
    asked = None
    for dest, read in readers.items():
        for text in opts.get(dest) or []:
            try:
                asked = max(asked or 0, read(str(text)))
            except (SlurmValueError, ValueError):
                continue  # judged (or reported not evaluable) with the step's other options
    return asked


def _shape_of_step(
    judge: _Judge, shape: Shape, nodes: int | None, ntasks: int | None, tpn: int | None
) -> tuple[int, int, int]:
    """(nodes, tasks, tasks per node) as srun resolves them (libsrun/opt.c, 22.05)."""
    nodes_given = nodes is not None
    nodes = nodes or shape.nodes
    tpn = tpn or (shape.tasks_per_node if shape.tasks_per_node_given else None)
    if ntasks is None and not nodes_given and shape.ntasks_given:
        ntasks = shape.ntasks  # SLURM_NTASKS
    if ntasks is None:
        ntasks = nodes * (tpn or 1)
    if ntasks < nodes:
        judge.bad(
            "step-nodes",
            f"srun: Warning: can't run {ntasks} processes on {nodes} nodes, setting nnodes "
            f"to {ntasks}",
            level="warning",
        )
        nodes = ntasks
    if tpn and tpn != ntasks // nodes and ntasks > tpn:
        judge.bad(
            "step-ntasks-per-node",
            f"srun: Warning: can't honor --ntasks-per-node set to {tpn} which doesn't match "
            f"the requested tasks {ntasks} with the number of requested nodes {nodes}. "
            "Ignoring --ntasks-per-node.",
            level="warning",
        )
    return nodes, ntasks, math.ceil(ntasks / nodes)


def _check_fit(judge: _Judge, shape: Shape, nodes: int, tpn: int, cpt: int, hint: str) -> None:
    """Nodes and CPUs: at most what the allocation holds."""
    if not shape.nodes_known:
        return  # Slurm chose the node count from a node size not known here
    if nodes > shape.nodes:
        judge.bad(
            "step-nodes", f"srun: error: Only allocated {shape.nodes} nodes asked for {nodes}"
        )
        return
    if not shape.cpus_known:
        return  # the job's CPUs per node depend on a node size not known here
    node = shape.node
    # stepmgr.c (_pick_step_nodes): a step that asks for fewer threads per core than the
    # node's schedulable ones (srun --hint=nomultithread: 1) needs that many more CPUs
    per_cpu = node.slurm_threads_per_core if "nomultithread" in hint else 1
    need, have = tpn * cpt * per_cpu, shape.cpus_per_node
    if need > have:
        how = f" x {per_cpu} hardware threads (--hint=nomultithread)" if per_cpu > 1 else ""
        judge.bad(
            "step-cpus",
            f"srun: error: {E_STEP} ({tpn} tasks x {cpt} CPUs per task{how} per node = "
            f"{need}; the job holds {have} CPUs on each {shape.partition.name} node)",
        )


def _check_gpus(judge: _Judge, shape: Shape, tpn: int, command: list[str]) -> None:
    launches_python = bool(command) and Path(command[0]).name.startswith("python")
    if shape.gpus_per_node and shape.node.gpus and tpn > shape.gpus_per_node and launches_python:
        judge.bad(
            "ranks-per-gpu",
            f"srun: {tpn} ranks per node but the job holds {shape.gpus_per_node} GPU(s) per "
            "node: one rank per GPU is the rule for data-parallel training",
            level="warning",
        )


def _place_parts(judge: _Judge, steps: list[Step], shape: Shape) -> None:
    """The parts of one step line in a job of one component take nodes in turn."""
    used = 0
    for step in steps:
        if used + step.nodes > shape.nodes:
            judge.bad(
                "step-nodes",
                f"srun: error: Allocation failure of {step.nodes} nodes: job size of "
                f"{shape.nodes}, already allocated {used} nodes to previous components.",
            )
            return
        step.first_node = used
        used += step.nodes


# --------------------------------------------------------------------------- in a job script
@register_command("srun", scheduler="slurm")
def judge_srun(ctx: Context, line: int, words: list[str], placement: Placement | None) -> None:
    """An ``srun`` line of a batch script: its steps join the plan, and the program each starts
    is judged where it runs."""
    site = ctx.site
    findings, steps = check_steps(
        ctx.path,
        line,
        words[1:],
        ctx.allocation,
        ctx.env,
        generic=site.generic,
        release=site.slurm_release if site.scheduler == "slurm" else "22.05",
        plugins=site_plugins(site),
        options_release=site.slurm_options_release if site.scheduler == "slurm" else None,
    )
    ctx.extend(findings)
    for step in steps:
        shape = ctx.allocation[step.het_group]
        nodes = ctx.nodes[step.het_group].part(step.first_node, step.nodes)
        add_step(
            ctx.report, step_plan(ctx, step, nodes), _rank_writer(ctx.step_id, step, nodes, shape)
        )
        where = Placement(
            "srun",
            step.tasks_per_node,
            shape.gpus_per_node,
            shape.partition,
            step.gpus_asked,
            nodes=step.nodes,
        )
        ctx.judge(line, step.command, where)
    ctx.step_id += 1 if steps else 0


def step_plan(ctx: Context, step: Step, nodes: NodeSet) -> dict:
    plan = {
        "line": step.line,
        "launcher": "srun",
        "nodes": nodes.count,
        "nodelist": nodes.compressed,
        "ntasks": step.ntasks,
        "tasks_per_node": step.tasks_per_node,
        "cpus_per_task": step.cpus_per_task,
        "command": step.command,
    }
    if len(ctx.allocation) > 1:
        plan["het_group"] = step.het_group
    return plan


def _rank_writer(step_id: int, step: Step, nodes: NodeSet, shape: Shape):
    """The function that writes out a step's first ranks, each with what srun gives it."""

    def ranks(limit: int) -> list[dict]:
        out = []
        for rank in range(min(limit, step.ntasks)):
            env = launch_env.srun_rank_env(
                step_id=step_id,
                nodes=nodes,
                ntasks=step.ntasks,
                tasks_per_node=step.tasks_per_node,
                rank=rank,
                cpus_per_task=step.cpus_per_task,
                gpus_per_node=shape.gpus_per_node,
            )
            node, local = int(env["SLURM_NODEID"]), int(env["SLURM_LOCALID"])
            out.append({"rank": rank, "node": nodes.name(node), "local_rank": local, "env": env})
        return out

    return ranks
