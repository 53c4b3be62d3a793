"""Commands shown on a page, each judged by the checker for that command.

A shell snippet (a code block, an included setup script or an inline code span) is split into
simple commands; job-script text goes to the scheduler emulation, ``module`` to the inventory,
``sbatch FILE`` to the emulator, launch lines to the launcher rules, and other commands to the
checker registered for them in :data:`COMMAND_CHECKERS`. A command with no checker is reported
(``block-untested``), so a page cannot show a command nothing judges.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from clusterkit import (
    conda_checks,
    container_checks,
    copy_checks,
    download_checks,
    emulation,
    env_checks,
    git_checks,
    install_target,
    installs,
    path_checks,
    python_commands,
    stack_installs,
)
from clusterkit.errors import Finding
from clusterkit.grammars import profilers, reframe_cli, slurm_query, tensorboard_cli
from clusterkit.profiles import Site

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
        if "#SBATCH" in source:
            report = emulation.slurm_job(page, site, text=source, first_line=first_line)
        else:
            report = emulation.lsf_job(page, site, text=source, first_line=first_line)
        return (
            "emulated-job",
            report.errors,
            f"{site.name}: {len(report.plan.get('steps', []))} step(s)",
        )
    commands = emulation.shell_commands(source)
    findings: list[Finding] = []
    checked = []
    for cmd in commands:
        name = Path(cmd.name).name if cmd.words else ""
        line = first_line + cmd.line - 1
        if name in path_checks.PATH_COMMANDS and site is not None:
            found, judged = path_checks.check(page, line, list(cmd.words), site)
            findings += found
            if judged:
                checked.append(name)
            continue
        if name == "export":
            found, judged = env_checks.check(page, line, list(cmd.words), site)
            findings += found
            checked += ["export"] if judged else []
            continue
        if not name or name in NEUTRAL:
            continue
        if site is None and name in SITE_FREE:
            findings += checker_for(name)(page, line, list(cmd.words), site, source)
            checked.append(name)
            continue
        if site is None:
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
        if name in {"module", "ml"}:
            findings += emulation.module_command(page, line, name, list(cmd.words[1:]), site)
            checked.append(name)
        elif name in {"sbatch", "bsub"}:
            findings += _check_submission(page, line, list(cmd.words[1:]), site)
            checked.append(name)
        elif checker_for(name):
            findings += checker_for(name)(page, line, list(cmd.words), site, source)
            checked.append(name)
        elif site.launcher(name):
            outside = emulation.login_srun(page, line, list(cmd.words), site)
            if outside is None:
                outside = emulation.launch_line(page, line, list(cmd.words), site).errors
                outside += _launched(page, line, list(cmd.words), site, source)
            findings += outside
            checked.append(name)
        elif site.wrapper(name):
            findings += emulation.wrapper_line(page, line, list(cmd.words), site)
            checked.append(name)
        elif site.tool(name):
            findings += site_tool(page, line, list(cmd.words), site, source)
            checked.append(name)
        else:
            findings.append(
                Finding(
                    page,
                    line,
                    "block-untested",
                    f"no checker for `{name}`: "
                    "mark the block `% test: skip <reason>` or add a checker",
                )
            )
    if "export" in checked and env_checks.settings_only(commands):
        findings += env_checks.run_settings(page, first_line, source)
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


def _launched(page, line: int, words: list[str], site: Site, snippet: str) -> list[Finding]:
    """The command a launch line starts, through its own checker where the emulator has no
    judge for it (``srun tar -xf ...``, ``srun mkdir -p DIR``); an unchecked one stays so."""
    inner = emulation.launched_command(words)
    name = Path(inner[0]).name if inner else ""
    if name in path_checks.PATH_COMMANDS:
        return path_checks.check(page, line, inner, site)[0]
    if not name or name in NEUTRAL or checker_for(name) is None:
        return []
    if name in {"bash", "sh"} and all(w.startswith("-") for w in inner[1:]):
        return []  # `srun --pty bash`: an interactive shell, nothing to check in it
    return checker_for(name)(page, line, inner, site, snippet)


def _ignoring_snippet(check):
    def wrapped(page, line, words, site, snippet=""):
        return check(page, line, words, site)

    return wrapped


def _launch_line(page: str, line: int, words: list[str], site: Site) -> list[Finding]:
    return emulation.launch_line(page, line, words, site).findings


def _pip(page, line: int, words: list[str], site: Site, snippet: str = "") -> list[Finding]:
    target = install_target.target_for(page, line, site, snippet)
    found = installs.check_pip(page, line, list(words[1:]), target)
    return found + stack_installs.check_pip(page, line, list(words[1:]), site, snippet)


# Per-command checkers: name -> fn(page, line, words, site, snippet) -> findings; ``snippet`` is
# the whole block or span the command came from (an install reads its Python from it).
COMMAND_CHECKERS: dict = {
    "jsrun": _ignoring_snippet(emulation.jsrun_line),
    "salloc": _ignoring_snippet(emulation.allocation),
    "torchrun": _ignoring_snippet(_launch_line),
    **dict.fromkeys(("squeue", "sacct", "scontrol", "seff"), _ignoring_snippet(slurm_query.check)),
    **dict.fromkeys(("pip", "pip3"), _pip),
    "conda": conda_checks.check,
}


def _container(page, line: int, words: list[str], site: Site, snippet: str = ""):
    return container_checks.check(page, line, words, site, snippet, inner=_inner_command)


def _inner_command(page, line: int, words: list[str], site: Site, snippet: str = ""):
    """A command another one starts (``sudo CMD``, ``apptainer exec IMAGE CMD``)."""
    name = Path(words[0]).name if words else ""
    if not name or name in NEUTRAL:
        return []
    checker = checker_for(name)
    if checker is None:
        msg = f"no checker for `{name}`: mark the block `% test: skip <reason>` or add a checker"
        return [Finding(page, line, "block-untested", msg)]
    return checker(page, line, words, site, snippet)


_MODULE_LOAD = re.compile(r"\bmodule\s+(?:-\S+\s+)*(?:load|add)\s+([^;&|#\n]+)")


def site_tool(page, line: int, words: list[str], site: Site, snippet: str = ""):
    """A command the site's profile lists under ``tools:``: its number of arguments, and the
    module it comes with loaded earlier in the snippet."""
    name, tool = Path(words[0]).name, site.tool(Path(words[0]).name)
    out = []
    if len(words) - 1 != tool["args"]:
        msg = f"{name} takes {tool['args']} argument(s) ({tool['usage']}); given {len(words) - 1}"
        out.append(Finding(page, line, "tool-args", msg))
    need = tool.get("needs_module") or []
    loaded = {m.split("/")[0] for g in _MODULE_LOAD.findall(snippet) for m in g.split()}
    if need and not loaded & set(need):
        msg = f"{name} is on the PATH only once one of {', '.join(need)} is loaded"
        out.append(Finding(page, line, "tool-module", msg))
    return out


def _profiler(page, line: int, words: list[str], site: Site, snippet: str = ""):
    def program(inner_words):
        return _inner_command(page, line, inner_words, site, snippet)

    return profilers.check(page, line, words, program)


_SUDO_VALUED = {"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T"}


def _sudo(page, line: int, words: list[str], site: Site, snippet: str = ""):
    i = 1
    while i < len(words) and words[i].startswith("-"):
        i += 2 if words[i] in _SUDO_VALUED else 1
    return _inner_command(page, line, words[i:], site, snippet)


def _shell_c(page, line: int, words: list[str], site: Site, snippet: str = ""):
    """``sh -c 'SCRIPT'``: the script's syntax, then its commands; ``bash INSTALLER ...``: a
    recorded installer's options."""
    if "-c" not in words[1:-1]:
        found = download_checks.check_installer(page, line, words, site, snippet)
        if found is not None:
            return found
        msg = f"`{' '.join(words)}` runs a script file: nothing here checks it"
        return [Finding(page, line, "block-untested", msg)]
    script = words[words.index("-c") + 1]
    r = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
    if r.returncode:
        return [Finding(page, line, "bash-syntax", f"{words[0]} -c: {r.stderr.strip()}")]
    _how, found, _detail = check_shell_text(script, page, line, site)
    return [f for f in found if "nothing in this block was checked" not in f.message]


