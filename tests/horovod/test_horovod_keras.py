"""examples/tensorflow/train_resnet_keras_hvd.py with Horovod: two ranks under horovodrun --gloo
that average their losses, stop together on one rank's signal and resume from rank 0's
checkpoint; a single-rank run of main() with its step function run as written (eagerly: the
lines of a function that AutoGraph converts are not counted as this file's); and the error
paths, in-process."""

from __future__ import annotations

import io
import runpy
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

require_horovod()  # TensorFlow is imported by the tests that need it: collecting is quick

PROGRAM = ROOT / "examples" / "tensorflow" / "train_resnet_keras_hvd.py"
STEPS = 8  # tiny runs made longer so that a signal lands mid-run (a line every 2 steps)
SMALL = ["--arch", "MobileNet"]


@pytest.fixture(scope="module")
def tf():
    import tensorflow

    return tensorflow


@pytest.fixture(scope="module")
def trainer(tf):
    import horovod.tensorflow as hvd

    hvd.init()  # one rank: what the program's main() does under no launcher
    return load(PROGRAM, "train_resnet_keras_hvd")


def losses_by_step(text: str) -> dict[int, set[float]]:
    out: dict[int, set[float]] = {}
    for r in records(text, "train"):
        out.setdefault(r.fields["step"], set()).add(r.fields["loss"])
    return out


# --------------------------------------------------------------------------- two ranks
def test_two_ranks_average_stop_together_and_resume(tmp_path):
    """Each rank logs the loss averaged over both: one value per step. SIGUSR1 to rank 1 alone
    stops both at one step, where rank 0 writes a checkpoint; started again, both ranks restore
    it and finish the run."""
    env = clean_env(TRAIN_TINY="1", TRAIN_TINY_STEPS=str(STEPS), OMP_NUM_THREADS="1")
    # MobileNet: four TensorFlow starts with ResNet-50 took 187 s (2 busy cores); the one-rank
    # test below builds ResNet-50, the default
    first = TwoRanks(PROGRAM, SMALL, tmp_path, env).signal_rank_after_step(1, 2)
    assert "Traceback" not in first, first
    (stopped,) = records(first, "preempted")
    at = stopped.fields["step"]
    assert 2 <= at < STEPS, first
    assert steps_of_rank(first, 0) == steps_of_rank(first, 1) == list(range(2, at + 1, 2))
    assert all(len(losses) == 1 for losses in losses_by_step(first).values())
    assert [r.fields["step"] for r in records(first, "checkpoint")] == [at]

    second = TwoRanks(PROGRAM, SMALL, tmp_path, env).finish()
    assert "Traceback" not in second, second
    assert [r.fields["step"] for r in records(second, "resume")] == [at]
    expected = [s for s in range(at + 1, STEPS + 1) if s % 2 == 0]
    assert steps_of_rank(second, 0) == steps_of_rank(second, 1) == expected
    assert all(len(losses) == 1 for losses in losses_by_step(second).values())
    (summary,) = records(second, "summary")
    assert (summary.fields["ranks"], summary.fields["steps"]) == (2, STEPS)
    assert summary.fields["img_s"] > 0


# --------------------------------------------------------------------------- one rank
def run_main(trainer, cwd: Path, argv: list[str], steps: int) -> str:
    """main() in this process, its tf.functions run eagerly, as `python PROGRAM --tiny ARGV` in
    ``cwd`` outside any GPU job: its output."""
    out = io.StringIO()
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGUSR1, signal.SIGTERM)}
    with pytest.MonkeyPatch.context() as m, redirect_stdout(out), redirect_stderr(io.StringIO()):
        for var in trainer.GPU_JOB_VARIABLES:
            m.delenv(var, raising=False)
        m.chdir(cwd)
        m.setenv("TRAIN_TINY_STEPS", str(steps))
        m.setattr(sys, "argv", [str(PROGRAM), "--tiny", *argv])
        trainer.tf.config.run_functions_eagerly(True)
        try:
            assert trainer.main() == 0
        finally:
            trainer.tf.config.run_functions_eagerly(False)
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
    return out.getvalue()


