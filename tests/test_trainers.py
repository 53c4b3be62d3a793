"""The training programs: resume exactly where they stopped, and fail clearly on bad input."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clusterkit import trainlog

ROOT = Path(__file__).resolve().parent.parent
TORCH = ROOT / "examples" / "pytorch" / "train_resnet.py"
KERAS = ROOT / "examples" / "tensorflow" / "train_resnet_keras.py"


def _env(**extra) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(
            (
                "SLURM_",
                "OMPI_",
                "JSM_",
                "PMIX_",
                "TF_CONFIG",
                "RANK",
                "WORLD_SIZE",
                "LOCAL_RANK",
                "TRAIN_TINY",
            )
        )
    }
    env.update(OMP_NUM_THREADS="2", TF_CPP_MIN_LOG_LEVEL="3")
    env.update(extra)
    return env


def _run(script: Path, cwd: Path, *args: str, env=None, timeout=300):
    return subprocess.run(
        [sys.executable, str(script), *args],
        cwd=cwd,
        env=env or _env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _interrupted(script: Path, cwd: Path, after_step: int, *args: str) -> str:
    """Run, send SIGUSR1 once `after_step` is logged, and return the output."""
    proc = subprocess.Popen(
        [sys.executable, str(script), *args],
        cwd=cwd,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = []
    deadline = time.monotonic() + 300
    for line in proc.stdout:
        lines.append(line)
        rec = trainlog.parse_line(line)
        if rec and rec.kind == "train" and rec.fields["step"] >= after_step:
            proc.send_signal(signal.SIGUSR1)
            break
        assert time.monotonic() < deadline, "".join(lines)
    rest, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, "".join(lines) + rest
    return "".join(lines) + rest


def _steps(text: str) -> list[int]:
    return [r.fields["step"] for r in trainlog.parse(text) if r.kind == "train"]


# --------------------------------------------------------------------------- PyTorch
def _torch_weights(directory: Path) -> dict:
    import torch

    newest = sorted(directory.glob("ckpt-step*.pt"))[-1]
    return torch.load(newest, map_location="cpu", weights_only=False)


TINY_RUN = ("--tiny", "--log-every", "1", "--checkpoint-every", "100")


def test_pytorch_resume_matches_an_uninterrupted_run(tmp_path):
    import torch

    straight = tmp_path / "straight"
    straight.mkdir()
    r = _run(TORCH, straight, *TINY_RUN)
    assert r.returncode == 0, r.stderr
    assert _steps(r.stdout) == [1, 2, 3, 4, 5, 6]

    resumed = tmp_path / "resumed"
    resumed.mkdir()
    first = _interrupted(TORCH, resumed, 2, *TINY_RUN)
    stopped = [r for r in trainlog.parse(first) if r.kind == "preempted"]
    assert stopped, first
    second = _run(TORCH, resumed, *TINY_RUN)
    assert second.returncode == 0, second.stderr
    at = stopped[0].fields["step"]
    assert f"[resume] step={at}" in second.stdout
    # no step lost, none done twice
    assert _steps(first) + _steps(second.stdout) == [1, 2, 3, 4, 5, 6]

    a, b = _torch_weights(straight / "checkpoints"), _torch_weights(resumed / "checkpoints")
    assert a["step"] == b["step"] == 6
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), f"{name} differs after resume"


def test_pytorch_skips_a_damaged_checkpoint(tmp_path):
    r = _run(TORCH, tmp_path, "--tiny", "--checkpoint-every", "3")
    assert r.returncode == 0, r.stderr
    ckpts = sorted((tmp_path / "checkpoints").glob("ckpt-step*.pt"))
    assert [p.name for p in ckpts][-2:] == ["ckpt-step00000003.pt", "ckpt-step00000006.pt"]
    ckpts[-1].write_bytes(ckpts[-1].read_bytes()[:100])  # truncated, as by a full disk
    again = _run(TORCH, tmp_path, "--tiny", "--checkpoint-every", "3")
    assert again.returncode == 0, again.stderr
    assert "skipping unreadable checkpoint" in again.stdout
    assert "[resume] step=3" in again.stdout


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--precision", "fp8"], {}, "invalid choice: 'fp8'"),
        (["--no-such-flag"], {}, "unrecognized arguments: --no-such-flag"),
        (["--data-dir", "/nonexistent"], {}, "--data-dir /nonexistent: no train/ directory"),
        (["--arch", "resnet5000"], {}, "not a torchvision classification model"),
        (["--tiny"], {"SLURM_PROCID": "0", "SLURM_NTASKS": "2"}, "MASTER_ADDR is not set"),
    ],
)
def test_pytorch_bad_input_gives_a_clear_error(tmp_path, args, env, message):
    r = _run(TORCH, tmp_path, *args, env=_env(**env))
    assert r.returncode != 0
    assert message in r.stderr
    assert "Traceback" not in r.stderr


def test_pytorch_trains_on_an_image_folder(tmp_path):
    from PIL import Image

    for cls in ("cat", "dog"):
        folder = tmp_path / "data" / "train" / cls
        folder.mkdir(parents=True)
        for i in range(8):
            Image.new("RGB", (40, 36), (i * 20, 100, 200)).save(folder / f"{i}.JPEG")
    r = _run(TORCH, tmp_path, "--tiny", "--data-dir", str(tmp_path / "data"))
    assert r.returncode == 0, r.stderr
    assert [rec for rec in trainlog.parse(r.stdout) if rec.kind == "summary"]


def test_pytorch_two_ranks_by_hand_from_slurm_variables(tmp_path):
    """srun-style launch: the script maps SLURM_PROCID/SLURM_NTASKS to its rank."""
    procs = []
    for rank in (0, 1):
        env = _env(
            SLURM_PROCID=str(rank),
            SLURM_NTASKS="2",
            SLURM_LOCALID=str(rank),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT="29531",
            OMP_NUM_THREADS="1",
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, str(TORCH), "--tiny"],
                cwd=tmp_path,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    ranks = {r.fields["rank"] for out in outs for r in trainlog.parse(out) if r.kind == "train"}
    assert ranks == {0, 1}


# --------------------------------------------------------------------------- TensorFlow
def _keras_weights(directory: Path) -> list:
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(directory))
    names = sorted(n for n in reader.get_variable_to_shape_map() if n.startswith("model/"))
    return [(n, reader.get_tensor(n)) for n in names]


def test_keras_resume_matches_an_uninterrupted_run(tmp_path):
    import numpy as np

    straight = tmp_path / "straight"
    straight.mkdir()
    r = _run(KERAS, straight, *TINY_RUN)
    assert r.returncode == 0, r.stderr
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    first = _interrupted(KERAS, resumed, 2, *TINY_RUN)
    assert "[preempted]" in first, first
    second = _run(KERAS, resumed, *TINY_RUN)
    assert second.returncode == 0, second.stderr
    assert _steps(first) + _steps(second.stdout) == [1, 2, 3, 4, 5, 6]
    a, b = _keras_weights(straight / "checkpoints"), _keras_weights(resumed / "checkpoints")
    assert [n for n, _ in a] == [n for n, _ in b] and a
    for (name, x), (_, y) in zip(a, b, strict=True):
        assert np.array_equal(x, y), f"{name} differs after resume"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--precision", "fp8"], "invalid choice: 'fp8'"),
        (["--data-dir", "/nonexistent"], "no train/ directory"),
        (["--arch", "NoSuchNet"], "not a keras.applications model"),
    ],
)
def test_keras_bad_input_gives_a_clear_error(tmp_path, args, message):
    r = _run(KERAS, tmp_path, *args)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr
