"""Commands that ask for a job or run in one, each judged by the scheduler and launcher
emulation (:mod:`clusterkit.emulate`) and registered under its name:

* ``sbatch FILE`` / ``bsub FILE``: the job script the page includes, with the options before it;
* ``salloc OPTIONS [COMMAND]``: the allocation, judged like a batch job with those options;
* a launcher the site's profile lists (``srun``, ``mpirun``, ...): typed at a login node, the
  allocation it makes or the running job it joins; else a step of the job it runs in, with the
  command it starts handed to that command's own judge; ``jsrun``, ``torchrun``, ``accelerate
  launch`` and ``deepspeed`` by their launch rules;
* a site's wrappers of a Slurm client (Bede's ``ghbatch``): the client's options, a new
  allocation on the partitions the wrapper serves;
* ``module`` / ``ml``: the site's module inventory;
* ``sbcast``: its options, as the real sbcast reads them;
* ``squeue``, ``sacct``, ``scontrol``, ``seff``: Slurm's query grammar.

The inline checks hand the options a sentence gives these tools to the same functions.
"""

from __future__ import annotations

from pathlib import Path

from clusterkit.commands import paths, registry
from clusterkit.commands.registry import register, register_kind
from clusterkit.commands.shell import NEUTRAL
from clusterkit.emulate import allocation as _allocation
from clusterkit.emulate import body as _body
from clusterkit.emulate import jsrun as _jsrun
from clusterkit.emulate import lsf as _lsf
from clusterkit.emulate import modules as _modules
from clusterkit.emulate import registry as _emulate_registry
from clusterkit.emulate import sbatch as _sbatch
from clusterkit.emulate import slurm_options as _slurm_options
from clusterkit.emulate.report import Report
from clusterkit.grammars import slurm_query
from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import Site


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


@register("sbatch", "bsub")
def submission(page, line: int, words: list[str], site: Site, snippet: str = "") -> list[Finding]:
    """``sbatch [OPTIONS] FILE`` / ``bsub FILE``: FILE must be a job script of the site's
    examples, judged under the site's scheduler."""
    args = list(words[1:])
    files = [a for a in args if not a.startswith("-")]
    if not files:
        return [Finding(page, line, "submit-file", "submission names no script")]
    target = site.example(files[0])
    if target is None:
        return [
            Finding(
                page,
                line,
                "submit-file",
                f"{files[0]} is not a file under "
                f"examples/{site.name}/: show the file the page includes",
            )
        ]
    if site.scheduler == "slurm":
        opts = args[: args.index(files[0])]
        return slurm_job(target, site, opts).errors
    return lsf_job(target, site).errors


@register("salloc")
def allocation(
    path: Path | str, line: int, words: list[str], site: Site, snippet: str = ""
) -> list[Finding]:
    """``salloc OPTIONS [COMMAND]``: the allocation judged like a batch job with those options."""
    argv = list(words[1:])
    try:
        parsed = _slurm_options.parse("salloc", argv)
    except _slurm_options.OptionError as exc:
        return [Finding(path, line, "salloc-option", str(exc))]
    opts = argv[: len(argv) - len(parsed.get("command") or [])]
    report = slurm_job(path, site, opts, text="#!/bin/bash\n", first_line=line)
    return [Finding(path, line, f.rule, f.message) for f in report.errors]


def launch_line(path: Path | str, line: int, words: list[str], site: Site) -> Report:
    """A launch line (``srun ...``, ``torchrun ...``, ``python ...``) on its own, judged on the
    site's default partition."""
    return _body.check_command_line(path, line, words, site)


@register("torchrun", "accelerate", "deepspeed")
def torchrun(page, line: int, words: list[str], site: Site, snippet: str = "") -> list[Finding]:
    """``torchrun``, ``accelerate launch``, ``deepspeed``: launchers that start the processes of
    one node, judged by their own option tables and launch rules in a job of the site."""
    return launch_line(page, line, words, site).findings


@register("jsrun")
def jsrun_line(
    path: Path | str, line: int, words: list[str], site: Site, snippet: str = ""
) -> list[Finding]:
    return _jsrun.check_jsrun_line(path, line, words, site)


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


@register_kind("launcher")
def launcher(page, line: int, words: list[str], site: Site, snippet: str = "") -> list[Finding]:
    """A launcher the site's profile lists: at a login node (:func:`login_srun`), else a step
    of the job it runs in, and the command it starts."""
    outside = login_srun(page, line, words, site)
    if outside is None:
        outside = launch_line(page, line, words, site).errors
        outside += _launched(page, line, words, site, snippet)
    return outside


def launched_command(words: list[str]) -> list[str] | None:
    """The command an ``srun`` line starts, when no judge of the emulator judges it (``srun
    tar ...``: the page's own checkers do); None otherwise."""
    if not words or Path(words[0]).name != "srun":
        return None
    try:
        command = _slurm_options.parse("srun", list(words[1:])).get("command") or []
    except _slurm_options.OptionError:
        return None
    if not command or _emulate_registry.command(Path(command[0]).name) is not None:
        return None
    return list(command)


def _launched(page, line: int, words: list[str], site: Site, snippet: str) -> list[Finding]:
    """The command a launch line starts, through its own judge where the emulator has no
    judge for it (``srun tar -xf ...``, ``srun mkdir -p DIR``); an unchecked one stays so."""
    inner = launched_command(words)
    name = Path(inner[0]).name if inner else ""
    if name in paths.PATH_COMMANDS:
        return paths.check(page, line, inner, site)[0]
    if not name or name in NEUTRAL:
        return []
    judge = registry.command(name)
    if judge is None:
        return []
    if name in {"bash", "sh"} and all(w.startswith("-") for w in inner[1:]):
        return []  # `srun --pty bash`: an interactive shell, nothing to check in it
    return judge(page, line, inner, site, snippet)


@register_kind("wrapper")
def wrapper_line(
    path: Path | str, line: int, words: list[str], site: Site, snippet: str = ""
) -> list[Finding]:
    """A command the site wraps around a Slurm client (Bede's ``ghbatch``), judged by the
    stand-in registered under its name: the client's options, a new allocation on the
    partitions the wrapper serves."""
    return launch_line(path, line, words, site).findings


@register("module", "ml")
def module_command(
    path: Path | str, line: int, words: list[str], site: Site, snippet: str = ""
) -> list[Finding]:
    """``module load ...`` / ``ml ...`` against the site's module inventory."""
    tool = Path(words[0]).name
    return _modules.check_module_command(path, line, tool, list(words[1:]), site)


@register("sbcast")
def sbcast_line(page, line: int, words: list[str], site: Site, snippet: str = "") -> list[Finding]:
    """``sbcast SOURCE DEST``: its options as the real sbcast reads them, in the job the page
    means (a job not shown: the paths it names are not held to a request)."""
    return launch_line(page, line, words, site).findings


@register("squeue", "sacct", "scontrol", "seff")
def slurm_query_line(
    page, line: int, words: list[str], site: Site, snippet: str = ""
) -> list[Finding]:
    return slurm_query.check(page, line, words, site)