def test_one_rank_with_its_step_run_as_written(trainer, tmp_path):
    out = run_main(trainer, tmp_path, ["--checkpoint-every", "2"], 3)
    assert steps_of_rank(out, 0) == [2]
    # every 2 steps, and once more at the end of a run that stops between two
    assert [r.fields["step"] for r in records(out, "checkpoint")] == [2, 3]
    assert sorted(p.name for p in (tmp_path / "checkpoints-hvd").glob("ckpt-*.index")) == [
        "ckpt-2.index",
        "ckpt-3.index",
    ]
    (summary,) = records(out, "summary")
    assert (summary.fields["ranks"], summary.fields["steps"]) == (1, 3)


def test_ctrl_c_ends_with_status_130_and_no_traceback(tf, trainer, monkeypatch, capsys):
    """The program run as a script, interrupted while it builds its model."""

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(tf.keras.applications, "ResNet50", interrupted)
    monkeypatch.setattr(sys, "argv", [str(PROGRAM), "--tiny"])
    with pytest.raises(SystemExit) as stop:
        runpy.run_path(str(PROGRAM), run_name="__main__")
    assert stop.value.code == 130
    assert "Traceback" not in capsys.readouterr().err


# --------------------------------------------------------------------------- errors
@pytest.fixture
def bare_env(monkeypatch, trainer):
    for var in (*trainer.GPU_JOB_VARIABLES, "TRAIN_TINY", "TRAIN_TINY_STEPS"):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def test_a_bad_argument_exits_2_naming_it(trainer, bare_env, capsys):
    with pytest.raises(SystemExit) as stop:
        trainer.parse_args(["--device", "tpu"])
    assert stop.value.code == 2
    assert "argument --device: invalid choice: 'tpu'" in capsys.readouterr().err


def test_tiny_settings_and_tiny_steps(trainer, bare_env):
    bare_env.setenv("TRAIN_TINY", "1")
    bare_env.setenv("TRAIN_TINY_STEPS", "3")
    args = trainer.parse_args([])
    assert args.tiny and (args.steps, args.image_size, args.batch_size) == (3, 32, 4)


def test_an_older_tensorflow_stops_at_start_up_naming_the_minimum(tf, trainer, bare_env):
    bare_env.setattr(tf, "__version__", "2.12.1")
    with pytest.raises(SystemExit) as stop:
        trainer.check_versions()
    assert str(stop.value.code) == (
        "error: train_resnet_keras_hvd.py needs tensorflow 2.13 or newer; "
        "this environment has 2.12.1"
    )
    assert trainer.version_tuple("unknown") == ()


def test_device_cpu_hides_the_gpus(tf, trainer, bare_env):
    hidden = []
    bare_env.setattr(tf.config, "set_visible_devices", lambda *a: hidden.append(a))
    assert trainer.visible_gpus(trainer.parse_args(["--device", "cpu"])) == []
    assert hidden == [([], "GPU")]


@pytest.fixture
def cpu_only_build(tf, bare_env):
    bare_env.setattr(tf.sysconfig, "get_build_info", lambda: {"is_cuda_build": False})
    bare_env.setattr(tf.config, "list_physical_devices", lambda kind=None: [])
    return bare_env


def test_a_gpu_job_with_a_cpu_only_tensorflow_stops_naming_the_build(tf, trainer, cpu_only_build):
    cpu_only_build.setenv("SLURM_GPUS_ON_NODE", "2")
    with pytest.raises(SystemExit) as stop:
        trainer.visible_gpus(trainer.parse_args([]))
    assert str(stop.value.code) == (
        f"error: SLURM_GPUS_ON_NODE=2 asks for a GPU, but this TensorFlow ({tf.__version__}) "
        "is a CPU-only build"
    )


def test_a_gpu_run_that_sees_no_gpu_stops_and_a_tiny_one_warns(tf, trainer, cpu_only_build, capsys):
    cpu_only_build.setattr(tf.sysconfig, "get_build_info", lambda: {"is_cuda_build": True})
    with pytest.raises(SystemExit) as stop:
        trainer.visible_gpus(trainer.parse_args(["--device", "gpu"]))
    assert str(stop.value.code) == (
        f"error: --device gpu asks for a GPU, but TensorFlow {tf.__version__} sees no GPU"
    )
    assert trainer.visible_gpus(trainer.parse_args(["--device", "gpu", "--tiny"])) == []
    assert (
        f"warning: --device gpu: TensorFlow {tf.__version__} sees no GPU; --tiny runs on the CPU"
        in capsys.readouterr().out
    )
    # no GPU asked for: the CPU, without a word
    assert trainer.visible_gpus(trainer.parse_args([])) == []
    assert capsys.readouterr().out == ""
