"""Running the Horovod twins in tests: Horovod or a skip, two ranks under horovodrun --gloo,
and a signal to one rank of a running job."""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clusterkit import trainlog

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 300
# a launcher's variables in the test's own environment (CI may run inside a job) would reach
# the ranks; horovodrun sets its own
LAUNCH_VARS = (
    "SLURM_",
    "OMPI_",
    "JSM_",
    "PMIX_",
    "PMI_",
    "HOROVOD_",
    "MASTER_",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "TRAIN_TINY",
    "OMP_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
)


def require(module: str):
    """Import a Horovod module, or skip the test file where Horovod is not installed (the tests
    session sets CLUSTERKIT_REQUIRE_HOROVOD=1: there, a missing Horovod is an error)."""
    if os.environ.get("CLUSTERKIT_REQUIRE_HOROVOD") == "1":
        return importlib.import_module(module)
    if importlib.util.find_spec("horovod") is None:
        pytest.skip(
            "Horovod is not installed (nox -s tests builds it; docs/howto/horovod.md shows how)",
            allow_module_level=True,
        )
    return importlib.import_module(module)


def load(program: Path, name: str):
    """The program as a module (its main() not run)."""
    spec = importlib.util.spec_from_file_location(name, program)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCH_VARS)}
    env.update(extra)
    return env


def horovodrun() -> str:
    found = shutil.which("horovodrun", path=str(Path(sys.executable).parent))
    assert found, f"horovodrun is not installed beside {sys.executable}"
    return found


def start_two_ranks(program: Path, args: list[str], cwd: Path, env: dict[str, str]):
    """``horovodrun -np 2 --gloo -H localhost:2 python PROGRAM ARGS``, output read as it comes."""
    return subprocess.Popen(
        [horovodrun(), "-np", "2", "--gloo", "-H", "localhost:2", sys.executable, str(program)]
        + args,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # a failed test can end the launcher and its ranks together
    )


def finish(proc: subprocess.Popen, head: str = "") -> str:
    """The job's whole output once it ends (``head``: what was read of it already)."""
    try:
        rest, _ = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return head + rest


def rank_process(launcher: subprocess.Popen, program: Path, rank: int):
    """The process of one rank: a descendant of horovodrun running the program, whose
    environment gives it that HOROVOD_RANK."""
    import psutil  # a dependency of Horovod's launcher

    for child in psutil.Process(launcher.pid).children(recursive=True):
        try:
            if str(program) in child.cmdline() and child.environ().get("HOROVOD_RANK") == str(
                rank
            ):
                return child
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return None


def signal_rank_after_step(
    proc: subprocess.Popen, program: Path, rank: int, step: int, sig=signal.SIGUSR1
) -> str:
    """Read the job's output; once a rank has logged ``step``, send ``sig`` to rank ``rank``
    alone (as a scheduler's warning signal reaches one task first). The job's whole output."""
    head = []
    deadline = time.monotonic() + TIMEOUT
    for line in proc.stdout:
        head.append(line)
        rec = trainlog.parse_line(line)
        if rec is not None and rec.kind == "train" and rec.fields["step"] >= step:
            target = rank_process(proc, program, rank)
            assert target is not None, f"no process of rank {rank} under horovodrun"
            target.send_signal(sig)
            break
        assert time.monotonic() < deadline, "".join(head)
    return finish(proc, "".join(head))


def records(text: str, kind: str) -> list[trainlog.Record]:
    return [r for r in trainlog.parse(text) if r.kind == kind]


def steps_of_rank(text: str, rank: int) -> list[int]:
    return [r.fields["step"] for r in records(text, "train") if r.fields["rank"] == rank]
