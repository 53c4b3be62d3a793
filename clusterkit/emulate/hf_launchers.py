"""Judge ``accelerate launch`` (also ``python -m accelerate.commands.launch``) and ``deepspeed``:
their options by the launchers' own tables, the processes they start on each node against the
GPUs the job holds there, and the machines they expect against the nodes that start them. The
training script and its options go on to the judge of ``python``, as torchrun's do.

An ``accelerate launch`` under ``srun`` is one launcher per node that starts that node's share of
``--num_processes``: the rules are those of torchrun (one per node, no more processes than GPUs),
plus accelerate's own: a run over several machines needs the first node's address, and with the
static rendezvous (accelerate's default) each node its own ``--machine_rank``, which an ``srun``
line cannot give (its ``$SLURM_NODEID`` is expanded once, by the batch shell), so such a run
uses ``--rdzv_backend c10d``, with which the nodes agree on their ranks themselves.
"""

from __future__ import annotations

from pathlib import Path

from clusterkit.emulate import accelerate_launch as acc
from clusterkit.emulate import deepspeed_launch as ds
from clusterkit.emulate.body import Context, Placement
from clusterkit.emulate.registry import register_command
from clusterkit.sites.root import ROOT


def _where(ctx: Context, placement: Placement | None) -> tuple[int, int | None, object]:
    """(GPUs each node of the launcher holds, nodes that start it (None: not known), partition)."""
    if placement is None:
        return ctx.gpus_per_node, 1, ctx.partition
    gpus = placement.gpus or placement.gpus_asked or 0
    return gpus, placement.nodes, placement.partition or ctx.partition


def _one_per_node(ctx: Context, line: int, tool: str, placement: Placement | None) -> None:
    if placement and placement.ranks_per_node > 1:
        ctx.add(
            line,
            f"{tool}-per-node",
            f"{placement.launcher} starts {placement.ranks_per_node} {tool} launchers per node; "
            f"start one per node (--ntasks-per-node=1) and let {tool} start the processes",
        )


def _per_gpu(ctx: Context, line: int, tool: str, per_node: int | None, how: str, where) -> None:
    """No more processes on a node than the GPUs the job holds there; none left idle."""
    gpus, _nodes, part = where
    node = part.node_type
    if not node.gpus or not gpus or per_node is None:
        return  # (a job that holds none of the node's GPUs: the program's judge says so)
    if per_node > gpus:
        ctx.add(
            line,
            f"{tool}-gpus",
            f"{tool} starts {per_node} processes per node ({how}), more than the {gpus} GPU(s) "
            f"the job holds per node on {part.name} ({node.gpus} x {node.gpu_model} per node)",
        )
    elif 0 < per_node < gpus:
        ctx.add(
            line,
            f"{tool}-gpus",
            f"{tool} starts {per_node} processes per node ({how}), leaving {gpus - per_node} of "
            f"the job's {gpus} GPU(s) per node idle",
            level="warning",
        )


def _machines(ctx: Context, line: int, tool: str, asked: int | None, what: str, where) -> None:
    """The launcher runs on as many nodes as it expects machines."""
    _gpus, nodes, _part = where
    if asked is None or nodes is None or asked == nodes:
        return
    started = "the batch script's node only" if nodes == 1 and asked > 1 else f"{nodes} node(s)"
    fix = (
        f"start it on every node: srun --ntasks-per-node=1 {tool} ..."
        if asked > nodes
        else "each node would train on its own"
    )
    ctx.add(line, f"{tool}-machines", f"{what} {asked}, but {tool} runs on {started}: {fix}")


def _follow(ctx: Context, line: int, script: list[str], module: bool, placement) -> None:
    """The training script, judged as ``python script.py args`` where the launcher runs it."""
    if script and script[0].endswith(".py") and not module:
        ctx.judge(line, ["python", *script], placement)


def _resolve(name: str, base: Path) -> Path | None:
    """A file a launch line names: beside the job script, in this checkout, or by its name
    under examples/ when only one file there has it."""
    for cand in (base.parent / name, ROOT / name):
        if cand.is_file():
            return cand
    hits = sorted((ROOT / "examples").rglob(Path(name).name)) if "$" not in name else []
    return hits[0] if len(hits) == 1 else None


