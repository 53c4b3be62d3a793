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
which the tests point at a tiny data set made once per session from the ``jpeg_folder``
fixture: WebDataset shards (examples/data/make_shards.py) for the PyTorch trainer, TFRecord files
(examples/data/make_tfrecords.py) for the TensorFlow one, each with train/ and val/ and, beside
it, the tar archive of both that Frontier's recipes send with sbcast. The trainer's ``data:``
line then names what it read: the data set itself where the script reads it in place, or the
copy in the job's node-local storage where the script stages it (the emulator says where that
storage is), and its ``[eval]`` line the accuracy on val/ at the end of the epoch.

A job of several nodes runs each node in network, host name and mount namespaces of its own
where this machine allows it (clusterkit/runs/node_network.py): one TensorFlow worker per node
then listens on the same port on every node, as on the site, and each node fills node-local
storage of its own. The conversion jobs (``make-shards``, ``make-tfrecords``) run on the
``jpeg_folder`` fixture and must write both splits.

A language-model script takes its model from ``MODEL`` and its text from ``DATA``: a tiny GPT-2
and a JSON-lines file written by the ``tiny_lm`` fixture (tests/tiny_lm.py), read with the Hub
offline.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import own_network
import pytest

from clusterkit.emulate import slurm_options
from clusterkit.runs import lines_hook, node_network, trainlog
from clusterkit.runs.programs import copy_program
from clusterkit.sites.errors import ProfileError
from clusterkit.sites.profiles import all_sites, load_site, profile_paths, raw_profile

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
# One-node scripts whose every line but their `module load` and `export` lines is in the
# two-node script of the same site, and whose #SBATCH options differ from its only in the
# nodes, the time limit, the warning signal and the network
# (test_same_launch_twins_differ_only_in_modules_and_exports): the same launch of the same
# trainer, which the two-node run starts on two emulated nodes.
SAME_LAUNCH = {
    "frontier/pytorch-ddp-1node.sbatch": "frontier/pytorch-ddp-multinode.sbatch",
    "isambard-ai/pytorch-ddp-1node.sbatch": "isambard-ai/pytorch-ddp-multinode.sbatch",
    "perlmutter/pytorch-ddp-1node.sbatch": "perlmutter/pytorch-ddp-multinode.sbatch",
}
NOT_RUN = {
    **{
        one: f"the launch of {two}, which runs, on one node; left out for the tests' time"
        for one, two in SAME_LAUNCH.items()
    },
    "bede/pytorch-ddp-1node.sbatch": "runs in tests/test_examples_bede.py, with its requeue test",
    # One TensorFlow worker per node, the cluster read from srun's variables: the launch of
    # isambard-ai/tensorflow-multinode.sbatch, which runs. Both ran to the end here once each
    # node had a network of its own (2026-11-28); left out for the tests' time (one to two
    # minutes each on two busy cores).
    "bede/tensorflow-multinode.sbatch": (
        "the launch of isambard-ai/tensorflow-multinode.sbatch, which runs; left out for the "
        "tests' time"
    ),
    "bede/tensorflow-container-gh200-multinode.sbatch": (
        "the launch of isambard-ai/tensorflow-multinode.sbatch, in an NGC image as there, which "
        "runs; left out for the tests' time"
    ),
    "archer2/pytorch-ddp-cpu.slurm": (
        "--backend mpi needs PyTorch built against MPI: runs in tests/test_trainer_mpi.py, "
        "with that backend stood in"
    ),
}

# The runs of these scripts measure the programs' lines (the tests session's line coverage,
# clusterkit/runs/lines_hook.py); the others run unmeasured. Tracing makes a run 30-40 %
# slower, and the programs' own tests run every other line these runs reach (a full tests
# session with none measured, 2026-11-29, left only these scripts' lines unrun): a script is
# listed here when it runs a line that no other test does.
MEASURED = {
    # the Keras skeleton's workers from srun's tasks, several on a node without GPUs
    "cirrus/own-script-keras.slurm",
}

