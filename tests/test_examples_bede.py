"""Bede examples run end to end through the emulated Slurm, scaled down to two CPU ranks."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import own_network

from clusterkit.runs import trainlog
from clusterkit.runs.programs import copy_program

ROOT = Path(__file__).resolve().parent.parent
SLICE = ROOT / "examples" / "bede" / "pytorch-ddp-1node.sbatch"
TRAINER = ROOT / "examples" / "pytorch" / "train_resnet.py"


def _job_dir(tmp_path: Path) -> Path:
    """What a user has in their job directory: the job script and the trainer."""
    shutil.copy(SLICE, tmp_path)
    copy_program(TRAINER, tmp_path)
    return tmp_path


def _output(tmp_path: Path) -> str:
    outs = sorted(tmp_path.glob("*.out"))
    assert outs, f"no job output in {tmp_path}: {os.listdir(tmp_path)}"
    return outs[-1].read_text()


def test_slice_runs_as_a_two_rank_ddp_job(emulated_env, tmp_path):
    job = _job_dir(tmp_path)
    # ResNet-18 for the tiny run: the launch and the world are tested (see test_examples_run.py)
    env = dict(
        emulated_env, CLUSTERKIT_SITE="bede", TRAIN_TINY_STEPS="2", TRAIN_TINY_ARCH="resnet18"
    )
    r = subprocess.run(
        own_network.command(["sbatch", SLICE.name]),
        cwd=job,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = _output(job)
    assert r.returncode == 0, f"{r.stderr}\n{out}"
    assert "Submitted batch job" in r.stdout
    records = trainlog.parse(out)
    ranks = {rec.fields["rank"] for rec in records if rec.kind == "train"}
    assert ranks == {0, 1}, out
    summary = [rec for rec in records if rec.kind == "summary"]
    assert len(summary) == 1 and summary[0].fields["ranks"] == 2
    assert summary[0].fields["img_s"] > 0
    # the scaled-down run said so
    assert "scaled down" in r.stderr and "4 worker(s) per node requested, 2 started" in out


def test_slice_checkpoints_and_requeues_on_usr1(emulated_env, tmp_path):
    """USR1 before the time limit: workers checkpoint, the script requeues the job."""
    job = _job_dir(tmp_path)
    env = dict(emulated_env, CLUSTERKIT_SITE="bede", TRAIN_TINY="1", TRAIN_TINY_STEPS="400")
    env["TRAIN_TINY_ARCH"] = "resnet18"
    proc = subprocess.Popen(
        own_network.command(["sbatch", SLICE.name]),
        cwd=job,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        outs = list(job.glob("*.out"))
        if outs and "[train]" in outs[0].read_text():
            break
        time.sleep(0.5)
    else:
        proc.kill()
        raise AssertionError("training never started")
    proc.send_signal(signal.SIGUSR1)
    _stdout, stderr = proc.communicate(timeout=240)
    out = _output(job)
    assert proc.returncode == 0, f"{stderr}\n{out}"
    records = trainlog.parse(out)
    preempted = [rec for rec in records if rec.kind == "preempted"]
    assert preempted, out
    assert any(rec.kind == "checkpoint" for rec in records), out
    assert "scontrol emulator] requeue" in out
    ckpts = list((job / "checkpoints").rglob("ckpt-*"))
    assert ckpts, "no checkpoint written"
