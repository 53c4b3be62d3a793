"""Lmod modulefiles generated from a site profile, so that the real Lmod judges ``module load``.

Each module of the inventory becomes ``<root>/<site>/<name>/<version>.lua``. A current module
only records that it was loaded (the software itself is not here) and sets the variables its
``sets`` names (one that holds a node-local path, such as ``$LOCALDIR``, names the directory a job
run here has for that path); a historical one loads with a
notice naming its replacement; a removed one fails with ``LmodError`` naming the replacement, the
way sites retire software. A bare name resolves to the version marked default, as on the site.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from clusterkit.sites.profiles import Site

CONDA_MODULE = "conda"  # a module that brings conda (NERSC's): `conda activate` works after it
CONDA_FUNCTION = (
    'case "${1:-}" in activate|deactivate) '
    'echo "[conda stand-in] conda $* (the current Python environment is used)" >&2 ;; '
    '*) command conda "$@" ;; esac'
)


def _lua(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def modulefile(site: Site, mod) -> str:
    provides = mod.raw.get("provides", "")
    var = "CLUSTERKIT_MODULE_" + re.sub(r"\W", "_", mod.name).upper()
    lines = [
        f"-- generated from sites/{site.name}.yaml: a stand-in that installs no software",
        f'whatis("{_lua(provides or mod.full_name)}")',
        f'setenv("{var}", "{_lua(mod.version or "")}")',
    ]
    staged = {p.variable: p for p in site.places.values() if p.variable and p.staging}
    for item in mod.raw.get("sets", ()):
        name, eq, value = item.partition("=")
        if not eq and name in staged:
            # node-local storage: in a job run here, the job's own directory for that path
            # (clusterkit.runs.run_storage makes it); elsewhere a name that is no directory
            stand_in = f"/clusterkit-stand-in/{mod.full_name}"
            lines.append(
                f'local job = os.getenv("CLUSTERKIT_JOB_SCRATCH")\n'
                f'setenv("{_lua(name)}", job and pathJoin(job, "{_lua(staged[name].name)}") '
                f'or "{_lua(stand_in)}")'
            )
            continue
        value = value if eq else f"/clusterkit-stand-in/{mod.full_name}"
        lines.append(f'setenv("{_lua(name)}", "{_lua(value)}")')
    if mod.name == CONDA_MODULE:
        # the site's conda: the module defines the shell function `conda` as conda's own
        # hook does; here activate and deactivate keep the current Python environment
        lines.append(f'set_shell_function("conda", "{_lua(CONDA_FUNCTION)}", "")')
    if mod.status == "historical":
        repl = f"; now: {mod.replacement}" if mod.replacement else ""
        msg = f"{mod.full_name} is historical on {site.title}{repl}"
        lines.append(f'LmodMessage("{_lua(msg)}")')
    if mod.status == "removed":
        msg = f"{mod.full_name} has been removed from {site.title}; use {mod.replacement}"
        lines.append(f'LmodError("{_lua(msg)}")')
    return "\n".join(lines) + "\n"


def write_modulefiles(site: Site, root: Path) -> Path:
    top = root / site.name
    top.mkdir(parents=True, exist_ok=True)
    for mod in site.modules:
        if mod.version and mod.raw.get("separate"):
            # a module of its own (brics/userenv beside brics/nccl): Lmod takes the directories
            # above the file for the name, so the two load side by side
            target = top / mod.name / mod.version / "stand-in.lua"
        elif mod.version:
            target = top / mod.name / f"{mod.version}.lua"
        else:
            target = top / f"{mod.name}.lua"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(modulefile(site, mod))
        if mod.version and mod.default:
            link = top / mod.name / "default"
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(target.name)
    return top


def ensure_modulefiles(site: Site, root: Path | None = None) -> Path:
    root = Path(
        root
        or os.environ.get("CLUSTERKIT_MODULE_ROOT")
        or Path(tempfile.gettempdir()) / f"clusterkit-modules-{os.getuid()}"
    )
    stamp = root / f".{site.name}.stamp"
    # the profile's and this generator's versions: a change to either writes the files again
    key = f"{site.path.stat().st_mtime_ns}:{Path(__file__).stat().st_mtime_ns}"
    if not stamp.is_file() or stamp.read_text() != key:
        write_modulefiles(site, root)
        stamp.write_text(key)
    return root / site.name