# Smaller models for the scripts' tiny runs (TRAIN_TINY_ARCH; an --arch in the script wins):
# what these tests check is the launch, the world the ranks form and the checkpoint, and
# ResNet-50 made each TensorFlow worker spend about 7 s more building and tracing it on two
# cores. For TensorFlow, the trainer's own two-convolution TinyCNN: a tiny one-worker run took
# 7.7 CPU-s against MobileNet's 11.9, and with --precision bf16 --jit-compile 9.6 against
# 25.7, XLA's CPU compiler being the difference (this 2-core machine, 2026-11-29, one run
# each). One script per framework keeps the default model, ResNet-50, as written.
TINY_ARCH = {"train_resnet.py": "resnet18", "train_resnet_keras.py": "TinyCNN"}
DEFAULT_MODEL = {"bede/first-job.sbatch", "bede/tensorflow-1node.sbatch"}

# torch.compile (a script's --compile) captures graphs with TorchDynamo and AOTAutograd as on a
# GPU, and runs them without Inductor, whose CPU code (C++ compiled by g++) is not what a GPU
# node runs: a tiny ResNet-18 run of bede/pytorch-gh200.sbatch's options took 82 s with an
# empty Inductor cache, 11 s with this backend (this 2-core machine, 2026-11-29, one run each).
# PyTorch's own debugging setting (torch._dynamo.config.debug_backend_override; 2.10 has none
# and would ignore it); test_the_compile_backend_setting_is_read_by_this_pytorch checks it is read.
COMPILE_BACKEND = {"TORCH_COMPILE_OVERRIDE_BACKENDS": ">=0:aot_eager"}

# Scripts of one TensorFlow worker per node: two workers listen on one port unless each node
# has a network of its own here.
ONE_WORKER_PER_NODE = {
    "bede/tensorflow-multinode.sbatch",
    "bede/tensorflow-container-gh200-multinode.sbatch",
    "isambard-ai/tensorflow-multinode.sbatch",
}
NO_NODE_NETWORK = (
    "one worker per node, and this machine cannot give each emulated node a network of its own "
    "(root and unshare, nsenter, ip: clusterkit/runs/node_network.py), so both workers would "
    "listen on one port"
)

# Real-data scripts (``--data-dir``): those that copy the data set to node-local storage first
# and train from the copy; every other one reads the data set where DATA points.
STAGES = {
    "frontier/pytorch-data-nvme.sbatch",
    "frontier/tensorflow-data-nvme.sbatch",
    "isambard-ai/pytorch-data-localdir.sbatch",
    "isambard-ai/tensorflow-multinode.sbatch",
}
MAKE_SHARDS = EX / "data" / "make_shards.py"
MAKE_TFRECORDS = EX / "data" / "make_tfrecords.py"
CONVERTERS = {"make_shards.py": MAKE_SHARDS, "make_tfrecords.py": MAKE_TFRECORDS}
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


def _scheduler(name: str) -> str | None:
    """The site's scheduler; for a profile that does not load, as its YAML says (its scripts
    are collected, and fail naming the profile's errors)."""
    try:
        return load_site(name).scheduler
    except ProfileError:
        kind = ((raw_profile(name) or {}).get("scheduler") or {}).get("kind")
        return kind if isinstance(kind, str) else None


def runnable_scripts() -> list[tuple[str, str, Path]]:
    """(site, path under examples/, trainer) of every Slurm job script that starts a trainer."""
    out = []
    for path in profile_paths():
        folder = EX / path.stem
        if _scheduler(path.stem) != "slurm" or not folder.is_dir():
            continue
        for script in sorted(folder.iterdir()):
            if script.suffix not in JOB_SUFFIXES:
                continue
            text = script.read_text(encoding="utf-8")
            trainers = [name for name in TRAINERS if re.search(rf"\b{re.escape(name)}\b", text)]
            if re.search(r"^#SBATCH\s", text, re.M) and trainers and not converts(text):
                out.append((path.stem, f"{path.stem}/{script.name}", TRAINERS[trainers[-1]]))
    return out


def out_of_service(site: str) -> str | None:
    """Why the scripts of a site that has closed are not run here: they stay on its pages as a
    record for similar systems, judged by the emulator (the fast pass's jobs check) and by the
    real Slurm session; the trainers they start run in other sites' scripts."""
    try:
        closed = load_site(site).out_of_service
    except ProfileError:
        return None  # its scripts run, and fail naming the profile's errors
    return closed and (
        f"{closed}: its job scripts are a record, judged by the emulator and the real Slurm "
        "session but no longer run scaled down"
    )


