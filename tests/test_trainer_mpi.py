"""train_resnet.py with ``--backend mpi``: the branch ARCHER2's CPU recipe (DDP over Cray MPICH)
takes, run here although no PyTorch in CI has an MPI backend.

How, and why so: the ranks are started by a real launcher, and only the one call that needs a
PyTorch built against MPI is stood in (``tests/fixtures/mpi_standin.py``):
``init_process_group("mpi")`` joins a gloo group of the rank and size MPI would report, and
``is_mpi_available()`` says yes. Everything else is the program as users run it: the argument
check, reading the rank from the launcher's own variables (not ones a test wrote), the thread
limit from the ranks per node the launcher reports, no ``MASTER_ADDR`` demanded, the world
group carrying the stop flag and the checkpoint's random states, the final barrier. A PyTorch
built against MPI would test the MPI library too, but it is a source build of hours, and the
library is Cray MPICH on ARCHER2 anyway; what can differ between sites is the code that picks
the backend and reads the launcher, and that runs here.

Two launchers: Open MPI's ``mpirun`` (Debian's openmpi-bin), whose ``OMPI_COMM_WORLD_*`` the
trainer reads, and the emulated ``srun`` running ARCHER2's job script as written.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit.runs import trainlog
from clusterkit.runs.programs import copy_program

ROOT = Path(__file__).resolve().parent.parent
TRAINER = ROOT / "examples" / "pytorch" / "train_resnet.py"
STANDIN = ROOT / "tests" / "fixtures" / "mpi_standin.py"
ARCHER2_CPU = ROOT / "examples" / "archer2" / "pytorch-ddp-cpu.slurm"
TIMEOUT = 300
# launcher variables of the environment CI itself runs in, which would confuse the ranks
LAUNCH_VARS = ("SLURM_", "OMPI_", "PMI_", "PMIX_", "JSM_", "MASTER_", "RANK", "WORLD_SIZE")
LAUNCH_VARS += ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "OMP_NUM_THREADS", "TORCHELASTIC_")


def clean_env(base: dict[str, str], **extra: str) -> dict[str, str]:
    env = {k: v for k, v in base.items() if not k.startswith(LAUNCH_VARS)}
    return {**env, **extra}


def mpirun() -> str:
    found = shutil.which("mpirun")
    if found is None:
        if os.environ.get("CLUSTERKIT_REQUIRE_MPIRUN") == "1":
            pytest.fail("mpirun not found: install openmpi-bin (nox -s tests does, as root)")
        pytest.skip("mpirun not found: apt-get install openmpi-bin")
    return found


def train_records(out: str) -> list[trainlog.Record]:
    return [r for r in trainlog.parse(out) if r.kind == "train"]


def test_mpi_backend_under_open_mpi(tmp_path):
    env = clean_env(
        os.environ,
        TRAIN_TINY="1",
        CLUSTERKIT_MPI_RENDEZVOUS=str(tmp_path / "rendezvous"),
        # CI runs as root; Open MPI refuses that unless told twice
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
    )
    r = subprocess.run(
        [
            mpirun(),
            *("--oversubscribe", "-np", "2"),
            sys.executable,
            str(STANDIN),
            str(TRAINER),
            *("--backend", "mpi", "--arch", "resnet18", "--log-every", "1"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    # the program took its ranks from Open MPI's variables and asked for no MASTER_ADDR
    assert "2 rank(s) (mpirun), device cpu, backend mpi" in r.stdout, r.stdout
    assert sorted(line for line in r.stderr.splitlines() if "[mpi stand-in]" in line) == [
        "[mpi stand-in] rank 0 of 2 joined over gloo",
        "[mpi stand-in] rank 1 of 2 joined over gloo",
    ]
    train = train_records(r.stdout)
    assert {(t.fields["rank"], t.fields["world"]) for t in train} == {(0, 2), (1, 2)}
    for rank in (0, 1):
        assert [t.fields["step"] for t in train if t.fields["rank"] == rank] == list(range(1, 7))
    # OMPI_COMM_WORLD_LOCAL_SIZE=2 and no OMP_NUM_THREADS: rank 0 shares out the cores, once
    assert r.stderr.count("OMP_NUM_THREADS is not set and 2 ranks share a node") == 1
    (summary,) = [rec for rec in trainlog.parse(r.stdout) if rec.kind == "summary"]
    assert summary.fields["ranks"] == 2 and summary.fields["steps"] == 6
    assert (tmp_path / "checkpoints" / "ckpt-step00000006.pt").is_file()


def test_archer2_cpu_job_script_runs_with_the_mpi_backend(emulated_env, tmp_path):
    """ARCHER2's CPU recipe as written, through the emulated sbatch and srun; ``python`` in the
    job directory's PATH starts each rank through the stand-in."""
    shutil.copy(ARCHER2_CPU, tmp_path)
    copy_program(TRAINER, tmp_path)
    wrapper = tmp_path / "bin" / "python"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STANDIN}" "$@"\n')
    wrapper.chmod(0o755)
    env = clean_env(
        emulated_env,
        CLUSTERKIT_SITE="archer2",
        TRAIN_TINY_STEPS="2",
        CLUSTERKIT_MPI_RENDEZVOUS=str(tmp_path / "rendezvous"),
        PATH=f"{wrapper.parent}{os.pathsep}{emulated_env['PATH']}",
    )
    r = subprocess.run(
        ["sbatch", ARCHER2_CPU.name],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    outs = sorted(tmp_path.glob("*.out"))
    out = outs[-1].read_text() if outs else ""
    assert r.returncode == 0, f"{r.stderr}\n{out}"
    assert "4 task(s) on 4 node(s) requested, 2 started here" in out
    assert out.count("[mpi stand-in] rank") == 2, out
    assert "2 rank(s) (srun), device cpu, backend mpi" in out
    train = train_records(out)
    assert {t.fields["rank"] for t in train} == {0, 1}
    summary = [rec for rec in trainlog.parse(out) if rec.kind == "summary"]
    assert summary and summary[-1].fields["ranks"] == 2
    assert "Traceback" not in out
