"""Whether a test run left the checkout as it found it.

A run of the tests must not change a tracked file or leave a file git would show: what a run
generates goes under ``_build/`` or a scratch folder. ``save`` records ``git status`` (each
changed or untracked path with a digest of its content) before the run, ``check`` compares
after it and names every path the run changed, added or removed; changes a contributor had
made before the run are left alone::

    python -m clusterkit.runs.clean_tree save _build/tree-before.json
    python -m pytest ...
    python -m clusterkit.runs.clean_tree check _build/tree-before.json

Outside a git checkout (an unpacked archive) there is nothing to compare: ``check`` says so and
passes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

from clusterkit.sites.profiles import ROOT


def state(root: Path = ROOT) -> dict[str, str] | None:
    """Each path ``git status`` lists (untracked files one by one) -> its status and a digest of
    its content; None outside a git checkout."""
    if shutil.which("git") is None:
        return None
    r = subprocess.run(
        ["git", "status", "--porcelain=v1", "-z", "--untracked-files=all"],
        cwd=root,
        capture_output=True,
    )
    if r.returncode != 0:
        return None
    out: dict[str, str] = {}
    fields = r.stdout.decode("utf-8", "surrogateescape").split("\0")
    i = 0
    while i < len(fields):
        entry = fields[i]
        i += 1
        if len(entry) < 4:
            continue
        code, path = entry[:2], entry[3:]
        if "R" in code or "C" in code:
            i += 1  # a rename or copy: the next field is the path it came from
        out[path] = f"{code} {_digest(root / path)}"
    return out


def _digest(path: Path) -> str:
    if path.is_symlink():
        return "link:" + str(path.readlink())
    if not path.is_file():
        return "absent" if not path.exists() else "dir"
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def changed(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Paths whose status or content differs between the two states, one line each."""
    lines = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        if old is None:
            what = "untracked, new" if new.startswith("??") else "changed"
        elif new is None:
            what = "restored to its committed content"
        else:
            what = "changed again"
        lines.append(f"{path}: [tree-clean] the test run left it {what}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("action", choices=["save", "check"])
    ap.add_argument("record", type=Path, help="where the state before the run is kept")
    ap.add_argument("--root", type=Path, default=ROOT, help="the checkout (default: this one)")
    args = ap.parse_args(argv)
    now = state(args.root)
    if args.action == "save":
        args.record.parent.mkdir(parents=True, exist_ok=True)
        args.record.write_text(json.dumps(now, indent=1, sort_keys=True), encoding="utf-8")
        return 0
    if not args.record.is_file():
        print(f"{args.record}: no state saved before the run (run `save` first)", file=sys.stderr)
        return 1
    before = json.loads(args.record.read_text(encoding="utf-8"))
    if before is None or now is None:
        print(f"{args.root}: not a git checkout; the tree was not compared")
        return 0
    lines = changed(before, now)
    for line in lines:
        print(line, file=sys.stderr)
    if lines:
        print(
            f"{len(lines)} path(s) changed by the test run: a test must write under _build/ "
            "or a scratch folder, not into the checkout",
            file=sys.stderr,
        )
        return 1
    print("the test run left the checkout as it found it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
