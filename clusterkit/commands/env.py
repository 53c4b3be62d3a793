"""Environment settings a page shows (``export NCCL_DEBUG=INFO``), judged against the variables
each tool reads (``contracts/environment.yaml``).

A variable whose name starts with a recorded prefix (``NCCL_``, ``APPTAINER_``) must be one the
tool reads, with a value it takes; a path value must lie on the site's file systems
(:mod:`clusterkit.commands.paths`). A block of settings only (exports and assignments) is run in
bash, with ``set -e`` and a bare environment, so a setting the shell refuses
(``export NCCL_DEBUG = INFO``) fails there.
"""

from __future__ import annotations

import re
import subprocess
from functools import cache

import yaml

from clusterkit.commands import paths as path_checks
from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import ROOT, Site

RECORD = ROOT / "contracts" / "environment.yaml"
_NAME = re.compile(r"^[A-Za-z_]\w*$")


@cache
def tools() -> list[dict]:
    return list(yaml.safe_load(RECORD.read_text(encoding="utf-8"))["tools"])


def tool_of(name: str) -> dict | None:
    return next((t for t in tools() if name.startswith(t["prefix"])), None)


def settings(words: list[str]) -> list[tuple[str, str | None]]:
    """(name, value or None) of ``export A=1 B`` words."""
    out = []
    for word in words[1:]:
        if word.startswith("-"):
            continue
        name, eq, value = word.partition("=")
        out.append((name, value if eq else None))
    return out


def check(page, line: int, words: list[str], site: Site | None) -> tuple[list[Finding], int]:
    """(findings, how many recorded variables were judged) for an ``export`` command."""
    findings, judged = [], 0
    for name, value in settings(words):
        tool = tool_of(name)
        if tool is None:
            continue
        judged += 1
        findings += _judge(page, line, tool, name, value, site)
    return findings, judged


def _judge(page, line: int, tool: dict, name: str, value, site) -> list[Finding]:
    rule = tool["variables"].get(name)
    if rule is None:
        known = ", ".join(sorted(tool["variables"]))
        msg = f"{name}: {tool['name']} reads no such variable (recorded: {known})"
        return [Finding(page, line, "env-unknown", msg)]
    if value is None or ("$" in value and not rule.get("path")):
        return []
    if rule.get("values"):
        allowed = {v.upper() for v in rule["values"]}
        items = value.split(",") if rule.get("list") else [value]
        bad = [i for i in items if i.lstrip("^").upper() not in allowed]
        if bad:
            msg = f"{name}={value}: {bad[0]!r} is not one of {', '.join(rule['values'])}"
            return [Finding(page, line, "env-value", msg)]
    if rule.get("path") and site is not None and value.startswith("/"):
        found = path_checks.judge(page, line, value, site)
        return [found] if found else []
    return []


def settings_only(commands) -> bool:
    """Whether the commands are all exports and assignments."""
    return bool(commands) and all(
        (not c.words and c.assignments) or (c.words and c.words[0] == "export") for c in commands
    )


def run_settings(page, first_line: int, source: str) -> list[Finding]:
    """Run a block of settings in bash (``set -e``, a bare environment)."""
    env = {"PATH": "/usr/bin:/bin", "HOME": "/home/user", "USER": "user"}
    r = subprocess.run(
        ["bash", "-c", "set -e\n" + source], env=env, capture_output=True, text=True, timeout=30
    )
    if r.returncode:
        said = (r.stderr.strip().splitlines() or ["(no message)"])[-1]
        return [Finding(page, first_line, "env-run", f"bash refused these settings: {said}")]
    return []
