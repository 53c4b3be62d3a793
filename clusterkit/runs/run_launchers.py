"""The shims of the launchers a job script starts: IBM DDL's ``ddlrun`` and Bede's
``bede-ddlrun`` and ``bede-mpirun``, ``torchrun``, ``accelerate``, ``singularity``/``apptainer``
and NERSC's ``shifter``.

Each judges its own command line as the dry run does, then runs the program here, scaled down to
``CLUSTERKIT_MAX_RANKS`` processes, with the environment the real launcher gives each rank
(Open MPI's ``OMPI_COMM_WORLD_*``); ``torchrun`` and ``accelerate launch`` run the real ones
with fewer processes, on the CPU; a container command runs directly, with a note that no
container runtime exists here.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from clusterkit.emulate import accelerate_launch, ddl, launch_env, shifter, torchrun
from clusterkit.emulate.container_options import ContainerOptionError, parse
from clusterkit.emulate.containers import FOLLOWED
from clusterkit.emulate.containers import check as check_container
from clusterkit.emulate.launcher_options import (
    parse_bede_mpirun,
    parse_ddlrun,
    ranks_per_node,
    threads_per_rank,
)
from clusterkit.runs.runtime import (
    ALLOC_VAR,
    LSF_VAR,
    current_site,
    max_ranks,
    note,
    run_ranks,
    scaled,
)


# --------------------------------------------------------------------------- MPI launchers
def _allocation(tool: str):
    """(site, node type, run nodes, nodes asked for, GPUs per node) of the job running here."""
    site = current_site(tool)
    lsf = json.loads(os.environ.get(LSF_VAR) or "null")
    if lsf:
        node = site.partitions[lsf["queue"]].node_type
        return site, node, lsf["run_nodes"], lsf["plan_nodes"], node.gpus
    alloc = json.loads(os.environ.get(ALLOC_VAR) or "null")
    if alloc:
        plan = alloc["plan"]
        node = site.partitions[plan["partition"]].node_type
        return site, node, alloc["run_nodes"], plan["nodes"], plan["gpus_per_node"]
    return site, None, [], 0, 0


def _start(
    tool: str,
    command: list[str],
    requested_per_node: int,
    nodes_asked: int,
    run_nodes: list[str],
    threads: int | None,
    exports: dict[str, str],
) -> int:
    n_nodes, per_node = scaled(min(nodes_asked, len(run_nodes)) or 1, max(requested_per_node, 1))
    nodes = run_nodes[:n_nodes] or ["localhost"]
    total = min(len(nodes) * per_node, max_ranks())
    note(
        tool,
        f"{requested_per_node * nodes_asked} rank(s) requested, {total} started here: "
        f"{' '.join(command)}",
    )
    envs = []
    for rank, (_node, idx, local) in enumerate(launch_env.layout(nodes, total, per_node)):
        env = dict(os.environ)
        env.update(
            {
                "OMPI_COMM_WORLD_RANK": str(rank),
                "OMPI_COMM_WORLD_SIZE": str(total),
                "OMPI_COMM_WORLD_LOCAL_RANK": str(local),
                "OMPI_COMM_WORLD_LOCAL_SIZE": str(min(per_node, total - idx * per_node)),
                "OMPI_COMM_WORLD_NODE_RANK": str(idx),
                "OMPI_UNIVERSE_SIZE": str(total),
                "PMIX_RANK": str(rank),
            }
        )
        if threads:
            env["OMP_NUM_THREADS"] = str(threads)
        env.update(exports)
        envs.append(env)
    return run_ranks(command, envs, [""] * len(envs))


def ddl_shim(tool: str):
    def run(argv: list[str]) -> int:
        site, node, run_nodes, asked, gpus = _allocation(tool)
        if site.launcher(tool) is None:
            print(f"bash: {tool}: command not found", file=sys.stderr)
            return 127
        notice = ddl.notice(tool, site)
        if notice:
            note(tool, notice)
        parsed, problems = parse_ddlrun(tool, argv)
        for p in problems:
            print(p, file=sys.stderr)
        if problems or not parsed.command:
            if not problems:
                print(f"{tool}: no program to run", file=sys.stderr)
            return 1
        if node is None:
            print(f"{tool}: error: no allocation: run it inside a batch job", file=sys.stderr)
            return 1
        accel = parsed.values.get("accelerators")
        per_node = int(accel) if accel and accel.isdigit() else (gpus or 1)
        return _start(tool, parsed.command, per_node, asked, run_nodes, None, {})

    return run


def bede_mpirun(argv: list[str]) -> int:
    site, node, run_nodes, asked, gpus = _allocation("bede-mpirun")
    if site.launcher("bede-mpirun") is None:
        print("bash: bede-mpirun: command not found", file=sys.stderr)
        return 127
    parsed, problems = parse_bede_mpirun(argv)
    for rule, level, msg in problems:
        print(f"{msg} [{rule}]" if level == "error" else f"warning: {msg}", file=sys.stderr)
    if parsed is None or any(level == "error" for _r, level, _m in problems):
        return 1
    if node is None:
        print("bede-mpirun: error: no Slurm allocation: run it inside a job", file=sys.stderr)
        return 1
    cores = node.usable_cores
    per_node = ranks_per_node(parsed.ranks, node, gpus, cores)
    if per_node < 1:
        print(
            f"bede-mpirun: --bede-par {parsed.ranks}: the job holds no GPUs on "
            f"{node.name} nodes [bede-par]",
            file=sys.stderr,
        )
        return 1
    if parsed.np is not None:
        per_node = max(1, -(-parsed.np // max(asked, 1)))
    threads = threads_per_rank(parsed.threads, node, cores, per_node)
    return _start(
        "bede-mpirun", parsed.command, per_node, asked, run_nodes, threads, parsed.exports
    )


# --------------------------------------------------------------------------- torchrun
def torchrun_shim(argv: list[str]) -> int:
    """Check the launch line, scale the workers down, then run the real torchrun."""
    try:
        ns, _script = torchrun.parse(argv)
    except torchrun.TorchrunError as exc:
        print(f"torchrun: error: {exc}", file=sys.stderr)
        return 2
    alloc = json.loads(os.environ.get(ALLOC_VAR, "null") or "null")
    gpus = alloc["plan"]["gpus_per_node"] if alloc else 0
    nproc = torchrun.nproc_per_node(ns, gpus) or 1
    if alloc and gpus and nproc > gpus:
        print(
            f"torchrun: --nproc_per_node={nproc} starts more workers than the {gpus} GPU(s) "
            f"per node the job holds [rule nproc-per-gpu]",
            file=sys.stderr,
        )
        return 1
    nnodes = (
        int(str(ns.nnodes or "1").split(":")[-1])
        if str(ns.nnodes or "1").replace(":", "").isdigit()
        else 1
    )
    run = max(1, min(nproc, max_ranks() // max(1, min(nnodes, max_ranks()))))
    new_argv, skip = [], False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a in {"--nproc-per-node", "--nproc_per_node"} and i + 1 < len(argv):
            new_argv += [a, str(run)]
            skip = True
        elif re.match(r"--nproc[-_]per[-_]node=", a):
            new_argv.append(f"{a.split('=')[0]}={run}")
        else:
            new_argv.append(a)
    if ns.nproc_per_node is None:
        new_argv = [f"--nproc-per-node={run}", *new_argv]
    note("torchrun", f"{nproc} worker(s) per node requested, {run} started here (CPU, gloo)")
    env = dict(os.environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    sys.stderr.flush()
    # exec, so that signals sent to "torchrun" (the job script's trap) reach the real agent
    os.execve(sys.executable, [sys.executable, "-m", "torch.distributed.run", *new_argv], env)
    return 0  # not reached


# --------------------------------------------------------------------------- accelerate
def accelerate_shim(argv: list[str]) -> int:
    """``accelerate launch``: the line judged as the dry run judges it (no more processes per
    node than the job's GPUs there), then the real ``accelerate launch`` with the processes
    scaled down and run on the CPU (``ACCELERATE_USE_CPU``, what its ``--cpu`` sets; without
    it, processes on a machine with no GPU form no group). Every node a step runs here is this
    machine: each node's launcher gets ``--machine_rank $SLURM_NODEID``, so that only the first
    checks that the meeting port is free (with the c10d rendezvous the nodes still agree on
    their ranks themselves). Any other sub-command is accelerate's own."""
    real = [sys.executable, "-m", "accelerate.commands.accelerate_cli"]
    if argv[:1] != ["launch"]:
        os.execv(sys.executable, [*real, *argv])
    try:
        ns, script = accelerate_launch.parse(argv[1:])
        config = accelerate_launch.read_config(Path(ns.config_file)) if ns.config_file else None
    except accelerate_launch.LaunchError as exc:
        print(f"accelerate launch: error: {exc}", file=sys.stderr)
        return 2
    launch = accelerate_launch.settings(ns, config)
    alloc = json.loads(os.environ.get(ALLOC_VAR, "null") or "null")
    gpus = alloc["plan"]["gpus_per_node"] if alloc else 0
    per_node = launch.per_machine or gpus or 1
    if gpus and per_node > gpus:
        print(
            f"accelerate launch: {per_node} processes per node, more than the {gpus} GPU(s) "
            "per node the job holds [rule accelerate-gpus]",
            file=sys.stderr,
        )
        return 1
    machines = int(os.environ.get("SLURM_STEP_NUM_NODES", "1")) if launch.machines != 1 else 1
    run = max(1, min(per_node, max_ranks() // max(1, machines)))
    shape = {"num_processes": str(run * machines), "num_machines": str(machines)}
    if machines > 1:
        shape["machine_rank"] = os.environ.get("SLURM_NODEID", "0")
    note(
        "accelerate",
        f"{per_node} process(es) per node on {launch.machines} machine(s) requested, {run} per "
        f"node on {machines} started here (CPU, gloo)",
    )
    env = dict(os.environ, ACCELERATE_USE_CPU="true")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    sys.stderr.flush()
    os.execve(sys.executable, [*real, "launch", *_with_values(argv[1:], script, shape)], env)
    return 0  # not reached


def _with_values(argv: list[str], script: list[str], values: dict[str, str]) -> list[str]:
    """The launcher's words of ``argv`` (all before ``script``, the training script and its
    arguments, which end it) with these options' values replaced (``--num_processes 8``,
    ``--num-processes=8``) or put in front, then ``script``."""
    spellings = {o: name for name in values for o in accelerate_launch.option_strings(name)}
    own = argv[: len(argv) - len(script)]
    out, given, skip = [], set(), False
    for word in own:
        name = spellings.get(word.split("=", 1)[0])
        if skip:
            skip = False
        elif name is None:
            out.append(word)
        else:
            given.add(name)
            out += [word.split("=", 1)[0], values[name]]
            skip = "=" not in word
    front = [w for n, v in values.items() if n not in given for w in (f"--{n}", v)]
    return [*front, *out, *script]


# --------------------------------------------------------------------------- containers
def _past_bound_entry(tool: str, command: list[str]) -> list[str]:
    """The command without a leading entry script that a module of the site binds into every
    container (APPTAINER_BINDPATH: BriCS's ``brics/apptainer-multi-node`` binds the host's MPI
    and NCCL under ``/host``, whose ``/host/adapt.sh`` sets their paths and runs the command
    given to it). Without such a bind, the script is missing, as in the container."""
    entry = command[0]
    if len(command) < 2 or not entry.startswith("/") or os.path.exists(entry):
        return command
    binds = os.environ.get("APPTAINER_BINDPATH") or os.environ.get("SINGULARITY_BINDPATH")
    if not binds:
        return command
    note(tool, f"{entry} is one of the host's files bound into the container: its command runs")
    return command[1:]


def shim(tool: str):
    def run(argv: list[str]) -> int:
        command, findings = check_container("<command line>", 0, tool, argv)
        for f in findings:
            print(f, file=sys.stderr)
        if any(f.level == "error" for f in findings):
            return 1 if any(f.rule == "container-option" for f in findings) else 255
        try:
            parsed = parse(tool, list(argv))
        except ContainerOptionError:  # pragma: no cover - check() has reported it
            return 1
        sub = parsed.sub
        if sub in FOLLOWED and command:
            opts = ", ".join(f"--{k}" for k in parsed.flags) or "no options"
            note(
                tool,
                f"no container runtime here: running {command[0]} directly "
                f"(image {parsed.args[0]}, {opts})",
            )
            command = _past_bound_entry(tool, command)
            try:
                return subprocess.call(command)
            except OSError as exc:
                print(f"{tool}: {command[0]}: {exc.strerror}", file=sys.stderr)
                return 127
        if sub == "shell":
            binds = ", ".join(parsed.flags.get("bind", [])) or "none"
            note(
                tool,
                f"no container runtime here: would start an interactive shell in "
                f"{parsed.args[0]} (GPUs: {'NVIDIA' if parsed.has('nv') else 'none'}, "
                f"binds: {binds}, writable: {'yes' if parsed.has('writable') else 'no'})",
            )
            return 0
        if sub == "build":
            target, source = parsed.args
            kind = "sandbox directory" if parsed.has("sandbox") else "SIF image"
            how = " with --fakeroot" if parsed.has("fakeroot") else ""
            note(tool, f"no container runtime here: would build {kind} {target} from {source}{how}")
            return 0
        if sub == "version":
            print(f"{tool} version 0.0.0-clusterkit-emulator")
            return 0
        note(tool, f"no container runtime here: {sub} not performed")
        return 0

    return run


def shifter_shim(argv: list[str]) -> int:
    """``shifter [OPTIONS] COMMAND``: its options judged as Shifter's getopt reads them, then the
    command run here directly, with the variables its ``--env``/``-e`` options set; no image is
    pulled or mounted and no volume bound (a note says so)."""
    command, findings = shifter.check("<command line>", 0, argv)
    for f in findings:
        print(f, file=sys.stderr)
    if any(f.level == "error" for f in findings):
        return 1
    opts, _ = shifter.parse(argv)
    named = (opts.get("image") or opts.get("i") or [""])[-1]
    image = f"image {named}" if named else "the image of the job's --image"
    volumes = opts.get("volume", []) + opts.get("V", [])
    bound = f", volumes not bound here: {'; '.join(volumes)}" if volumes else ""
    note(
        "shifter",
        f"no container runtime here: running {command[0]} directly, not in {image}{bound}",
    )
    env = dict(os.environ)
    for item in opts.get("env", []) + opts.get("e", []):
        name, _, value = item.partition("=")
        env[name] = value
    try:
        return subprocess.call(command, env=env)
    except OSError as exc:
        print(f"shifter: {command[0]}: {exc.strerror}", file=sys.stderr)
        return 127


HANDLERS = {
    "ddlrun": ddl_shim("ddlrun"),
    "bede-ddlrun": ddl_shim("bede-ddlrun"),
    "bede-mpirun": bede_mpirun,
    "torchrun": torchrun_shim,
    "accelerate": accelerate_shim,
    "singularity": shim("singularity"),
    "apptainer": shim("apptainer"),
    "shifter": shifter_shim,
}