COMMAND_CHECKERS.update(
    {
        "tensorboard": tensorboard_cli.check,
        "reframe": reframe_cli.check,
        "git": git_checks.check,
        "curl": download_checks.check_curl,
        "tar": copy_checks.check_tar,
        "rsync": copy_checks.check_rsync,
        "sha256sum": download_checks.check_sha256sum,
        **dict.fromkeys(profilers.PARSERS, _profiler),
        **dict.fromkeys(container_checks.TOOLS, _container),
        "sudo": _sudo,
        **dict.fromkeys(("sh", "bash"), _shell_c),
    }
)
_PYTHON = re.compile(r"^python(3(\.\d+)?)?$")


def checker_for(name: str):
    """The checker of a command name (``python3.12`` is checked as ``python``)."""
    if name in COMMAND_CHECKERS:
        return COMMAND_CHECKERS[name]
    if _PYTHON.match(name):
        return python_commands.check
    return None


def _check_submission(page: str, line: int, args: list[str], site: Site) -> list[Finding]:
    files = [a for a in args if not a.startswith("-")]
    if not files:
        return [Finding(page, line, "submit-file", "submission names no script")]
    target = _resolve_example(files[0], site)
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
        return emulation.slurm_job(target, site, opts).errors
    return emulation.lsf_job(target, site).errors


def _resolve_example(name: str, site: Site) -> Path | None:
    return site.example(name)


# Commands whose check does not depend on a site: a page for every site may show them.
SITE_FREE = {"tensorboard", "reframe", "git", *profilers.PARSERS, "python", "python3"}