def why_not_run(rel: str) -> str | None:
    if rel in NOT_RUN:
        return NOT_RUN[rel]
    if out_of_service(rel.split("/")[0]):
        return out_of_service(rel.split("/")[0])
    if rel in ONE_WORKER_PER_NODE and not node_network.available():
        return NO_NODE_NETWORK
    return None


def converts(text: str) -> bool:
    """Whether a job script runs one of the converters (it names the trainers it writes for)."""
    return any(re.search(rf"python\s+{re.escape(name)}\s", text) for name in CONVERTERS)


def conversion_jobs() -> list[tuple[str, str]]:
    """(site, path under examples/) of every job script that runs one of the converters."""
    out = []
    for path in profile_paths():
        folder = EX / path.stem
        if not folder.is_dir():
            continue
        for script in sorted(folder.iterdir()):
            text = script.read_text(encoding="utf-8") if script.suffix in JOB_SUFFIXES else ""
            if re.search(r"^#SBATCH\s", text, re.M) and converts(text):
                out.append((path.stem, f"{path.stem}/{script.name}"))
    return out


CASES = [
    pytest.param(
        site,
        rel,
        trainer,
        id=rel,
        marks=[pytest.mark.skip(reason=why_not_run(rel))] if why_not_run(rel) else [],
    )
    for site, rel, trainer in runnable_scripts()
]


def trains_on_data(script: str) -> bool:
    return "--data-dir" in (EX / script).read_text(encoding="utf-8")


def with_archive(out: Path) -> Path:
    """``out``, beside the tar archive of its train/ and val/ (what Frontier's recipes send)."""
    subprocess.run(["tar", "-C", str(out), "-cf", f"{out}.tar", "train", "val"], check=True)
    return out


