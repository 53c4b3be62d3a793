"""examples/pytorch/train_resnet.py: tiny CPU runs, two ranks, exact resume, clear errors.

Every run here is a tiny one (TRAIN_TINY=1 or --tiny: 32x32 images, 4 per rank, a few steps) on
the CPU. The torchrun test runs the default ResNet-50 exactly as the pages do; the others use
ResNet-18 (--arch resnet18), whose checkpoints are half the size, to keep the file near a minute.
Tests marked ``stack`` also run under each software stack's PyTorch (``nox -s stacks``).
"""

from __future__ import annotations

import importlib.util
import itertools
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clusterkit.runs import trainlog

# Some tests load the trainer as a module: its lines that run here are measured too.
pytestmark = pytest.mark.program_lines

ROOT = Path(__file__).resolve().parent.parent
TRAINER = ROOT / "examples" / "pytorch" / "train_resnet.py"
RUNTIME = TRAINER.parent / "job_runtime.py"  # what the PyTorch trainers share
STEPS = 10  # tiny runs made longer (TRAIN_TINY_STEPS) so that a signal has time to land
TIMEOUT = 180
LAUNCH_VARS = (
    "SLURM_",
    "OMPI_",
    "JSM_",
    "PMIX_",
    "PMI_",
    "MPI_LOCAL",
    "TORCHELASTIC_",
    "MASTER_",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "TRAIN_TINY",
    "OMP_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
)


def clean_env(**extra: str) -> dict[str, str]:
    """The test's environment without any launcher's variables (CI may itself run in a job)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCH_VARS)}
    env.update(extra)
    return env


def run(cwd: Path, *args: str, env: dict[str, str] | None = None):
    env = env if env is not None else clean_env(OMP_NUM_THREADS="2")
    return subprocess.run(
        [sys.executable, str(TRAINER), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def records(text: str, kind: str) -> list[trainlog.Record]:
    return [r for r in trainlog.parse(text) if r.kind == kind]


def steps(text: str) -> list[int]:
    return [r.fields["step"] for r in records(text, "train")]


def final_state(directory: Path) -> dict:
    import torch

    newest = sorted(directory.glob("ckpt-step*.pt"))[-1]
    return torch.load(newest, map_location="cpu", weights_only=True)


def assert_same_weights(a: dict, b: dict) -> None:
    import torch

    assert a["step"] == b["step"]
    assert a["model"].keys() == b["model"].keys()
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), f"{name} differs"
    momenta = [s["momentum_buffer"] for s in a["optimizer"]["state"].values()]
    again = [s["momentum_buffer"] for s in b["optimizer"]["state"].values()]
    assert all(torch.equal(x, y) for x, y in zip(momenta, again, strict=True))


def free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


TINY_ENV = {"TRAIN_TINY": "1", "TRAIN_TINY_STEPS": str(STEPS), "OMP_NUM_THREADS": "2"}
SMALL = ("--arch", "resnet18", "--log-every", "1")


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> tuple[Path, str]:
    """One uninterrupted tiny run (checkpoints every 4 steps); shared by several tests."""
    cwd = tmp_path_factory.mktemp("straight")
    r = run(cwd, *SMALL, "--checkpoint-every", "4", "--keep", "2", env=clean_env(**TINY_ENV))
    assert r.returncode == 0, r.stdout + r.stderr
    return cwd, r.stdout


# --------------------------------------------------------------------------- one process
def test_single_process_tiny_run(straight):
    cwd, out = straight
    assert steps(out) == list(range(1, STEPS + 1))
    assert all(math.isfinite(r.fields["loss"]) for r in records(out, "train"))
    assert {(r.fields["rank"], r.fields["world"]) for r in records(out, "train")} == {(0, 1)}
    (summary,) = records(out, "summary")
    assert summary.fields["ranks"] == 1 and summary.fields["steps"] == STEPS
    assert summary.fields["img_s"] > 0
    assert "channels-last memory format" in out.splitlines()[0]  # on the CPU by default
    # --keep 2: the last two checkpoints stay, nothing half-written is left behind
    names = sorted(p.name for p in (cwd / "checkpoints").iterdir())
    assert names == ["ckpt-step00000008.pt", "ckpt-step00000010.pt"]
    assert [r.fields["step"] for r in records(out, "checkpoint")] == [4, 8, 10]


def stopped_at_step_2(cwd: Path, args: tuple[str, ...], env: dict[str, str]) -> tuple[int, str]:
    """Start a run, send it SIGUSR1 once it logs step 2: the step it stopped at, its output."""
    proc = subprocess.Popen(
        [sys.executable, str(TRAINER), *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            rec = trainlog.parse_line(line)
            if rec and rec.kind == "train" and rec.fields["step"] == 2:
                proc.send_signal(signal.SIGUSR1)
                break
        rest, _ = proc.communicate(timeout=TIMEOUT)
    finally:
        proc.kill()
    out = "".join(lines) + rest
    assert proc.returncode == 0, out
    (stopped,) = records(out, "preempted")
    at = stopped.fields["step"]
    assert f"[checkpoint] step={at} " in out
    return at, out


def test_resume_after_sigusr1_is_exact(straight, tmp_path):
    """Stop with SIGUSR1 part-way, resume: same steps, bit-identical weights."""
    at, first = stopped_at_step_2(
        tmp_path, (*SMALL, "--checkpoint-every", "100"), clean_env(**TINY_ENV)
    )
    assert 2 <= at < STEPS, first

    second = run(tmp_path, *SMALL, "--checkpoint-every", "100", env=clean_env(**TINY_ENV))
    assert second.returncode == 0, second.stderr
    assert [r.fields["step"] for r in records(second.stdout, "resume")] == [at]
    # no step lost and none done twice
    assert steps(first) + steps(second.stdout) == list(range(1, STEPS + 1))
    assert_same_weights(
        final_state(straight[0] / "checkpoints"), final_state(tmp_path / "checkpoints")
    )


def test_damaged_newest_checkpoint_falls_back_to_the_previous_one(straight, tmp_path):
    shutil.copytree(straight[0] / "checkpoints", tmp_path / "checkpoints")
    newest = tmp_path / "checkpoints" / f"ckpt-step{STEPS:08d}.pt"
    newest.write_bytes(newest.read_bytes()[:4096])  # truncated, as by a full disk
    r = run(tmp_path, *SMALL, "--checkpoint-every", "100", env=clean_env(**TINY_ENV))
    assert r.returncode == 0, r.stderr
    assert f"skipping checkpoint {Path('checkpoints') / newest.name}" in r.stderr
    assert [rec.fields["step"] for rec in records(r.stdout, "resume")] == [8]
    assert steps(r.stdout) == [9, 10]
    assert_same_weights(
        final_state(straight[0] / "checkpoints"), final_state(tmp_path / "checkpoints")
    )


def test_image_folder_with_evaluation(jpeg_folder, tmp_path):
    data = str(jpeg_folder)
    r = run(tmp_path, "--tiny", "--arch", "resnet18", "--data-dir", data, "--eval-every-epoch")
    assert r.returncode == 0, r.stderr
    assert steps(r.stdout) == [2, 4, 6]
    evals = records(r.stdout, "eval")
    assert [e.fields["epoch"] for e in evals] == [0, 1]  # 16 images / 4 -> epochs of 3 steps
    assert all(0 <= e.fields["top1"] <= e.fields["top5"] <= 1 for e in evals)
    assert records(r.stdout, "summary")


@pytest.mark.slow
def test_resume_on_an_image_folder_with_a_loader_process_is_exact(jpeg_folder, tmp_path):
    """Random crops come from (seed, epoch, image), not from a loader process's random stream:
    a run stopped and resumed ends with the weights of an uninterrupted one."""
    flags = (*SMALL, "--device", "cpu", "--data-dir", str(jpeg_folder), "--workers", "1")
    flags += ("--image-size", "32", "--batch-size", "4", "--steps", "8")
    flags += ("--steps-per-epoch", "3", "--checkpoint-every", "100")
    env = clean_env(OMP_NUM_THREADS="2")
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    whole.mkdir()
    parts.mkdir()
    straight_run = run(whole, *flags, env=env)
    assert straight_run.returncode == 0, straight_run.stderr
    at, first = stopped_at_step_2(parts, flags, env)
    assert 2 <= at < 8, first
    second = run(parts, *flags, env=env)
    assert second.returncode == 0, second.stderr
    assert steps(first) + steps(second.stdout) == list(range(1, 9))
    assert_same_weights(final_state(whole / "checkpoints"), final_state(parts / "checkpoints"))


# --------------------------------------------------------------------------- two ranks
def torchrun() -> list[str]:
    beside = Path(sys.executable).with_name("torchrun")
    return [str(beside)] if beside.exists() else [sys.executable, "-m", "torch.distributed.run"]


@pytest.mark.stack
def test_two_ranks_under_torchrun(tmp_path):
    r = subprocess.run(
        [*torchrun(), "--standalone", "--nproc_per_node=2", str(TRAINER), "--eval-every-epoch"],
        cwd=tmp_path,
        env=clean_env(TRAIN_TINY="1"),  # what CI runs for the pages: the default ResNet-50
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    train = records(r.stdout, "train")
    assert {(t.fields["rank"], t.fields["world"]) for t in train} == {(0, 2), (1, 2)}
    for rank in (0, 1):
        assert [t.fields["step"] for t in train if t.fields["rank"] == rank] == [2, 4, 6]
    (summary,) = records(r.stdout, "summary")
    assert summary.fields["ranks"] == 2 and summary.fields["steps"] == 6
    assert "OMP_NUM_THREADS is not set" not in r.stderr  # torchrun sets it
    # held-out images after each 3-step epoch, summed over both ranks, printed by rank 0
    evals = records(r.stdout, "eval")
    assert [(e.fields["rank"], e.fields["epoch"]) for e in evals] == [(0, 0), (0, 1)]
    assert all(0 <= e.fields["top1"] <= e.fields["top5"] <= 1 for e in evals)


# Each rank gathers states into rank 0 with the trainers' gather_states (job_runtime.py), then
# ends the process group as the trainer's last lines do (barrier, destroy, the DDP model's last
# reference goes).
GATHER_THEN_END = r"""
import importlib.util, sys, torch, torch.distributed as dist
spec = importlib.util.spec_from_file_location("job_runtime", sys.argv[1])
trainer = importlib.util.module_from_spec(spec)
spec.loader.exec_module(trainer)


