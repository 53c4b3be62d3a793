"""The scheduler and launcher emulation as the page checks call it: the one place outside
``clusterkit.emulate`` that imports it, so a change of its layout is one edit here.

Every function takes words or text as a page shows them and returns findings (or the emulator's
report, whose ``plan`` describes the allocation).
"""

from __future__ import annotations

from pathlib import Path

from clusterkit.emulate import allocation as _allocation
from clusterkit.emulate import body as _body
from clusterkit.emulate import container_options as _container_options
from clusterkit.emulate import containers as _containers
from clusterkit.emulate import jsrun as _jsrun
from clusterkit.emulate import lsf as _lsf
from clusterkit.emulate import modules as _modules
from clusterkit.emulate import programs as _programs
from clusterkit.emulate import registry as _registry
from clusterkit.emulate import report as _report
from clusterkit.emulate import sbatch as _sbatch
from clusterkit.emulate import script as _script
from clusterkit.emulate import slurm_options as _slurm_options
from clusterkit.emulate import torchrun as _torchrun
from clusterkit.errors import Finding
from clusterkit.profiles import Site
from clusterkit.profiles import all_sites as _all_sites

Report = _report.Report
ContainerOptionError = _container_options.ContainerOptionError
TorchrunError = _torchrun.TorchrunError


def slurm_job(
    path: Path | str,
    site: Site,
    argv: list[str] | None = None,
    text: str | None = None,
    first_line: int = 1,
) -> Report:
    """A Slurm job script (``text``, else the file) submitted with ``argv`` before it."""
    return _sbatch.check_slurm_script(path, site, argv, text=text, first_line=first_line)


def lsf_job(
    path: Path | str,
    site: Site,
    argv: list[str] | None = None,
    text: str | None = None,
    first_line: int = 1,
) -> Report:
    return _lsf.check_lsf_script(path, site, argv, text=text, first_line=first_line)


def allocation(path: Path | str, line: int, words: list[str], site: Site) -> list[Finding]:
    """``salloc OPTIONS [COMMAND]``: the allocation judged like a batch job with those options."""
    from clusterkit.emulate import slurm_options

    argv = list(words[1:])
    try:
        parsed = slurm_options.parse("salloc", argv)
    except slurm_options.OptionError as exc:
        return [Finding(path, line, "salloc-option", str(exc))]
    opts = argv[: len(argv) - len(parsed.get("command") or [])]
    report = slurm_job(path, site, opts, text="#!/bin/bash\n", first_line=line)
    return [Finding(path, line, f.rule, f.message) for f in report.errors]


def launch_line(path: Path | str, line: int, words: list[str], site: Site) -> Report:
    """A launch line (``srun ...``, ``torchrun ...``, ``python ...``) on its own, judged on the
    site's default partition."""
    return _body.check_command_line(path, line, words, site)


def login_srun(path: Path | str, line: int, words: list[str], site: Site) -> list[Finding] | None:
    """An ``srun`` typed at a login node: one that makes an allocation of its own (``--pty``,
    ``--partition``, ``--account``) is judged as that job, one that joins a running job
    (``--jobid``) as a step of it; None for a step of the job it runs in."""
    how = _allocation.outside_job(words)
    if how == "joins":
        return launch_line(path, line, words, site).errors + _allocation.joined_job(
            path, line, words
        )
    if how == "allocates":
        return _allocation.session(path, line, list(words[1:]), site).findings
    return None


def launched_command(words: list[str]) -> list[str] | None:
    """The command an ``srun`` line starts, when no judge of the emulator judges it (``srun
    tar ...``: the page's own checkers do); None otherwise."""
    if not words or Path(words[0]).name != "srun":
        return None
    try:
        command = _slurm_options.parse("srun", list(words[1:])).get("command") or []
    except _slurm_options.OptionError:
        return None
    if not command or _registry.command(Path(command[0]).name) is not None:
        return None
    return list(command)


def wrapper_line(path: Path | str, line: int, words: list[str], site: Site) -> list[Finding]:
    """A command the site wraps around a Slurm client (Bede's ``ghbatch``), judged by the
    stand-in registered under its name: the client's options, a new allocation on the
    partitions the wrapper serves."""
    return launch_line(path, line, words, site).findings


def script_options(path: Path | str, line: int, script: str, args: list[str]) -> list[Finding]:
    """``python SCRIPT ARGS`` on its own: ARGS against the script's command-line contract (the
    project's example or benchmark, or a kept third-party contract)."""
    report = Report(Path(path), "", plan={"steps": []})
    site = next(iter(_all_sites()))  # a script's own options do not depend on the site
    ctx = _registry.snippet_job(site.scheduler)(site, report)
    _programs.check_python_invocation(ctx, line, script, list(args))
    return report.findings


def jsrun_line(path: Path | str, line: int, words: list[str], site: Site) -> list[Finding]:
    return _jsrun.check_jsrun_line(path, line, words, site)


def module_command(
    path: Path | str, line: int, tool: str, words: list[str], site: Site
) -> list[Finding]:
    return _modules.check_module_command(path, line, tool, words, site)


def torchrun_parse(argv: list[str]):
    """(options, [script, args...]); raises :data:`TorchrunError` on a bad command line."""
    return _torchrun.parse(argv)


def container_parse(tool: str, argv: list[str]):
    """Apptainer's flag tables: (sub-command, flags, arguments); raises
    :data:`ContainerOptionError` on an unknown flag or a wrong number of arguments."""
    return _container_options.parse(tool, argv)


def container_check(path: Path | str, line: int, tool: str, argv: list[str]):
    """(the command run inside the container, findings) for ``tool argv``: Apptainer's flag
    tables, and what the emulator knows of binds, writable images and old image formats."""
    return _containers.check(path, line, tool, argv)


def shell_commands(text: str) -> list:
    """The simple commands of shell text, with their lines (bashlex)."""
    return _script.body_commands(text)
