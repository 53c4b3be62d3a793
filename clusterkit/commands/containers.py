"""``apptainer`` / ``singularity`` commands a page shows.

The command line goes through Apptainer's flag tables (``build``, ``pull``, ``exec``, ``run``,
... via :mod:`clusterkit.emulate.container_options`); each ``docker://`` image it names is
judged against the recorded tag lists for the node the page means
(:mod:`clusterkit.sites.container_images`, :mod:`clusterkit.commands.install_target`); the
command ``exec`` runs inside the container is checked as well, a ``pip install`` there for the
image's own Python where the record gives it.
"""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path

from clusterkit.commands import install_target, installs
from clusterkit.commands import python as python_commands
from clusterkit.commands.registry import register
from clusterkit.commands.shell import inner_command
from clusterkit.emulate import container_options
from clusterkit.emulate import containers as _containers
from clusterkit.sites import container_images
from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import Site

TOOLS = ("apptainer", "singularity")


@register(*TOOLS)
def judge(page, line: int, words: list[str], site: Site, snippet: str = ""):
    """Findings for ``words`` (``apptainer build ...``); the command an ``exec`` runs goes to
    its own judge."""
    return check(page, line, words, site, snippet, inner=inner_command)


def check(page, line: int, words: list[str], site: Site, snippet: str = "", inner=None):
    """Findings for ``words`` (``apptainer build ...``); ``inner(page, line, words, site,
    snippet)`` checks the command an ``exec`` runs."""
    tool, args = Path(words[0]).name, list(words[1:])
    command, findings = _containers.check(page, line, tool, args)
    if any(f.level == "error" for f in findings):
        return findings
    parsed = container_options.parse(tool, args)
    target = install_target.target_for(page, line, site, snippet)
    for arg in parsed.args if parsed.sub in {"build", "pull"} else parsed.args[:1]:
        findings += container_images.check_image(page, line, arg, target.arch)
    if parsed.sub in _containers.FOLLOWED and command:
        source = built_from(snippet).get(parsed.args[0].rstrip("/"), parsed.args[0])
        findings += _inside(page, line, command, site, snippet, source, target, inner)
    return findings


def _inside(page, line, command, site, snippet, source, target, inner) -> list[Finding]:
    """The command run in the container: a pip install resolved for the image's Python."""
    ref = container_images.parse_ref(source)
    tag = container_images.tag_record(ref) if ref else None
    cmd = python_commands.split(command) if Path(command[0]).name.startswith("python") else None
    if cmd is not None and cmd.mode == "module" and cmd.target == "pip":
        python = (tag or {}).get("python", "")
        what = f"{ref.name if ref else source} on {target.what}"
        return installs.check_pip(page, line, cmd.args, replace(target, python=python, what=what))
    return inner(page, line, command, site, snippet) if inner else []


def built_from(snippet: str) -> dict[str, str]:
    """Image files and sandboxes that ``build`` commands in ``snippet`` make -> their source."""
    out = {}
    for raw in snippet.splitlines():
        try:
            words = shlex.split(raw, comments=True)
        except ValueError:
            continue
        if words and words[0] == "sudo":
            words = words[1:]
        if len(words) < 2 or Path(words[0]).name not in TOOLS or words[1] != "build":
            continue
        try:
            parsed = container_options.parse(Path(words[0]).name, words[1:])
        except container_options.ContainerOptionError:
            continue
        target, source = (a.rstrip("/") for a in parsed.args)
        out[target] = out.get(source, source)  # a sandbox's source, if built from one above
    return out
