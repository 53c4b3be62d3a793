#!/usr/bin/env python3
"""Write ``clusterkit/emulate/slurm_option_table.py``: the options of sbatch, srun and salloc in
each Slurm release, read from Slurm's own sources.

    python ci/slurm/option_table.py SLURM_GIT_DIR

SLURM_GIT_DIR is a git directory of SchedMD/slurm (a clone, or a fetched snapshot's
``repo``) holding the release tags below. For each release the getopt table of the three tools
is read from ``src/common/slurm_opt.c`` -- the entries of ``common_options[]`` with a name, their
``has_arg`` and short letter, and the tools whose ``set_func_<tool>`` (or the common
``set_func``) they have, as ``slurm_option_table_create`` builds the table -- and the options
the manual page documents from ``doc/man/man1/<tool>.1``. Nothing else is read. Rerun it when a
release is added to RELEASES; ``tests/slurm/test_option_tables.py`` holds the table to the
Slurm that CI installs.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "clusterkit" / "emulate" / "slurm_option_table.py"
# release -> the tag read (the last patch release tagged when the table was written)
RELEASES = {
    "22.05": "slurm-22-05-11-1",
    "23.02": "slurm-23-02-8-1",
    "23.11": "slurm-23-11-11-1",
    "24.05": "slurm-24-05-8-1",
    "24.11": "slurm-24-11-7-1",
    "25.05": "slurm-25-05-8-1",
    "25.11": "slurm-25-11-7-1",
}
TOOLS = ("sbatch", "srun", "salloc")
ARITY = {"no_argument": "F", "required_argument": "V", "optional_argument": "O"}


def show(git_dir: str, tag: str, path: str) -> str:
    return subprocess.run(
        ["git", f"--git-dir={git_dir}", "show", f"{tag}:{path}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def getopt_table(source: str) -> dict[str, dict[str, tuple[str | None, str]]]:
    """tool -> {long name: (short letter or None, arity F/V/O)}."""
    blocks = dict(
        re.findall(r"static slurm_cli_opt_t (slurm_opt_\w+) = \{(.*?)\n\};", source, re.S)
    )
    listed = re.search(r"common_options\[\] = \{(.*?)\};", source, re.S)
    out: dict[str, dict] = {t: {} for t in TOOLS}
    for var in re.findall(r"&(slurm_opt_\w+)", listed[1]):
        body = blocks[var]
        name = re.search(r'\.name\s*=\s*"([^"]+)"', body)
        if not name:
            continue  # an option that exists only as an environment variable
        arity = ARITY[re.search(r"\.has_arg\s*=\s*(\w+)", body)[1]]
        short = re.search(r"\.val\s*=\s*'(.)'", body)
        common = re.search(r"\.set_func\s*=", body)
        for tool in TOOLS:
            if common or re.search(rf"\.set_func_{tool}\s*=", body):
                out[tool][name[1]] = (short[1] if short else None, arity)
    return out


def documented(man: str) -> set[str]:
    """Long option names the manual page has an entry for (``.TP`` then ``\\fB\\-\\-name``)."""
    names = set()
    lines = man.split("\n")
    for i, line in enumerate(lines[:-1]):
        if line.startswith(".TP"):
            plain = re.sub(r"\\f[BIRP]", "", lines[i + 1]).replace("\\-", "-")
            names |= set(re.findall(r"(?:^|[\s,])--([A-Za-z][\w-]*)", plain))
    return names


def span_text(have: list[str], releases: list[str]) -> str:
    """``"22.05:"``, ``"22.05:23.02"`` or, for an option that left and came back,
    ``"22.05:23.11,24.05:"``."""
    parts, start = [], None
    for release in [*releases, ""]:
        if release in have and start is None:
            start = release
        elif release not in have and start is not None:
            parts.append(f"{start}:{release}")
            start = None
    return ",".join(parts)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    git_dir = argv[0]
    # (tool, name) -> {"short": set, "arity": set, "releases": [...]}
    seen: dict[tuple[str, str], dict] = {}
    undocumented: set[str] = set()
    for release, tag in RELEASES.items():
        table = getopt_table(show(git_dir, tag, "src/common/slurm_opt.c"))
        for tool in TOOLS:
            docs = documented(show(git_dir, tag, f"doc/man/man1/{tool}.1"))
            for name, (short, arity) in table[tool].items():
                got = seen.setdefault((tool, name), {"short": set(), "arity": set(), "in": []})
                got["short"].add(short)
                got["arity"].add(arity)
                got["in"].append(release)
                if name not in docs:
                    undocumented.add(f"{tool} --{name}")
    releases = list(RELEASES)
    # one row per name and signature (sbatch's --wait is a flag, srun's takes seconds)
    rows: dict[tuple, dict[str, str]] = {}
    for (tool, name), got in seen.items():
        (short,) = got["short"]
        # an option whose argument became optional in a release takes both forms
        arity = "O" if "O" in got["arity"] else got["arity"].pop()
        rows.setdefault((name, short, arity), {})[tool] = span_text(got["in"], releases)
    lines = []
    for (name, short, arity), spans in sorted(rows.items(), key=lambda kv: kv[0][0]):
        cols = ", ".join(f'"{spans.get(tool, "")}"' for tool in TOOLS)
        letter = f'"{short}"' if short else "None"
        lines.append(f'    ("{name}", {letter}, "{arity}", {cols}),')
    text = HEADER.format(
        releases=", ".join(f'"{r}"' for r in releases),
        tags="\n".join(f"    {r}: {t}" for r, t in RELEASES.items()),
        rows="\n".join(lines),
        undocumented="\n".join(f'        "{u}",' for u in sorted(undocumented)),
    )
    OUT.write_text(text, encoding="utf-8")
    print(f"written: {OUT} ({len(rows)} options)")
    return 0


HEADER = '''"""sbatch, srun and salloc options in each Slurm release (generated; do not edit).

Written by ``python ci/slurm/option_table.py SLURM_GIT_DIR`` from SchedMD/slurm: the getopt
table that ``src/common/slurm_opt.c`` builds for each tool (``common_options[]``: name,
``has_arg``, short letter, the tools that set it), at these tags:
{tags}

Each row: (long name, short letter, arity, sbatch, srun, salloc). Arity: F takes no argument,
V requires one (``--opt=v`` or ``--opt v``), O takes one only attached (``--opt=v``; getopt's
optional argument). Each tool's column is the releases that have the option, ``"22.05:"``
(since 22.05) or ``"22.05:23.02"`` (22.05 up to, not including, 23.02), spans joined by
commas where an option left and came back; empty: the tool never had it.
``tests/slurm/test_option_tables.py`` compares the rows of the installed Slurm's release with
its manual pages.
"""

RELEASES = ({releases})

OPTIONS = (
{rows}
)

# Options of the getopt table that the tool's manual page has no entry for (aliases such as
# --tasks-per-node and --cpu_bind, options internal to Slurm), in some release.
UNDOCUMENTED = frozenset(
    {{
{undocumented}
    }}
)
'''

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
