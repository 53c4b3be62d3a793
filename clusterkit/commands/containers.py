"""``apptainer`` / ``singularity`` commands a page shows.

The command line goes through Apptainer's flag tables (``build``, ``pull``, ``exec``, ``run``,
... via :mod:`clusterkit.emulation`); each ``docker://`` image it names is judged against the
recorded tag lists for the node the page means (:mod:`clusterkit.container_images`,
:mod:`clusterkit.install_target`); the command ``exec`` runs inside the container is checked as
well, a ``pip install`` there for the image's own Python where the record gives it.
"""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path

from clusterkit import container_images, emulation, install_target, installs, python_commands
from clusterkit.errors import Finding
from clusterkit.profiles import Site

TOOLS = ("apptainer", "singularity")


def check(page, line: int, words: list[str], site: Site, snippet: str = "", inner=None):
    """Findings for ``words`` (``apptainer build ...``); ``inner(page, line, words, site,
    snippet)`` checks the command an ``exec`` runs."""
    tool, args = Path(words[0]).name, list(words[1:])
    command, findings = emulation.container_check(page, line, tool, args)
    if any(f.level == "error" for f in findings):
        return findings
    parsed = emulation.container_parse(tool, args)
    target = install_target.target_for(page, line, site, snippet)
    for arg in parsed.args if parsed.sub in {"build", "pull"} else parsed.args[:1]:
        findings += container_images.check_image(page, line, arg, target.arch)
    if parsed.sub == "exec" and command:
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
            parsed = emulation.container_parse(Path(words[0]).name, words[1:])
        except emulation.ContainerOptionError:
            continue
        target, source = (a.rstrip("/") for a in parsed.args)
        out[target] = out.get(source, source)  # a sandbox's source, if built from one above
    return out
