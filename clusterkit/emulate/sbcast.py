"""Judge ``sbcast SOURCE DEST`` in a job script: Slurm's copy of one file to every node of the
job, run from the batch script (not from a step: each task would send the file again).

Its options are read as the real sbcast reads them (:mod:`clusterkit.grammars.sbcast_cli`): an
option it does not have, a value it would refuse or a count of file names other than two is an
error (rule ``sbcast-option``). DEST is where each node writes its copy: a relative one lands in
the directory slurm.conf's BcastParameters names, else the working directory, and one on a file
system every node shares has every node write the same file (rule ``sbcast-dest``, warnings).
Whether DEST needs a node feature the job did not ask for is the body's path check
(:mod:`clusterkit.emulate.storage`).
"""

from __future__ import annotations

from clusterkit.emulate.registry import register_command
from clusterkit.emulate.storage import place_of
from clusterkit.grammars import sbcast_cli

SHARED_KINDS = ("parallel", "network")


@register_command("sbcast", scheduler="slurm")
def judge_sbcast(ctx, line: int, words: list[str], placement) -> None:
    if placement is not None:
        ctx.add(
            line,
            "sbcast-in-step",
            f"sbcast under {placement.launcher}: every task would send the file to every node; "
            "run sbcast from the batch script itself",
            level="warning",
        )
    release = ctx.site.slurm_release  # the site's Slurm (22.05 where the profile names none)
    try:
        args = sbcast_cli.parse(ctx.expanded(words[1:]), release)
        if args.has("help") or args.has("usage") or args.has("version"):
            return
        sbcast_cli.check_files(args)
    except sbcast_cli.SbcastUsageError as exc:
        message = f"{exc} (sbcast of Slurm {release}; sbcast --help lists its options)"
        ctx.add(line, "sbcast-option", message)
        return
    for problem in sbcast_cli.value_problems(args, release):
        ctx.add(line, "sbcast-option", f"sbcast {problem}")
    dest = args.files[1]
    if not dest.startswith(("/", "$")):
        ctx.add(
            line,
            "sbcast-dest",
            f"sbcast DEST {dest} is relative: each node writes it in the directory of "
            "slurm.conf's BcastParameters, else the working directory; give node-local storage "
            "as a full path",
            level="warning",
        )
        return
    place = place_of(dest, ctx.site)
    if place is not None and place.kind in SHARED_KINDS:
        ctx.add(
            line,
            "sbcast-dest",
            f"sbcast DEST {dest} is on {place.path}, a {place.kind} file system every node "
            "sees: each node would write the same file; copy to node-local storage, or read "
            "the file where it is",
            level="warning",
        )
