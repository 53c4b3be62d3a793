"""Shared fixtures: the shim directory on PATH, and the site profiles.

With ``CLUSTERKIT_STACK=site/name`` set (``nox -s stacks`` sets it when it runs the trainers'
tests under a software stack's framework versions) only the tests marked ``stack`` run; the
others are deselected, and the report's header names the stack and the interpreter.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from pathlib import Path

import own_network
import pytest
from benchmark_scripts import benchmark_module

from clusterkit.runs import lines_hook, shimdir

ROOT = Path(__file__).resolve().parent.parent
# Tests that load a PyTorch trainer in their own process (importlib) find the module it imports
# from its own folder, as `python train_resnet.py` does.
sys.path.append(str(ROOT / "examples" / "pytorch"))

# No per-example deadline for property tests: on two busy cores under pytest-xdist one example
# of a fast test can exceed Hypothesis's default 200 ms, which says nothing about the code
# (speed is measured by benchmarks/, not by tests). The stack environments have no Hypothesis.
if importlib.util.find_spec("hypothesis") is not None:
    from hypothesis import settings

    settings.register_profile("clusterkit", deadline=None)
    settings.load_profile("clusterkit")


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


def pytest_configure(config):
    """Triton (PyTorch's compiler, which importing torchvision loads) crashes a process that has
    loaded TensorFlow before it (Segmentation fault; TensorFlow 2.21, PyTorch 2.14). A test
    process runs in-process tests of both frameworks in any order: load Triton first. Only
    where both frameworks are installed: a stack's environment has one, and there the Triton
    of an older PyTorch may not even import (Triton 2.1 wants setuptools, PyTorch 2.1.2)."""
    both = all(importlib.util.find_spec(name) for name in ("tensorflow", "torch", "triton"))
    if both:
        import triton  # noqa: F401


def pytest_report_header(config):
    if STACK:
        version = ".".join(map(str, sys.version_info[:3]))
        return f"stack: {STACK} (Python {version}, {sys.executable}); tests marked 'stack' only"
    return None


# The job scripts set fixed ports, as users copy them (MASTER_PORT=29500, TensorFlow's 8888).
# The tests that run them start each job in a network namespace of its own where this user may
# make one (tests/own_network.py), so they run side by side; elsewhere they hold one lock, so
# that no two of them listen on one port at once. (A lock rather than --dist loadgroup: pytest
# 9.2 no longer lets pytest-xdist group tests by mark, pytest-dev/pytest-xdist#1386.)
FIXED_PORT_FILES = {"test_examples_run.py", "test_examples_bede.py"}
FIXED_PORT_LOCK = Path(tempfile.gettempdir()) / "clusterkit-fixed-ports.lock"


@pytest.fixture(autouse=True)
def _one_job_script_at_a_time(request):
    if request.node.path.name not in FIXED_PORT_FILES or own_network.available():
        yield
        return
    from filelock import FileLock  # here: the stack environments run none of these files

    with FileLock(FIXED_PORT_LOCK):
        yield


@pytest.fixture(autouse=True)
def _environment_as_it_was():
    """A program run in this process may set variables of its own (join_group sets RANK and
    WORLD_SIZE, as a launcher would): gone after the test, so that a later test or page block
    of this worker does not take itself for a rank of a finished job."""
    saved = dict(os.environ)
    yield
    if dict(os.environ) != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(scope="module", autouse=True)
def _program_lines_in_module(request):
    """A test file marked program_lines as a whole is measured from its first fixture to its
    last test: its module-scoped fixtures (one run shared by several tests) run programs too."""
    if request.node.get_closest_marker("program_lines") is None:
        yield
        return
    with lines_hook.measured():
        yield


@pytest.fixture(autouse=True)
def _program_lines_in_process(request):
    """Tests marked program_lines run a program in this process: measure its lines (only the
    processes that run a program are measured as a whole; see clusterkit/runs/lines_hook.py)."""
    if request.node.get_closest_marker("program_lines") is None:
        yield
        return
    with lines_hook.measured():
        yield


def pytest_collection_modifyitems(config, items):
    if not STACK:
        return
    keep = [item for item in items if item.get_closest_marker("stack")]
    dropped = [item for item in items if not item.get_closest_marker("stack")]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.fixture(scope="session")
def tiny_lm(tmp_path_factory) -> dict[str, Path]:
    """Tiny GPT-2 and Llama models in save_pretrained layout, and a JSON-lines text file
    (tests/tiny_lm.py): {"gpt2": DIR, "llama": DIR, "text": FILE}."""
    import tiny_lm as lm

    root = tmp_path_factory.mktemp("tiny-lm")
    return {
        "gpt2": lm.write_model(root / "gpt2", "gpt2"),
        "llama": lm.write_model(root / "llama", "llama"),
        "text": lm.write_text(root / "text.jsonl"),
    }


@pytest.fixture(scope="session")
def jpeg_folder(tmp_path_factory) -> Path:
    """A tiny ImageNet-style folder from benchmarks/make_jpeg_folder.py: 2 classes, 8 training
    and 2 validation images each, 64x48 pixels."""
    root = tmp_path_factory.mktemp("jpegs")
    benchmark_module("make_jpeg_folder").make_folder(root, 2, 8, 2, size=(64, 48))
    return root
