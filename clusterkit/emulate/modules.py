"""``module``/``ml`` commands judged against a site's module inventory (the profile).

The real Lmod also runs in the tests, on modulefiles generated from the same profiles
(:mod:`clusterkit.sites.lmod`); this module gives the same verdicts without a shell, for dry runs.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from clusterkit.emulate.body import Context, Placement
from clusterkit.emulate.registry import register_command
from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import Site

# Lmod sub-commands that take module names
_LOADERS = {"load", "add", "try-load", "try-add", "switch", "swap"}
_HARMLESS = {
    "purge",
    "list",
    "avail",
    "spider",
    "show",
    "help",
    "whatis",
    "unload",
    "rm",
    "del",
    "reset",
    "restore",
    "save",
    "savelist",
    "describe",
    "keyword",
    "is-loaded",
    "is-avail",
    "use",
    "unuse",
    "refresh",
    "update",
    "overview",
    "--version",
}


def module_names(words: list[str]) -> tuple[str, list[str]]:
    """(sub-command, module names) for ``module ...`` or ``ml ...`` words (without the command)."""
    args = [w for w in words if not w.startswith("-")]
    if not args:
        return "list", []
    sub, rest = args[0], args[1:]
    if sub in _LOADERS or sub in _HARMLESS:
        if sub in {"switch", "swap"} and len(rest) == 2:
            rest = rest[1:]
        return sub, rest
    return "load", args  # `ml name ...` loads


@register_command("module")
def judge_module(ctx: Context, line: int, words: list[str], placement: Placement | None) -> None:
    ctx.extend(check_module_command(ctx.path, line, "module", words[1:], ctx.site))


@register_command("ml")
def judge_ml(ctx: Context, line: int, words: list[str], placement: Placement | None) -> None:
    ctx.extend(check_module_command(ctx.path, line, "ml", words[1:], ctx.site))


def check_module_command(
    path: Path | str, line: int, tool: str, words: list[str], site: Site
) -> list[Finding]:
    sub, names = module_names(words)
    if tool == "module" and sub not in _LOADERS and sub not in _HARMLESS:
        return [Finding(path, line, "module-subcommand", f"module: unknown sub-command {sub!r}")]
    if sub not in _LOADERS and tool == "module":
        return []
    if tool == "ml" and sub != "load" and sub not in _LOADERS:
        return []
    return [f for name in names for f in check_module(path, line, name, site)]


def refresh_hint(site: Site) -> str:
    """How the module inventory of ``site`` is brought up to date (or why it cannot be)."""
    if site.status == "retired":
        return f"{site.title} is retired: its inventory can no longer be refreshed"
    return (
        f"if {site.title} has it, refresh the profile: python -m clusterkit.sites.refresh "
        f"--site {site.name} --module-avail FILE (FILE: what `module -t avail` prints there)"
    )


def check_module(path: Path | str, line: int, spec: str, site: Site) -> list[Finding]:
    """The verdict on loading ``spec`` (``name`` or ``name/version``) on ``site``."""
    if spec.startswith("-") or "$" in spec or spec in site.placeholders:
        return []
    if spec in _LOADERS or spec in _HARMLESS or spec in {"module", "ml"}:
        # `module load module load X`: Lmod looks for modules named "module" and "load", stops
        # on the first it cannot find, and loads none of the names
        return [
            Finding(
                path,
                line,
                "module-known",
                f'module: The following module(s) are unknown: "{spec}" ({spec!r} is a word of '
                "the module command, not a module: is the command written twice?)",
            )
        ]
    if site.generic:
        return []  # no inventory: the site's modules are not known
    mod, others = site.find_module(spec)
    name = spec.split("/")[0]
    if mod is None and not others:
        near = _misspelt(name, site)
        if near:  # a name one or two letters from one the site has: a typo, inventory or not
            return [
                Finding(
                    path,
                    line,
                    "module-known",
                    f'module: The following module(s) are unknown: "{spec}" (did you mean '
                    f"{', '.join(near)}? {site.title} has no module of that name)",
                )
            ]
    if mod is None and not site.modules_complete and not (others and site.versions_complete(name)):
        # a partial inventory claims every version only of the names it says it lists whole
        return [_unlisted(path, line, spec, site, [m.full_name for m in others])]
    if mod is None:
        return [_unknown(path, line, spec, site, [m.full_name for m in others])]
    if mod.status == "removed":
        why = f"has been removed from {site.title}; use {mod.replacement}"
        return [Finding(path, line, "module-removed", f"module {mod.full_name} {why}")]
    if mod.status == "historical":
        where = f"; now: {mod.replacement}" if mod.replacement else ""
        message = f"module {mod.full_name} is historical on {site.title}{where}"
        return [Finding(path, line, "module-historical", message, level="warning")]
    return []


def edits(a: str, b: str, most: int = 2) -> int:
    """Levenshtein distance of ``a`` and ``b`` (``most + 1`` once it exceeds ``most``)."""
    if abs(len(a) - len(b)) > most:
        return most + 1
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, start=1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, start=1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
        if min(row) > most:
            return most + 1
    return row[-1]


def _misspelt(name: str, site: Site) -> list[str]:
    """Module names of the site one or two edits from ``name`` (a name of 5 letters or more:
    shorter ones are too close to each other to tell a typo from another module)."""
    if len(name) < 5:
        return []
    names = sorted({m.name for m in site.modules} - {name})
    return [n for n in names if len(n) >= 5 and edits(name.lower(), n.lower()) <= 2]


def _unlisted(path: Path | str, line: int, spec: str, site: Site, versions: list[str]) -> Finding:
    """A module the inventory does not claim to know (it is partial): a warning."""
    near = difflib.get_close_matches(spec.split("/")[0], sorted({m.name for m in site.modules}))
    hint = f" (did you mean {', '.join(near)}?)" if near else ""
    if versions:
        hint = f" (it lists {', '.join(versions)})"
    return Finding(
        path,
        line,
        "module-unlisted",
        f"module {spec} is not in {site.title}'s profile{hint}, whose module inventory is "
        f"partial: not judged; {refresh_hint(site)}",
        level="warning",
    )


def _unknown(path: Path | str, line: int, spec: str, site: Site, versions: list[str]) -> Finding:
    """A module Lmod would not find: the versions that exist, or names close to it."""
    near = difflib.get_close_matches(spec, [m.full_name for m in site.modules], n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(near)}?" if near else ""
    if versions:
        hint = f"; {site.title} has {', '.join(versions)}"
    return Finding(
        path,
        line,
        "module-known",
        f'module: The following module(s) are unknown: "{spec}" '
        f"({site.title}'s profile does not list it{hint})",
    )
