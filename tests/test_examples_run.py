"""Job scripts from examples/ run end to end through the emulated scheduler, scaled down.

Each script runs as written in a scratch job directory holding the script and the trainer it
starts; CI sets TRAIN_TINY=1 so that the trainers run a few steps on CPU.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from clusterkit import trainlog

ROOT = Path(__file__).resolve().parent.parent
EX = ROOT / "examples"

# (site, job script, trainer it starts, ranks expected after scaling down)
RUNS = [
    ("archer2", "archer2/pytorch-ddp-gpu.slurm", "pytorch/train_resnet.py", 2),
    ("archer2", "archer2/tensorflow-cpu.slurm", "tensorflow/train_resnet_keras.py", 2),
    ("bede", "bede/tensorflow-1node.sbatch", "tensorflow/train_resnet_keras.py", 1),
    ("bede", "bede/pytorch-ddp-multinode.sbatch", "pytorch/train_resnet.py", 2),
    ("bede", "bede/first-job.sbatch", "pytorch/train_resnet.py", 2),
    ("archer2", "archer2/pytorch-1gpu.slurm", "pytorch/train_resnet.py", 1),
    ("archer2", "archer2/first-tf-job.slurm", "tensorflow/train_resnet_keras.py", 2),
    ("bede", "bede/pytorch-ddp-gh200-multinode.sbatch", "pytorch/train_resnet.py", 2),
]
# bede/tensorflow-multinode.sbatch and bede/tensorflow-container-gh200-multinode.sbatch are not
# run here: they start one worker per node, and the emulator runs every node on this one
# machine, so both workers would listen on one port.


@pytest.mark.parametrize(("site", "script", "trainer", "ranks"), RUNS, ids=[r[1] for r in RUNS])
def test_job_script_runs(emulated_env, tmp_path, site, script, trainer, ranks):
    shutil.copy(EX / script, tmp_path)
    shutil.copy(EX / trainer, tmp_path)
    env = dict(emulated_env, CLUSTERKIT_SITE=site)
    r = subprocess.run(
        ["sbatch", Path(script).name],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    outs = sorted(tmp_path.glob("*.out"))
    out = outs[-1].read_text() if outs else ""
    assert r.returncode == 0, f"{r.stderr}\n{out}"
    records = trainlog.parse(out)
    seen = {rec.fields["rank"] for rec in records if rec.kind == "train"}
    assert seen == set(range(ranks)), out
    summary = [rec for rec in records if rec.kind == "summary"]
    assert summary and summary[-1].fields["ranks"] == ranks, out
    assert "Traceback" not in out
