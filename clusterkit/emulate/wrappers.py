"""Judge the commands a site puts around a Slurm client (Bede's ``ghlogin``, ``ghbatch`` and
``ghrun``): the judge of every command a profile lists under ``tools:`` with ``wraps``, found
when a command of that site is looked up (registered by kind, so no profile is read at import).

Such a command takes the options of the client it wraps and hands them on, after its own
``defaults``, to the partitions it serves: the options go through that client's grammar, and
the job they make is judged as the client's would be, as a new allocation from a login node:

* ``wraps: sbatch``: ``NAME [OPTIONS] SCRIPT`` is ``sbatch [OPTIONS] SCRIPT``, the script being
  the site's example file the page names;
* ``wraps: srun``/``salloc``: ``NAME [OPTIONS] [COMMAND]`` is a job with the options sbatch also
  takes, whose one step is ``srun OPTIONS COMMAND``; with ``opens_shell`` the command starts a
  shell itself (``--pty bash``) and takes options only.

The job must land on one of the tool's ``partitions``; a script that names no partition lands
on the site's default one, which the wrapper does not serve.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from clusterkit.emulate import allocation, registry, slurm_options
from clusterkit.emulate.body import Context, Placement
from clusterkit.emulate.report import Report
from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import Site, all_sites


def wrapper_names() -> list[str]:
    """Every command a profile that loads lists as a wrapper of a Slurm client."""
    return sorted(
        {
            name
            for site in all_sites()
            for name, tool in site.data.get("tools", {}).items()
            if "wraps" in tool
        }
    )


def judge_wrapper(ctx: Context, line: int, words: list[str], placement: Placement | None) -> None:
    ctx.extend(check(ctx.path, line, words, ctx.site))


def check(path: Path | str, line: int, words: list[str], site: Site) -> list[Finding]:
    """Findings for ``words`` (``ghbatch --partition=ghtest job.sbatch``) on ``site``."""
    name = Path(words[0]).name
    tool = site.wrapper(name)
    if tool is None and site.generic:
        return []  # a site's own commands are not known here
    if tool is None:
        msg = f"{name} is not a command of {site.title} (its profile lists no such tool)"
        return [Finding(path, line, "tool-site", msg)]
    client, argv = tool["wraps"], list(tool.get("defaults", [])) + list(words[1:])
    try:
        parsed = slurm_options.parse(client, argv)
    except slurm_options.OptionError as exc:
        msg = f"{name} takes {client}'s options: {slurm_options.option_message(exc)}"
        return [Finding(path, line, "wrapper-option", msg)]
    if client == "sbatch":
        report = _batch(path, line, name, argv, parsed, site)
    else:
        report = _session(path, line, name, tool, argv, parsed, site)
    if isinstance(report, list):
        return report
    findings = list(report.findings)
    if not report.errors:
        findings += _partition(path, line, name, tool, report)
    return findings


def _batch(path, line: int, name: str, argv: list[str], parsed: dict, site: Site):
    script = parsed.get("script")
    if script is None:
        return [Finding(path, line, "submit-file", f"{name} names no job script")]
    target = site.example(script)
    if target is None:
        msg = f"{script} is not a file under examples/{site.name}/: show the file the page includes"
        return [Finding(path, line, "submit-file", msg)]
    report = registry.scheduler("slurm")(target, site, argv[: argv.index(script)])
    # what the command line asked for is the page's line; the script's own lines stay its own
    report.findings = [
        Finding(path, line, f.rule, f.message, f.level) if not f.line else f
        for f in report.findings
    ]
    return report


def _session(path, line: int, name: str, tool: dict, argv, parsed: dict, site: Site):
    """An allocation made from a login node, holding one step: ``srun OPTIONS COMMAND``."""
    command = parsed.get("command") or []
    if tool.get("opens_shell"):
        if command:
            msg = f"{name} opens a shell itself and takes options only; given {shlex.join(command)}"
            return [Finding(path, line, "wrapper-command", msg)]
        argv = [*argv, "--pty", "bash"]
    return allocation.session(path, line, argv, site)


def _partition(path, line: int, name: str, tool: dict, report: Report) -> list[Finding]:
    got = report.plan.get("partition")
    if got is None or got in tool["partitions"]:
        return []
    served = " or ".join(f"--partition={p}" for p in tool["partitions"])
    msg = f"{name} serves {', '.join(tool['partitions'])}; this job would run on {got} ({served})"
    return [Finding(path, line, "wrapper-partition", msg)]


registry.register_kind("wrapper", scheduler="slurm")(judge_wrapper)
