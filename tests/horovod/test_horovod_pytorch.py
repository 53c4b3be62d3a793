"""examples/pytorch/train_resnet_hvd.py with Horovod: two ranks under horovodrun --gloo that a
signal to one rank stops together and that resume from rank 0's checkpoint; single-process runs
of main() (Horovod with one rank) for exact resume, a damaged checkpoint and an image folder;
and the error paths, in-process."""

from __future__ import annotations

import io
import itertools
import shutil
import signal
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from horovod_runs import (
    ROOT,
    TwoRanks,
    clean_env,
    load,
    records,
    require_horovod,
    steps_of_rank,
)

# tests that load the twin into this process measure its lines (clusterkit/runs/lines_hook.py)
pytestmark = pytest.mark.program_lines

require_horovod()
import horovod.torch as hvd  # noqa: E402  (after the skip: where Horovod is missing)
import torch  # noqa: E402

PROGRAM = ROOT / "examples" / "pytorch" / "train_resnet_hvd.py"
STEPS = 8  # tiny runs made longer (3 steps per epoch) so that a signal lands mid-run
SMALL = ["--arch", "resnet18", "--num-classes", "10", "--log-every", "1"]


@pytest.fixture(scope="module")
def trainer():
    hvd.init()  # one rank: what the program's main() does under no launcher
    return load(PROGRAM, "train_resnet_hvd")


def run_main(trainer, cwd: Path, argv: list[str], steps: int, **patches) -> tuple[str, str]:
    """main() in this process, as `python train_resnet_hvd.py --tiny ARGV` in ``cwd`` outside
    any GPU job, with the trainer's functions ``patches`` replaced: its output and errors."""
    out, err = io.StringIO(), io.StringIO()
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGUSR1, signal.SIGTERM)}
    with pytest.MonkeyPatch.context() as m, redirect_stdout(out), redirect_stderr(err):
        for var in trainer.GPU_JOB_VARIABLES:
            m.delenv(var, raising=False)
        m.chdir(cwd)
        m.setenv("TRAIN_TINY_STEPS", str(steps))
        m.setattr(sys, "argv", [str(PROGRAM), "--tiny", *argv])
        for name, value in patches.items():
            m.setattr(trainer, name, value)
        try:
            code = trainer.main()
        finally:  # main() installs its own SIGUSR1/SIGTERM handlers
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
    assert code == 0, err.getvalue()
    return out.getvalue(), err.getvalue()


def final_state(directory: Path) -> dict:
    newest = sorted(directory.glob("ckpt-step*.pt"))[-1]
    return torch.load(newest, map_location="cpu", weights_only=True)


def assert_same_weights(a: dict, b: dict) -> None:
    assert a["step"] == b["step"]
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), f"{name} differs"
    momenta = [s["momentum_buffer"] for s in a["optimizer"]["state"].values()]
    again = [s["momentum_buffer"] for s in b["optimizer"]["state"].values()]
    assert len(momenta) == len(again) > 0
    assert all(torch.equal(x, y) for x, y in zip(momenta, again, strict=True))


# --------------------------------------------------------------------------- two ranks
def test_two_ranks_stop_together_on_one_rank_s_signal_and_resume(tmp_path):
    """The pages' launch (horovodrun -np 2 --gloo, ResNet-50). SIGUSR1 to rank 1 alone stops
    both ranks at one step; rank 0 checkpoints there. Started again, both ranks resume from it,
    skip the batches of the epoch already done, and finish the run."""
    env = clean_env(TRAIN_TINY="1", TRAIN_TINY_STEPS=str(STEPS), OMP_NUM_THREADS="1")
    args = ["--log-every", "1", "--checkpoint-every", "100"]
    first = TwoRanks(PROGRAM, args, tmp_path, env).signal_rank_after_step(1, 2)
    assert "Traceback" not in first, first
    (stopped,) = records(first, "preempted")
    at = stopped.fields["step"]
    assert 2 <= at < STEPS, first
    assert steps_of_rank(first, 0) == steps_of_rank(first, 1) == list(range(1, at + 1))
    saved = [r.fields["step"] for r in records(first, "checkpoint")]
    assert saved == [at]  # rank 0 alone writes it
    assert (tmp_path / "checkpoints" / f"ckpt-step{at:08d}.pt").is_file()

    second = TwoRanks(PROGRAM, args, tmp_path, env).finish()
    assert "Traceback" not in second, second
    assert [r.fields["step"] for r in records(second, "resume")] == [at]
    for rank in (0, 1):
        assert steps_of_rank(second, rank) == list(range(at + 1, STEPS + 1))
    (summary,) = records(second, "summary")
    assert (summary.fields["ranks"], summary.fields["steps"]) == (2, STEPS)
    assert [r.fields["step"] for r in records(second, "checkpoint")] == [STEPS]


