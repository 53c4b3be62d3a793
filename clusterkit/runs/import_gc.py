"""The frameworks imported with Python's cyclic garbage collector paused, in the tests' processes.

Importing PyTorch, TensorFlow or Transformers makes hundreds of thousands of objects that live
as long as the process, and the collector of CPython 3.11 walks all of them again at each full
collection while the import goes on: ``import torchvision`` took 5.8 CPU-s with the collector
on and 5.0 with it off (this 2-core machine, 2026-11-29, six runs of each, alternated). The
tests start hundreds of such processes (each rank of each tiny run, the data loader processes
that spawn, the workers of pytest), so the tests session sets ``CLUSTERKIT_IMPORT_GC=paused``;
the ``.pth`` line that :func:`install_hook` writes into the environment's site-packages then
calls :func:`install` at each start of the interpreter. From then on the first import of each
of :data:`FRAMEWORKS` runs with the collector off, and the collector is on again, as it was,
when that import returns. Nothing else changes: the programs' own code, and everything after
their imports, runs with the collector as it runs for a user. Only the standard library is
imported here: the hook runs in every process of the environment.
"""

from __future__ import annotations

import builtins
import gc
import sys
from pathlib import Path

ENV = "CLUSTERKIT_IMPORT_GC"
PAUSED = "paused"
PTH_NAME = "clusterkit_import_gc.pth"
PTH_LINE = (
    f"import os; os.environ.get({ENV!r}) == {PAUSED!r} and "
    "__import__('clusterkit.runs.import_gc').runs.import_gc.install()\n"
)
FRAMEWORKS = frozenset(
    {"accelerate", "datasets", "keras", "peft", "tensorflow", "torch", "torchvision"}
    | {"transformers", "webdataset"}
)


def paused_while(do, name: str):
    """``do()``, with the collector off if ``name`` is a framework not imported yet."""
    first = name.partition(".")[0] in FRAMEWORKS and name.partition(".")[0] not in sys.modules
    if not (first and gc.isenabled()):
        return do()
    gc.disable()
    try:
        return do()
    finally:
        gc.enable()


def install() -> None:
    """Wrap ``builtins.__import__`` (once per process) so that :func:`paused_while` runs each
    absolute import."""
    original = builtins.__import__
    if getattr(original, "_pauses_gc", False):
        return

    def importing(name, globals=None, locals=None, fromlist=(), level=0):
        def do():
            return original(name, globals, locals, fromlist, level)

        return do() if level else paused_while(do, name)

    importing._pauses_gc = True
    builtins.__import__ = importing


def install_hook(site_dir: Path) -> Path:
    """Write the start-up line into ``site_dir`` (a site-packages folder); it does nothing in
    a process without ``CLUSTERKIT_IMPORT_GC=paused``."""
    path = Path(site_dir) / PTH_NAME
    if not path.is_file() or path.read_text(encoding="utf-8") != PTH_LINE:
        path.write_text(PTH_LINE, encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    """``python -m clusterkit.runs.import_gc``: install the hook into this interpreter's
    environment and print where."""
    import argparse
    import sysconfig

    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args(argv)
    print(install_hook(Path(sysconfig.get_path("purelib"))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