@pytest.fixture(scope="session")
def tiny_shards(jpeg_folder, tmp_path_factory) -> Path:
    """The jpeg_folder fixture as WebDataset shards: train/ in 8 shards of 2 images and val/ in
    2 (enough for two ranks), each with its shards.json; and their archive."""
    out = tmp_path_factory.mktemp("shards") / "imagenet-shards"
    subprocess.run(
        [sys.executable, str(MAKE_SHARDS), str(jpeg_folder), str(out), "--per-shard", "2"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return with_archive(out)


@pytest.fixture(scope="session")
def tiny_tfrecords(jpeg_folder, tmp_path_factory) -> Path:
    """The jpeg_folder fixture as TFRecord files: train/ and val/ in 2 files each (one for each
    of two workers), each with its index.json; and their archive."""
    out = tmp_path_factory.mktemp("tfrecords") / "imagenet-tfrecords"
    subprocess.run(
        [sys.executable, str(MAKE_TFRECORDS), "--shards", "2", str(jpeg_folder), str(out)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return with_archive(out)


def data_set(request, trainer: Path) -> Path:
    name = "tiny_shards" if trainer.name == "train_resnet.py" else "tiny_tfrecords"
    return request.getfixturevalue(name)


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
    slurm = {s.name for s in all_sites() if s.scheduler == "slurm"}
    assert slurm <= sites, f"no runnable example job script for {sorted(slurm - sites)}"


def test_not_run_names_existing_scripts():
    runnable = {rel for _, rel, _ in runnable_scripts()}
    assert set(NOT_RUN) <= runnable and MEASURED <= runnable - set(NOT_RUN)


def launch_lines(script: str) -> list[str]:
    """The script's lines, continuations joined, less comments, blank lines, the lines that
    load modules or export variables, and the `if ...; then` ... `fi` that held only those."""
    text = re.sub(r"\\\n\s*", " ", (EX / script).read_text(encoding="utf-8"))
    lines = [line.split("  #")[0].strip() for line in text.splitlines()]
    skipped = ("#", "module ", "export ")
    kept: list[str] = []
    for line in lines:
        if line == "fi" and kept and re.fullmatch(r"if .*; then", kept[-1]):
            kept.pop()  # an `if` left empty
        elif line and not line.startswith(skipped):
            kept.append(line)
    return kept


TWIN_MAY_CHANGE = {"nodes", "time", "signal", "network"}


def directives(script: str) -> dict[str, list]:
    """The script's #SBATCH options as sbatch reads them, by option name."""
    text = (EX / script).read_text(encoding="utf-8")
    words = [w for d in slurm_options.read_directives(text).read for w in d.words]
    return slurm_options.parse("sbatch", words)


def test_same_launch_twins_differ_only_in_modules_and_exports():
    for one, two in SAME_LAUNCH.items():
        assert launch_lines(one) == launch_lines(two), (one, two)
        options = [
            {k: v for k, v in directives(s).items() if k not in TWIN_MAY_CHANGE} for s in (one, two)
        ]
        assert options[0] == options[1] and directives(one)["nodes"] == ["1"], (one, options)
        assert two not in NOT_RUN


def test_each_trainer_runs_its_default_model_in_some_script():
    trainers = {trainer.name for _, rel, trainer in runnable_scripts() if rel in DEFAULT_MODEL}
    trainers |= {name for name in TRAINERS if name not in TINY_ARCH}  # no model of their own
    assert trainers == set(TRAINERS)
    assert DEFAULT_MODEL.isdisjoint(NOT_RUN)


def test_the_compile_backend_setting_is_read_by_this_pytorch():
    """COMPILE_BACKEND is a setting of PyTorch's, read when torch._dynamo.config is imported:
    a PyTorch that stopped reading it would compile the --compile scripts' runs with Inductor."""
    ((name, value),) = COMPILE_BACKEND.items()
    code = "import torch._dynamo.config as c; print(c.debug_backend_override)"
    env = {**os.environ, name: value}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == value, r.stderr[-2000:]
    compiling = [rel for _, rel, _ in runnable_scripts() if "--compile" in (EX / rel).read_text()]
    assert compiling and set(compiling).isdisjoint(NOT_RUN), "no script that is run uses --compile"


def evaluates(script: str) -> bool:
    """Whether a data recipe reports accuracy on val/ after every epoch."""
    text = (EX / script).read_text(encoding="utf-8")
    return "--eval-every-epoch" in text or re.search(r"--eval-steps [1-9]", text) is not None


def test_every_site_in_service_has_real_data_recipes():
    """Each Slurm site in service has, for each trainer, a script that trains on a data set
    (--data-dir) and reports top-1 accuracy on its val/ after every epoch, and a job that
    converts an image folder to that trainer's files; the list of those that stage the data
    names scripts that do; Isambard-AI's two-node TensorFlow job is among those that run."""
    slurm_current = {s.name for s in all_sites() if s.is_current and s.scheduler == "slurm"}
    for trainer, converter in (
        ("train_resnet.py", "shards"),
        ("train_resnet_keras.py", "tfrecords"),
    ):
        with_data = {
            site
            for site, rel, path in runnable_scripts()
            if path.name == trainer and trains_on_data(rel) and evaluates(rel)
        }
        assert slurm_current <= with_data, (
            f"no {trainer} data recipe for {slurm_current - with_data}"
        )
        converts = {site for site, rel in conversion_jobs() if converter in rel}
        assert slurm_current <= converts, f"no make-{converter} job for {slurm_current - converts}"
    assert all(trains_on_data(rel) for rel in STAGES)
    assert "isambard-ai/tensorflow-multinode.sbatch" in ONE_WORKER_PER_NODE - NOT_RUN.keys()


@pytest.mark.parametrize(("site", "script", "trainer"), CASES)
def test_job_script_runs(emulated_env, tmp_path, site, script, trainer, request):
    load_site(site)  # a profile that does not load fails here, naming its errors
    shutil.copy(EX / script, tmp_path)
    copy_program(trainer, tmp_path)
    # Two steps are all these assertions need (one [train] line per rank, one checkpoint); the
    # trainers' own tests cover longer runs, resume and preemption.
    env = dict(emulated_env, CLUSTERKIT_SITE=site, TRAIN_TINY_STEPS="2", STEPS=SKELETON_STEPS)
    env.update(COMPILE_BACKEND)
    if script not in MEASURED:
        env.pop(lines_hook.ENV, None)
    if trainer.name == "finetune_hf.py":
        run_finetune(script, tmp_path, env, request.getfixturevalue("tiny_lm"))
        return
    if trainer.name == "train_lm.py":
        lm = request.getfixturevalue("tiny_lm")
        env.update(MODEL=str(lm["gpt2"]), DATA=str(lm["text"]), HF_HOME=str(tmp_path / "hf"))
    elif script not in DEFAULT_MODEL and trainer.name in TINY_ARCH:
        env["TRAIN_TINY_ARCH"] = TINY_ARCH[trainer.name]
    data = data_set(request, trainer) if trains_on_data(script) else None
    if data is not None:
        env["DATA"] = str(data)
        if trainer.name == "train_resnet.py":
            # it evaluates at the end of an epoch: three steps end one on a single rank too
            # (the tiny run's epoch is at most three steps)
            env["TRAIN_TINY_STEPS"] = "3"
    r, out = run_job(env, tmp_path, script)
    assert r.returncode == 0, f"{r.stderr}\n{out}"
    if data is not None:
        check_data_read(script, data, r.stderr, out)
        check_evaluated(script, out)
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


def check_evaluated(script: str, out: str) -> None:
    """Rank 0 reported top-1 accuracy on the held-out split at the end of an epoch."""
    evals = [rec for rec in trainlog.parse(out) if rec.kind == "eval"]
    assert evals and "top1" in evals[-1].fields, f"{script}: no [eval] line:\n{out}"


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
    """The trainer read the data set where the script says: in place, or staged to the
    job's node-local storage."""
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
    """The transfer to a node breaks halfway (the emulator's sbcast, told to): the job stops at
    it, with sbcast's message and the script's own, and trains on nothing."""
    script = "frontier/pytorch-data-nvme.sbatch"
    job = job_dir(tmp_path, script, TRAINERS["train_resnet.py"])
    env = dict(emulated_env, CLUSTERKIT_SITE="frontier", DATA=str(tiny_shards))
    # the second node where each node has storage of its own, else the one copy for them all
    second = node_network.addresses(2)[1] if node_network.available() else "localhost"
    env["CLUSTERKIT_SBCAST_FAIL"] = second
    r, out = run_job(env, job, script)
    assert r.returncode == 1, f"{r.stderr}\n{out}"
    assert f"sbcast: error: REQUEST_FILE_BCAST({second}): Input/output error" in out, out
    assert f"error: sbcast of {tiny_shards}.tar to " in out
    assert "failed: stopping before training" in out
    assert "[train]" not in out and "data:" not in out


def job_dir(tmp_path: Path, script: str, *programs: Path) -> Path:
    """A job directory holding ``script`` and the programs it starts."""
    job = tmp_path / "job"
    job.mkdir()
    shutil.copy(EX / script, job)
    for program in programs:
        copy_program(program, job)  # with the modules beside it that it imports
    return job


def converter_lacks(program: Path, flags: set[str]) -> set[str]:
    """The flags of ``flags`` that the converter's own parser does not offer."""
    return {flag for flag in flags if f'"{flag}"' not in program.read_text(encoding="utf-8")}


@pytest.mark.parametrize(
    ("site", "script"), conversion_jobs(), ids=[r for _, r in conversion_jobs()]
)
def test_conversion_job_runs(emulated_env, tmp_path, jpeg_folder, site, script):
    """A conversion job turns the image folder into both splits of its trainer's format (and,
    on Frontier, the archive its staging recipes send)."""
    program = next(CONVERTERS[name] for name in CONVERTERS if name in (EX / script).read_text())
    asked = set(re.findall(r"(--[a-z-]+)", (EX / script).read_text().split(program.name, 1)[1]))
    missing = converter_lacks(program, asked & {"--jobs", "--val-labels", "--per-shard"})
    if missing:
        pytest.skip(f"{program.name} here has no {', '.join(sorted(missing))} yet")
    job = job_dir(tmp_path, script, program)
    dst = tmp_path / "converted"
    env = dict(emulated_env, CLUSTERKIT_SITE=site, SRC=str(jpeg_folder), DST=str(dst))
    r, out = run_job(env, job, script)
    assert r.returncode == 0, f"{r.stderr}\n{out}"
    index = "shards.json" if program == MAKE_SHARDS else "index.json"
    for split in ("train", "val"):
        assert (dst / split / index).is_file(), out
    if "tar -C" in (EX / script).read_text():
        names = subprocess.run(
            ["tar", "-tf", f"{dst}.tar"], capture_output=True, text=True, check=True
        ).stdout.split()
        assert {"train/", "val/", f"train/{index}", f"val/{index}"} <= set(names)
    assert "Traceback" not in out


def test_a_data_job_without_webdataset_stops_before_staging(emulated_env, tmp_path, tiny_shards):
    """The environment lacks webdataset (a package of that name that cannot be imported comes
    first on the path): the job stops with one line naming the install, before any copy."""
    script = "isambard-ai/pytorch-data-localdir.sbatch"
    broken = tmp_path / "site-packages" / "webdataset"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('No module named webdataset')\n")
    job = job_dir(tmp_path, script, TRAINERS["train_resnet.py"])
    env = dict(emulated_env, CLUSTERKIT_SITE="isambard-ai", DATA=str(tiny_shards))
    env["PYTHONPATH"] = os.pathsep.join([str(broken.parent), env.get("PYTHONPATH", "")])
    r, out = run_job(env, job, script)
    assert r.returncode == 1, f"{r.stderr}\n{out}"
    errors = [line for line in out.splitlines() if "error" in line.lower()]
    assert errors == ["error: no webdataset in the torch environment: pip install webdataset"], out
    assert "[srun emulator]" not in out and "Traceback" not in out


SPARSE = 1 << 43  # 8 TiB, more than any node-local stand-in here has free


def sparse(path: Path) -> None:
    """An 8 TiB file of which nothing is written (skips where the file system refuses one, or
    has that much free)."""
    if shutil.disk_usage(path.parent).free >= SPARSE:
        pytest.skip(f"{path.parent} has 8 TiB free: a sparse file of 8 TiB fits")
    try:
        with open(path, "wb") as file:
            file.truncate(SPARSE)
    except OSError as exc:
        pytest.skip(f"{path.parent} holds no sparse file of 8 TiB: {exc}")


def test_a_frontier_job_without_room_stops_before_the_copy(emulated_env, tmp_path):
    """An archive larger than a node's NVMe has room for (a sparse file of 8 TiB): each node
    says how much it has and needs, and the job stops before sbcast."""
    script = "frontier/pytorch-data-nvme.sbatch"
    data = tmp_path / "imagenet-shards"
    sparse(Path(f"{data}.tar"))
    job = job_dir(tmp_path, script, TRAINERS["train_resnet.py"])
    env = dict(emulated_env, CLUSTERKIT_SITE="frontier", DATA=str(data))
    r, out = run_job(env, job, script)
    assert r.returncode == 1, f"{r.stderr}\n{out}"
    assert re.search(r"GiB free in \S+, 16384 GiB needed", out), out  # twice the 8 TiB
    assert f"error: no room for {data}.tar on every node's NVMe: stopping before the copy" in out
    assert "[sbcast emulator]" not in out and "[train]" not in out


def test_isambard_ai_reads_in_place_without_room_in_localdir(emulated_env, tmp_path, tiny_shards):
    """A shard set larger than $LOCALDIR has room for (a sparse file among the shards, which the
    trainer does not read): the nodes say so, and the ranks read the shards in place."""
    script = "isambard-ai/pytorch-data-localdir.sbatch"
    data = tmp_path / "imagenet-shards"
    shutil.copytree(tiny_shards, data)
    sparse(data / "train" / "padding.bin")
    job = job_dir(tmp_path, script, TRAINERS["train_resnet.py"])
    env = dict(emulated_env, CLUSTERKIT_SITE="isambard-ai", DATA=str(data), TRAIN_TINY_STEPS="2")
    env["TRAIN_TINY_ARCH"] = TINY_ARCH["train_resnet.py"]
    r, out = run_job(env, job, script)
    assert r.returncode == 0, f"{r.stderr}\n{out}"
    assert "not every node has room in $LOCALDIR: reading the shards in place" in out, out
    assert _DATA_LINE.findall(out) == [str(data)], out
