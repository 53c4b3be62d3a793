"""What the shell makes of a job script before any scheduler rule applies.

* Syntax, from bash itself: ``bash -n`` reads the script (placeholders such as ``<app>``
  replaced by plain words first, since they stand for the reader's own text), and every string
  a command hands to ``bash -c`` or ``sh -c`` (``srun bash -c "..."`` too); each syntax error
  bash reports is an error at its line.
* The ``#!`` line: the kernel passes everything after the interpreter as one argument, so
  ``#!/bin/bash -l # comment`` hands bash the option ``-l # comment``, which it refuses before
  reading a line.
* A backslash that should continue a line but is followed by blanks escapes the blank instead:
  the command ends there and the next line runs as a command of its own (outside the launcher
  whose options it was meant to carry).
* ``NAME = value`` runs a command called NAME; it sets no variable.
* A job whose every launch is commented out starts no program.

bash is the one on this machine's PATH; where there is none the syntax check is left out and
bashlex's reading stands (:mod:`clusterkit.emulate.script`).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path, PurePosixPath

from clusterkit.emulate import script_vars
from clusterkit.emulate.script import JobScript, heredoc_lines, text_lines
from clusterkit.grammars.placeholders import mask
from clusterkit.sites.errors import Finding

BASH_LIMIT_S = 10.0
SHELLS = {"bash", "sh"}
# "bash: -c: line 3: syntax error near unexpected token `fi'"
BASH_ERROR = re.compile(r"^(?:\S*/)?bash: -c: line (\d+): (.*)$")
# commands that only prepare a job; a body of these alone starts no program
SETUP = {
    "module", "ml", "export", "source", ".", "cd", "echo", "printf", "set", "unset", "mkdir",
    "ulimit", "date", "hostname", "env", "printenv", "umask", "spack", "conda", "eval", "true",
    "pwd", "ls", "cat", "sleep", "wait", "exit", "trap", "alias", "shopt", "nvidia-smi",
}  # fmt: skip
LAUNCHERS = {"srun", "mpirun", "mpiexec", "ibrun", "aprun", "jsrun", "torchrun", "prun"}
COMMENTED_LAUNCH = re.compile(r"^\s*#+\s*(?:time\s+)?(srun|mpirun|mpiexec|ibrun|aprun|torchrun)\s")
ASSIGN_WITH_BLANKS = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def bash() -> str | None:
    return shutil.which("bash")


def shell_of(script: JobScript) -> str | None:
    """``bash`` or ``sh`` when the ``#!`` line names one (or none is named), else None."""
    if script.shebang is None:
        return "bash"
    words = script.shebang.split()
    if not words:
        return None
    name = PurePosixPath(words[0]).name
    if name == "env" and len(words) > 1:
        name = PurePosixPath(next((w for w in words[1:] if not w.startswith("-")), "")).name
    return name if name in SHELLS else None


def checks(script: JobScript, placeholders: tuple[str, ...] = ()) -> tuple[list[Finding], bool]:
    """The findings, and whether bash was asked about the script's syntax (False: no bash
    here, or the script is not a shell script)."""
    out = shebang_findings(script)
    asked = False
    if script.text.strip() and shell_of(script) is not None and bash() is not None:
        out += syntax_findings(script, placeholders)
        out += string_findings(script, placeholders)
        asked = True
    out += continuation_findings(script)
    out += assignment_findings(script)
    out += launch_findings(script)
    out += script_vars.findings(script)
    return out, asked


# --------------------------------------------------------------------------- bash -n
def run_bash_n(text: str) -> list[tuple[int, str]] | None:
    """(line, message) of each syntax error bash reports in ``text``; None if bash could not
    be run."""
    exe = bash()
    if exe is None:
        return None
    if "\0" in text:
        return None  # no argument holds a NUL byte (sbatch refuses such a script anyway)
    try:
        r = subprocess.run(
            [exe, "--norc", "--noprofile", "-n", "-c", text],
            capture_output=True,
            text=True,
            timeout=BASH_LIMIT_S,
            env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
        )
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None
    out = []
    for line in r.stderr.splitlines():
        m = BASH_ERROR.match(line)
        if m and not m[2].startswith("`"):
            out.append((int(m[1]), m[2]))
    if r.returncode != 0 and not out:
        last = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "syntax error"
        out.append((0, re.sub(r"^(?:\S*/)?bash: (?:-c: )?", "", last)))
    return out


def syntax_findings(script: JobScript, placeholders: tuple[str, ...] = ()) -> list[Finding]:
    masked, _ = mask(script.text, placeholders)
    errors = run_bash_n(masked) or []
    last = max(len(text_lines(script.text)), 1)
    return [
        Finding(script.path, min(line, last), "bash-syntax", f"bash: {message}")
        for line, message in errors
    ]


def shell_strings(words: tuple[str, ...] | list[str]) -> list[str]:
    """The strings that ``bash -c``/``sh -c`` (``-lc``, ``-ec``, ...) in ``words`` run."""
    out = []
    for k, word in enumerate(words):
        if PurePosixPath(word).name not in SHELLS:
            continue
        j, takes_c = k + 1, False
        while j < len(words) and words[j].startswith("-") and not words[j].startswith("--"):
            takes_c = takes_c or "c" in words[j][1:]
            j += 1
        if takes_c and j < len(words):
            out.append(words[j])
    return out


