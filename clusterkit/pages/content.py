"""Content checks that read what pages and job scripts say, not only what they run.

``python -m clusterkit.pages.content``; part of ``python -m clusterkit.pages.fast``.

* ``option-unit``: what a comment or page sentence says an option counts, against the
  trainer's own help (:mod:`~clusterkit.pages.option_units`);
* ``cited-heading``: job-script comments cite page headings that exist
  (:mod:`~clusterkit.pages.cited_headings`);
* ``unpinned-install`` / ``unpinned-image``: installs and images name their versions
  (:mod:`~clusterkit.commands.pins`);
* ``binding-workers``: no rank is bound to fewer cores than the loader workers it starts
  (:mod:`~clusterkit.commands.binding`);
* ``script-env-unknown`` / ``script-env-arch``: job scripts activate environments the pages
  create, from directories of their nodes' architecture (:mod:`~clusterkit.commands.script_envs`).

Each finding names file, line and rule.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from clusterkit.commands import binding, pins, script_envs
from clusterkit.pages import cited_headings, option_units
from clusterkit.sites.errors import Finding
from clusterkit.sites.profiles import ROOT

CHECKS = {
    "option-unit": option_units.lint_all,
    "cited-heading": cited_headings.lint_all,
    "pins": pins.lint_all,
    "binding-workers": binding.lint_all,
    "script-envs": script_envs.lint_all,
}


def lint_all(root: Path = ROOT) -> list[Finding]:
    out: list[Finding] = []
    for check in CHECKS.values():
        out += check(root)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.parse_args(argv)
    found = lint_all()
    for f in found:
        print(f, file=sys.stderr)
    print(f"content: {len(found)} finding(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
