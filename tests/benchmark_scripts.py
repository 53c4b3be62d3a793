"""The scripts of benchmarks/ imported as modules, for the tests (they are files to copy, not a
package). A module of its own, not conftest: with docs/ and tests/ collected in one run, the
name ``conftest`` may already belong to docs/conftest.py."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def benchmark_module(name: str):
    """benchmarks/<name>.py, imported afresh."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
