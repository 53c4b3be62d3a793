"""The options of the project's own trainers and their help text, read from the source.

The trainers import PyTorch or TensorFlow at the top, so the static checks read their
``add_argument`` calls with :mod:`ast` instead of importing them: the flags, the help string
and the line. A help string built at run time (an f-string, a variable) is left out.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from clusterkit.sites.profiles import ROOT

TRAINER_DIRS = ("pytorch", "tensorflow")


@dataclass(frozen=True)
class Option:
    flags: tuple[str, ...]
    help: str
    line: int
    trainer: Path


def trainer_files(root: Path = ROOT) -> list[Path]:
    """Programs under examples/<framework>/ that define command-line options."""
    out = []
    for name in TRAINER_DIRS:
        for path in sorted((root / "examples" / name).glob("*.py")):
            if "add_argument(" in path.read_text(encoding="utf-8"):
                out.append(path)
    return out


@cache
def options(path: Path) -> dict[str, Option]:
    """Every long flag of ``path`` -> its option (flags, help, line)."""
    tree = ast.parse(Path(path).read_text(encoding="utf-8"), filename=str(path))
    out: dict[str, Option] = {}
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_argument"
        ):
            continue
        flags = tuple(
            a.value
            for a in node.args
            if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-")
        )
        if not flags:
            continue
        help_text = next(
            (
                k.value.value
                for k in node.keywords
                if k.arg == "help"
                and isinstance(k.value, ast.Constant)
                and isinstance(k.value.value, str)
            ),
            "",
        )
        opt = Option(flags, help_text, node.lineno, Path(path))
        for flag in flags:
            out[flag] = opt
    return out


def trainers_named_in(text: str, root: Path = ROOT) -> list[Path]:
    """The trainers a script or page runs or shows (by file name)."""
    return [t for t in trainer_files(root) if re.search(rf"(?<![\w-]){re.escape(t.name)}\b", text)]
