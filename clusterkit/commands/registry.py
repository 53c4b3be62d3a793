"""Judges of the commands a page shows register here by name; the router looks a command up
once and imports none of them.

A judge is ``fn(page, line, words, site, snippet) -> list[Finding]``: ``words[0]`` is the
command as written, ``site`` the site the page means (None on a page for every site) and
``snippet`` the whole block or span the command came from (an install reads its Python from
it). ``@register("pip", "pip3")`` makes ``fn`` the judge of those names; ``site_free=True``
says that it judges without a site too (``git``, ``tensorboard``), so a page for every site may
show the command. What a site's profile names rather than a fixed name is registered by kind:
``@register_kind("launcher")`` judges each launcher the profile lists (``srun``, ``mpirun``),
``"wrapper"`` its wrappers of a Slurm client (Bede's ``ghbatch``), ``"tool"`` its other tools.

The judges live in the modules of :data:`JUDGE_MODULES`, imported on the first look-up (as
:mod:`clusterkit.emulate.registry` loads the emulator's judges, the way ReFrame loads its
launchers), so that the router (:mod:`clusterkit.commands.shell`) imports none of them.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass

JUDGE_MODULES = (
    "clusterkit.commands.jobs",
    "clusterkit.commands.python",
    "clusterkit.commands.conda",
    "clusterkit.commands.containers",
    "clusterkit.commands.copies",
    "clusterkit.commands.downloads",
    "clusterkit.commands.git",
    "clusterkit.commands.tools",
)
KINDS = ("launcher", "wrapper", "tool")  # in the order a name is looked up in a profile


@dataclass(frozen=True)
class Judge:
    name: str
    judge: Callable  # (page, line, words, site, snippet) -> list[Finding]
    site_free: bool = False  # judges a command on a page for every site, too

    def __call__(self, page, line: int, words: list[str], site, snippet: str = "") -> list:
        return self.judge(page, line, words, site, snippet)


_COMMANDS: dict[str, Judge] = {}
_KINDS: dict[str, Judge] = {}
_PYTHON = re.compile(r"^python(3(\.\d+)?)?$")
_loaded = False


def register(*names: str, site_free: bool = False):
    """Decorator: ``fn(page, line, words, site, snippet)`` judges commands called ``names``."""

    def add(fn: Callable) -> Callable:
        for name in names:
            _COMMANDS[name] = Judge(name, fn, site_free)
        return fn

    return add


def register_kind(kind: str):
    """Decorator: ``fn`` judges every command a site's profile lists as a ``kind`` (one of
    :data:`KINDS`)."""
    if kind not in KINDS:
        raise ValueError(f"no such kind of command: {kind!r} (known: {', '.join(KINDS)})")

    def add(fn: Callable) -> Callable:
        _KINDS[kind] = Judge(kind, fn)
        return fn

    return add


def _load() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for name in JUDGE_MODULES:
            importlib.import_module(name)


def command(name: str, site=None) -> Judge | None:
    """The judge of a command: the one registered under its name (``python3.12`` is judged as
    ``python``, on a site's pages only), else, given a site, the judge of what its profile
    lists the name as; None when nothing judges it."""
    _load()
    if name in _COMMANDS:
        return _COMMANDS[name]
    if _PYTHON.match(name) and "python" in _COMMANDS:
        return Judge(name, _COMMANDS["python"].judge)
    if site is not None:
        for kind in KINDS:
            if kind in _KINDS and getattr(site, kind)(name):
                return _KINDS[kind]
    return None


def commands() -> dict[str, Judge]:
    """Every judge registered by name."""
    _load()
    return dict(_COMMANDS)