# --------------------------------------------------------------------------- one rank
@pytest.fixture(scope="module")
def straight(trainer, tmp_path_factory) -> tuple[Path, str]:
    """One uninterrupted single-rank run of 5 steps: checkpoints every 2, the last two kept."""
    cwd = tmp_path_factory.mktemp("straight")
    out, _ = run_main(trainer, cwd, [*SMALL, "--checkpoint-every", "2", "--keep", "2"], 5)
    return cwd / "checkpoints", out


def test_one_rank_runs_and_keeps_its_last_checkpoints(straight):
    checkpoints, out = straight
    assert steps_of_rank(out, 0) == [1, 2, 3, 4, 5]
    assert [r.fields["step"] for r in records(out, "checkpoint")] == [2, 4, 5]
    kept = sorted(p.name for p in checkpoints.iterdir())
    assert kept == ["ckpt-step00000004.pt", "ckpt-step00000005.pt"]
    (summary,) = records(out, "summary")
    assert summary.fields["ranks"] == 1 and summary.fields["img_s"] > 0


def test_a_run_stopped_mid_epoch_resumes_exactly(trainer, straight, tmp_path):
    """SIGUSR1 during step 2 (of an epoch of 3 steps) stops the run after it; the resumed run
    skips the epoch's first two batches and ends with the weights and momenta of the run that
    never stopped."""
    real_rate = trainer.learning_rate

    def signal_during_step_2(step, *args):
        if step == 1:  # steps count from 0 here
            signal.raise_signal(signal.SIGUSR1)
        return real_rate(step, *args)

    argv = [*SMALL, "--checkpoint-every", "100"]
    first, _ = run_main(trainer, tmp_path, argv, 5, learning_rate=signal_during_step_2)
    assert [r.fields["step"] for r in records(first, "preempted")] == [2]
    second, _ = run_main(trainer, tmp_path, argv, 5)
    assert [r.fields["step"] for r in records(second, "resume")] == [2]
    assert steps_of_rank(first, 0) + steps_of_rank(second, 0) == [1, 2, 3, 4, 5]
    assert_same_weights(final_state(straight[0]), final_state(tmp_path / "checkpoints"))


def test_a_damaged_newest_checkpoint_gives_way_to_the_one_before(trainer, straight, tmp_path):
    shutil.copytree(straight[0], tmp_path / "checkpoints")
    newest = tmp_path / "checkpoints" / "ckpt-step00000005.pt"
    newest.write_bytes(newest.read_bytes()[:4096])  # cut short, as by a full disk
    out, err = run_main(trainer, tmp_path, SMALL, 5)
    assert f"warning: skipping checkpoint {Path('checkpoints') / newest.name}" in err
    assert [r.fields["step"] for r in records(out, "resume")] == [4]
    assert steps_of_rank(out, 0) == [5]
    assert_same_weights(final_state(straight[0]), final_state(tmp_path / "checkpoints"))


def test_an_image_folder(trainer, jpeg_folder, tmp_path):
    out, _ = run_main(trainer, tmp_path, [*SMALL, "--data-dir", str(jpeg_folder)], 2)
    assert steps_of_rank(out, 0) == [1, 2]
    assert all(0 < r.fields["loss"] < 10 for r in records(out, "train"))


# --------------------------------------------------------------------------- errors
@pytest.fixture
def bare_env(monkeypatch):
    for key in ("TRAIN_TINY", "TRAIN_TINY_STEPS", "SLURM_GPUS_ON_NODE", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.delenv("ROCR_VISIBLE_DEVICES", raising=False)
    return monkeypatch


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--precision", "fp8"], "argument --precision: invalid choice: 'fp8'"),
        (["--data-dir", "/nonexistent/imagenet"], "--data-dir /nonexistent/imagenet: no train/"),
    ],
)
def test_bad_arguments_exit_2_naming_the_problem(trainer, bare_env, capsys, argv, message):
    with pytest.raises(SystemExit) as stop:
        trainer.parse_args(argv)
    assert stop.value.code == 2
    assert message in capsys.readouterr().err


def test_an_older_pytorch_stops_at_start_up_naming_the_minimum(trainer, bare_env):
    bare_env.setattr(torch, "__version__", "2.0.1+cu118")
    with pytest.raises(SystemExit) as stop:
        trainer.check_versions()
    assert str(stop.value.code) == (
        "error: train_resnet_hvd.py needs torch 2.1 or newer; this environment has 2.0.1+cu118"
    )
    assert trainer.version_tuple("unknown") == ()


@pytest.fixture
def cuda_build_without_gpu(bare_env):
    bare_env.setattr(torch.version, "cuda", "13.0")
    bare_env.setattr(torch.cuda, "is_available", lambda: False)
    return bare_env


