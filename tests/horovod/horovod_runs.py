"""Running the Horovod twins in tests: Horovod or a skip, two ranks under horovodrun --gloo,
and a signal to one rank of a running job."""

from __future__ import annotations

import importlib
import importlib.util
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from clusterkit.pages.pagetest import horovod_installed
from clusterkit.runs import trainlog

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


def require_horovod() -> None:
    """Skip the test file where Horovod is not installed (the tests session of `nox -t ci`
    does not build it); `nox -s horovod` builds it and sets CLUSTERKIT_REQUIRE_HOROVOD=1, and
    there a missing Horovod is an error."""
    if horovod_installed():  # not find_spec: this folder, tests/horovod, would pass for it
        return
    if os.environ.get("CLUSTERKIT_REQUIRE_HOROVOD") == "1":
        raise ImportError("CLUSTERKIT_REQUIRE_HOROVOD=1, and Horovod is not installed")
    pytest.skip(
        "Horovod is not installed: nox -s horovod builds it and runs these tests "
        "(docs/howto/horovod.md shows the build)",
        allow_module_level=True,
    )


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


def launcher() -> list[str]:
    """horovodrun, two ranks on this machine, connected by Gloo."""
    found = shutil.which("horovodrun", path=str(Path(sys.executable).parent))
    assert found, f"horovodrun is not installed beside {sys.executable}"
    return [found, "-np", "2", "--gloo", "-H", "localhost:2"]


class TwoRanks:
    """``horovodrun -np 2 --gloo -H localhost:2 python PROGRAM ARGS``, its output collected by a
    thread as it comes (so a test can act on a line while the job runs)."""

    def __init__(self, program: Path, args: list[str], cwd: Path, env: dict[str, str]):
        self.program = program
        self.proc = subprocess.Popen(
            [*launcher(), sys.executable, str(program), *args],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # a failed test ends the launcher and its ranks together
        )
        self.lines: list[str] = []
        self.new: queue.Queue[str | None] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)
            self.new.put(line)
        self.new.put(None)

    def output(self) -> str:
        return "".join(self.lines)

    def finish(self) -> str:
        """The job's whole output once it ends."""
        try:
            self.proc.wait(timeout=TIMEOUT)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            self.reader.join(timeout=30)
        return self.output()

    def rank_process(self, rank: int):
        """The process of one rank: a descendant of horovodrun running the program, whose
        environment gives it that HOROVOD_RANK."""
        import psutil  # a dependency of Horovod's launcher

        for child in psutil.Process(self.proc.pid).children(recursive=True):
            try:
                mine = str(self.program) in child.cmdline()
                if mine and child.environ().get("HOROVOD_RANK") == str(rank):
                    return child
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return None

    def signal_rank_after_step(self, rank: int, step: int, sig=signal.SIGUSR1) -> str:
        """Once a rank has logged ``step``, send ``sig`` to rank ``rank`` alone (as a
        scheduler's warning signal may reach one task first); the job's whole output."""
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            line = self.new.get(timeout=TIMEOUT)
            if line is None:
                break  # the job ended first
            rec = trainlog.parse_line(line)
            if rec is not None and rec.kind == "train" and rec.fields["step"] >= step:
                target = self.rank_process(rank)
                assert target is not None, f"no process of rank {rank} under horovodrun"
                target.send_signal(sig)
                break
        return self.finish()


def records(text: str, kind: str) -> list[trainlog.Record]:
    return [r for r in trainlog.parse(text) if r.kind == kind]


def steps_of_rank(text: str, rank: int) -> list[int]:
    return [r.fields["step"] for r in records(text, "train") if r.fields["rank"] == rank]
