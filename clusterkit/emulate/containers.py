"""``singularity`` / ``apptainer``: no container runtime exists on the test machine.

The command line is parsed with Apptainer's options; ``exec`` then runs its command directly
(saying so), so the command inside the container is still checked and run; ``build`` with the
Singularity 2 ``--writable`` image format is refused with its replacement.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from clusterkit.errors import Finding


class ContainerOptionError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:
        raise ContainerOptionError(message)


def _exec_parser(tool: str) -> argparse.ArgumentParser:
    p = _Parser(prog=f"{tool} exec", add_help=False)
    for flag in (
        "--nv",
        "--rocm",
        "-e",
        "--cleanenv",
        "-c",
        "--contain",
        "-C",
        "--containall",
        "--writable-tmpfs",
        "--fakeroot",
        "--no-home",
        "-w",
        "--writable",
        "--nvccli",
    ):
        p.add_argument(flag, action="store_true")
    for opt in (
        "-B",
        "--bind",
        "--env",
        "--env-file",
        "--pwd",
        "-H",
        "--home",
        "--mount",
        "--overlay",
        "-W",
        "--workdir",
    ):
        p.add_argument(opt, action="append")
    p.add_argument("image")
    p.add_argument("command", nargs=argparse.REMAINDER)
    return p


def _build_parser(tool: str) -> argparse.ArgumentParser:
    p = _Parser(prog=f"{tool} build", add_help=False)
    for flag in (
        "-s",
        "--sandbox",
        "--fakeroot",
        "-f",
        "-F",
        "--force",
        "--writable",
        "--notest",
        "-u",
        "--update",
        "--nv",
        "--rocm",
    ):
        p.add_argument(flag, action="store_true")
    p.add_argument("--bind", "-B", action="append")
    p.add_argument("target")
    p.add_argument("source")
    return p


def check(path, line: int, tool: str, args: list[str]) -> tuple[list[str], list[Finding]]:
    """(command run inside the container, findings) for ``tool args``."""
    if not args:
        return [], [Finding(path, line, "container-command", f"{tool}: no sub-command")]
    sub, rest = args[0], args[1:]
    try:
        if sub == "exec":
            ns = _exec_parser(tool).parse_args(rest)
            if not ns.command:
                return [], [
                    Finding(
                        path, line, "container-command", f"{tool} exec: no command after the image"
                    )
                ]
            return ns.command, []
        if sub == "build":
            ns = _build_parser(tool).parse_args(rest)
            if ns.writable:
                return [], [
                    Finding(
                        path,
                        line,
                        "container-writable",
                        f"{tool} build --writable made Singularity 2 ext3 images, "
                        "removed in Singularity 3.0: build a --sandbox directory, "
                        "then an image (.sif) from it",
                    )
                ]
            return [], []
        if sub in {"shell", "run", "pull", "inspect", "instance", "version", "--version"}:
            return [], []
    except ContainerOptionError as exc:
        return [], [Finding(path, line, "container-option", f"{tool} {sub}: {exc}")]
    return [], [Finding(path, line, "container-command", f"{tool}: unknown sub-command {sub!r}")]


def wrapper(tool: str):
    def inner(path, line, args, site):
        return check(path, line, tool, args)

    return inner


def shim(tool: str):
    def run(argv: list[str]) -> int:
        command, findings = check("<command line>", 0, tool, argv)
        for f in findings:
            print(f, file=sys.stderr)
        if any(f.level == "error" for f in findings):
            return 255
        print(
            f"[{tool} emulator] no container runtime here: "
            + (f"running {command[0]} directly" if command else f"{argv[0]} not performed"),
            file=sys.stderr,
        )
        return subprocess.call(command) if command else 0

    return run


HANDLERS = {"singularity": shim("singularity"), "apptainer": shim("apptainer")}
WRAPPERS = {"singularity": wrapper("singularity"), "apptainer": wrapper("apptainer")}
