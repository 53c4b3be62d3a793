"""Tools a page shows that are judged by their own grammar (:mod:`clusterkit.grammars`), the
commands that start another one, and a site's own tools:

* ``tensorboard``, ``reframe``: their command-line parsers; the profilers (Nsight Systems,
  rocprof, ...): their options, and the program they profile through its own judge;
* ``sudo CMD``: CMD through its own judge; ``sh -c SCRIPT`` / ``bash -c SCRIPT``: the script's
  syntax, then its commands, as a snippet of their own; ``bash INSTALLER``: a recorded
  installer's options;
* a command the site's profile lists under ``tools:``: its number of arguments, and the
  module it comes with loaded earlier in the snippet.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from clusterkit.commands import downloads
from clusterkit.commands.registry import register, register_kind
from clusterkit.commands.shell import check_shell_text, inner_command
from clusterkit.grammars import hf_cli, profilers, reframe_cli, tensorboard_cli
from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import Site

register("tensorboard", site_free=True)(tensorboard_cli.check)


@register("hf", site_free=True)
def hf(page, line: int, words: list[str], site=None, snippet: str = ""):
    """``hf`` through its own parser; a download into the home directory is a warning (models
    are gigabytes; home quotas are small: project storage is the place)."""
    try:
        command, params = hf_cli.parse(list(words[1:]))
    except hf_cli.HfOptionError as exc:
        return [Finding(page, line, "hf-option", str(exc))]
    where = params.get("local_dir") or params.get("cache_dir")
    if command == "download" and hf_cli.in_home(where):
        msg = f"hf download into {where}: models fill a home quota; use project storage"
        return [Finding(page, line, "hf-home", msg, "warning")]
    return []


register("reframe", site_free=True)(reframe_cli.check)


@register(*profilers.PARSERS, site_free=True)
def profiler(page, line: int, words: list[str], site: Site, snippet: str = ""):
    def program(inner_words):
        return inner_command(page, line, inner_words, site, snippet)

    return profilers.check(page, line, words, program)


_SUDO_VALUED = {"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T"}


@register("sudo")
def sudo(page, line: int, words: list[str], site: Site, snippet: str = ""):
    i = 1
    while i < len(words) and words[i].startswith("-"):
        i += 2 if words[i] in _SUDO_VALUED else 1
    return inner_command(page, line, words[i:], site, snippet)


@register("sh", "bash")
def shell_c(page, line: int, words: list[str], site: Site, snippet: str = ""):
    """``sh -c 'SCRIPT'``: the script's syntax, then its commands; ``bash INSTALLER ...``: a
    recorded installer's options."""
    if "-c" not in words[1:-1]:
        found = downloads.check_installer(page, line, words, site, snippet)
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


_MODULE_LOAD = re.compile(r"\bmodule\s+(?:-\S+\s+)*(?:load|add)\s+([^;&|#\n]+)")


@register_kind("tool")
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