@pytest.mark.parametrize(
    ("env", "argv", "asked_by"),
    [
        ({"SLURM_GPUS_ON_NODE": "4"}, [], "SLURM_GPUS_ON_NODE=4"),
        ({"CUDA_VISIBLE_DEVICES": "0"}, [], "CUDA_VISIBLE_DEVICES=0"),
        ({}, ["--device", "cuda"], "--device cuda"),
    ],
)
def test_a_gpu_run_that_sees_no_gpu_stops(trainer, cuda_build_without_gpu, env, argv, asked_by):
    for key, value in env.items():
        cuda_build_without_gpu.setenv(key, value)
    with pytest.raises(SystemExit) as stop:
        trainer.choose_device(trainer.parse_args(argv))
    assert str(stop.value.code) == (
        f"error: {asked_by} asks for a GPU, but PyTorch {torch.__version__} sees no GPU"
    )


def test_a_gpu_job_with_a_cpu_only_pytorch_stops_naming_the_build(trainer, bare_env):
    bare_env.setattr(torch.version, "cuda", None)
    bare_env.setattr(torch.version, "hip", None)
    bare_env.setenv("SLURM_GPUS_ON_NODE", "1")
    with pytest.raises(SystemExit) as stop:
        trainer.choose_device(trainer.parse_args([]))
    assert "asks for a GPU, but this PyTorch" in str(stop.value.code)
    assert "is a CPU-only build" in str(stop.value.code)


def test_a_tiny_run_in_a_gpu_job_warns_and_uses_the_cpu(trainer, cuda_build_without_gpu, capsys):
    cuda_build_without_gpu.setenv("SLURM_GPUS_ON_NODE", "0")  # "0": no GPUs, not a GPU job
    assert trainer.choose_device(trainer.parse_args(["--tiny"])) == torch.device("cpu")
    cuda_build_without_gpu.setenv("SLURM_GPUS_ON_NODE", "2")
    assert trainer.choose_device(trainer.parse_args(["--tiny"])) == torch.device("cpu")
    assert "warning: SLURM_GPUS_ON_NODE=2: PyTorch" in capsys.readouterr().err


def test_a_gpu_that_pytorch_sees_is_this_rank_s(trainer, cuda_build_without_gpu):
    """Each rank takes the GPU of its local rank (a GPU made visible: CI has none)."""
    cuda_build_without_gpu.setattr(torch.cuda, "is_available", lambda: True)
    cuda_build_without_gpu.setattr(torch.cuda, "device_count", lambda: 4)
    cuda_build_without_gpu.setenv("SLURM_GPUS_ON_NODE", "4")
    expected = torch.device("cuda", hvd.local_rank())
    assert trainer.choose_device(trainer.parse_args([])) == expected
    assert trainer.choose_device(trainer.parse_args(["--device", "cpu"])) == torch.device("cpu")


def test_the_loss_scaler_of_pytorch_before_2_3(trainer, monkeypatch):
    """torch.amp.GradScaler is PyTorch 2.3+; before, the CUDA scaler (off on the CPU)."""
    assert isinstance(trainer.grad_scaler("cpu", True), torch.amp.GradScaler)
    monkeypatch.delattr(torch.amp, "GradScaler")
    with pytest.warns(FutureWarning):  # PyTorch 2.3+ deprecates the CUDA scaler
        scaler = trainer.grad_scaler("cpu", True)
    assert isinstance(scaler, torch.cuda.amp.GradScaler) and not scaler.is_enabled()


# --------------------------------------------------------------------------- pieces
def test_synthetic_images_depend_only_on_seed_and_index(trainer):
    a = trainer.SyntheticImages(8, 16, 10, seed=0)
    b = trainer.SyntheticImages(8, 16, 10, seed=0)
    other = trainer.SyntheticImages(8, 16, 10, seed=1)
    assert len(a) == 8
    image, label = a[5]
    assert image.shape == (3, 16, 16) and image.dtype == torch.uint8 and 0 <= label < 10
    assert torch.equal(image, b[5][0]) and label == b[5][1]
    assert not torch.equal(image, other[5][0]) and not torch.equal(image, a[4][0])
    # SplitMix64's published first output for the seed 0
    assert trainer.splitmix64(0) == 0xE220A8397B1DCDAF


def test_learning_rate_warms_up_then_decays(trainer):
    rates = [trainer.learning_rate(s, 0.4, 4, 20) for s in range(20)]
    assert rates[:4] == pytest.approx([0.1, 0.2, 0.3, 0.4])
    assert rates[4] == pytest.approx(0.4)
    assert all(x > y for x, y in itertools.pairwise(rates[4:]))
    assert trainer.learning_rate(20, 0.4, 4, 20) == pytest.approx(0.0)


def test_checkpoints_are_ordered_by_step_number(trainer, tmp_path):
    for name in ("ckpt-step00000010.pt", "ckpt-step00000009.pt", "ckpt-step100000000.pt"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / ".ckpt-abc.tmp").write_bytes(b"")  # a save cut short: never a checkpoint
    names = [p.name for p in trainer.checkpoints(tmp_path)]
    assert names == ["ckpt-step00000009.pt", "ckpt-step00000010.pt", "ckpt-step100000000.pt"]
    assert trainer.newest_checkpoint(tmp_path / "none") == (None, None)