def one_group(i):
    group = dist.new_group(backend="gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 8), process_group=group)
    model(torch.ones(2, 8)).sum().backward()
    state = torch.get_rng_state()
    trainer._GROUPS.append(group)  # as the trainer's setup does
    got = trainer.gather_states((rank, i, state), rank, world, group)
    dist.barrier(group=group)  # nothing between the gather and the end, as in the trainer
    dist.destroy_process_group(group)
    return got, state  # the model goes as the function returns, as main()'s does


dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
for i in range(int(sys.argv[2])):
    got, state = one_group(i)
    trainer._GROUPS.clear()  # as the trainer's run() does
    if rank == 0:
        assert [g[:2] for g in got] == [(r, i) for r in range(world)], got
        assert torch.equal(got[0][2], state)
    else:
        assert got is None, got
print(f"rank {rank}: {i + 1} process groups ended", flush=True)
"""


@pytest.mark.stack
def test_process_groups_end_after_gathering_states(tmp_path):
    """The trainer's ending leaves nothing that deadlocks gloo's teardown. This program hung
    in 3 of 3 tries under torch 2.5.0 with dist.gather_object in gather_states' place, and in
    2 of 2 under torch 2.10.0 without the groups held past the model (2026-11-27, 2 cores); the
    stacks session runs it under each stack's PyTorch."""
    port, groups = free_port(), 60
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", GATHER_THEN_END, str(RUNTIME), str(groups)],
            cwd=tmp_path,
            env=clean_env(
                RANK=str(rank),
                WORLD_SIZE="2",
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=port,
                OMP_NUM_THREADS="1",
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in (0, 1)
    ]
    try:
        # a deadlock waits forever; 60 groups took 127-190 s on 2 cores at load 9 (torch 2.9.1)
        outputs = [proc.communicate(timeout=360)[0] for proc in procs]
    except subprocess.TimeoutExpired:
        for proc in procs:
            proc.kill()
        pytest.fail("a rank hung ending its process groups (gloo teardown deadlock)")
    for rank, (proc, out) in enumerate(zip(procs, outputs, strict=True)):
        assert proc.returncode == 0, out
        assert f"rank {rank}: {groups} process groups ended" in out


def two_ranks_by_hand(cwd: Path, steps: int) -> list[subprocess.Popen]:
    """Two ranks started as srun starts them, each with its SLURM_PROCID."""
    port = free_port()
    procs = []
    for rank in (0, 1):
        env = clean_env(
            TRAIN_TINY="1",
            TRAIN_TINY_STEPS=str(steps),
            SLURM_PROCID=str(rank),
            SLURM_NTASKS="2",
            SLURM_LOCALID=str(rank),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
        )
        procs.append(
            subprocess.Popen(
                # the layout a GPU run has by default (other runs here: channels-last)
                [
                    sys.executable,
                    str(TRAINER),
                    *SMALL,
                    "--checkpoint-every",
                    "100",
                    "--no-channels-last",
                ],
                cwd=cwd,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    return procs


def test_two_ranks_by_hand_from_slurm_variables_stop_together(
    trainer, bare_env, own_signals, capsys, tmp_path
):
    """srun-style launch (SLURM_PROCID/SLURM_NTASKS, MASTER_ADDR/PORT); SIGUSR1 to one rank
    stops both at the same step, and rank 0 checkpoints there. Started again, both ranks
    resume from that checkpoint; a single process then finds the run complete."""
    procs = two_ranks_by_hand(tmp_path, 40)
    head = []
    try:
        deadline = time.monotonic() + TIMEOUT
        for line in procs[0].stdout:
            head.append(line)
            rec = trainlog.parse_line(line)
            if rec and rec.kind == "train" and rec.fields["step"] == 2:
                procs[1].send_signal(signal.SIGUSR1)
                break
            assert time.monotonic() < deadline
        outs = [p.communicate(timeout=TIMEOUT)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    outs[0] = "".join(head) + outs[0]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert "channels-first memory format" in outs[0]  # rank 0 says how the ranks run
    # hand-launched ranks without OMP_NUM_THREADS: one warning, from rank 0
    assert outs[0].count("OMP_NUM_THREADS is not set") == 1
    assert "OMP_NUM_THREADS" not in outs[1]
    (stopped,) = records(outs[0], "preempted")
    at = stopped.fields["step"]
    assert 2 <= at < 40
    for rank, out in enumerate(outs):
        train = records(out, "train")
        assert {(t.fields["rank"], t.fields["world"]) for t in train} == {(rank, 2)}
        assert [t.fields["step"] for t in train] == list(range(1, at + 1))
    assert (tmp_path / "checkpoints" / f"ckpt-step{at:08d}.pt").is_file()

    # the requeued job: one more step, which both ranks take from the checkpoint's step on
    procs = two_ranks_by_hand(tmp_path, at + 1)
    try:
        outs = [p.communicate(timeout=TIMEOUT)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0, 0], outs
    (resumed,) = records(outs[0], "resume")
    assert resumed.fields["step"] == at
    for out in outs:
        assert [t.fields["step"] for t in records(out, "train")] == [at + 1]

    # the same checkpoints, one process: a different data order, and nothing left to train
    bare_env.setenv("TRAIN_TINY_STEPS", str(at + 1))
    assert trainer.run(["--tiny", *SMALL, "--checkpoint-dir", str(tmp_path / "checkpoints")]) == 0
    out, err = capsys.readouterr()
    assert "warning: checkpoint written by 2 rank(s), now 1: new data order" in err
    assert f"already trained for {at + 1} steps (of {at + 1}): nothing to do" in out
    assert records(out, "train") == [] and len(records(out, "summary")) == 1


# --------------------------------------------------------------------------- errors
def test_bad_flag_exits_2_with_usage_and_no_traceback(tmp_path):
    r = run(tmp_path, "--precision", "fp8")
    assert r.returncode == 2
    assert "argument --precision: invalid choice: 'fp8'" in r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""


@pytest.fixture(scope="module")
def trainer():
    """The trainer as a module, for error paths that stop before any training."""
    spec = importlib.util.spec_from_file_location("train_resnet", TRAINER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def bare_env(monkeypatch):
    for key in list(os.environ):
        if key.startswith(LAUNCH_VARS):
            monkeypatch.delenv(key)
    return monkeypatch


def one_line_error(trainer, capsys, argv) -> tuple[int, str]:
    try:
        code = trainer.run(argv)
    except SystemExit as exc:  # argparse
        code = exc.code
    err = capsys.readouterr().err
    return code, err.strip().splitlines()[-1]


@pytest.mark.stack
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["--arch", "resnet5000"], "argument --arch: invalid choice: 'resnet5000'"),
        (["--batch-size", "0"], "--batch-size must be at least 1"),
        (["--steps", "0"], "--steps must be at least 1"),
        (["--steps-per-epoch", "-3"], "--steps-per-epoch must be at least 1"),
        (["--workers", "-1"], "--workers and --warmup-steps cannot be negative"),
        (["--warmup-steps", "-1"], "--workers and --warmup-steps cannot be negative"),
        (["--loader", "dali"], "--loader dali decodes the images of --data-dir: give it"),
        (["--data-dir", "/nonexistent/imagenet"], "--data-dir /nonexistent/imagenet: no such dir"),
        (["--backend", "mpi"], "--backend mpi: this PyTorch build has no MPI support"),
    ],
)
def test_bad_arguments(trainer, bare_env, capsys, argv, message):
    code, line = one_line_error(trainer, capsys, argv)
    assert code == 2 and message in line


def test_data_dir_that_is_no_image_folder(trainer, bare_env, capsys, tmp_path):
    (tmp_path / "a_file").write_text("")
    (tmp_path / "no_train").mkdir()
    (tmp_path / "only_train" / "train" / "cat").mkdir(parents=True)
    (tmp_path / "only_train" / "train" / "cat" / "1.JPEG").write_bytes(b"")
    cases = [
        (["--data-dir", str(tmp_path / "a_file")], "a_file: not a directory"),
        (
            ["--data-dir", str(tmp_path / "no_train")],
            "no_train: no train/ directory in it (expected train/<class>/<image> files)",
        ),
        (
            ["--data-dir", str(tmp_path / "only_train"), "--eval-every-epoch"],
            "only_train: no val/ directory in it (expected val/<class>/<image> files)",
        ),
    ]
    for argv, message in cases:
        code, line = one_line_error(trainer, capsys, argv)
        assert code == 2 and line.endswith(message), line


def test_data_dir_without_images(trainer, bare_env, capsys, tmp_path):
    (tmp_path / "train" / "empty_class").mkdir(parents=True)
    code, line = one_line_error(trainer, capsys, ["--data-dir", str(tmp_path)])
    assert (
        code == 2 and "train/ holds neither class directories with images nor WebDataset " in line
    )
    assert "WebDataset shards (train/*.tar, written by make_shards.py)" in line
    code, line = one_line_error(trainer, capsys, ["--data-dir", str(tmp_path / "train" / "x")])
    assert code == 2 and "no such directory" in line


def test_missing_master_addr_says_how_to_set_it(trainer, bare_env, capsys):
    bare_env.setenv("SLURM_PROCID", "0")
    bare_env.setenv("SLURM_NTASKS", "2")
    code, line = one_line_error(trainer, capsys, ["--tiny"])
    assert code == 1
    assert line.startswith("error: MASTER_ADDR is not set (nor MASTER_PORT): srun started 2")
    assert 'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)' in line


@pytest.mark.parametrize(
    ("env", "says"),
    [
        (
            {"JSM_NAMESPACE_RANK": "0", "JSM_NAMESPACE_SIZE": "2"},
            "MASTER_ADDR is not set (nor MASTER_PORT): jsrun started 2 ranks but does not say "
            "where they meet. In the job script: export MASTER_PORT=29500 MASTER_ADDR="
            '$(sort -u "$LSB_DJOB_HOSTFILE" | grep -v -e batch -e login | head -n 1)',
        ),
        (
            {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "MASTER_ADDR": "n1"},
            "MASTER_PORT is not set: mpirun started 2 ranks but does not say where they meet. "
            "In the job script: export MASTER_PORT=29500 MASTER_ADDR=$(hostname)  "
            "(and pass -x MASTER_ADDR -x MASTER_PORT to mpirun)",
        ),
    ],
)
def test_missing_rendezvous_variables_under_jsrun_and_mpirun(trainer, bare_env, capsys, env, says):
    for key, value in env.items():
        bare_env.setenv(key, value)
    code, line = one_line_error(trainer, capsys, ["--tiny"])
    assert (code, line) == (1, f"error: {says}")


def test_a_rank_that_cannot_join_its_group_says_where_it_tried(trainer, bare_env, capsys):
    for key, value in {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "OMP_NUM_THREADS": "2"}.items():
        bare_env.setenv(key, value)
    bare_env.setenv("MASTER_ADDR", "127.0.0.1")
    bare_env.setenv("MASTER_PORT", "29500x")  # a typo in the job script
    code, line = one_line_error(trainer, capsys, ["--tiny"])
    assert code == 1
    assert line.startswith("error: rank 0 could not join the gloo group at 127.0.0.1:29500x: ")
    assert "'29500x'" in line


def test_nccl_on_the_cpu_is_refused(trainer, bare_env, capsys):
    code, line = one_line_error(trainer, capsys, ["--tiny", "--backend", "nccl"])
    assert (code, line) == (1, "error: --backend nccl needs GPUs; use gloo on CPU")


@pytest.fixture
def own_signals():
    """main() installs SIGUSR1/SIGTERM handlers: give the test process its own back."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGUSR1, signal.SIGTERM)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def test_fewer_images_than_one_batch_is_an_error(trainer, bare_env, own_signals, capsys, tmp_path):
    (tmp_path / "train" / "cat").mkdir(parents=True)
    (tmp_path / "train" / "cat" / "1.jpg").write_bytes(b"")
    code, line = one_line_error(trainer, capsys, ["--tiny", "--data-dir", str(tmp_path)])
    assert code == 1
    assert line == "error: 1 training images are fewer than one batch on each of 1 rank(s) (4 each)"


def test_a_loss_that_overflows_stops_the_run(trainer, bare_env, own_signals, capsys, tmp_path):
    bare_env.setenv("TRAIN_TINY_STEPS", "4")
    argv = ["--tiny", "--arch", "resnet18", "--num-classes", "10", "--optimizer", "adamw"]
    argv += ["--lr", "1e30"]
    argv += ["--log-every", "1", "--checkpoint-dir", str(tmp_path)]
    code, line = one_line_error(trainer, capsys, argv)
    assert code == 1
    assert line.startswith("error: loss is nan at step ") or line.startswith("error: loss is inf")
    assert line.endswith(": lower --lr, or use bf16 or fp32")


@pytest.mark.parametrize(
    ("raised", "code", "message"),
    [
        ("OutOfMemoryError", 1, "error: out of GPU memory: lower --batch-size"),
        ("KeyboardInterrupt", 130, ""),
    ],
)
def test_out_of_memory_and_ctrl_c_end_without_a_traceback(
    trainer, monkeypatch, capsys, raised, code, message
):
    """What run() makes of them: the GPU's out-of-memory error (which a CPU cannot raise here,
    so main is made to raise it) in one line, Ctrl-C as status 130."""
    import job_runtime  # beside the trainer, which reports its errors in one line

    error = job_runtime.OutOfMemoryError if raised == "OutOfMemoryError" else KeyboardInterrupt

    def main(argv):
        raise error("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(trainer, "main", main)
    assert trainer.run([]) == code
    assert capsys.readouterr().err.strip() == message


# --------------------------------------------------------------------------- GPUs and versions
@pytest.fixture
def no_gpu(bare_env):
    """A CUDA build of PyTorch that sees no GPU (whatever this machine has)."""
    import torch

    bare_env.setattr(torch.version, "cuda", "12.1")
    bare_env.setattr(torch.cuda, "is_available", lambda: False)
    return bare_env


@pytest.mark.stack
@pytest.mark.parametrize(
    ("env", "argv", "asked_by"),
    [
        ({"SLURM_GPUS_ON_NODE": "4"}, [], "SLURM_GPUS_ON_NODE=4"),
        ({"CUDA_VISIBLE_DEVICES": "0,1"}, [], "CUDA_VISIBLE_DEVICES=0,1"),  # LSF, jsrun
        ({"ROCR_VISIBLE_DEVICES": "0"}, [], "ROCR_VISIBLE_DEVICES=0"),  # AMD GPUs under Slurm
        ({}, ["--device", "cuda"], "--device cuda"),
    ],
)
def test_a_gpu_run_that_sees_no_gpu_stops_at_once(trainer, no_gpu, capsys, env, argv, asked_by):
    for key, value in env.items():
        no_gpu.setenv(key, value)
    code, line = one_line_error(trainer, capsys, argv)
    assert code == 1
    assert line.startswith(f"error: {asked_by} asks for a GPU, but PyTorch ")
    assert "(CUDA 12.1) sees no GPU" in line


@pytest.mark.stack
def test_a_gpu_job_with_a_cpu_only_pytorch_stops_naming_the_build(trainer, bare_env, capsys):
    import torch

    bare_env.setattr(torch.version, "cuda", None)
    bare_env.setattr(torch.version, "hip", None)
    bare_env.setenv("SLURM_GPUS_ON_NODE", "1")
    code, line = one_line_error(trainer, capsys, [])
    assert code == 1
    assert f"asks for a GPU, but this PyTorch ({torch.__version__}) is a CPU-only build" in line


def device_type(trainer, argv):
    """What --device and --tiny in argv choose on this (patched) machine, for rank 0."""
    args = trainer.parse_args(argv)
    return trainer.choose_device_type(args.device, args.tiny, rank=0)


@pytest.mark.stack
@pytest.mark.parametrize(
    ("env", "argv"),
    [
        ({}, []),  # no job, no GPU: the CPU, as ever
        ({"SLURM_GPUS_ON_NODE": "0"}, []),
        ({"CUDA_VISIBLE_DEVICES": ""}, []),
        ({"CUDA_VISIBLE_DEVICES": "-1"}, []),  # GPUs hidden on purpose
        ({"SLURM_GPUS_ON_NODE": "4"}, ["--device", "cpu"]),  # the CPU asked for by name
    ],
)
def test_runs_that_ask_for_no_gpu_use_the_cpu(trainer, no_gpu, capsys, env, argv):
    for key, value in env.items():
        no_gpu.setenv(key, value)
    assert device_type(trainer, argv) == "cpu"
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("env", "argv"), [({"SLURM_GPUS_ON_NODE": "1"}, []), ({}, [])])
def test_a_gpu_that_pytorch_sees_is_used(trainer, no_gpu, capsys, env, argv):
    """With --device auto, a GPU that a CUDA build sees is used, inside a GPU job or not."""
    no_gpu.setattr(trainer.torch.cuda, "is_available", lambda: True)
    for key, value in env.items():
        no_gpu.setenv(key, value)
    assert sys.modules[trainer.choose_device_type.__module__].missing_gpu() is None
    assert device_type(trainer, argv) == "cuda"
    assert capsys.readouterr().err == ""


@pytest.mark.stack
def test_a_tiny_run_in_a_gpu_job_warns_and_uses_the_cpu(trainer, no_gpu, capsys):
    """What CI does with the GPU job scripts: TRAIN_TINY=1 on a machine without GPUs."""
    no_gpu.setenv("SLURM_GPUS_ON_NODE", "4")
    assert device_type(trainer, ["--tiny"]) == "cpu"
    err = capsys.readouterr().err
    assert "warning: SLURM_GPUS_ON_NODE=4 asks for a GPU, but PyTorch" in err
    assert "--tiny runs on the CPU instead" in err


def test_a_gpu_run_stops_before_any_training(tmp_path):
    """End to end: a job that holds GPUs, no GPU visible (hidden here): exit 1 at start-up."""
    import torch

    r = run(
        tmp_path,
        "--steps",
        "1",
        env=clean_env(SLURM_GPUS_ON_NODE="2", CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="2"),
    )
    assert r.returncode == 1, r.stdout + r.stderr
    cause = "sees no GPU" if torch.version.cuda or torch.version.hip else "is a CPU-only build"
    assert r.stderr.strip().splitlines()[-1].startswith("error: SLURM_GPUS_ON_NODE=2 asks for")
    assert cause in r.stderr and "Traceback" not in r.stderr
    assert r.stdout == "" and not (tmp_path / "checkpoints").exists()


@pytest.mark.stack
def test_an_older_pytorch_stops_at_start_up_naming_the_minimum(trainer, bare_env, capsys):
    import torch

    bare_env.setattr(torch, "__version__", "2.0.1+cu118")
    code, line = one_line_error(trainer, capsys, ["--tiny"])
    assert code == 1
    oldest = trainer.MINIMUM_VERSIONS["torch"]
    assert (
        line
        == f"error: train_resnet.py needs torch {oldest} or newer; this environment has 2.0.1+cu118"
    )


@pytest.mark.stack
def test_a_checkpoint_round_trip_restores_weights_momenta_and_random_state(trainer, tmp_path):
    """What an exact resume rests on, in-process: the file written at a step loads (with
    weights_only) into a fresh model and optimizer, and the random streams carry on."""
    import random

    import torch
    import torchvision

    def fresh():
        torch.manual_seed(0)
        model = torchvision.models.get_model("resnet18", weights=None, num_classes=10)
        return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    model, optimizer = fresh()
    model(torch.rand(2, 3, 32, 32)).sum().backward()
    optimizer.step()  # momentum buffers to save
    args = trainer.parse_args(["--tiny", "--checkpoint-dir", str(tmp_path), "--keep", "2"])
    scaler = trainer.grad_scaler("cpu", enabled=False)
    cpu = torch.device("cpu")
    random.seed(7)
    torch.manual_seed(7)
    trainer.save_checkpoint(args, model, optimizer, scaler, 3, 1, 0, 1, cpu, None)
    draws = (random.random(), torch.rand(4))

    again, again_optimizer = fresh()
    path, state = trainer.find_checkpoint(tmp_path, again)
    assert path.name == "ckpt-step00000003.pt" and state["step"] == 3
    again.load_state_dict(state["model"])
    again_optimizer.load_state_dict(state["optimizer"])
    trainer.set_rng_state(state["rng"][0], cpu)
    assert (random.random(), *torch.rand(4).tolist()) == (draws[0], *draws[1].tolist())
    assert_same_weights(
        {"step": 3, "model": model.state_dict(), "optimizer": optimizer.state_dict()},
        {"step": 3, "model": again.state_dict(), "optimizer": again_optimizer.state_dict()},
    )


def test_checkpoints_that_do_not_fit_are_named_with_the_reason(trainer, tmp_path):
    import torch

    model = torch.nn.Linear(3, 2)
    path = tmp_path / "ckpt-step00000004.pt"
    good = {"model": model.state_dict(), "optimizer": {}, "scaler": {}, "step": 4, "epoch": 0}
    good["rng"] = [None]
    assert trainer.check_state(good, path, model) is None
    cases = [
        ([1, 2], "not a checkpoint of this program"),
        ({"model": {}, "step": 4}, "lacks epoch, optimizer, rng, scaler"),
        ({**good, "step": 5}, "holds step 5, not the step in its name"),
        ({**good, "model": torch.nn.Linear(3, 4).state_dict()}, "its model does not match"),
    ]
    for state, says in cases:
        assert trainer.check_state(state, path, model).startswith(says)


def test_a_half_written_checkpoint_is_removed_and_none_found(trainer, tmp_path):
    (tmp_path / ".ckpt-k2x9.tmp").write_bytes(b"\x80")  # left by a job killed mid-write
    assert trainer.find_checkpoint(tmp_path, None) == (None, None)
    assert list(tmp_path.iterdir()) == []


def test_a_checkpoint_that_cannot_be_written_is_an_error(trainer, tmp_path):
    import torch

    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    (tmp_path / "taken").write_text("")  # a file where the directory should go
    args = trainer.parse_args(["--tiny", "--checkpoint-dir", str(tmp_path / "taken" / "ckpt")])
    scaler = trainer.grad_scaler("cpu", enabled=False)
    cpu = torch.device("cpu")
    with pytest.raises(trainer.Abort) as caught:
        trainer.save_checkpoint(args, model, optimizer, scaler, 3, 0, 0, 1, cpu, None)
    final = tmp_path / "taken" / "ckpt" / "ckpt-step00000003.pt"
    assert str(caught.value) == f"cannot write checkpoint {final}: Not a directory"


@pytest.mark.parametrize(
    ("env", "argv", "context"),
    [
        ({}, [], "fork"),
        ({"OMPI_COMM_WORLD_RANK": "0"}, [], "forkserver"),  # forked workers can crash under MPI
        ({"PMI_RANK": "0"}, ["--mp-start-method", "spawn"], "spawn"),
    ],
)
def test_data_loader_processes_start_safely_under_mpi(
    trainer, bare_env, jpeg_folder, env, argv, context
):
    import torch

    for key, value in env.items():
        bare_env.setenv(key, value)
    argv = ["--workers", "2", "--batch-size", "2", "--data-dir", str(jpeg_folder), *argv]
    batches = trainer.folder_batches(trainer.parse_args(argv), "train", 0, 1, torch.device("cpu"))
    loader = batches.loader
    assert loader.num_workers == 2 and loader.persistent_workers and batches.images == 16
    assert loader.multiprocessing_context.get_start_method() == context


@pytest.mark.stack
def test_the_loss_scaler_of_this_pytorch(trainer):
    """fp16 loss scaling: torch.amp.GradScaler (2.3+) or, before it, CUDA's own scaler."""
    import torch

    scaler = trainer.grad_scaler("cpu", enabled=True)
    loss = torch.tensor(2.0, requires_grad=True)
    scaled = scaler.scale(loss)
    if hasattr(torch.amp, "GradScaler"):  # scales on the CPU too
        assert scaled.item() > loss.item() and scaler.is_enabled()
    else:  # CPU runs go unscaled (PyTorch's CUDA scaler disables itself)
        assert scaled.item() == loss.item() and not scaler.is_enabled()
    import job_runtime  # beside the trainer: the out-of-memory error it reports in one line

    assert isinstance(job_runtime.OutOfMemoryError, type) and issubclass(
        job_runtime.OutOfMemoryError, RuntimeError
    )


# --------------------------------------------------------------------------- pieces
@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, ("none", 0, 1, 0)),
        (
            {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "SLURM_PROCID": "0"},
            ("torchrun", 3, 8, 1),
        ),
        ({"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1"}, ("srun", 5, 8, 1)),
        (
            {"SLURM_PROCID": "5", "SLURM_NTASKS": "9", "SLURM_STEP_NUM_TASKS": "8"},
            ("srun", 5, 8, 0),
        ),
        (  # mpirun inside a Slurm job: its ranks inherit the batch shell's SLURM_PROCID=0
            {"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4", "SLURM_PROCID": "0"},
            ("mpirun", 2, 4, 0),
        ),
        ({"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1"}, ("mpiexec", 3, 4, 1)),
        (
            {
                "JSM_NAMESPACE_RANK": "7",
                "JSM_NAMESPACE_SIZE": "12",
                "JSM_NAMESPACE_LOCAL_RANK": "1",
            },
            ("jsrun", 7, 12, 1),
        ),
        ({"PMIX_RANK": "1", "WORLD_SIZE": "2"}, ("pmix", 1, 2, 0)),
    ],
)
def test_launcher_detection(trainer, bare_env, env, expected):
    for key, value in env.items():
        bare_env.setenv(key, value)
    assert trainer.launcher_env() == expected


