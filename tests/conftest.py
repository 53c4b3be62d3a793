"""Shared fixtures: the shim directory on PATH, and the site profiles."""

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
