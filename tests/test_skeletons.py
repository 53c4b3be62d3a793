"""examples/skeletons/: the short data-parallel programs for a reader's own model and data.

Each runs as two real ranks on this machine's CPU. The PyTorch skeleton runs once with the
variables srun gives each task (set here by hand, as srun would: there is no Slurm here; the job
scripts of examples/<site>/ run it through the emulated srun in tests/test_examples_run.py), is
stopped by SIGUSR1 to one rank, and resumes under the real torchrun. The Keras skeleton runs as
two TensorFlow workers described by TF_CONFIG, is stopped the same way, and resumes as one
process with its step functions run as written (eagerly), so that their lines are measured.
TensorFlow's start-up is slow on two cores, so one two-worker run serves several tests.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clusterkit.runs import trainlog

ROOT = Path(__file__).resolve().parent.parent
DDP = ROOT / "examples" / "skeletons" / "ddp_skeleton.py"
KERAS = ROOT / "examples" / "skeletons" / "keras_skeleton.py"
TORCHRUN = str(Path(sys.executable).parent / "torchrun")  # the environment's own
TIMEOUT = 240
STOP_AFTER = 200  # the signal goes out once rank 0 has logged this step (a line every 100)
# Both skeletons learn y = the sum of 32 standard normals: variance 32, so a model that has not
# learned it has a loss near 32. From step 100 on the loss of one batch is a few hundredths, and
# it moves up and down from batch to batch (0.042, 0.023, 0.043 in one run): "it falls" is
# asserted against what an untrained model scores, not between two logged batches.
LEARNED = 1.0
LAUNCH_VARS = ("SLURM_", "OMPI_", "PMI", "TF_CONFIG", "RANK", "WORLD_SIZE", "LOCAL_")
NO_TORCH = importlib.util.find_spec("torch") is None
NO_TF = importlib.util.find_spec("tensorflow") is None
needs_torch = pytest.mark.skipif(NO_TORCH, reason="this environment has no PyTorch")
needs_tf = pytest.mark.skipif(NO_TF, reason="this environment has no TensorFlow")
# `python -c EAGER PROGRAM ARGS...`: the program with tf.function bodies run as written, op by
# op, and none of its functions converted by AutoGraph (coverage.py would credit the lines of a
# converted function to AutoGraph's copy).
EAGER = """
import runpy, sys
import tensorflow as tf
from tensorflow.python.autograph.core import config as autograph
tf.config.run_functions_eagerly(True)
autograph.CONVERSION_RULES = (autograph.DoNotConvert("__main__"), *autograph.CONVERSION_RULES)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without any launcher's variables (the tests may run inside a job)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCH_VARS)}
    env.pop("MASTER_ADDR", None)
    env.pop("MASTER_PORT", None)
    env.update(OMP_NUM_THREADS="1", **extra)
    return env