def test_pmix_without_a_world_size_is_an_error(trainer, bare_env):
    bare_env.setenv("PMIX_RANK", "0")
    with pytest.raises(trainer.Abort, match="export WORLD_SIZE"):
        trainer.launcher_env()


def test_learning_rate_warms_up_then_decays(trainer):
    lrs = [trainer.learning_rate(s, 0.4, 4, 20) for s in range(20)]
    assert lrs[:4] == pytest.approx([0.1, 0.2, 0.3, 0.4])
    assert lrs[4] == 0.4 and all(a > b for a, b in itertools.pairwise(lrs[4:])) and lrs[-1] > 0


@pytest.mark.stack
def test_synthetic_batches_depend_only_on_seed_rank_epoch_and_step(trainer):
    import torch

    cpu = torch.device("cpu")

    def batches(seed=1, rank=0, split=0, epoch=2, done=0):
        b = trainer.SyntheticBatches(5, 4, 16, 10, seed, rank, cpu, split=split)
        b.start(epoch, done)
        return list(b)

    whole = batches()
    images, labels = whole[3]
    assert len(whole) == 5 and images.dtype == torch.uint8 and images.shape == (4, 3, 16, 16)
    assert labels.shape == (4,) and 0 <= labels.min() <= labels.max() < 10
    resumed = batches(done=3)  # what a run resumed after step 3 of the epoch gets
    assert len(resumed) == 2 and torch.equal(resumed[0][0], images)
    assert torch.equal(resumed[0][1], labels)
    for other in (batches(seed=2), batches(rank=1), batches(split=1), batches(epoch=3)):
        assert not torch.equal(other[3][0], images)
    assert not torch.equal(whole[4][0], images)


