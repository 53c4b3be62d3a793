"""Judge ``ibrun``, TACC's MPI launcher, against the job it runs in.

ibrun starts its tasks on the entries of the hostfile Slurm writes for the job, one entry per
task of the job: ``-n N`` tasks from entry ``-o OFFSET`` on (``-np`` is the same as ``-n``), and
``-N`` the number of nodes. A launch that needs more entries than the job has tasks, or more
nodes than it has, cannot start (TACC-Docs at 1d94ecf, docs/hpc/3stampede/launching.md, line
80: the hostfile holds one entry per task of the job, and -n with -o picks entries from it).
"""

from __future__ import annotations

from clusterkit.emulate.body import Context, Placement
from clusterkit.emulate.registry import register_command

# ibrun's options that take a value; anything else before the program is a flag
_VALUED = {"-n", "-np", "-o", "-N", "-p"}


def ibrun_request(words: list[str]) -> tuple[dict[str, str], list[str]]:
    """(options, program words) of ``ibrun OPTIONS PROGRAM ARGS`` (words after ``ibrun``)."""
    opts: dict[str, str] = {}
    i = 0
    while i < len(words) and words[i].startswith("-"):
        word = words[i]
        if word in _VALUED and i + 1 < len(words):
            opts[word] = words[i + 1]
            i += 2
            continue
        i += 1
    return opts, words[i:]


def _count(text: str | None) -> int | None:
    return int(text) if text and text.isascii() and text.isdigit() else None


@register_command("ibrun", scheduler="slurm")
def judge_ibrun(ctx: Context, line: int, words: list[str], placement: Placement | None) -> None:
    opts, program = ibrun_request(ctx.expanded(words[1:]))
    shape = ctx.allocation[0]
    tasks = _count(opts.get("-n") or opts.get("-np"))
    offset = _count(opts.get("-o")) or 0
    nodes = _count(opts.get("-N"))
    if nodes and shape.nodes_known and nodes > shape.nodes:
        ctx.add(
            line,
            "step-nodes",
            f"ibrun -N {nodes} asks for {nodes} nodes; the job has {shape.nodes}",
        )
    elif tasks and shape.ntasks_given and tasks + offset > shape.ntasks:
        ctx.add(
            line,
            "step-tasks",
            f"ibrun -n {tasks}{f' -o {offset}' if offset else ''} needs hostfile entries "
            f"{offset + 1}-{offset + tasks}; the job's hostfile has {shape.ntasks} (one per task)",
        )
    if program:
        gpus = placement.gpus if placement else ctx.gpus_per_node
        per_node = -(-(tasks or shape.ntasks) // max(nodes or shape.nodes, 1))
        ctx.judge(line, program, Placement("ibrun", per_node, gpus))
