"""``python ...`` command lines a page shows, each judged by what it starts.

* ``python -m pip ...``: pip's parser, then the install resolved for the node and Python the
  page means (:mod:`clusterkit.commands.install_target`, :mod:`clusterkit.commands.installs`);
* ``python -m torch.distributed.run`` / ``launch`` and ``python SCRIPT.py``: the launcher rules
  and the script's command-line contract, as in a job script;
* ``python -m MODULE ...`` (``venv``, ``clusterkit.reframe.config``, ...): the module's own
  argparse options, read from its source without running it (:mod:`clusterkit.sites.contracts`);
* ``python -c CODE``: compiled.

The interpreter's own options (``-u``, ``-O``, ``-W arg``, ...) are skipped first.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

from clusterkit.commands import install_target, installs, stack_installs
from clusterkit.commands.registry import register
from clusterkit.emulate import body as _body
from clusterkit.emulate import programs as _programs
from clusterkit.emulate import registry as _emulate_registry
from clusterkit.emulate.report import Report
from clusterkit.sites import contracts
from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import Site, all_sites

_VALUED = {"-W", "-X", "-Q"}
LAUNCH_MODULES = {"torch.distributed.run", "torch.distributed.launch"}


@dataclass
class PythonCommand:
    mode: str  # module, code, script, none
    target: str = ""
    args: list[str] = field(default_factory=list)


def split(words: list[str]) -> PythonCommand:
    """``python [interpreter options] (-m MODULE | -c CODE | SCRIPT) ARGS``."""
    i = 1
    while i < len(words):
        w = words[i]
        if w in {"-m", "-c"}:
            if i + 1 >= len(words):
                return PythonCommand("none")
            mode = "module" if w == "-m" else "code"
            return PythonCommand(mode, words[i + 1], list(words[i + 2 :]))
        if w.startswith(("-m", "-c")) and len(w) > 2:
            mode = "module" if w[1] == "m" else "code"
            return PythonCommand(mode, w[2:], list(words[i + 1 :]))
        if not w.startswith("-") or w == "-":
            return PythonCommand("script", w, list(words[i + 1 :]))
        i += 2 if w in _VALUED else 1
    return PythonCommand("none")


@register("python", "python3", site_free=True)
def check(page, line: int, words: list[str], site: Site, snippet: str = "") -> list[Finding]:
    cmd = split(words)
    if cmd.mode == "none":
        msg = f"`{' '.join(words)}` starts an interactive interpreter: nothing to check"
        return [Finding(page, line, "block-untested", msg)]
    if cmd.mode == "code":
        try:
            compile(cmd.target, f"{page}:{line}", "exec")
        except SyntaxError as exc:
            return [Finding(page, line, "python-syntax", f"python -c: {exc.msg}")]
        return []
    if site is None and cmd.mode == "script":
        return script_options(page, line, cmd.target, cmd.args)
    if cmd.mode == "script" or cmd.target in LAUNCH_MODULES:
        if site is None:
            return [_needs_site(page, line, words)]
        return _body.check_command_line(page, line, list(words), site).errors
    if cmd.target == "pip":
        if site is None:
            return [_needs_site(page, line, words)]
        return pip_install(page, line, cmd.args, site, snippet)
    return module_options(page, line, cmd.target, cmd.args)


@register("pip", "pip3")
def pip(page, line: int, words: list[str], site: Site, snippet: str = "") -> list[Finding]:
    """``pip ARGS``, as ``python -m pip ARGS``."""
    return pip_install(page, line, list(words[1:]), site, snippet)


def pip_install(page, line: int, args: list[str], site: Site, snippet: str) -> list[Finding]:
    """pip's command line, then the install resolved for the node and Python the page means
    and held to the stack it builds."""
    target = install_target.target_for(page, line, site, snippet)
    found = installs.check_pip(page, line, args, target)
    return found + stack_installs.check_pip(page, line, args, site, snippet)


def script_options(path, line: int, script: str, args: list[str]) -> list[Finding]:
    """``python SCRIPT ARGS`` on a page for every site: ARGS against the script's command-line
    contract (the project's example or benchmark, or a kept third-party contract)."""
    report = Report(Path(path), "", plan={"steps": []})
    site = next(iter(all_sites()))  # a script's own options do not depend on the site
    ctx = _emulate_registry.snippet_job(site.scheduler)(site, report)
    _programs.check_python_invocation(ctx, line, script, list(args))
    return report.findings


def _needs_site(page, line: int, words: list[str]) -> Finding:
    msg = (
        f"`{' '.join(words[:3])}` depends on the site: put the block in a site tab or give "
        "the page a site"
    )
    return Finding(page, line, "block-site", msg)


def module_options(page, line: int, module: str, args: list[str]) -> list[Finding]:
    """``python -m MODULE ARGS``: ARGS against the module's argparse options."""
    path = module_path(module)
    if path is None:
        msg = f"python -m {module}: no such module here, so its options cannot be read"
        return [Finding(page, line, "block-untested", msg)]
    try:
        contract = contracts.own_contract(path, module)
    except contracts.ContractError as exc:
        return [Finding(page, line, "script-contract", f"python -m {module}: {exc}")]
    found = contracts.check_invocation(page, line, contract, args)
    return [Finding(f.path, f.line, f.rule, f"python -m {module}: {f.message}") for f in found]


def module_path(module: str) -> Path | None:
    """The file ``python -m MODULE`` runs (a package's ``__main__``), found without running it."""
    try:
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.submodule_search_locations is not None:
            spec = importlib.util.find_spec(module + ".__main__")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin)