@pytest.mark.stack
def test_random_crops_depend_on_the_image_and_epoch_only(trainer, jpeg_folder):
    """What exact resume on an image folder rests on: sample (epoch, i) is the same whichever
    process makes it, and making it leaves the caller's random stream alone."""
    import torch
    import torchvision

    args = trainer.parse_args(["--data-dir", str(jpeg_folder), "--image-size", "24"])
    folder = torchvision.datasets.ImageFolder(
        jpeg_folder / "train", trainer.folder_transform(args, "train")
    )
    samples = trainer.SeededSamples(folder, seed=0)
    assert len(samples) == len(folder) == 16
    torch.manual_seed(5)
    image, label = samples[(1, 3)]
    assert image.shape == (3, 24, 24) and image.dtype == torch.uint8 and label == 0
    after = torch.rand(1)
    torch.manual_seed(5)
    assert torch.equal(samples[(1, 3)][0], image) and torch.equal(torch.rand(1), after)
    crops = {bytes(samples[(epoch, 3)][0].flatten().tolist()) for epoch in range(4)}
    assert len(crops) == 4  # a new crop each epoch


@pytest.mark.stack
def test_gpu_decoding_path_crops_what_the_cpu_loader_crops(trainer, jpeg_folder, tmp_path):
    """--loader gpu-decode's pieces, run on the CPU: loader processes read the files and plan the
    crops, the decoder decodes, crops and resizes. A PNG among the JPEGs is decoded the CPU's
    way. The centre crops match those of the CPU loader but for resampling differences."""
    import shutil

    import torch
    import torchvision
    from PIL import Image

    data = tmp_path / "data"
    shutil.copytree(jpeg_folder, data)
    with Image.open(data / "val" / "n00000000" / "n00000000_0.JPEG") as im:
        im.save(data / "val" / "n00000000" / "n00000000_png.png")
    args = trainer.parse_args(["--data-dir", str(data), "--image-size", "24", "--batch-size", "5"])
    args.workers, args.loader = 0, "gpu-decode"
    cpu = torch.device("cpu")
    planned = trainer.folder_batches(args, "val", 0, 1, cpu)
    planned.start(0, 0)
    args.loader = "cpu"
    plain = trainer.folder_batches(args, "val", 0, 1, cpu)
    plain.start(0, 0)
    (images, labels), (expected, expected_labels) = next(iter(planned)), next(iter(plain))
    assert images.shape == (5, 3, 24, 24) and images.dtype == torch.float32
    assert torch.equal(labels, expected_labels) and labels.tolist() == [0, 0, 0, 1, 1]
    # the same regions, but for resampling: 4x4 averages within 8 of 255 (another image's: 35+)
    pooled = [torch.nn.functional.avg_pool2d(x.float(), 4) for x in (images, expected)]
    assert (pooled[0] - pooled[1]).abs().mean(dim=(1, 2, 3)).max() < 8
    jpeg, png = (p for p, _ in torchvision.datasets.ImageFolder(data / "val").samples[1:3])
    plan = trainer.CropPlan(24, train=False)
    assert plan(trainer.EncodedImage.read(jpeg))[0].dim() == 1  # bytes, for the GPU
    assert plan(trainer.EncodedImage.read(png))[0].shape == (3, 24, 24)  # decoded here
    encoded = trainer.EncodedImage.read(jpeg)
    torch.manual_seed(0)
    payload, (top, left, h, w), flip = trainer.CropPlan(24, train=True)(encoded)
    assert payload.dim() == 1 and isinstance(flip, bool)
    assert 0 <= top <= top + h <= encoded.height and 0 <= left <= left + w <= encoded.width
    decoder = trainer.GpuDecoder(24, cpu)
    assert decoder.decode_all([]) == []  # a batch of PNGs only
    assert not decoder.batched  # on the CPU: one call per image, whatever the torchvision
    (one,) = decoder.decode_all([payload])
    assert one.shape == (3, encoded.height, encoded.width)
    if trainer.version_tuple(torchvision.__version__) >= (0, 20):  # a list on the CPU too
        decoder.batched = True  # the call a GPU makes: the same pixels
        (batched,) = decoder.decode_all([payload])
        assert torch.equal(batched, one)
    train = trainer.folder_batches(args, "train", 0, 1, cpu)
    assert len(train) == 3  # 16 images in batches of 5: the 16th is left out


