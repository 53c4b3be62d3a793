"""examples/pytorch/train_resnet.py on real data: WebDataset shards (examples/data/make_shards.py)
with exact resume, loader processes that start safely under launchers and end the run when one
dies, the GPU decoder's steps held to the CPU loader, and JPEGs decoded no larger than needed.

Everything runs on the CPU: the GPU decoder's steps run with torchvision's CPU decoder.
"""

from __future__ import annotations

import importlib.util
import io
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from clusterkit.runs import trainlog

pytestmark = pytest.mark.program_lines

ROOT = Path(__file__).resolve().parent.parent
TRAINER = ROOT / "examples" / "pytorch" / "train_resnet.py"
MAKE_SHARDS = ROOT / "examples" / "data" / "make_shards.py"
LAUNCH_PREFIXES = ("SLURM_", "OMPI_", "JSM_", "PMIX_", "PMI_", "MASTER_", "TRAIN_TINY")
LAUNCH_NAMES = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}
TIMEOUT = 180
SMALL = ("--arch", "resnet18", "--device", "cpu", "--image-size", "32", "--log-every", "1")


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def trainer():
    return load(TRAINER, "train_resnet")


@pytest.fixture
def bare_env(monkeypatch):
    for key in list(os.environ):
        if key.startswith(LAUNCH_PREFIXES) or key in LAUNCH_NAMES:
            monkeypatch.delenv(key)
    return monkeypatch


def clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(LAUNCH_PREFIXES) and k not in LAUNCH_NAMES
    }
    return {**env, "OMP_NUM_THREADS": "2", **extra}


def run(cwd: Path, *args: str, program: Path = TRAINER) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(program), *args],
        cwd=cwd,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def steps(text: str) -> list[int]:
    return [r.fields["step"] for r in trainlog.parse(text) if r.kind == "train"]


@pytest.fixture(scope="module")
def shards(jpeg_folder, tmp_path_factory) -> Path:
    """The tiny JPEG folder (2 classes, 16 training and 4 validation images) as shards of 2."""
    out = tmp_path_factory.mktemp("shards")
    make_shards = load(MAKE_SHARDS, "make_shards")
    assert make_shards.main([str(jpeg_folder), str(out), "--per-shard", "2"]) == 0
    return out


# --------------------------------------------------------------------------- the converter
def test_make_shards_packs_every_image_once_with_its_class(shards, jpeg_folder):
    import webdataset as wds

    index = json.loads((shards / "train" / "shards.json").read_text())
    assert index["classes"] == ["n00000000", "n00000001"]
    assert [s["samples"] for s in index["shards"]] == [2] * 8
    read = [
        (bytes(sample["jpg"]), int(sample["cls"]))
        for s in index["shards"]
        for sample in wds.tariterators.tarfile_samples([{"url": str(shards / "train" / s["file"])}])
    ]
    originals = {
        p.read_bytes(): label
        for label, name in enumerate(index["classes"])
        for p in (jpeg_folder / "train" / name).iterdir()
    }
    assert len(read) == 16 and dict(read) == originals  # each image once, with its class
    assert [label for _, label in read] != sorted(label for _, label in read)  # shuffled
    val = json.loads((shards / "val" / "shards.json").read_text())
    assert [s["samples"] for s in val["shards"]] == [2, 2]


def test_make_shards_refuses_a_folder_without_train(tmp_path, capsys):
    make_shards = load(MAKE_SHARDS, "make_shards")
    with pytest.raises(SystemExit) as exit_:
        make_shards.main([str(tmp_path), str(tmp_path / "out")])
    assert exit_.value.code == 2 and "no train/ directory in it" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        make_shards.main([str(tmp_path), str(tmp_path / "out"), "--per-shard", "0"])
    assert "--per-shard must be at least 1" in capsys.readouterr().err
    (tmp_path / "train" / "empty").mkdir(parents=True)
    with pytest.raises(SystemExit, match="no images in class folders"):
        make_shards.main([str(tmp_path), str(tmp_path / "out")])
    for flag in ("--jobs", "--report-every"):
        with pytest.raises(SystemExit):
            make_shards.main([str(tmp_path), str(tmp_path / "out"), flag, "0"])
        assert f"{flag} must be at least 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        make_shards.main([str(tmp_path), str(tmp_path / "out"), "--val-labels", "none.csv"])
    assert "--val-labels none.csv: no such file" in capsys.readouterr().err
    (tmp_path / "train" / "x.jpg").write_bytes(b"")
    with pytest.raises(SystemExit, match="train/ needs a folder per class"):
        make_shards.main([str(tmp_path), str(tmp_path / "out")])
    (tmp_path / "train" / "x.jpg").rename(tmp_path / "train" / "empty" / "x.jpg")
    gone = tmp_path / "train" / "empty" / "gone.jpg"
    gone.symlink_to(tmp_path / "nowhere.jpg")  # listed, then unreadable
    with pytest.raises(SystemExit, match=r"error: \[Errno 2\] No such file or directory: .*"):
        make_shards.main([str(tmp_path), str(tmp_path / "out")])
    gone.unlink()
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "webdataset", None)  # as if not installed
        with pytest.raises(SystemExit):
            make_shards.main([str(tmp_path), str(tmp_path / "out")])
    assert "writing shards needs webdataset" in capsys.readouterr().err
    (tmp_path / "val" / "dog").mkdir(parents=True)
    (tmp_path / "val" / "dog" / "1.jpg").write_bytes(b"")
    with pytest.raises(SystemExit, match="val/dog: train/ has no class folder of that name"):
        make_shards.main([str(tmp_path), str(tmp_path / "out")])