def free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def start(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def stop_one_rank(procs: list[subprocess.Popen]) -> list[tuple[str, str]]:
    """Wait until rank 0 logs step STOP_AFTER, send SIGUSR1 to rank 1 alone, collect both."""
    head, deadline = [], time.monotonic() + TIMEOUT
    try:
        for line in procs[0].stdout:
            head.append(line)
            rec = trainlog.parse_line(line)
            if rec and rec.kind == "train" and rec.fields["step"] >= STOP_AFTER:
                procs[1].send_signal(signal.SIGUSR1)
                break
            assert time.monotonic() < deadline, "".join(head)
        outs = [p.communicate(timeout=TIMEOUT) for p in procs]
    finally:
        for p in procs:
            p.kill()
    return [("".join(head) + outs[0][0], outs[0][1]), outs[1]]


def records(text: str, kind: str) -> list[trainlog.Record]:
    return [r for r in trainlog.parse(text) if r.kind == kind]


def losses(text: str) -> list[float]:
    return [r.fields["loss"] for r in records(text, "train")]


# --------------------------------------------------------------------------- both
@pytest.mark.parametrize("program", [DDP, KERAS], ids=lambda p: p.name)
def test_skeleton_is_short_and_self_contained(program):
    """Under 100 lines, every line counted; it imports only the standard library and its
    framework, nothing of this project."""
    lines = program.read_text(encoding="utf-8").splitlines()
    assert len(lines) < 100, f"{program.name} has {len(lines)} lines"
    tree = ast.parse("\n".join(lines))
    imported = {
        (node.module if isinstance(node, ast.ImportFrom) else alias.name).split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert imported <= set(sys.stdlib_module_names) | {"torch", "tensorflow"}, imported
    assert "CHANGE" in "\n".join(lines)


# --------------------------------------------------------------------------- PyTorch
def srun_env(rank: int, port: int) -> dict[str, str]:
    """What srun gives task `rank` of a two-task step on one node, and the job script's
    MASTER_ADDR and MASTER_PORT."""
    return clean_env(
        SLURM_PROCID=str(rank),
        SLURM_LOCALID=str(rank),
        SLURM_STEP_NUM_TASKS="2",
        SLURM_NTASKS="2",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )


@pytest.fixture(scope="module")
def ddp_stopped(tmp_path_factory):
    """Two ranks started as srun starts them, stopped by SIGUSR1 to rank 1 alone."""
    cwd = tmp_path_factory.mktemp("ddp")
    (port,) = free_ports(1)
    argv = [sys.executable, str(DDP), "--steps", "100000", "--checkpoint", "ck/model.pt"]
    procs = [start(argv, cwd, srun_env(rank, port)) for rank in (0, 1)]
    outs = stop_one_rank(procs)
    return cwd, procs, outs


@needs_torch
@pytest.mark.stack
def test_ddp_sigusr1_to_one_rank_stops_both_at_one_step_with_a_checkpoint(ddp_stopped):
    cwd, procs, outs = ddp_stopped
    assert [p.returncode for p in procs] == [0, 0], outs
    (stopped,) = records(outs[0][0], "preempted")
    at = stopped.fields["step"]
    assert STOP_AFTER <= at < 100000
    for rank, (out, err) in enumerate(outs):
        train = records(out, "train")
        assert {(t.fields["rank"], t.fields["world"]) for t in train} == {(rank, 2)}
        # a line every 100 steps, and one at the step where both stopped
        assert [t.fields["step"] for t in train] == [*range(100, at, 100), at]
        assert "Traceback" not in err
    assert not records(outs[1][0], "preempted") and not records(outs[1][0], "summary")
    (summary,) = records(outs[0][0], "summary")
    assert summary.fields["ranks"] == 2 and summary.fields["steps"] == at
    # the loss of each rank's own batches is finite and far below an untrained model's
    for out, _ in outs:
        assert all(math.isfinite(v) and v < LEARNED for v in losses(out)), losses(out)
    assert sorted(p.name for p in (cwd / "ck").iterdir()) == ["model.pt"]  # no temporary file


@needs_torch
# not under every stack: the stop above already runs the skeleton's DDP and checkpoint there
def test_ddp_resumes_under_torchrun_at_the_step_it_stopped(ddp_stopped):
    cwd, _, outs = ddp_stopped
    (stopped,) = records(outs[0][0], "preempted")
    at = stopped.fields["step"]
    until = at + 1  # one more step: a line from each rank (the last step logs)
    argv = [str(DDP), "--steps", str(until), "--checkpoint", "ck/model.pt"]
    r = subprocess.run(
        [TORCHRUN, "--standalone", "--nproc_per_node", "2", *argv],
        cwd=cwd,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    resumed = records(r.stdout, "resume")
    assert [x.fields["step"] for x in resumed] == [at, at]  # both ranks read rank 0's file
    train = records(r.stdout, "train")
    assert sorted((t.fields["rank"], t.fields["step"]) for t in train) == [(0, until), (1, until)]
    (summary,) = records(r.stdout, "summary")
    assert summary.fields["ranks"] == 2 and summary.fields["steps"] == until
    assert all(math.isfinite(t.fields["loss"]) for t in train)
    # trained on from the checkpoint, not from scratch (a fresh model's loss is near 32)
    assert max(t.fields["loss"] for t in train) < LEARNED


@needs_torch
def test_ddp_without_master_address_under_srun_says_so_in_one_line(tmp_path):
    env = srun_env(1, 29500)
    del env["MASTER_ADDR"], env["MASTER_PORT"]
    r = subprocess.run(
        [sys.executable, str(DDP)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.count("\n") == 1, r.stderr
    assert r.stderr == (
        "error: MASTER_ADDR or MASTER_PORT is not set: use torchrun, or first "
        "export MASTER_PORT=29500 MASTER_ADDR=$(scontrol show hostnames | head -n 1)\n"
    )
    assert not list(tmp_path.iterdir())


# --------------------------------------------------------------------------- Keras
@pytest.fixture(scope="module")
def keras_stopped(tmp_path_factory):
    """Two workers described by TF_CONFIG, stopped by SIGUSR1 to worker 1 alone."""
    cwd = tmp_path_factory.mktemp("keras")
    hosts = [f"localhost:{port}" for port in free_ports(2)]
    argv = [sys.executable, str(KERAS), "--steps", "100000", "--checkpoint", "ck"]
    procs = []
    for index in (0, 1):
        config = {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": index}}
        procs.append(start(argv, cwd, clean_env(TF_CONFIG=json.dumps(config))))
    outs = stop_one_rank(procs)
    return cwd, procs, outs


@needs_tf
@pytest.mark.stack
def test_keras_two_workers_train_one_model_and_stop_together(keras_stopped):
    cwd, procs, outs = keras_stopped
    assert [p.returncode for p in procs] == [0, 0], outs
    (stopped,) = records(outs[0][0], "preempted")
    at = stopped.fields["step"]
    assert STOP_AFTER <= at < 100000
    for rank, (out, err) in enumerate(outs):
        train = records(out, "train")
        assert {(t.fields["rank"], t.fields["world"]) for t in train} == {(rank, 2)}
        assert [t.fields["step"] for t in train] == [*range(100, at, 100), at]
        assert "Traceback" not in err
    # one model: both workers report the same loss, summed over the replicas; it has learned
    assert losses(outs[0][0]) == losses(outs[1][0])
    assert all(math.isfinite(v) and v < LEARNED for v in losses(outs[0][0])), losses(outs[0][0])
    (summary,) = records(outs[0][0], "summary")
    assert summary.fields["ranks"] == 2 and summary.fields["steps"] == at
    assert not records(outs[1][0], "summary")
    # only rank 0's checkpoint is kept, where --checkpoint says; the other's copy is gone
    assert sorted(p.name for p in (cwd / "ck").iterdir()) == [
        "checkpoint",
        f"ckpt-{at}.data-00000-of-00001",
        f"ckpt-{at}.index",
    ]
    assert sorted(p.name for p in cwd.iterdir()) == ["ck"]


@needs_tf
def test_keras_resumes_at_the_step_it_stopped(keras_stopped):
    """One process (MirroredStrategy) goes on from the two workers' checkpoint."""
    cwd, _, outs = keras_stopped
    (stopped,) = records(outs[0][0], "preempted")
    at = stopped.fields["step"]
    until = at + 1  # one more step, logged as the last
    r = subprocess.run(
        [sys.executable, "-c", EAGER, str(KERAS), "--steps", str(until), "--checkpoint", "ck"],
        cwd=cwd,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    (resumed,) = records(r.stdout, "resume")
    assert resumed.fields["step"] == at
    (train,) = records(r.stdout, "train")
    assert (train.fields["rank"], train.fields["world"], train.fields["step"]) == (0, 1, until)
    assert math.isfinite(train.fields["loss"]) and train.fields["loss"] < LEARNED  # not afresh
    (summary,) = records(r.stdout, "summary")
    assert summary.fields["ranks"] == 1 and summary.fields["steps"] == until
    assert (cwd / "ck" / f"ckpt-{until}.index").is_file()
