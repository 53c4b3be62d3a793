"""An example program and the modules beside it that it imports: what a user copies into a job
directory (train_resnet.py and train_lm.py import job_runtime.py from their own folder)."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path


def companions(program: Path) -> list[Path]:
    """The files of ``program``'s folder that it imports, by top-level module name."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(program.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    found = (program.parent / f"{name}.py" for name in sorted(names) if name != program.stem)
    return [path for path in found if path.is_file()]


def copy_program(program: Path, dest: Path) -> list[Path]:
    """Copy ``program`` and its companions into the folder ``dest``; return the copies."""
    copies = []
    for path in [program, *companions(program)]:
        copies.append(Path(shutil.copy(path, dest)))
    return copies
