"""A shell snippet shown on a page, split into commands, each handed to its judge.

A snippet (a code block, an included setup script or an inline code span) that holds a job
script (``#SBATCH``/``#BSUB``) goes whole to the judge the scheduler emulation registers for
that scheduler. Any other is split into
simple commands: the shell's own paths (``cd``, ``mkdir``, ``source``) and settings
(``export``) are judged here; every other command is looked up once in the registry of judges
(:mod:`clusterkit.commands.registry`) and handed to the judge registered for its name. A
command with no judge is reported (``block-untested``), so a page cannot show a command
nothing judges.
"""

from __future__ import annotations

from pathlib import Path

from clusterkit.commands import env, paths, registry
from clusterkit.emulate import registry as emulate_registry
from clusterkit.emulate.script import body_commands
from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import Site

# Commands that change nothing a test could judge; a block of only these is not "tested".
NEUTRAL = {
    "cd",
    "echo",
    "export",
    "mkdir",
    "set",
    "pushd",
    "popd",
    "cat",
    "ls",
    "true",
    "date",
    "sleep",
    "exit",
    "unset",
    "trap",
    "wait",
    "printf",
    "rm",
    "mv",
    "cp",
    "chmod",
    "source",
    ".",
    "eval",
    "readlink",
    "cut",
    "head",
    "tail",
    "deactivate",
    "[",
    "test",
    "sort",
    "grep",
}


def check_shell_text(
    source: str, page: str, first_line: int, site: Site | None
) -> tuple[str, list[Finding], str]:
    """(how, findings, detail) for a shell snippet."""
    if "#SBATCH" in source or "#BSUB" in source:
        if site is None:
            msg = (
                "a job script block needs a site: put it in a site tab, give the page "
                "`site:` front matter, or mark `% test: site`"
            )
            return "emulated-job", [Finding(page, first_line, "block-site", msg)], ""
        scheduler = emulate_registry.scheduler("slurm" if "#SBATCH" in source else "lsf")
        report = scheduler(page, site, None, text=source, first_line=first_line)
        return (
            "emulated-job",
            report.errors,
            f"{site.name}: {len(report.plan.get('steps', []))} step(s)",
        )
    commands = body_commands(source)
    findings: list[Finding] = []
    checked = []
    for cmd in commands:
        name = Path(cmd.name).name if cmd.words else ""
        line = first_line + cmd.line - 1
        if name in paths.PATH_COMMANDS and site is not None:
            found, judged = paths.check(page, line, list(cmd.words), site)
            findings += found
            if judged:
                checked.append(name)
            continue
        if name == "export":
            found, judged = env.check(page, line, list(cmd.words), site)
            findings += found
            checked += ["export"] if judged else []
            continue
        if not name or name in NEUTRAL:
            continue
        judge = registry.command(name, site)
        if site is None and not (judge and judge.site_free):
            findings.append(
                Finding(
                    page,
                    line,
                    "block-site",
                    f"`{name}` depends on the site: "
                    "put the block in a site tab or give the page a site",
                )
            )
            continue
        if judge is None:
            findings.append(
                Finding(
                    page,
                    line,
                    "block-untested",
                    f"no checker for `{name}`: "
                    "mark the block `% test: skip <reason>` or add a checker",
                )
            )
            continue
        findings += judge(page, line, list(cmd.words), site, source)
        checked.append(name)
    if "export" in checked and env.settings_only(commands):
        findings += env.run_settings(page, first_line, source)
    if not checked and not findings:
        findings.append(
            Finding(
                page,
                first_line,
                "block-untested",
                "nothing in this block was checked: mark it `% test: skip <reason>`",
            )
        )
    return "command-checked", findings, ", ".join(checked)


def inner_command(page, line: int, words: list[str], site: Site, snippet: str = ""):
    """A command another one starts (``sudo CMD``, ``apptainer exec IMAGE CMD``, ``nsys
    profile CMD``), handed to the judge registered for its name."""
    name = Path(words[0]).name if words else ""
    if not name or name in NEUTRAL:
        return []
    judge = registry.command(name)
    if judge is None:
        msg = f"no checker for `{name}`: mark the block `% test: skip <reason>` or add a checker"
        return [Finding(page, line, "block-untested", msg)]
    return judge(page, line, words, site, snippet)
