"""``podman-hpc`` in a job: NERSC's wrapper of Podman for HPC (NERSC/podman-hpc at 01b02d6).

``podman-hpc [--squash-dir DIR] [--additional-stores DIR] SUBCOMMAND ...``: its own
sub-commands (``infohpc``, ``migrate``, ``rmsqi``, ``images``, ``pull``, ``shared-run``) and
Podman's, which it hands on. ``run`` and ``shared-run`` take Podman's options plus the site's
modules, each a flag (``--gpu``, ``--mpi``, ``--nccl``, ... from ``etc/modules.d``); the
command after the image is handed back to the body's judges, where the launcher that started
the container runs it. Podman's options are many: the common ones are read below, and a line
with another is reported as not followed rather than guessed at.
"""

from __future__ import annotations

from clusterkit.emulate.body import Context, Placement
from clusterkit.emulate.registry import register_command
from clusterkit.sites.errors import Finding

OWN = {"infohpc", "migrate", "rmsqi", "images", "pull", "shared-run"}
PODMAN = {
    "run", "exec", "build", "ps", "rm", "rmi", "inspect", "logs", "login", "logout", "tag",
    "push", "stop", "start", "kill", "version", "info", "system", "volume", "image", "container",
}  # fmt: skip
GLOBAL_VALUED = {"--squash-dir", "--additional-stores", "--log-level"}
# podman-hpc's site modules (etc/modules.d: cli_arg), each a flag of run and shared-run
MODULE_FLAGS = {
    "--cfs", "--cuda-mpi", "--cvmfs", "--gpu", "--home", "--jupyter", "--mpi", "--nccl",
    "--openmpi-pmi2", "--openmpi-pmix", "--scratch",
}  # fmt: skip
# Podman's run options read here: flags, and those that take a value
RUN_FLAGS = {
    "--rm", "-i", "--interactive", "-t", "--tty", "-it", "-ti", "-d", "--detach", "--init",
    "--privileged", "--read-only", "--replace", "--rmi", "-q", "--quiet",
}  # fmt: skip
RUN_VALUED = {
    "-v", "--volume", "-e", "--env", "--env-file", "-w", "--workdir", "--name", "--network",
    "--net", "--entrypoint", "-u", "--user", "--device", "--mount", "--shm-size", "--ipc",
    "--pid", "--security-opt", "--cap-add", "--cap-drop", "-h", "--hostname", "-p",
    "--publish", "--userns", "--group-add", "-l", "--label", "-m", "--memory", "--cpus",
    "--gpus", "--pull", "--platform", "--annotation", "--tmpfs", "--ulimit",
}  # fmt: skip


def check(path, line: int, args: list[str]) -> tuple[list[str], list[Finding]]:
    """(the command run in the container, findings) for ``podman-hpc args``."""
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 1 if "=" in args[i] or args[i] not in GLOBAL_VALUED else 2
    if i >= len(args):
        return [], [Finding(path, line, "podman-hpc-command", "podman-hpc: no sub-command")]
    sub = args[i]
    if sub not in OWN | PODMAN:
        known = ", ".join(sorted(OWN | {"run", "exec", "build"}))
        return [], [
            Finding(
                path,
                line,
                "podman-hpc-command",
                f"podman-hpc: unknown sub-command {sub!r} (known: {known}, ...)",
            )
        ]
    if sub not in {"run", "shared-run"}:
        return [], []
    return _run(path, line, sub, args[i + 1 :])


def _run(path, line: int, sub: str, args: list[str]) -> tuple[list[str], list[Finding]]:
    i = 0
    while i < len(args) and args[i].startswith("-"):
        name = args[i].split("=", 1)[0]
        if name in RUN_FLAGS | MODULE_FLAGS or (name in RUN_VALUED and "=" in args[i]):
            i += 1
        elif name in RUN_VALUED:
            i += 2
        else:
            note = (
                f"podman-hpc {sub}: option {name} is not among those read here; the command "
                "run in the container is not judged"
            )
            return [], [Finding(path, line, "podman-hpc-option", note, level="warning")]
    if i >= len(args):
        return [], [Finding(path, line, "podman-hpc-command", f"podman-hpc {sub}: no image")]
    return args[i + 1 :], []


@register_command("podman-hpc")
def judge_podman_hpc(
    ctx: Context, line: int, words: list[str], placement: Placement | None
) -> None:
    """Judge podman-hpc's command line, then the command it runs in the container."""
    inner, findings = check(ctx.path, line, ctx.expanded(words[1:]))
    ctx.extend(findings)
    if inner:
        ctx.judge(line, inner, placement)
