"""A network of its own for each job a test runs.

The job scripts set fixed ports, as users copy them (``MASTER_PORT=29500``, TensorFlow's 8888),
so two of them running at once on one machine would meet on a port. Where this user may make a
network namespace (root, as in CI), each job runs in one of its own that holds only a loopback
device, and the tests that run jobs run side by side under pytest-xdist. Elsewhere they take
one lock instead (``conftest.py``), one job at a time, as before.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys

# `ip link set lo up` first: a new namespace's loopback device starts down
_PREFIX = ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "job"]


@functools.cache
def available() -> bool:
    """Whether this user may start a process in a network namespace of its own."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return False
    # Inside, gloo and TensorFlow bind to the address this machine's name resolves to: it
    # must be one the namespace holds (a loopback address), else the jobs could not meet.
    bind = (
        "import socket; s = socket.socket(); "
        "s.bind((socket.gethostbyname(socket.gethostname()), 0)); s.close()"
    )
    try:
        probe = subprocess.run(
            [*_PREFIX, sys.executable, "-c", bind], capture_output=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def command(argv: list[str]) -> list[str]:
    """``argv`` run in a network namespace of its own where one may be made, else as it is.
    The process keeps its PID (unshare and sh exec it), so a signal sent to it arrives."""
    return [*_PREFIX, *argv] if available() else list(argv)