def shard_contents(folder: Path) -> list[tuple[bytes, int]]:
    """The (image bytes, class) of every sample of the shards in folder, in shards.json's order."""
    import webdataset as wds

    index = json.loads((folder / "shards.json").read_text())
    return [
        (bytes(sample["jpg"]), int(sample["cls"]))
        for s in index["shards"]
        for sample in wds.tariterators.tarfile_samples([{"url": str(folder / s["file"])}])
    ]


def flat_val(jpeg_folder: Path, root: Path) -> dict[str, str]:
    """A copy of the JPEG folder whose val/ is flat, as ImageNet's is: {image name: class}."""
    import shutil

    shutil.copytree(jpeg_folder / "train", root / "train")
    (root / "val").mkdir()
    classes = {}
    for n, image in enumerate(sorted((jpeg_folder / "val").glob("*/*"))):
        name = f"ILSVRC2012_val_{n + 1:08d}.JPEG"
        shutil.copy(image, root / "val" / name)
        classes[name] = image.parent.name
    return classes


def test_a_flat_val_folder_takes_its_classes_from_a_labels_file(
    jpeg_folder, tmp_path, capsys, monkeypatch
):
    """Kaggle's LOC_val_solution.csv, the devkit's ground truth (class numbers, named by
    meta.mat beside it: scipy reads that, stood in here as this environment has no scipy),
    and lines of an image and its class name or number, all give each image its class."""
    import types

    make_shards = load(MAKE_SHARDS, "make_shards")
    src = tmp_path / "src"
    truth = flat_val(jpeg_folder, src)
    names, classes = sorted(truth), ["n00000000", "n00000001"]
    kaggle = "ImageId,PredictionString\n\n" + "".join(
        f"{Path(n).stem},{truth[n]} 1 2 30 40 {truth[n]} 3 4 5 6\n" for n in reversed(names)
    )
    ids = {"n00000000": 7, "n00000001": 3}  # ILSVRC2012_IDs are not in class-name order
    devkit = "".join(f"{ids[truth[n]]}\n" for n in names)
    synsets = [(7, "n00000000", "a", "", 0), (3, "n00000001", "b", "", 0), (1001, "n0", "", "", 2)]
    fake = types.ModuleType("scipy.io")
    fake.loadmat = lambda path, squeeze_me: (
        {"synsets": synsets} if path.endswith("meta.mat") else {}
    )
    monkeypatch.setitem(sys.modules, "scipy", types.ModuleType("scipy"))
    monkeypatch.setitem(sys.modules, "scipy.io", fake)
    (tmp_path / "devkit").mkdir()
    (tmp_path / "devkit" / "meta.mat").write_bytes(b"stand-in")
    files = {
        "LOC_val_solution.csv": kaggle,
        "devkit/ILSVRC2012_validation_ground_truth.txt": devkit,
        "names.txt": "".join(f"{n} {truth[n]}\n" for n in names),
        "numbers.txt": "".join(f"{Path(n).stem}\t{classes.index(truth[n])}\n" for n in names),
    }
    for k, (file, text) in enumerate(files.items()):
        (tmp_path / file).write_text(text)
        out = tmp_path / f"out{k}"
        argv = [str(src), str(out), "--per-shard", "3", "--val-labels", str(tmp_path / file)]
        assert make_shards.main(argv) == 0, file
        got = shard_contents(out / "val")
        assert got == [((src / "val" / n).read_bytes(), classes.index(truth[n])) for n in names]
    assert "val: 4 images of 2 classes in 2 shard(s)" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("labels", "says"),
    [
        (None, "{src}/val holds 4 images in no class folder: give their classes with --val-labels"),
        ("ILSVRC2012_val_00000001 n00000000\n", "no class for ILSVRC2012_val_00000002.JPEG (3 "),
        ("ILSVRC2012_val_00000001 n0000000x\n", "{file}:1: 'n0000000x' is neither a class folder"),
        ("a b c\n", "{file}:1: expected an image and its class, not 3 words"),
        ("1\n2\n3\n", "{file}: 3 class numbers for 4 images"),
        ("1\n2\n3\n4\n", "its class numbers are named in the devkit's meta.mat, which is not"),
        (b"\xff\xfe\x00", "--val-labels {file}: cannot be read ('utf-8' codec can't decode"),
        ("7\n7\n3\n5\n", "{file}:4: class number 5 is not in {meta}"),
        ("7\n7\n3\n3\n", "{meta}: reading the devkit's meta.mat needs scipy (pip install scipy)"),
    ],
)
def test_a_flat_val_folder_without_its_classes_stops_before_any_shard(
    jpeg_folder, tmp_path, monkeypatch, labels, says
):
    import types

    make_shards = load(MAKE_SHARDS, "make_shards")
    src, out, file = tmp_path / "src", tmp_path / "out", tmp_path / "labels.txt"
    meta = tmp_path / "meta.mat"
    flat_val(jpeg_folder, src)
    argv = [str(src), str(out)]
    if isinstance(labels, bytes):
        file.write_bytes(labels)
    elif labels is not None:
        file.write_text(labels)
    if labels is not None:
        argv += ["--val-labels", str(file)]
    if "scipy" in says:  # meta.mat, and no scipy to read it
        meta.write_bytes(b"")
        monkeypatch.setitem(sys.modules, "scipy.io", None)
    elif "class number 5" in says:  # a stand-in scipy reading a stand-in meta.mat
        meta.write_bytes(b"")
        fake = types.ModuleType("scipy.io")
        fake.loadmat = lambda path, squeeze_me: {
            "synsets": [(7, "n00000000", "", "", 0), (3, "n00000001", "", "", 0)]
        }
        monkeypatch.setitem(sys.modules, "scipy", types.ModuleType("scipy"))
        monkeypatch.setitem(sys.modules, "scipy.io", fake)
    with pytest.raises(SystemExit) as stopped:
        make_shards.main(argv)
    assert says.format(src=src, file=file, meta=meta) in str(stopped.value)
    assert str(stopped.value).startswith("error: ") and "\n" not in str(stopped.value)
    assert not list(out.rglob("*.tar"))  # listed and labelled before any shard is written


