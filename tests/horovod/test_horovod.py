"""Horovod examples, run for real where Horovod is installed (it is not built in CI: see
docs/howto/horovod.md)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from clusterkit import trainlog

ROOT = Path(__file__).resolve().parents[2]
try:
    import horovod.torch  # noqa: F401
except ImportError:
    if os.environ.get("CLUSTERKIT_REQUIRE_HOROVOD") == "1":
        raise
    pytest.skip(
        "Horovod is not installed (docs/howto/horovod.md shows how to build it)",
        allow_module_level=True,
    )


def test_pytorch_horovod_two_ranks_with_gloo(tmp_path):
    horovodrun = shutil.which("horovodrun", path=str(Path(sys.executable).parent))
    assert horovodrun, "horovodrun not found beside the interpreter"
    env = dict(os.environ, OMP_NUM_THREADS="1")  # horovodrun does not set it
    r = subprocess.run(
        [
            horovodrun,
            "-np",
            "2",
            "--gloo",
            "-H",
            "localhost:2",
            sys.executable,
            str(ROOT / "examples/pytorch/train_resnet_hvd.py"),
            "--tiny",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    records = trainlog.parse(r.stdout)
    assert {rec.fields["rank"] for rec in records if rec.kind == "train"} == {0, 1}
    assert [rec for rec in records if rec.kind == "summary"]


def test_keras_horovod_two_ranks_with_gloo(tmp_path):
    import horovod.tensorflow  # noqa: F401  (built with HOROVOD_WITH_TENSORFLOW=1)

    horovodrun = shutil.which("horovodrun", path=str(Path(sys.executable).parent))
    assert horovodrun, "horovodrun not found beside the interpreter"
    r = subprocess.run(
        [
            horovodrun,
            *("-np", "2", "--gloo", "-H", "localhost:2"),
            sys.executable,
            str(ROOT / "examples/tensorflow/train_resnet_keras_hvd.py"),
            "--tiny",
        ],
        cwd=tmp_path,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    records = trainlog.parse(r.stdout)
    train = [rec for rec in records if rec.kind == "train"]
    assert {rec.fields["rank"] for rec in train} == {0, 1}
    # each rank logs the loss averaged over the ranks: the same value at each step
    losses = {}
    for rec in train:
        losses.setdefault(rec.fields["step"], set()).add(rec.fields["loss"])
    assert all(len(v) == 1 for v in losses.values()), losses
    assert [rec for rec in records if rec.kind == "summary"]
