"""Shared fixtures: the shim directory on PATH, and the site profiles.

With ``CLUSTERKIT_STACK=site/name`` set (``nox -s stacks`` sets it when it runs the trainers'
tests under a software stack's framework versions) only the tests marked ``stack`` run; the
others are deselected, and the report's header names the stack and the interpreter.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from clusterkit.emulate import shimdir

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def shim_path() -> Path:
    return shimdir.ensure()


@pytest.fixture
def emulated_env(shim_path, tmp_path):
    """Environment for running job scripts through the shims (site chosen by the test)."""
    env = dict(os.environ)
    # shims first, then the interpreter running the tests (its torchrun, python, ...)
    env["PATH"] = os.pathsep.join([str(shim_path), str(Path(sys.executable).parent), env["PATH"]])
    env["TRAIN_TINY"] = "1"
    env.pop("CLUSTERKIT_ALLOC", None)
    return env


STACK = os.environ.get("CLUSTERKIT_STACK")


def pytest_report_header(config):
    if STACK:
        version = ".".join(map(str, sys.version_info[:3]))
        return f"stack: {STACK} (Python {version}, {sys.executable}); tests marked 'stack' only"
    return None


# The job scripts set fixed ports, as users copy them (MASTER_PORT=29500): under pytest-xdist
# (nox runs the tests with --dist loadgroup) the tests that run them share one worker, so that
# no two of them listen on one port at once.
FIXED_PORT_FILES = {"test_examples_run.py", "test_examples_bede.py", "test_emulate_refusals.py"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in FIXED_PORT_FILES:
            item.add_marker(pytest.mark.xdist_group("fixed-ports"))
    if not STACK:
        return
    keep = [item for item in items if item.get_closest_marker("stack")]
    dropped = [item for item in items if not item.get_closest_marker("stack")]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