def test_a_stopped_parallel_conversion_resumes_keeping_its_whole_shards(jpeg_folder, tmp_path):
    """make_shards.py --jobs 2, killed after its first shards; run again, it keeps the shards
    written whole and writes the rest, with a progress line per shard. A shard cut short and
    a partial file (what a kill leaves) are written again; the result is a conversion's that
    was never stopped."""
    src, out = str(jpeg_folder), tmp_path / "out"
    argv = [sys.executable, str(MAKE_SHARDS), src, str(out), "--per-shard", "1"]
    argv += ["--jobs", "2", "--report-every", "1"]
    proc = subprocess.Popen(
        argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, start_new_session=True
    )
    try:
        first = proc.stderr.readline()
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the writers too, as the end of a job does
        proc.wait(timeout=TIMEOUT)
        time.sleep(1)  # a rename under way when the signal came completes
    assert re.fullmatch(r"train: 1/16 shards, [\d.]+ images/s, \d+:\d\d:\d\d left\n", first)
    written = sorted(out.glob("train/shard-*.tar"))
    assert 1 <= len(written) and not (out / "train" / "shards.json").exists()
    again = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT)
    assert again.returncode == 0, again.stderr
    kept = len(written)
    if kept < 16:
        assert f"train: {kept} shard(s) already written whole: kept" in again.stderr
    assert "train: 16/16 shards" in again.stderr and "val: 4/4 shards" in again.stderr

    whole = shard_contents(out / "train")
    cut = out / "train" / "shard-000005.tar"
    cut.write_bytes(cut.read_bytes()[:1000])
    (out / "train" / "shard-000009.tar").unlink()
    (out / "train" / ".shard-000009.partial").write_bytes(b"a killed writer's")
    stamps = {p.name: p.stat().st_mtime_ns for p in (out / "train").glob("shard-*.tar")}
    third = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT)
    assert third.returncode == 0, third.stderr
    assert "train: 14 shard(s) already written whole: kept" in third.stderr
    assert "train: 16/16 shards" in third.stderr and "val: 4 shard(s) already" in third.stderr
    rewritten = {
        p.name
        for p in (out / "train").glob("shard-*.tar")
        if p.stat().st_mtime_ns != stamps.get(p.name)
    }
    assert rewritten == {"shard-000005.tar", "shard-000009.tar"}
    assert not list(out.rglob("*.partial")) and shard_contents(out / "train") == whole
    fresh = tmp_path / "fresh"
    make_shards = load(MAKE_SHARDS, "make_shards")
    assert make_shards.main([src, str(fresh), "--per-shard", "1", "--report-every", "5"]) == 0
    assert shard_contents(fresh / "train") == whole
    with pytest.raises(SystemExit, match="holds shards of another conversion"):
        make_shards.main([src, str(fresh), "--per-shard", "2"])


# --------------------------------------------------------------------------- training on shards
def test_training_on_shards_with_evaluation(shards, tmp_path):
    r = run(
        tmp_path, "--tiny", "--arch", "resnet18", "--data-dir", str(shards), "--eval-every-epoch"
    )
    assert r.returncode == 0, r.stderr
    assert steps(r.stdout) == [2, 4, 6]
    evals = [e for e in trainlog.parse(r.stdout) if e.kind == "eval"]
    assert [e.fields["epoch"] for e in evals] == [0, 1]
    assert "data: " in r.stdout and r.stderr.count("warning") == 0