@pytest.mark.parametrize(
    ("argv", "device", "message"),
    [
        (["--loader", "dali"], "cpu", "--loader dali: it decodes on a GPU and this run has none"),
        (["--loader", "gpu-decode"], "cpu", "--loader gpu-decode: it decodes on a GPU"),
        (["--loader", "dali"], "cuda", "--loader dali needs NVIDIA DALI"),
    ],
)
def test_a_gpu_loader_that_cannot_work_stops_at_once(
    trainer, jpeg_folder, monkeypatch, argv, device, message
):
    import torch

    args = trainer.parse_args([*argv, "--data-dir", str(jpeg_folder)])
    if device == "cuda" and importlib.util.find_spec("nvidia.dali") is not None:
        pytest.skip("DALI is installed here")
    if device == "rocm":  # ROCm builds of PyTorch call their GPUs cuda too
        monkeypatch.setattr(torch.version, "hip", "6.2")
        device = "cuda"
    with pytest.raises(trainer.Abort, match=message):
        trainer.check_loader(
            args, torch.device(device, 0) if device == "cuda" else torch.device(device)
        )


@pytest.mark.parametrize(
    ("loader", "why"),
    [
        ("gpu-decode", "torchvision decodes JPEGs on NVIDIA GPUs only (nvJPEG); use --loader cpu"),
        ("dali", "DALI is built for NVIDIA GPUs only; use --loader cpu"),
    ],
)
@pytest.mark.parametrize("tiny", [[], ["--tiny"]])
def test_the_gpu_loaders_are_refused_on_rocm_in_one_line(
    trainer, bare_env, own_signals, capsys, jpeg_folder, tmp_path, loader, why, tiny
):
    """A ROCm build of PyTorch (torch.version.hip set, as on Frontier; stood in here, where the
    build is CPU-only) stops a run with either GPU loader at once, --tiny runs too: the job
    script, not the node, is what needs changing."""
    import torch

    bare_env.setattr(torch.version, "hip", "7.1.2")
    argv = [*tiny, "--loader", loader, "--data-dir", str(jpeg_folder), "--device", "cpu"]
    code, line = one_line_error(trainer, capsys, [*argv, "--checkpoint-dir", str(tmp_path / "c")])
    assert code == 1
    assert line == f"error: --loader {loader}: {why}, and this PyTorch is built for ROCm (7.1.2)"
    assert not (tmp_path / "c").exists()  # stopped before any step


