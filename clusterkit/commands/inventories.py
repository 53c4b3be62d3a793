"""Module inventories: every ``module load``/``module use``/``ml`` in pages and examples names
what the site's profile lists.

The verdicts are the emulator's (:func:`clusterkit.emulate.modules.check_module`): an unknown
module fails with the versions that exist, a removed one with its replacement, a historical one
warns. On top of that:

* ``module use DIR`` must name a module path the profile lists (a module's ``modulepath``, or
  a path under ``paths:``);
* a job script that asks for a partition must load only modules built for that partition's
  node type (a module's ``node_types``), e.g. no aarch64-only ``cuda`` on POWER9 nodes.

Pages get their site from a ``% test: site`` marker, the enclosing site tab or the page's
``site:`` front matter; examples from ``examples/<site>/``. A module command with no site to
judge it against fails (``module-site``).

``python -m clusterkit.commands.inventories [--sites-dir DIR]`` checks the tree (``--sites-dir``
points it at other profiles, e.g. a refreshed proposal).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from clusterkit.emulate import modules as M
from clusterkit.grammars import myst as P
from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import ROOT, Site, load_profile, profile_paths, unless_unloaded

LOAD = {"load", "add", "try-load", "try-add", "switch", "swap"}


class Sites:
    """Site profiles by name, loaded from a directory (default: the project's sites/)."""

    def __init__(self, sites_dir: Path | None = None):
        self.dir = Path(sites_dir) if sites_dir else None
        self._cache: dict[str, Site] = {}

    def get(self, name: str | None) -> Site | None:
        if not name:
            return None
        if name not in self._cache:
            if self.dir is None:
                from clusterkit.sites.profiles import load_site

                self._cache[name] = load_site(name)
            else:
                path = self.dir / f"{name}.yaml"
                if not path.is_file():
                    return None
                self._cache[name] = load_profile(path)
        return self._cache[name]

    def names(self) -> list[str]:
        if self.dir is None:
            return [p.stem for p in profile_paths()]
        return [p.stem for p in profile_paths(self.dir)]


def is_placeholder(spec: str) -> bool:
    """``NAME/VERSION``, ``<module>``, ``name/...``: prose, not a module to look up."""
    return (
        bool(re.fullmatch(r"[A-Z][A-Z_]*(/[A-Z][A-Z_]*)?", spec))
        or any(c in spec for c in "<>[]{}")
        or spec.endswith("...")
    )


def modulepaths(site: Site) -> set[str]:
    out = {m.raw["modulepath"].rstrip("/") for m in site.modules if m.raw.get("modulepath")}
    out |= {p["path"].rstrip("/") for p in site.data.get("paths", {}).values()}
    return out


def check_words(
    path: Path | str,
    line: int,
    words: list[str],
    site: Site | None,
    node_type: str | None = None,
) -> list[Finding]:
    """Findings for one ``module ...``/``ml ...`` command (``words`` include the command)."""
    tool, args = Path(words[0]).name, words[1:]
    sub, names = M.module_names(args)
    first = next((a for a in args if not a.startswith("-")), None)
    if tool == "module" and first is not None and first not in LOAD | M._HARMLESS:
        return [Finding(path, line, "module-subcommand", f"module: unknown sub-command {first!r}")]
    if tool == "module" and sub not in LOAD and sub != "use":
        if sub in M._HARMLESS or sub == "list":
            return []
    if tool == "ml" and sub not in LOAD and sub not in {"load", "use"}:
        return []
    names = [n for n in names if not is_placeholder(n)]
    if not names:
        return []
    if site is None:
        return [
            Finding(
                path,
                line,
                "module-site",
                f"`{' '.join(words)}` depends on the site: give the page `site:` front matter, "
                "put the block in a site tab, or mark it `% test: site <name>`",
            )
        ]
    if sub == "use":
        known = modulepaths(site)
        out = []
        for d in names:
            if "$" in d:
                continue
            if d.rstrip("/") not in known:
                out.append(
                    Finding(
                        path,
                        line,
                        "module-use",
                        f"module use {d}: {site.title}'s profile lists no such module path "
                        f"(known: {', '.join(sorted(known)) or 'none'})",
                    )
                )
        return out
    if tool == "module" and sub not in LOAD:
        return M.check_module_command(path, line, tool, args, site)
    out = []
    for spec in names:
        found = M.check_module(path, line, spec, site)
        out += found
        if found or node_type is None:
            continue
        mod, _ = site.find_module(spec)
        allowed = mod.raw.get("node_types") if mod else None
        if allowed and node_type not in allowed:
            out.append(
                Finding(
                    path,
                    line,
                    "module-node-type",
                    f"module {mod.full_name} is built for {', '.join(allowed)} nodes, but this "
                    f"job runs on {node_type} nodes",
                )
            )
    return out


def _module_commands(lines: list[tuple[int, str]], console: bool) -> list[tuple[int, list[str]]]:
    out = []
    for cmd in P.logical_commands(lines, console=console):
        for simple in P.split_commands(cmd.words):
            words = P.command_words(simple)
            if words and Path(words[0].text).name in {"module", "ml"}:
                out.append((words[0].line, [w.text for w in words]))
    return out


def lint_page(path: Path, sites: Sites | None = None, text: str | None = None) -> list[Finding]:
    sites = sites or Sites()
    page = P.scan_page(Path(path), text)
    out: list[Finding] = []
    for block in page.blocks:
        if block.is_include or not (block.is_shell or block.lang == ""):
            continue
        site = sites.get(P.block_site(page, block))
        for line, words in _module_commands(list(block.body), block.lang == "console"):
            out += check_words(path, line, words, site)
    for span in page.inline:
        code = re.sub(r"<[\w .-]+>", "PLACEHOLDER", span.code)  # `module load <name>` in prose
        for line, words in _module_commands([(span.line, code)], False):
            out += check_words(path, line, words, sites.get(P.block_site(page, span)))
    return out


_PARTITION = re.compile(r"^#SBATCH\s+(?:-p\s*|--partition[= ])\s*(\S+)", re.M)


def lint_file(
    path: Path, sites: Sites | None = None, text: str | None = None, site: str | None = None
) -> list[Finding]:
    """Module commands of an example; its site is ``site`` or the ``examples/<site>/`` dir."""
    sites = sites or Sites()
    path = Path(path)
    text = text if text is not None else path.read_text(encoding="utf-8", errors="replace")
    if P.file_kind(path, text) != "shell":
        return []
    site = sites.get(site or P.example_site(path))
    node_type = None
    m = _PARTITION.search(text)
    if site is not None:
        part = site.partitions.get(m[1]) if m else site.default_partition
        node_type = part.node_type.name if part else None
    out = []
    for line, words in _module_commands(list(enumerate(text.splitlines(), 1)), False):
        out += check_words(path, line, words, site, node_type)
    return out


def lint_all(root: Path = ROOT, sites_dir: Path | None = None) -> list[Finding]:
    sites = Sites(sites_dir)
    out: list[Finding] = []
    for page in sorted((root / "docs").rglob("*.md")):
        if "_build" not in page.parts:
            out += unless_unloaded(page, lambda p=page: lint_page(p, sites))
    for f in P.example_files(root / "examples"):
        out += unless_unloaded(f, lambda f=f: lint_file(f, sites))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sites-dir", type=Path, help="judge against these profiles instead")
    args = ap.parse_args(argv)
    found = lint_all(sites_dir=args.sites_dir)
    errors = [f for f in found if f.level == "error"]
    for f in found:
        print(f, file=sys.stderr)
    print(f"module inventory: {len(errors)} error(s), {len(found) - len(errors)} warning(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