def shard_stream(trainer, args, rank: int, world: int, epoch: int, done: int) -> list:
    import torch

    batches = trainer.make_batches(args, "train", rank, world, torch.device("cpu"), 2)
    batches.start(epoch, done)
    return list(batches)


def same(a: list, b: list) -> bool:
    import torch

    return len(a) == len(b) and all(
        torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) for x, y in zip(a, b, strict=True)
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_a_resumed_epoch_of_shards_is_the_tail_of_the_whole_one(trainer, bare_env, shards, workers):
    """Batch b of an epoch is the same whether the epoch ran from its start or was resumed after
    b of its batches: with two loader processes, resuming after 3 batches starts the rotation at
    the second reader."""
    argv = ["--data-dir", str(shards), "--image-size", "16", "--batch-size", "2"]
    args = trainer.parse_args([*argv, "--workers", str(workers), "--mp-start-method", "fork"])
    whole = shard_stream(trainer, args, 0, 1, epoch=1, done=0)
    assert len(whole) == 8  # 16 images: 2 readers x 4 batches, or 1 x 8
    for done in (1, 3, 6):
        assert same(shard_stream(trainer, args, 0, 1, epoch=1, done=done), whole[done:])
    assert not same(shard_stream(trainer, args, 0, 1, epoch=2, done=0), whole)  # a new order


def test_each_rank_reads_its_own_shards(trainer, bare_env, shards):
    import torch

    argv = ["--data-dir", str(shards), "--image-size", "16", "--batch-size", "2", "--workers", "0"]
    args = trainer.parse_args(argv)
    ranks = [shard_stream(trainer, args, rank, 2, epoch=0, done=0) for rank in (0, 1)]
    assert [len(r) for r in ranks] == [4, 4]  # 8 images each: every rank takes 4 steps
    seen = [{bytes(img.flatten().tolist()) for images, _ in r for img in images} for r in ranks]
    assert len(seen[0]) == len(seen[1]) == 8 and not seen[0] & seen[1]
    labels = torch.cat([labels for r in ranks for _, labels in r])
    assert sorted(labels.tolist()) == [0] * 8 + [1] * 8