def test_gpu_decode_on_a_torchvision_without_its_decoders_points_to_dali(
    trainer, jpeg_folder, monkeypatch
):
    """torchvision 0.29 deprecated its image decoders; a release without them stops the run."""
    import torch

    args = trainer.parse_args(["--loader", "gpu-decode", "--data-dir", str(jpeg_folder)])
    trainer.check_loader(args, torch.device("cuda", 0))  # decode_jpeg is here: nothing to say
    monkeypatch.delattr(trainer.torchvision.io, "decode_jpeg")
    with pytest.raises(trainer.Abort, match="has no decode_jpeg; use --loader dali"):
        trainer.check_loader(args, torch.device("cuda", 0))


def test_a_tiny_run_falls_back_to_the_cpu_loader(trainer, jpeg_folder, capsys):
    import torch

    args = trainer.parse_args(["--tiny", "--loader", "dali", "--data-dir", str(jpeg_folder)])
    trainer.check_loader(args, torch.device("cpu"))
    assert args.loader == "cpu" and "--tiny uses the CPU loader instead" in capsys.readouterr().err


def dali_stand_in(monkeypatch, batches: int):
    """nvidia.dali and its PyTorch plugin, stood in (DALI decodes on NVIDIA GPUs only): fn records
    the pipeline's operators, the iterator hands out `batches` batches of 4 CPU images."""
    import types
    from unittest import mock

    import torch

    made = {"pipelines": []}
    fn = mock.MagicMock()
    fn.readers.file.return_value = (mock.MagicMock(name="jpegs"), mock.MagicMock(name="labels"))

    def pipeline_def(**settings):
        made["settings"] = settings
        return lambda body: lambda: made["pipelines"].append(body()) or "pipeline"

    class Iterator:
        def __init__(self, pipelines, names, **options):
            made["iterator"] = (pipelines, names, options)

        def __len__(self):
            return batches

        def __iter__(self):
            for i in range(batches):
                labels = torch.full((4, 1), i, dtype=torch.int32)
                yield [{"images": torch.zeros(4, 3, 8, 8, dtype=torch.uint8), "labels": labels}]

    policy = types.SimpleNamespace(DROP="drop", PARTIAL="partial")
    dali = types.ModuleType("nvidia.dali")
    dali.fn, dali.pipeline_def, dali.types = fn, pipeline_def, mock.MagicMock()
    plugin = types.ModuleType("nvidia.dali.plugin.pytorch")
    plugin.DALIGenericIterator, plugin.LastBatchPolicy = Iterator, policy
    monkeypatch.setitem(sys.modules, "nvidia.dali", dali)
    monkeypatch.setitem(sys.modules, "nvidia.dali.plugin", types.ModuleType("nvidia.dali.plugin"))
    monkeypatch.setitem(sys.modules, "nvidia.dali.plugin.pytorch", plugin)
    return fn, made


