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
their imports, runs with the collector as it runs for a user. Only the standard library (and
:mod:`clusterkit.runs.lines_hook`, which imports no more) is imported here: the hook runs in
every process of the environment.
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path

from clusterkit.runs import lines_hook

ENV = "CLUSTERKIT_IMPORT_GC"
PAUSED = "paused"
PTH_NAME = "clusterkit_import_gc.pth"
# (where clusterkit cannot be imported, as in a test's process that a software stack's
# environment runs without the checkout on its path, the line does nothing)
PTH_LINE = (
    f"import os; os.environ.get({ENV!r}) == {PAUSED!r} and "
    "__import__('importlib.util').util.find_spec('clusterkit') is not None and "
    "__import__('clusterkit.runs.import_gc').runs.import_gc.install()\n"
)
# the frameworks whose imports a measured process makes before its measurement starts, less
# NumPy (quick to import, and imported by much else)
FRAMEWORKS = lines_hook.FRAMEWORKS - {"numpy"}


def paused(do):
    """``do()`` with the collector off, and on again after, if it was on."""
    if not gc.isenabled():
        return do()
    gc.disable()
    try:
        return do()
    finally:
        gc.enable()


class PausingFinder:
    """First on ``sys.meta_path``: for a framework's top-level package, the spec that the
    finders after it give, its loader's ``exec_module`` (the whole import of the package and of
    what it imports) run by :func:`paused`. Nothing else passes through it: the frames
    between a module and the import it asks for stay those of importlib (code that inspects
    them, such as a probe that stubs the imports the standard library makes, sees no change)."""

    def find_spec(self, name, path=None, target=None):
        if name not in FRAMEWORKS or name in sys.modules:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module
        # on this loader only (a file loader is made for each module it loads)
        loader.exec_module = lambda module: paused(lambda: original(module))
        return spec


def install() -> None:
    """Put a :class:`PausingFinder` first on ``sys.meta_path`` (once per process)."""
    if not any(isinstance(f, PausingFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, PausingFinder())


def install_hook(site_dir: Path) -> Path:
    """Write the start-up line into ``site_dir`` (a site-packages folder); it does nothing in
    a process without ``CLUSTERKIT_IMPORT_GC=paused``."""
    return lines_hook.write_start_up_line(site_dir, PTH_NAME, PTH_LINE)


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