@pytest.mark.slow
def test_resume_on_shards_with_loader_processes_is_exact(shards, tmp_path):
    """A run stopped by SIGUSR1 and resumed ends with the weights of an uninterrupted one."""
    import torch

    flags = (*SMALL, "--data-dir", str(shards), "--workers", "2", "--batch-size", "2")
    flags += ("--steps", "9", "--steps-per-epoch", "5", "--checkpoint-every", "100")
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    whole.mkdir()
    parts.mkdir()
    straight = run(whole, *flags)
    assert straight.returncode == 0, straight.stderr
    proc = subprocess.Popen(
        [sys.executable, str(TRAINER), *flags],
        cwd=parts,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("[train]") and " step=3 " in line:
                proc.send_signal(signal.SIGUSR1)
                break
        first = "".join(lines) + proc.communicate(timeout=TIMEOUT)[0]
    finally:
        proc.kill()
    assert proc.returncode == 0 and "[preempted]" in first, first
    second = run(parts, *flags)
    assert second.returncode == 0, second.stderr
    assert steps(first) + steps(second.stdout) == list(range(1, 10))
    a, b = (
        torch.load(sorted((d / "checkpoints").glob("*.pt"))[-1], weights_only=True)
        for d in (whole, parts)
    )
    assert a["step"] == b["step"] == 9
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


def test_shards_that_cannot_be_read_are_named(trainer, bare_env, tmp_path, shards, capsys):
    import torch

    (tmp_path / "bad" / "train").mkdir(parents=True)
    (tmp_path / "bad" / "train" / "broken.tar").write_bytes(b"no tar file" * 100)
    args = trainer.parse_args(["--data-dir", str(tmp_path / "bad"), "--workers", "0"])
    with pytest.raises(trainer.Abort, match=r"broken.tar: not a readable tar file"):
        trainer.make_batches(args, "train", 0, 1, torch.device("cpu"), 2)
    dali = trainer.parse_args(["--data-dir", str(shards), "--loader", "dali"])
    with pytest.raises(trainer.Abort, match="--loader dali reads image folders"):
        trainer.make_batches(dali, "train", 0, 1, torch.device("cpu"), 2)


def test_an_index_that_promises_more_samples_ends_the_run_naming_it(
    trainer, bare_env, tmp_path, shards
):
    import shutil

    import torch

    data = tmp_path / "data"
    shutil.copytree(shards, data)
    index = json.loads((data / "train" / "shards.json").read_text())
    for shard in index["shards"]:
        shard["samples"] = 3  # each holds 2
    (data / "train" / "shards.json").write_text(json.dumps(index))
    args = trainer.parse_args(["--data-dir", str(data), "--workers", "0", "--batch-size", "2"])
    batches = trainer.make_batches(args, "train", 0, 1, torch.device("cpu"), 2)
    batches.start(0, 0)
    with pytest.raises(
        trainer.Abort,
        match=r"shard-00000\d.tar: holds 2 samples, fewer than its index says \(at least 3\): "
        "write shards.json again",
    ):
        list(batches)


def test_shards_without_an_index_are_counted(trainer, bare_env, tmp_path, shards):
    """Shards written by other tools: samples with an image and a class are counted."""
    import shutil

    data = tmp_path / "data"
    shutil.copytree(shards, data)
    (data / "train" / "shards.json").unlink()
    with tarfile.open(data / "train" / "shard-000000.tar", "a") as tar:
        info = tarfile.TarInfo("extra.txt")  # a member of no sample: not counted
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    found, classes = trainer.shard_index(data / "train")
    assert [n for _, n in found] == [2] * 8 and classes is None
    args = trainer.parse_args(["--data-dir", str(data), "--num-classes", "7"])
    assert trainer.classes_of(args, data / "train") == 7


def test_a_reader_skips_into_a_shard_past_members_of_no_sample(trainer, tmp_path):
    """A shard's samples are counted as the trainer counts them: a member without an
    extension, a directory and a sample without a class are no samples."""
    path = tmp_path / "odd.tar"
    with tarfile.open(path, "w") as tar:
        for name, data in [
            ("README", b"notes"),
            ("a.jpg", b"no class"),
            ("b.jpg", b"image b"),
            ("b.cls", b"1"),
            ("c.JPG", b"image c"),
            ("c.cls", b"0"),
        ]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        tar.addfile(tarfile.TarInfo("folder/"), None)  # a directory member
    assert list(trainer.shard_range(str(path), 1, 1)) == [(b"image c", 0)]
    assert list(trainer.shard_range(str(path), 0, 2)) == [(b"image b", 1), (b"image c", 0)]
    with pytest.raises(trainer.DataError, match=r"odd.tar: holds 2 samples, fewer than its"):
        list(trainer.shard_range(str(path), 1, 2))


IMAGENET_TRAIN = 1_281_167  # images in ImageNet-1k's training set


@pytest.mark.parametrize("per_shard", [1000, 2000, 10000])
@pytest.mark.parametrize("batch", [64, 256])
def test_imagenet_on_16_ranks_x_6_loaders_leaves_under_a_batch_per_reader(
    trainer, per_shard, batch
):
    """ImageNet's training set in shards as make_shards.py writes them, dealt by the trainer to
    Frontier's recipe's readers (16 ranks x 6 loader processes): every reader gets the same
    whole number of batches, each sample goes to one reader at most, less than one batch per
    reader is left over, and each epoch deals differently. (Dealt whole shard by shard, the
    same sets left 4.1 to 25.2 % unread every epoch at a batch of 256.)"""
    counts = [per_shard] * (IMAGENET_TRAIN // per_shard) + [IMAGENET_TRAIN % per_shard]
    readers = 16 * 6
    deals = [trainer.deal_samples(counts, readers, batch, trainer.seed_of(0, e)) for e in (0, 1)]
    for dealt in deals:
        shares = [sum(n for *_, n in pieces) for pieces in dealt]
        assert len(set(shares)) == 1 and shares[0] % batch == 0
        assert 0 <= IMAGENET_TRAIN - sum(shares) < readers * batch
        taken: dict[int, list[tuple[int, int]]] = {}
        for pieces in dealt:
            # a share is whole shards but for its two ends (and the short last shard)
            assert len(pieces) <= shares[0] // per_shard + 3
            for shard, first, n in pieces:
                assert n > 0 and 0 <= first and first + n <= counts[shard]
                taken.setdefault(shard, []).append((first, first + n))
        for ranges in taken.values():  # no sample twice
            ranges.sort()
            assert all(a[1] <= b[0] for a, b in itertools.pairwise(ranges))
    assert deals[0] != deals[1]


def test_held_out_samples_are_all_dealt_in_shares_one_apart(trainer):
    counts = [3, 5, 1, 7, 4]
    dealt = trainer.deal_samples(counts, 4, batch=8)  # no key: evaluation, in shard order
    assert [sum(n for *_, n in pieces) for pieces in dealt] == [5, 5, 5, 5]
    assert [piece for pieces in dealt for piece in pieces] == [
        (0, 0, 3), (1, 0, 2), (1, 2, 3), (2, 0, 1), (3, 0, 1), (3, 1, 5), (3, 6, 1), (4, 0, 4)
    ]  # fmt: skip
    assert trainer.deal_samples([2], 3, batch=1) == [[], [(0, 0, 1)], [(0, 1, 1)]]


# --------------------------------------------------------------------------- loader processes
@pytest.mark.parametrize(
    ("env", "context"),
    [
        ({}, "fork"),
        # set by container images that ship Open MPI, with no launcher in sight
        (
            {
                "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
                "OMPI_MCA_plm": "isolated",
                "PMIX_MCA_gds": "hash",
            },
            "fork",
        ),
        ({"SLURM_PROCID": "0", "SLURM_JOB_ID": "7"}, "fork"),  # the batch shell
        ({"SLURM_PROCID": "1", "SLURM_STEP_ID": "0"}, "forkserver"),  # a task of an srun step
        ({"OMPI_COMM_WORLD_RANK": "0"}, "forkserver"),
        ({"PMIX_RANK": "0"}, "forkserver"),
        ({"PMI_RANK": "0"}, "forkserver"),
        ({"JSM_NAMESPACE_RANK": "0"}, "forkserver"),
    ],
)
def test_loader_processes_fork_unless_a_launcher_started_the_rank(
    trainer, bare_env, jpeg_folder, env, context
):
    for key, value in env.items():
        bare_env.setenv(key, value)
    args = trainer.parse_args(["--data-dir", str(jpeg_folder), "--workers", "2"])
    assert trainer.loader_context(args) == context


def test_a_fork_server_that_cannot_start_processes_gives_way_to_fork(jpeg_folder, tmp_path):
    """The trainer started from a file that the fork server cannot import (it dies): loader
    processes are forked instead, with a warning, and the run trains."""
    main = tmp_path / "main_that_breaks_fork_servers.py"
    main.write_text(
        "import os, sys\n"
        "if __name__ != '__main__':  # the fork server imports the main file: it dies here\n"
        "    os._exit(3)\n"
        f"sys.path.insert(0, {str(TRAINER.parent)!r})\n"
        "import train_resnet\n"
        "sys.exit(train_resnet.run())\n"
    )
    flags = (*SMALL, "--data-dir", str(jpeg_folder), "--workers", "2", "--batch-size", "2")
    r = run(tmp_path, *flags, "--steps", "2", "--mp-start-method", "forkserver", program=main)
    assert r.returncode == 0, r.stderr
    assert "warning: the fork server cannot start loader processes here" in r.stderr
    assert steps(r.stdout) == [1, 2]


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, todo = [], [pid]
    while todo:
        kids = [p for p, parent in parents.items() if parent == todo[-1]]
        todo.pop()
        found += kids
        todo += kids
    return found


def loader_processes(pid: int) -> list[int]:
    """The leaf processes below the trainer, but multiprocessing's resource tracker."""
    out = []
    for p in descendants(pid):
        try:
            cmdline = Path(f"/proc/{p}/cmdline").read_bytes()
        except OSError:
            continue
        if b"resource_tracker" not in cmdline and not descendants(p):
            out.append(p)
    return out


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")
@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_a_killed_loader_process_ends_the_run_within_30_s(jpeg_folder, tmp_path, method):
    flags = (*SMALL, "--data-dir", str(jpeg_folder), "--workers", "2", "--batch-size", "2")
    proc = subprocess.Popen(
        [sys.executable, str(TRAINER), *flags, "--steps", "1000", "--mp-start-method", method],
        cwd=tmp_path,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for line in proc.stdout:
            if line.startswith("[train]"):
                break
        workers = loader_processes(proc.pid)
        assert len(workers) == 2, workers
        os.kill(workers[0], signal.SIGKILL)  # as the kernel's out-of-memory killer does
        killed = time.monotonic()
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - killed
    finally:
        proc.kill()
    assert proc.returncode == 1 and took < 30, (took, err)
    (error,) = [line for line in err.splitlines() if line.startswith("error:")]
    assert error.startswith("error: a data loader process died (DataLoader worker (pid")
    assert "out-of-memory killer" in error and "Traceback" not in err


# --------------------------------------------------------------------------- decoding
def test_the_gpu_decoder_s_steps_match_the_cpu_loader(trainer, bare_env, jpeg_folder):
    """--loader gpu-decode's pipeline, run on the CPU (torchvision's CPU decoder), against the
    CPU loader on the same training images: the same crop boxes and flips, the same pixels
    within resampling differences, then the same normalisation and memory layout."""
    import torch
    import torchvision
    from PIL import Image
    from torchvision.io import decode_jpeg

    cpu = torch.device("cpu")
    paths = [Path(p) for p, _ in torchvision.datasets.ImageFolder(jpeg_folder / "train").samples]
    # decoding: libjpeg-turbo in both, within a JPEG decoder's rounding
    for path in paths[:4]:
        ours = decode_jpeg(torch.frombuffer(bytearray(path.read_bytes()), dtype=torch.uint8))
        with Image.open(path) as im:
            pil = torchvision.transforms.functional.pil_to_tensor(im.convert("RGB"))
        assert (ours.int() - pil.int()).abs().max() <= 2
    plan = trainer.CropPlan(32, train=True)
    crop = trainer.ReducedResizedCrop(32)
    planned, loaded = [], []
    for i, path in enumerate(paths):
        torch.manual_seed(100 + i)
        planned.append((plan(trainer.EncodedImage.read(str(path))), i % 2))
        torch.manual_seed(100 + i)
        with Image.open(path) as im:
            loaded.append(torchvision.transforms.functional.pil_to_tensor(crop(im)))
    decoded, labels = trainer.GpuDecoder(32, cpu)(trainer.collate_planned(planned))
    assert decoded.shape == (16, 3, 32, 32) and labels.tolist() == [0, 1] * 8
    expected = torch.stack(loaded).float()
    diff = (decoded - expected).abs()
    # a mirror image or another crop would differ by tens on average
    assert diff.mean() < 4 and diff.mean(dim=(1, 2, 3)).max() < 8
    to_device = trainer.ToDevice(cpu, torch.channels_last)
    a, _ = to_device(decoded, labels)
    b, _ = to_device(torch.stack(loaded), labels)
    assert a.dtype == b.dtype == torch.float32
    assert a.is_contiguous(memory_format=torch.channels_last) and b.is_contiguous(
        memory_format=torch.channels_last
    )
    assert (a - b).abs().mean() < 4 / 255 / 0.224


def test_a_jpeg_scaled_down_is_decoded_small(trainer, tmp_path):
    """A crop to be scaled down 8 times is decoded at 1/8 size (libjpeg's DCT scaling): the
    result differs from a full decode by little; one scaled down less is decoded whole."""
    import numpy as np
    import torch
    from PIL import Image
    from torchvision import transforms
    from torchvision.transforms import functional as F

    path = tmp_path / "photo.jpg"
    y, x = np.mgrid[0:300, 0:400]
    rgb = np.stack([x * 255 // 399, y * 255 // 299, (x + y) * 255 // 698], axis=2)
    Image.fromarray(rgb.astype(np.uint8)).save(path, quality=90)
    with Image.open(path) as im:
        small, scale = trainer.decode_reduced(im, 8.5)
        assert small.size == (50, 38) and scale == (8, 300 / 38)
    with Image.open(path) as im:
        whole, scale = trainer.decode_reduced(im, 1.9)
        assert whole.size == (400, 300) and scale == (1, 1)
    crop = trainer.ReducedResizedCrop(16)
    for seed in range(6):
        torch.manual_seed(seed)
        with Image.open(path) as im:
            reduced = F.pil_to_tensor(crop(im)).float()
        torch.manual_seed(seed)
        box = transforms.RandomResizedCrop.get_params(
            torch.empty(3, 300, 400), scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)
        )
        flip = bool(torch.rand(1) < 0.5)
        with Image.open(path) as im:
            full = F.pil_to_tensor(F.resized_crop(im.convert("RGB"), *box, [16, 16])).float()
        full = full.flip(-1) if flip else full
        assert (reduced - full).abs().mean() < 6, seed


def test_the_gpu_decoder_resizes_huge_crops_in_several_groups(trainer):
    import torch

    boxes = torch.tensor([[0, 0, 100, 100], [0, 0, 2999, 3999], [0, 0, 50, 60], [5, 5, 20, 20]])
    groups = trainer.GpuDecoder.groups([0, 1, 2, 3], boxes, limit=1 << 28)
    assert groups == [[0], [1], [2, 3]]  # 3000 x 4000 alone: 144 MB of float32 a crop
    assert trainer.GpuDecoder.groups([0, 2, 3], boxes) == [[0, 2, 3]]
    assert trainer.GpuDecoder.groups([], boxes) == []
    decoder = trainer.GpuDecoder(8, torch.device("cpu"))
    flat = torch.full((3, 30, 40), 200, dtype=torch.uint8)
    out = decoder.resize([flat, flat[:, :10, :7]])
    assert out.shape == (2, 3, 8, 8) and torch.allclose(out, torch.full_like(out, 200.0))


def test_a_fork_server_that_fails_in_any_way_gives_way_to_fork(trainer, monkeypatch, capsys):
    import multiprocessing

    class Server:
        """A fork-server context whose test process fails as ``how`` says."""

        def __init__(self, exitcode=0, error=None):
            self.exitcode, self.error, self.killed = exitcode, error, False

        def set_forkserver_preload(self, names):
            assert "torch" in names

        def Process(self, **kwargs):
            return self

        def start(self):
            if self.error:
                raise self.error

        def join(self, timeout):
            assert timeout == trainer.job_runtime.FORKSERVER_PROBE_S

        def kill(self):
            self.killed = True

    cases = [
        (
            Server(error=BrokenPipeError(32, "Broken pipe")),
            "(BrokenPipeError: [Errno 32] Broken pipe)",
        ),
        (Server(exitcode=1), "(a test process failed (exit code 1))"),
        (Server(exitcode=None), "(a test process did not end (exit code None))"),
    ]
    for server, says in cases:
        monkeypatch.setattr(multiprocessing, "get_context", lambda method, s=server: s)
        assert trainer.working_context("forkserver", 0) == "fork"
        err = capsys.readouterr().err
        assert f"warning: the fork server cannot start loader processes here {says}" in err
    assert cases[2][0].killed and not cases[0][0].killed
    monkeypatch.setattr(multiprocessing, "get_context", lambda method: Server())
    assert trainer.working_context("forkserver", 1) == "forkserver"
    assert trainer.working_context("spawn", 0) == "spawn"
    assert capsys.readouterr().err == ""


def test_how_a_loader_process_ended_is_said_in_words(trainer):
    assert trainer.job_runtime.exit_status(-9) == "killed by signal SIGKILL"
    assert trainer.job_runtime.exit_status(255) == "exited with status 255"


def test_errors_of_the_loader_other_than_a_death_pass_through(trainer, monkeypatch):
    def failing(message):
        raise RuntimeError(message)
        yield  # a generator, as a DataLoader's iterator is

    other = trainer.LoaderBatches(failing("CUDA error: an illegal memory access"), None, 2, 0)
    with pytest.raises(RuntimeError, match="illegal memory access"):
        list(other)
    death = failing("DataLoader worker (pid 7) is killed by signal: Killed. ")
    died = trainer.LoaderBatches(death, None, 2, 0)
    with pytest.raises(
        trainer.Abort, match=r"a data loader process died \(DataLoader worker \(pid 7"
    ):
        list(died)

    def main(argv):
        raise RuntimeError("other")

    monkeypatch.setattr(trainer, "main", main)
    with pytest.raises(RuntimeError, match="other"):
        trainer.run([])


def test_shards_need_webdataset(trainer, monkeypatch):
    monkeypatch.setitem(sys.modules, "webdataset", None)  # as if not installed
    with pytest.raises(trainer.Abort, match="pip install webdataset"):
        trainer.import_webdataset()


def test_more_loaders_than_batches_and_more_readers_than_shards(trainer, bare_env, shards, capsys):
    """Loader processes beyond those that get a batch each are not started; readers need not
    have a shard each: 16 images in 8 shards are read by 3 readers, 4 each (12 images an
    epoch, a different 4 left over each epoch), or by 8 ranks, a shard each."""
    import torch

    cpu = torch.device("cpu")
    argv = ["--data-dir", str(shards), "--image-size", "16", "--batch-size", "2"]
    args = trainer.parse_args([*argv, "--workers", "5"])
    batches = trainer.make_batches(args, "train", 0, 2, cpu, 2)
    assert args.workers == 4 and len(batches) == 4  # 16 images: 4 batches of 2 per rank
    assert "16 training images fill batches of 2 for 4 loader process(es) on each of 2 rank(s)" in (
        capsys.readouterr().err
    )
    args = trainer.parse_args([*argv, "--batch-size", "4", "--workers", "3"])
    args.mp_start_method = "fork"
    batches = trainer.make_batches(args, "train", 0, 1, cpu, 2)
    assert len(batches) == 3 and capsys.readouterr().err == ""
    labels = []
    for epoch in (0, 1):
        batches.start(epoch, 0)
        labels.append([tuple(lab.tolist()) for _, lab in batches])
        assert [len(batch) for batch in labels[-1]] == [4, 4, 4]
    single = trainer.parse_args([*argv, "--workers", "0"])
    for rank in (0, 7):
        batches = trainer.make_batches(single, "train", rank, 8, cpu, 2)
        batches.start(0, 0)
        assert [len(lab) for _, lab in batches] == [2]
    nine = trainer.make_batches(single, "train", 0, 9, cpu, 2)
    assert len(nine) == 0  # 16 images, 18 in one batch on each rank: main() stops, saying so


def test_shards_for_evaluation_and_for_the_gpu_decoder(trainer, bare_env, shards, tmp_path):
    import torch

    cpu = torch.device("cpu")
    argv = ["--data-dir", str(shards), "--image-size", "16", "--batch-size", "3", "--workers", "0"]
    args = trainer.parse_args(argv)
    val = trainer.make_batches(args, "val", 0, 1, cpu, 2)
    val.start(0, 0)
    sizes = [len(labels) for _, labels in val]
    assert len(val) == 2 and sizes == [3, 1]  # every image once, the last batch short
    args.loader = "gpu-decode"  # its steps, on the CPU
    train = trainer.make_batches(args, "train", 0, 1, cpu, 2)
    train.start(0, 0)
    images, _ = next(iter(train))
    assert images.shape == (3, 3, 16, 16) and images.dtype == torch.float32
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "fake.tar").write_bytes(b"not a tar file at all" * 50)
    index = {"classes": ["a"], "shards": [{"file": "fake.tar", "samples": 4}]}
    (tmp_path / "train" / "shards.json").write_text(json.dumps(index))
    bad = trainer.parse_args(["--data-dir", str(tmp_path), "--workers", "0", "--batch-size", "2"])
    broken = trainer.make_batches(bad, "train", 0, 1, cpu, 1)
    broken.start(0, 0)
    with pytest.raises(trainer.Abort, match=r"fake.tar: not a readable WebDataset shard"):
        list(broken)
