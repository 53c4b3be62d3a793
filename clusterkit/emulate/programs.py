"""Judge the programs a job starts: ``torchrun`` (and ``python -m torch.distributed.run``)
against the GPUs it sees, and ``python script.py --flags`` against the script's own
command-line contract (its argument parser, or a third-party contract under ``contracts/``).

``python -m accelerate.commands.launch`` and ``python -m deepspeed.launcher.runner`` go to the
judges of ``accelerate launch`` and ``deepspeed`` (:mod:`clusterkit.emulate.hf_launchers`).

A program started straight from the batch script, not by a launcher, runs where the script
runs: under LSF that is the launch node, not a compute node, which is said.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from clusterkit.emulate import torchrun
from clusterkit.emulate.body import Context, Placement
from clusterkit.emulate.registry import register_command
from clusterkit.emulate.script import text_lines
from clusterkit.grammars import argparse_ast
from clusterkit.sites import contracts, stacks
from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import Partition
from clusterkit.sites.root import ROOT

# The section of docs/contributing.md that says how to add a third-party program's contract
CONTRACTS_SECTION = "Script contracts"
# Launchers run as modules, and the command each stands for (judged by that command's judge)
LAUNCHER_MODULES = {
    "accelerate.commands.launch": ["accelerate", "launch"],
    "deepspeed.launcher.runner": ["deepspeed"],
}
# How a job asks for the GPUs of its nodes, by scheduler
GPU_REQUESTS = {"slurm": "--gres=gpu:N, --gpus-per-node=N or --gpus=N", "lsf": "jsrun -g N"}


def _on_launch_node(ctx: Context, line: int, name: str, placement: Placement | None) -> None:
    if ctx.launch_node and placement is None:
        ctx.add(
            line,
            "launch-node-command",
            f"{name} runs on the launch node ({ctx.launch_node}), not on the job's compute "
            "nodes: start it with jsrun",
            level="warning",
        )


@register_command("python")
def judge_python(ctx: Context, line: int, words: list[str], placement: Placement | None) -> None:
    _on_launch_node(ctx, line, Path(words[0]).name, placement)
    args = ctx.expanded(words[1:])
    if args[:2] == ["-m", "torch.distributed.run"]:
        check_torchrun(ctx, line, args[2:], placement)
    elif args[:2] in (["-m", name] for name in LAUNCHER_MODULES):
        ctx.judge(line, [*LAUNCHER_MODULES[args[1]], *args[2:]], placement)
    elif args and args[0].endswith(".py"):
        check_python_invocation(ctx, line, args[0], args[1:], placement)


@register_command("torchrun")
def judge_torchrun(ctx: Context, line: int, words: list[str], placement: Placement | None) -> None:
    _on_launch_node(ctx, line, "torchrun", placement)
    check_torchrun(ctx, line, ctx.expanded(words[1:]), placement)


def check_torchrun(ctx: Context, line: int, args: list[str], placement: Placement | None) -> None:
    try:
        ns, script_argv = torchrun.parse(args)
    except torchrun.TorchrunError as exc:
        ctx.add(line, "torchrun-option", f"torchrun: error: {exc}")
        return
    gpus = placement.gpus if placement else ctx.gpus_per_node
    if placement and placement.ranks_per_node > 1:
        ctx.add(
            line,
            "torchrun-per-node",
            f"{placement.launcher} starts {placement.ranks_per_node} torchrun agents per node; "
            "start one per node (--ntasks-per-node=1) and let torchrun start the workers",
        )
    part = (placement and placement.partition) or ctx.partition
    _check_workers(ctx, line, part, torchrun.nproc_per_node(ns, gpus), gpus)
    if script_argv and script_argv[0].endswith(".py") and not ns.module:
        check_python_invocation(ctx, line, script_argv[0], script_argv[1:], placement)


def _check_workers(ctx: Context, line: int, part: Partition, nproc: int | None, gpus: int) -> None:
    """One worker per GPU the job holds on the node: no more, and none left idle."""
    node = part.node_type
    if not node.gpus or nproc is None or (ctx.site.generic and not gpus):
        return  # (a generic site: a job that names no GPUs may hold a whole node's)
    if nproc > gpus:
        ctx.add(
            line,
            "nproc-per-gpu",
            f"torchrun --nproc_per_node={nproc} starts more workers than the {gpus} GPU(s) the "
            f"job holds per node on {part.name} ({node.gpus} x {node.gpu_model} per "
            "node)",
        )
    elif nproc < gpus:
        ctx.add(
            line,
            "nproc-per-gpu",
            f"torchrun --nproc_per_node={nproc} leaves {gpus - nproc} of the job's {gpus} GPU(s) "
            "per node idle",
            level="warning",
        )


def token_line(text: str, line: int, message: str) -> int:
    """The line, within a command continued with backslashes, that holds the offending word."""
    m = (
        re.search(r"unrecognized arguments: (\S+)", message)
        or re.search(r"invalid choice: '([^']+)'", message)
        or re.search(r"argument (--?[\w-]+)", message)
    )
    lines = text_lines(text)
    if not m or not 0 < line <= len(lines):
        return line
    i = line - 1
    while i < len(lines):
        if m[1] in lines[i]:
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
    hits = sorted((ROOT / "examples").rglob(Path(script).name))
    if len(hits) == 1:
        return hits[0]
    if hits:  # several examples share the name: the one whose framework the job script names
        text = base.read_text(errors="replace") if base.is_file() else ""
        return contracts.own_script(script, ROOT, f"{base}\n{text}")
    return None


def _contract(ctx: Context, line: int, script: str) -> contracts.Contract | None:
    found = contracts.find_third_party(script, ctx.report.text)
    target = resolve_script(script, ctx.path)
    if found is None and target is not None:
        # a script we can read (the project's examples, or a copy next to the job script): its
        # parser from the source, so that no framework need be installed to judge a job
        data = argparse_ast.read_options(target)
        if data is not None:
            return contracts.Contract(
                target.name, data["options"], str(target), data["allow_abbrev"]
            )
        try:  # a parser the source alone does not give: read it by running the script
            return contracts.own_contract(target)
        except contracts.ContractError as exc:
            ctx.add(line, "script-contract", str(exc))
            return None
    if found is None and not ctx.site.generic:
        ctx.add(
            line,
            "script-contract",
            f"no command-line contract for {script}: add one under contracts/ (see "
            f'"{CONTRACTS_SECTION}" in docs/contributing.md)',
            level="warning",
        )
    return found


def check_python_invocation(
    ctx: Context, line: int, script: str, args: list[str], placement: Placement | None = None
) -> None:
    """Flags given to a Python script must exist in its argument parser; a training program
    on GPU nodes needs GPUs of the job."""
    check_gpu_request(ctx, line, script, args, placement)
    if os.environ.get("CLUSTERKIT_NO_CONTRACTS"):
        return
    contract = _contract(ctx, line, script)
    if contract is None:
        return
    for f in contracts.check_invocation(ctx.path, line, contract, args):
        at = token_line(ctx.report.text, line, f.message)
        ctx.extend([Finding(f.path, at, f.rule, f.message, f.level)])
    ctx.report.plan.setdefault("scripts_checked", []).append(
        {"line": line, "script": script, "contract": contract.source or contract.name}
    )


def check_gpu_request(
    ctx: Context, line: int, script: str, args: list[str], placement: Placement | None
) -> None:
    """A training program of this project started on GPU nodes in a job (or step) that holds
    none of their GPUs cannot see them: with ``--device auto`` it would train on the CPU without
    a word, with ``--device cuda``/``gpu`` it stops. Only ``--device cpu`` asks for that. A job
    holds GPUs by asking for them; a step of a whole-node job (Frontier's) gets those it asks
    for itself."""
    part = (placement and placement.partition) or ctx.partition
    gpus = placement.gpus if placement else ctx.gpus_per_node
    node = part.node_type
    if not node.gpus or gpus or (placement and placement.gpus_asked) or ctx.site.generic:
        return  # (a generic site's nodes: whether they have GPUs is not known)
    target = resolve_script(script, ctx.path)
    if target is None or not target.is_relative_to(ROOT / "examples"):
        return
    if not stacks.frameworks_of(target):
        return  # not a training program
    device = _option_value(args, "--device") or "auto"
    if device == "cpu":
        return
    outcome = "trains on the CPU" if device == "auto" else "stops at start-up"
    ask = GPU_REQUESTS.get(ctx.site.scheduler, "the scheduler's GPU request")
    options = argparse_ast.read_options(target)
    flags = {f for o in (options or {}).get("options", []) for f in o["flags"]}
    if options is not None and "--device" not in flags:  # no choice of device: the GPU or not
        how, cpu = f"it {outcome}", ""
    else:
        how, cpu = f"with --device {device} it {outcome}", ", or pass --device cpu"
    ctx.add(
        line,
        "gpu-not-requested",
        f"{Path(script).name} runs on {part.name} nodes ({node.gpus} x {node.gpu_model} each), "
        f"but the job holds none of their GPUs, so {how}: ask for them ({ask}){cpu}",
    )


def _option_value(args: list[str], flag: str) -> str | None:
    """The value of ``flag`` in ``args`` (``--flag V`` or ``--flag=V``), the last one given."""
    value = None
    for i, word in enumerate(args):
        if word == flag and i + 1 < len(args):
            value = args[i + 1]
        elif word.startswith(flag + "="):
            value = word.split("=", 1)[1]
    return value
