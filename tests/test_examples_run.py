"""Job scripts from examples/ run end to end through the emulated scheduler, scaled down.

Every job script of a Slurm site that starts one of the trainers runs, unless NOT_RUN says why
not: a new site's scripts are found here without editing this file. Each runs as written in a
scratch job directory holding the script and the trainer it starts; the tests set TRAIN_TINY=1
and TRAIN_TINY_STEPS=2 so that the trainers run two steps on CPU, and STEPS=200 for the scripts
that start a skeleton of examples/skeletons/ (they pass it on as --steps). The launchers'
emulators say how many ranks they started (``... K started here``): the trainer must have formed
one world of exactly those ranks, and a script that asks for several ranks must have run at
least two.

The Hugging Face scripts (``finetune_hf.py`` under ``accelerate launch``) take a model folder and
a text from ``MODEL`` and ``DATA``, as the language-model scripts below do, and keep Hugging
Face's cache in ``HF_HOME``, a scratch folder; the accelerate configuration files a script names
are copied beside it. Such a run must report one group of the ranks the launchers started and
leave a model in save_pretrained layout in its output folder.

A script that trains on real data (``--data-dir``) takes the data set's place from ``DATA``,
which the tests point at a tiny WebDataset shard set made once per session from the
``jpeg_folder`` fixture with examples/data/make_shards.py. The trainer's ``data:`` line then
names what it read: the shard set itself where the script reads it in place, or the copy in the
job's node-local storage where the script stages it (the emulator says where that storage is).

A language-model script takes its model from ``MODEL`` and its text from ``DATA``: a tiny GPT-2
and a JSON-lines file written by the ``tiny_lm`` fixture (tests/tiny_lm.py), read with the Hub
offline.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import own_network
import pytest

from clusterkit.runs import trainlog
from clusterkit.runs.programs import copy_program
from clusterkit.sites.profiles import load_site, profile_paths

ROOT = Path(__file__).resolve().parent.parent
EX = ROOT / "examples"
TRAINERS = {
    "train_resnet.py": EX / "pytorch" / "train_resnet.py",
    "train_resnet_keras.py": EX / "tensorflow" / "train_resnet_keras.py",
    "finetune_hf.py": EX / "pytorch" / "finetune_hf.py",
    "train_lm.py": EX / "pytorch" / "train_lm.py",
    "ddp_skeleton.py": EX / "skeletons" / "ddp_skeleton.py",
    "keras_skeleton.py": EX / "skeletons" / "keras_skeleton.py",
}
# Trainers whose every rank prints [train] lines (the language-model trainer's rank 0 prints the
# loss of all ranks, averaged)
EVERY_RANK_PRINTS = {
    "train_resnet.py",
    "train_resnet_keras.py",
    "ddp_skeleton.py",
    "keras_skeleton.py",
}
SKELETON_STEPS = "200"  # two log lines a rank, at steps 100 and 200
JOB_SUFFIXES = {".sbatch", ".slurm", ".sh"}

# Scripts that start a trainer but do not run here, and why.
NOT_RUN = {
    "bede/pytorch-ddp-1node.sbatch": "runs in tests/test_examples_bede.py, with its requeue test",
    "bede/tensorflow-multinode.sbatch": (
        "one worker per node, and the emulator runs every node on this one machine, so both "
        "workers would listen on one port"
    ),
    "bede/tensorflow-container-gh200-multinode.sbatch": (
        "one worker per node, and the emulator runs every node on this one machine, so both "
        "workers would listen on one port"
    ),
    "archer2/pytorch-ddp-cpu.slurm": (
        "--backend mpi needs PyTorch built against MPI: runs in tests/test_trainer_mpi.py, "
        "with that backend stood in"
    ),
}

# Smaller models for the scripts' tiny runs (TRAIN_TINY_ARCH; an --arch in the script wins):
# what these tests check is the launch, the world the ranks form and the checkpoint, and
# ResNet-50 made each TensorFlow worker spend about 7 s more building and tracing it on two
# cores. One script per framework keeps the default model, ResNet-50, as written.
TINY_ARCH = {"train_resnet.py": "resnet18", "train_resnet_keras.py": "MobileNet"}
DEFAULT_MODEL = {"bede/first-job.sbatch", "bede/tensorflow-1node.sbatch"}

# Real-data scripts (``--data-dir``): those that copy the shard set to node-local storage first
# and train from the copy; every other one reads the shard set where DATA points.
STAGES = {"frontier/pytorch-data-nvme.sbatch", "isambard-ai/pytorch-data-localdir.sbatch"}
MAKE_SHARDS = EX / "data" / "make_shards.py"
_DATA_LINE = re.compile(r"^data: (.+?), loader ", re.M)
_NODE_LOCAL = re.compile(r"node-local storage: .* is (/\S+?)(?::| once|$)", re.M)

_SRUN = re.compile(
    r"\[srun emulator\] step \d+: (\d+) task\(s\) on \d+ node\(s\) requested, "
    r"(\d+) started here: (.*)"
)
_TORCHRUN = re.compile(r"\[torchrun emulator\] (\d+) worker\(s\) per node requested, (\d+) started")
_ACCELERATE = re.compile(
    r"\[accelerate emulator\] (\d+) process\(es\) per node on \d+ machine\(s\) requested, "
    r"(\d+) per node"
)
_CONFIG = re.compile(r"--config_file[ =](\S+)")
_FINETUNE = re.compile(r"^\[finetune\] ranks=(\d+) parallel=(\S+) steps=(\d+) loss=(\S+)", re.M)


def runnable_scripts() -> list[tuple[str, str, Path]]:
    """(site, path under examples/, trainer) of every Slurm job script that starts a trainer."""
    out = []
    for path in profile_paths():
        site = load_site(path.stem)
        folder = EX / site.name
        if site.scheduler != "slurm" or not folder.is_dir():
            continue
        for script in sorted(folder.iterdir()):
            if script.suffix not in JOB_SUFFIXES:
                continue
            text = script.read_text(encoding="utf-8")
            trainers = [name for name in TRAINERS if re.search(rf"\b{re.escape(name)}\b", text)]
            if re.search(r"^#SBATCH\s", text, re.M) and trainers:
                out.append((site.name, f"{site.name}/{script.name}", TRAINERS[trainers[-1]]))
    return out


CASES = [
    pytest.param(
        site,
        rel,
        trainer,
        id=rel,
        marks=[pytest.mark.skip(reason=NOT_RUN[rel])] if rel in NOT_RUN else [],
    )
    for site, rel, trainer in runnable_scripts()
]


def trains_on_data(script: str) -> bool:
    return "--data-dir" in (EX / script).read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def tiny_shards(jpeg_folder, tmp_path_factory) -> Path:
    """The jpeg_folder fixture as WebDataset shards: train/ in 4 shards of 4 images (enough for
    two ranks) with its shards.json, and val/."""
    out = tmp_path_factory.mktemp("shards") / "imagenet-shards"
    subprocess.run(
        [sys.executable, str(MAKE_SHARDS), str(jpeg_folder), str(out), "--per-shard", "4"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return out


def run_job(env: dict, cwd: Path, script: str) -> tuple[subprocess.CompletedProcess, str]:
    """Submit ``script`` (copied into ``cwd``) to the emulated sbatch; (result, job output)."""
    r = subprocess.run(
        own_network.command(["sbatch", Path(script).name]),
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    outs = sorted(cwd.glob("*.out"))
    return r, outs[-1].read_text() if outs else ""


def started_ranks(out: str) -> tuple[int, int]:
    """(ranks the emulated launchers started, ranks the script asked for) from their notes."""
    torchrun = _TORCHRUN.findall(out) or _ACCELERATE.findall(out)
    if torchrun:
        return sum(int(k) for _, k in torchrun), sum(int(n) for n, _ in torchrun)
    srun = [(int(n), int(k)) for n, k, cmd in _SRUN.findall(out) if any(t in cmd for t in TRAINERS)]
    if srun:
        return srun[-1][1], srun[-1][0]
    return 1, 1


def test_every_slurm_site_has_examples_that_run():
    sites = {site for site, rel, _ in runnable_scripts() if rel not in NOT_RUN}
    slurm = {p.stem for p in profile_paths() if load_site(p.stem).scheduler == "slurm"}
    assert slurm <= sites, f"no runnable example job script for {sorted(slurm - sites)}"


def test_not_run_names_existing_scripts():
    assert {rel for rel in NOT_RUN} <= {rel for _, rel, _ in runnable_scripts()}


def test_each_trainer_runs_its_default_model_in_some_script():
    trainers = {trainer.name for _, rel, trainer in runnable_scripts() if rel in DEFAULT_MODEL}
    trainers |= {name for name in TRAINERS if name not in TINY_ARCH}  # no model of their own
    assert trainers == set(TRAINERS)
    assert DEFAULT_MODEL.isdisjoint(NOT_RUN)


def test_every_site_in_service_has_a_real_data_recipe():
    """Each Slurm site in service has a script that trains on a data set (--data-dir), and the
    list of those that stage it names scripts that do."""
    current = {p.stem for p in profile_paths() if load_site(p.stem).is_current}
    with_data = {site for site, rel, _ in runnable_scripts() if trains_on_data(rel)}
    slurm_current = {s for s in current if load_site(s).scheduler == "slurm"}
    assert slurm_current <= with_data, (
        f"no real-data recipe for {sorted(slurm_current - with_data)}"
    )
    assert all(trains_on_data(rel) for rel in STAGES)


@pytest.mark.parametrize(("site", "script", "trainer"), CASES)
def test_job_script_runs(emulated_env, tmp_path, site, script, trainer, request):
    shutil.copy(EX / script, tmp_path)
    copy_program(trainer, tmp_path)
    # Two steps are all these assertions need (one [train] line per rank, one checkpoint); the
    # trainers' own tests cover longer runs, resume and preemption.
    env = dict(emulated_env, CLUSTERKIT_SITE=site, TRAIN_TINY_STEPS="2", STEPS=SKELETON_STEPS)
    if trainer.name == "finetune_hf.py":
        run_finetune(script, tmp_path, env, request.getfixturevalue("tiny_lm"))
        return
    if trainer.name == "train_lm.py":
        lm = request.getfixturevalue("tiny_lm")
        env.update(MODEL=str(lm["gpt2"]), DATA=str(lm["text"]), HF_HOME=str(tmp_path / "hf"))
    elif script not in DEFAULT_MODEL and trainer.name in TINY_ARCH:
        env["TRAIN_TINY_ARCH"] = TINY_ARCH[trainer.name]
    data = request.getfixturevalue("tiny_shards") if trains_on_data(script) else None
    if data is not None:
        env["DATA"] = str(data)
    r, out = run_job(env, tmp_path, script)
    assert r.returncode == 0, f"{r.stderr}\n{out}"
    if data is not None:
        check_data_read(script, data, r.stderr, out)
    ranks, asked = started_ranks(out)
    if asked > 1:
        assert ranks >= 2, f"{script} asks for {asked} ranks but ran {ranks}:\n{out}"
    records = trainlog.parse(out)
    train = [rec.fields for rec in records if rec.kind == "train"]
    assert train and all(rec["world"] == ranks for rec in train), out
    if trainer.name in EVERY_RANK_PRINTS:
        assert {rec["rank"] for rec in train} == set(range(ranks)), out
    summary = [rec for rec in records if rec.kind == "summary"]
    assert summary and summary[-1].fields["ranks"] == ranks, out
    assert "Traceback" not in out
    shutil.rmtree(tmp_path / "checkpoints", ignore_errors=True)  # ResNet-50's are 200 MB each


def run_finetune(script: str, job: Path, env: dict, tiny: dict[str, Path]) -> None:
    """A Hugging Face script: its configuration files beside it, the tiny model and text in
    MODEL and DATA, the cache in scratch. One group of every rank the launchers started trains
    to a finite loss, and the model is saved where the script says."""
    for name in _CONFIG.findall((EX / script).read_text(encoding="utf-8")):
        shutil.copy(EX / "accelerate" / name, job)
    env = dict(env, HF_HOME=str(job / "hf-home"), MODEL=str(tiny["gpt2"]), DATA=str(tiny["text"]))
    r, out = run_job(env, job, script)
    assert r.returncode == 0, f"{r.stderr}\n{out}"
    ranks, asked = started_ranks(r.stderr + out)
    if asked > 1:
        assert ranks >= 2, f"{script} asks for {asked} ranks but ran {ranks}:\n{out}"
    (done,) = _FINETUNE.findall(out)
    assert int(done[0]) == ranks and done[2] == "2" and math.isfinite(float(done[3])), out
    (saved,) = job.glob("finetuned/*/model.safetensors")
    assert (saved.parent / "tokenizer.json").is_file() and "Traceback" not in out


def check_data_read(script: str, data: Path, notes: str, out: str) -> None:
    """The trainer read the shard set where the script says: in place, or staged to the
    job's node-local storage (a complete copy of train/)."""
    read = _DATA_LINE.findall(out)
    assert read, f"{script}: the trainer names no data set:\n{out}"
    if script not in STAGES:
        assert set(read) == {str(data)}, out
        return
    stand_ins = _NODE_LOCAL.findall(notes)
    assert stand_ins, f"{script}: the emulated job had no node-local storage:\n{notes}"
    staged = Path(read[0])
    assert staged != data and any(staged.is_relative_to(d) for d in stand_ins), (read, stand_ins)
    # the job's node-local storage goes when the job ends, as on the site
    assert not any(Path(d).exists() for d in stand_ins)


