"""Options a sentence gives to a tool the scheduler emulation does not run, judged by that
tool's own parser:

* ``pip``: pip's option parser (:mod:`clusterkit.grammars.pip_cli`), for ``pip install``,
  ``wheel`` and ``download``. An option pip has removed and the stale-command registry
  (``lint/deprecations.yaml``) records is told apart from one pip never had: it gets the
  registry's rule and replacement, which a sentence about the past turns into a notice. Names
  must be written in full: pip would take an abbreviation (``--no-build`` for
  ``--no-build-isolation``), a sentence that names an option should not;
* ``python -m MODULE`` (``venv``, ``clusterkit.reframe.config``): the module's argparse options,
  as a block's ``python -m`` line is judged (:func:`clusterkit.commands.python.module_options`);
* ``ddlrun``: IBM DDL's launcher, by its option table
  (:func:`clusterkit.emulate.launcher_options.parse_ddlrun`).
"""

from __future__ import annotations

import fnmatch
from functools import cache

from clusterkit.commands import deprecations
from clusterkit.commands import python as python_commands
from clusterkit.emulate.launcher_options import parse_ddlrun
from clusterkit.grammars import pip_cli
from clusterkit.sites.errors import Finding

PIP_SUBCOMMANDS = ("install", "wheel", "download")
MODULE_PREFIX = "python -m "


def knows(tool: str) -> bool:
    return tool in {"pip", "ddlrun"} or tool.startswith(MODULE_PREFIX)


def check(tool: str, page, line: int, options: list[str]) -> list[Finding]:
    """Findings for ``options`` given to ``tool`` with nothing else around them."""
    if tool == "pip":
        return pip_options(page, line, options)
    if tool == "ddlrun":
        _args, problems = parse_ddlrun(tool, [*options, "true"])
        return [Finding(page, line, "ddlrun-option", p) for p in problems]
    module = tool[len(MODULE_PREFIX) :]
    found = python_commands.module_options(page, line, module, options)
    # a module that is not here, or whose options cannot be read, takes no option
    return [
        Finding(f.path, f.line, "script-flags", f.message)
        if f.rule in {"block-untested", "script-contract"}
        else f
        for f in found
    ]


# --------------------------------------------------------------------------- pip
def removed_pip_options() -> dict[str, deprecations.Entry]:
    """The options of ``pip install`` the stale-command registry records, by name."""
    out = {}
    for entry in deprecations.registry():
        for cm in entry.commands:
            if any(fnmatch.fnmatchcase("pip", n) for n in cm.names):
                out.update(dict.fromkeys(cm.flags, entry))
    return out


def pip_options(page, line: int, options: list[str]) -> list[Finding]:
    """``options`` of ``pip install`` (or ``wheel``, ``download``: the first that has them)."""
    removed = removed_pip_options()
    stale, kept = [], []
    skip_value = False
    for i, word in enumerate(options):
        if skip_value:
            skip_value = False
            continue
        name = word.split("=", 1)[0]
        if word.startswith("-") and name in removed and not _current(name):
            entry = removed[name]
            stale.append(Finding(page, line, entry.rule, entry.message(f"pip install {name}")))
            # every option the registry records for pip took a value
            skip_value = "=" not in word and i + 1 < len(options)
            continue
        kept.append(word)
    problems = _pip_problems(kept)
    return stale + [Finding(page, line, "pip-option", p) for p in problems]


def _current(name: str) -> bool:
    return any(_parser(sub).has_option(name) for sub in PIP_SUBCOMMANDS)


def _pip_problems(words: list[str]) -> list[str]:
    names = [w.split("=", 1)[0] for w in words if w.startswith("-")]
    unknown = [n for n in names if not _current(n)]
    if unknown:
        return [f"pip install: no such option: {n}" for n in unknown]
    errors = []
    for sub in PIP_SUBCOMMANDS:
        if not all(_parser(sub).has_option(n) for n in names):
            continue
        try:
            pip_cli.parse([sub, *words])
            return []
        except pip_cli.PipOptionError as exc:
            errors.append(str(exc))
    return errors[:1]


@cache
def _parser(sub: str):
    from pip._internal.commands import create_command

    return create_command(sub, isolated=True).parser