# --------------------------------------------------------------------------- accelerate
@register_command("accelerate")
def judge_accelerate(ctx: Context, line: int, words: list[str], placement) -> None:
    args = ctx.expanded(words[1:])
    if args and args[0] == "launch":
        check_accelerate(ctx, line, args[1:], placement)
    elif args and not args[0].startswith("-") and args[0] not in acc.SUBCOMMANDS:
        shown = ", ".join(repr(c) for c in acc.SUBCOMMANDS)
        ctx.add(line, "accelerate-option", f"accelerate: invalid choice: {args[0]!r} ({shown})")


def check_accelerate(ctx: Context, line: int, args: list[str], placement) -> None:
    try:
        ns, script = acc.parse(args)
        config = _accelerate_config(ctx, line, ns.config_file)
    except acc.LaunchError as exc:
        ctx.add(line, "accelerate-option", f"accelerate launch: error: {exc}")
        return
    launch = acc.settings(ns, config)
    where = _where(ctx, placement)
    _one_per_node(ctx, line, "accelerate", placement)
    _machines(ctx, line, "accelerate", launch.machines, "--num_machines", where)
    gpus = where[0]
    per_node = launch.per_machine if launch.processes is not None else None
    how = f"--num_processes {launch.processes} over {launch.machines} machine(s)"
    _per_gpu(ctx, line, "accelerate", per_node, how, where)
    if launch.processes and launch.processes > 1 and not launch.distributed and gpus == 1:
        ctx.add(
            line,
            "accelerate-distributed",
            f"--num_processes {launch.processes} without --multi_gpu (or a config file's "
            "distributed_type) on nodes of one GPU: accelerate runs the script in one process "
            "per launcher, not as one group",
        )
    if (launch.machines or 1) > 1:
        _several_machines(ctx, line, launch, placement)
    _follow(ctx, line, script, bool(ns.module), placement)


def _accelerate_config(ctx: Context, line: int, name: str | None) -> dict | None:
    if not name:
        return None
    path = _resolve(name, ctx.path)
    if path is None:
        ctx.add(
            line,
            "accelerate-config",
            f"--config_file {name} is not here, so the settings it gives are not judged",
            level="warning",
        )
        return None
    return acc.read_config(path)


def _several_machines(ctx: Context, line: int, launch: acc.Launch, placement) -> None:
    if launch.main_process_ip is None:
        ctx.add(
            line,
            "accelerate-main-process",
            f"--num_machines {launch.machines} without --main_process_ip: give the first "
            "node's address, where the machines meet",
        )
    if launch.rdzv_backend == "static" and placement is not None:
        ctx.add(
            line,
            "accelerate-machine-rank",
            "the static rendezvous (accelerate's default) needs each node's own --machine_rank, "
            f"and {placement.launcher} hands every node the same line (a $SLURM_NODEID there is "
            "the batch shell's, 0): add --rdzv_backend c10d, with which the nodes agree on "
            "their ranks themselves",
        )
    elif launch.machine_rank is None and not launch.from_config:
        ctx.add(
            line,
            "accelerate-machine-rank",
            f"--num_machines {launch.machines} with neither --machine_rank nor --config_file: "
            "accelerate launch stops at start-up (int(None)), unless `accelerate config` left "
            "a default configuration in the home directory of whoever runs the job",
        )


# --------------------------------------------------------------------------- deepspeed
@register_command("deepspeed")
def judge_deepspeed(ctx: Context, line: int, words: list[str], placement) -> None:
    check_deepspeed(ctx, line, ctx.expanded(words[1:]), placement)


def check_deepspeed(ctx: Context, line: int, args: list[str], placement) -> None:
    try:
        ns, script = ds.parse(args)
        hosts = _hostfile(ns.hostfile, ctx)
    except ds.LaunchError as exc:
        ctx.add(line, "deepspeed-option", f"deepspeed: error: {exc}")
        return
    launch = ds.settings(ns, hosts)
    where = _where(ctx, placement)
    _one_per_node(ctx, line, "deepspeed", placement)
    if placement is not None or ns.no_ssh:
        # each node runs its own launcher; without --no_ssh, one reaches the others itself
        _machines(ctx, line, "deepspeed", launch.nodes, "--num_nodes", where)
    how = "--include" if ns.include else f"--num_gpus {ns.num_gpus}" if ns.num_gpus else "hostfile"
    _per_gpu(ctx, line, "deepspeed", launch.per_node, how, where)
    _follow(ctx, line, script, bool(ns.module), placement)


def _hostfile(name: str | None, ctx: Context) -> dict[str, int] | None:
    if name is None:
        return None
    path = _resolve(name, ctx.path)
    return ds.read_hostfile(path) if path is not None else None