def test_a_failed_sbcast_stops_the_frontier_job(emulated_env, tmp_path, tiny_shards):
    """A shard sbcast cannot read (a link to nothing): the job stops at that copy, with sbcast's
    message and the script's own, and trains on nothing."""
    script = "frontier/pytorch-data-nvme.sbatch"
    broken = tmp_path / "shards"
    shutil.copytree(tiny_shards, broken)
    index = json.loads((broken / "train" / "shards.json").read_text())
    victim = broken / "train" / index["shards"][1]["file"]
    victim.unlink()
    os.symlink(tmp_path / "nowhere.tar", victim)
    job = tmp_path / "job"
    job.mkdir()
    shutil.copy(EX / script, job)
    copy_program(TRAINERS["train_resnet.py"], job)
    env = dict(emulated_env, CLUSTERKIT_SITE="frontier", TRAIN_TINY_STEPS="2", DATA=str(broken))
    r, out = run_job(env, job, script)
    assert r.returncode == 1, f"{r.stderr}\n{out}"
    assert f"sbcast: error: Can't open `{victim}`: No such file or directory" in out
    assert f"sbcast of {victim} to " in out and "failed: stopping before training" in out
    assert "[train]" not in out and "data:" not in out
    # the shards before the broken one were copied, and sbcast stopped at it
    assert out.count("[sbcast emulator]") == 1, out