def test_the_dali_pipeline_reads_the_rank_s_shard_and_resumes_mid_epoch(
    trainer, jpeg_folder, monkeypatch
):
    import torch

    fn, made = dali_stand_in(monkeypatch, batches=4)
    argv = ["--loader", "dali", "--data-dir", str(jpeg_folder), "--workers", "3"]
    args = trainer.parse_args([*argv, "--batch-size", "4"])
    gpu = torch.device("cuda", 0)
    trainer.check_loader(args, gpu)  # DALI is "installed": nothing to say
    train = trainer.make_batches(args, "train", 1, 2, gpu, num_classes=2)
    assert len(train) == 4 and train.images == 16
    assert made["settings"] == {
        "batch_size": 4,
        "num_threads": 3,
        "device_id": 0,
        "seed": trainer.seed_of(0, 1),
    }
    read = fn.readers.file.call_args.kwargs
    assert (read["shard_id"], read["num_shards"], read["random_shuffle"]) == (1, 2, True)
    assert len(read["files"]) == 16 and sorted(read["labels"]) == [0] * 8 + [1] * 8
    assert fn.decoders.image_random_crop.call_args.kwargs["device"] == "mixed"
    assert made["iterator"][2]["last_batch_policy"] == "drop"
    train.start(epoch=3, done=1)  # resumed after the first step of an epoch
    got = list(train)
    assert [labels.tolist() for _, labels in got] == [[0] * 4, [1] * 4, [2] * 4]
    assert all(labels.dtype == torch.int64 for _, labels in got)

    trainer.make_batches(args, "val", 1, 2, gpu, num_classes=2)  # the centre, every image
    assert fn.decoders.image.call_args.kwargs["device"] == "mixed"
    assert fn.readers.file.call_args.kwargs["random_shuffle"] is False
    assert made["iterator"][2]["last_batch_policy"] == "partial" and len(made["pipelines"]) == 2


