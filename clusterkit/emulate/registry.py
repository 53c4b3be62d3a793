"""Judges register here by name; the core looks them up and imports none of them.

A scheduler judge (``@register_scheduler("slurm")``) judges a whole job script of a site whose
profile names that scheduler. A command judge (``@register_command("srun")``) judges one command
of a script's body: a launcher, a wrapper that starts another command, a program, ``module``.
A command judge that belongs to one scheduler says so (``scheduler="lsf"`` for ``jsrun``), and
is then used only on that scheduler's sites. What a site's profile names rather than a fixed
name is registered by kind (``@register_kind("wrapper", scheduler="slurm")`` judges every
command a profile lists as a wrapper of a Slurm client, Bede's ``ghbatch``) and found when a
command of that site is looked up, so no profile is read before a site is asked for. The judges
live in the modules of
:data:`JUDGE_MODULES`, imported on the first look-up (the way ReFrame loads its schedulers and
launchers), so that no judge imports another and the core imports none.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

JUDGE_MODULES = (
    "clusterkit.emulate.sbatch",
    "clusterkit.emulate.srun",
    "clusterkit.emulate.ibrun",
    "clusterkit.emulate.lsf",
    "clusterkit.emulate.jsrun",
    "clusterkit.emulate.ddl",
    "clusterkit.emulate.containers",
    "clusterkit.emulate.shifter",
    "clusterkit.emulate.podman_hpc",
    "clusterkit.emulate.modules",
    "clusterkit.emulate.programs",
    "clusterkit.emulate.hf_launchers",
    "clusterkit.emulate.wrappers",
    "clusterkit.emulate.sbcast",
    "clusterkit.emulate.hub",
)


@dataclass(frozen=True)
class CommandJudge:
    name: str
    judge: Callable  # (context, line, words, placement) -> None; words[0] is the command
    scheduler: str | None = None  # the scheduler whose launcher this is, if it is one


_COMMANDS: dict[str, CommandJudge] = {}
_KINDS: dict[str, CommandJudge] = {}  # kind (a method of Site: wrapper) -> its judge
_SCHEDULERS: dict[str, Callable] = {}
_SNIPPETS: dict[str, Callable] = {}
_loaded = False


def register_command(*names: str, scheduler: str | None = None):
    """Decorator: ``fn(context, line, words, placement)`` judges commands called ``names``
    (``words[0]`` is the command as written)."""

    def add(fn: Callable) -> Callable:
        for name in names:
            _COMMANDS[name] = CommandJudge(name, fn, scheduler)
        return fn

    return add


def register_kind(kind: str, scheduler: str | None = None):
    """Decorator: ``fn(context, line, words, placement)`` judges every command a site's
    profile lists as a ``kind`` (``site.wrapper(name)`` for ``"wrapper"``)."""

    def add(fn: Callable) -> Callable:
        _KINDS[kind] = CommandJudge(kind, fn, scheduler)
        return fn

    return add


def register_scheduler(kind: str):
    """Decorator: ``fn(path, site, argv, text, first_line) -> Report`` judges whole scripts."""

    def add(fn: Callable) -> Callable:
        _SCHEDULERS[kind] = fn
        return fn

    return add


def register_snippet_job(kind: str):
    """Decorator: ``fn(site, report) -> Context``, the job a command shown on its own (a page
    snippet) is judged in on a site of that scheduler."""

    def add(fn: Callable) -> Callable:
        _SNIPPETS[kind] = fn
        return fn

    return add


def _load() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for name in JUDGE_MODULES:
            importlib.import_module(name)


def command(name: str, site=None) -> CommandJudge | None:
    """The judge of a command (``python3.11`` is judged as ``python``), else, given a site,
    the judge of what its profile lists the name as; None when nothing judges it."""
    _load()
    found = _COMMANDS.get("python" if name.startswith("python") else name)
    if found is None and site is not None:
        for kind, judge in _KINDS.items():
            if getattr(site, kind)(name):
                return CommandJudge(name, judge.judge, judge.scheduler)
    return found


def scheduler(kind: str) -> Callable:
    _load()
    return _SCHEDULERS[kind]


def snippet_job(kind: str) -> Callable:
    _load()
    return _SNIPPETS[kind]


def commands() -> dict[str, CommandJudge]:
    _load()
    return dict(_COMMANDS)