def string_findings(script: JobScript, placeholders: tuple[str, ...] = ()) -> list[Finding]:
    lines = text_lines(script.text)
    out = []
    for cmd in script.commands:
        for string in shell_strings(cmd.words):
            errors = run_bash_n(mask(string, placeholders)[0]) or []
            base = _string_line(lines, cmd.line, string)
            tool = cmd.words[0] if cmd.words else "the command"
            for line, message in errors:
                out.append(
                    Finding(
                        script.path,
                        base + max(line, 1) - 1,
                        "bash-syntax",
                        f"bash -c: {message} (in the string {PurePosixPath(tool).name} hands to "
                        "bash, which stops there: the command does nothing else)",
                    )
                )
    return out


def _string_line(lines: list[str], start: int, string: str) -> int:
    """The line of the script where ``string`` (a word of the command at ``start``) begins:
    where its first line that holds text is found, less the blank lines before it."""
    parts = string.split("\n")
    k = next((i for i, p in enumerate(parts) if p.strip()), 0)
    first = parts[k].strip()
    for i in range(max(start - 1, 0), min(len(lines), start + 200)):
        if first and first in lines[i]:
            return max(i + 1 - k, start)
    return start


# --------------------------------------------------------------------------- the #! line
def shebang_findings(script: JobScript) -> list[Finding]:
    if not script.shebang:
        return []
    interpreter, _, arg = script.shebang.strip().partition(" ")
    arg = arg.strip()
    name = PurePosixPath(interpreter).name
    if not arg or not re.search(r"\s", arg):
        return []
    if name == "env" and arg.startswith("-S"):
        return []  # env -S splits the rest itself
    if name not in SHELLS | {"env", "zsh", "ksh", "dash", "csh", "tcsh"}:
        return []
    if name == "env":
        why = f"env looks for a program named {arg!r} and finds none"
    else:
        why = f"{name} takes it for options and stops ('- : invalid option') before line 2"
    return [
        Finding(
            script.path,
            1,
            "shebang-argument",
            f"the kernel hands {interpreter} everything after it on the #! line as one "
            f"argument, {arg!r}: {why}, so the job runs nothing (put comments on a line of "
            "their own)",
        )
    ]


# --------------------------------------------------------------------------- line by line
def _code_lines(script: JobScript) -> list[tuple[int, str]]:
    """(line number, text) of the lines the shell reads as code: not comments, not the
    bodies of here-documents."""
    bodies = heredoc_lines(script.text)
    return [
        (n, line)
        for n, line in enumerate(text_lines(script.text), start=1)
        if n not in bodies and not line.lstrip().startswith("#")
    ]


def continuation_findings(script: JobScript) -> list[Finding]:
    out = []
    lines = dict(_code_lines(script))
    for n, line in lines.items():
        m = re.search(r"(\\+)([ \t]+)$", line)
        if not m or len(m[1]) % 2 == 0:
            continue
        nxt = lines.get(n + 1, "").strip()
        where = f"line {n + 1} ({nxt[:40]}{'...' if len(nxt) > 40 else ''})" if nxt else "the rest"
        out.append(
            Finding(
                script.path,
                n,
                "continuation-blank",
                f"{len(m[2])} blank(s) follow the backslash that should continue this line: it "
                f"escapes the blank instead of the line break, so the command ends here (with a "
                f"word that is a blank) and {where} runs as a command of its own",
            )
        )
    return out


def assignment_findings(script: JobScript) -> list[Finding]:
    out = []
    for cmd in script.commands:
        w = cmd.words
        if len(w) >= 2 and ASSIGN_WITH_BLANKS.match(w[0]) and (w[1] == "=" or w[1].startswith("=")):
            if w[0] in SETUP or w[0] in {"test", "["}:
                continue
            out.append(
                Finding(
                    script.path,
                    cmd.line,
                    "assignment-blanks",
                    f"'{w[0]} {w[1]} ...' runs a command named {w[0]} (bash: {w[0]}: command "
                    f"not found) and sets no variable: write {w[0]}={w[1].lstrip('=') or '...'}"
                    " with no blanks around '='",
                )
            )
    return out


def launch_findings(script: JobScript) -> list[Finding]:
    """A job that starts no program: its launches are all commented out."""
    commented = [
        (n, m[1])
        for n, line in enumerate(text_lines(script.text), start=1)
        if (m := COMMENTED_LAUNCH.match(line))
    ]
    if not commented:
        return []
    names = [Path(c.name).name for c in script.commands if c.words]
    if any(n not in SETUP for n in names):
        return []
    n, tool = commented[0]
    return [
        Finding(
            script.path,
            n,
            "no-launch",
            f"every launch of this job is commented out (the first: {tool} on line {n}): it "
            "prepares its environment and ends without starting a program",
            level="warning",
        )
    ]