@pytest.mark.parametrize(
    ("argv", "device", "expected"),
    [
        ([], "cuda", 0),  # synthetic batches are made on the device
        (["--data-dir", "DATA"], "cpu", 1),
        (["--data-dir", "DATA"], "cuda", 15),
        (["--data-dir", "DATA", "--loader", "gpu-decode"], "cuda", 4),
        (["--data-dir", "DATA", "--loader", "dali"], "cuda", 15),
        (["--data-dir", "DATA", "--workers", "3"], "cuda", 3),  # given: taken as it is
    ],
)
def test_loader_workers(trainer, bare_env, jpeg_folder, argv, device, expected):
    import torch

    bare_env.setenv("SLURM_CPUS_PER_TASK", "16")
    argv = [str(jpeg_folder) if a == "DATA" else a for a in argv]
    assert trainer.loader_workers(trainer.parse_args(argv), 1, torch.device(device)) == expected


def test_loader_workers_outside_slurm_share_the_cores_among_the_node_s_ranks(
    trainer, bare_env, jpeg_folder
):
    import torch

    cores = len(os.sched_getaffinity(0))
    bare_env.setenv("LOCAL_WORLD_SIZE", "2")  # torchrun: two ranks on this node
    args = trainer.parse_args(["--data-dir", str(jpeg_folder)])
    assert trainer.cores_per_rank(2) == max(1, cores // 2)
    assert trainer.loader_workers(args, 2, torch.device("cuda")) == max(1, cores // 2 - 1)


def test_help_documents_tiny_the_learning_rate_rule_and_the_log_format(trainer):
    text = trainer.build_parser().format_help()
    assert "TRAIN_TINY=1" in text and "global batch / 256" in text
    assert "[train] rank=0/2 epoch=0 step=20 loss=6.912345 lr=0.100000 img_s=123.4" in text
    assert trainlog.parse_line(
        "[train] rank=0/2 epoch=0 step=20 loss=6.912345 lr=0.100000 img_s=123.4"
    )


def test_tiny_arch_replaces_only_the_default_model(trainer, bare_env, capsys):
    bare_env.delenv("TRAIN_TINY", raising=False)
    bare_env.setenv("TRAIN_TINY_ARCH", "resnet18")
    assert trainer.parse_args(["--tiny"]).arch == "resnet18"
    assert trainer.parse_args(["--tiny", "--arch", "resnet34"]).arch == "resnet34"
    assert trainer.parse_args([]).arch == "resnet50"  # not a tiny run
    bare_env.setenv("TRAIN_TINY_ARCH", "resnet5000")
    code, line = one_line_error(trainer, capsys, ["--tiny"])
    assert code == 2 and "TRAIN_TINY_ARCH=resnet5000: not a torchvision model" in line
