"""The benchmark scripts run and print a complete JSON record (tiny settings: the figures
themselves are not judged here; results/ holds those of record)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TINY = ("--batch-size", "2", "--image-size", "32", "--steps", "1", "--warmup", "1")


# Each repeat starts the framework afresh, so the scripts run once each here; taking the best
# of several repeats is tested on record.py itself below. The smallest models that the scripts
# accept: what is tested is the record, not the figures (ResNet-50 traced and run twice made
# the TensorFlow case 100 s of CPU time).
@pytest.mark.parametrize(
    ("script", "trainer", "arch", "repeats"),
    [
        ("bench_pytorch.py", "train_resnet.py", "resnet18", 1),
        ("bench_tensorflow.py", "train_resnet_keras.py", "MobileNet", 1),
    ],
)
def test_benchmark_prints_a_record(script, trainer, arch, repeats, tmp_path):
    out = tmp_path / "record.json"
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / script),
            *TINY,
            "--arch",
            arch,
            "--repeats",
            str(repeats),
            "--output",
            str(out),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    record = json.loads(out.read_text())
    assert set(record["img_s"]) == {trainer, "plain loop"}
    assert all(v > 0 for v in record["img_s"].values())
    assert [len(v) for v in record["all_runs_img_s"].values()] == [repeats, repeats]
    assert record["img_s"][trainer] == max(record["all_runs_img_s"]["trainer"])
    # the ratio comes from the unrounded rates; the rates are printed to 0.1 img/s
    ours, plain = record["img_s"][trainer], record["img_s"]["plain loop"]
    assert (ours - 0.05) / (plain + 0.05) <= record["ratio"] <= (ours + 0.05) / (plain - 0.05)
    assert record["settings"]["steps"] == 1 and "output" not in record["settings"]


def test_repeats_alternate_and_the_best_of_each_side_is_the_figure(tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import record
    finally:
        sys.path.pop(0)
    order = []
    trainer_rates, plain_rates = iter([3.0, 5.0, 4.0]), iter([10.0, 8.0, 12.0])

    def trainer(tmp):
        order.append("trainer")
        return next(trainer_rates), "python train_resnet.py --tiny"

    def plain():
        order.append("plain")
        return next(plain_rates)

    runs, command = record.compare(3, trainer, plain)
    assert order == ["trainer", "plain"] * 3
    assert runs == {"trainer": [3.0, 5.0, 4.0], "plain": [10.0, 8.0, 12.0]}
    args = argparse.Namespace(steps=1, output=tmp_path / "r.json")
    record.emit(args, "b", "train_resnet.py", runs, command, {}, {})
    out = json.loads((tmp_path / "r.json").read_text())
    assert out["img_s"] == {"train_resnet.py": 5.0, "plain loop": 12.0}
    assert out["ratio"] == round(5.0 / 12.0, 3)
    assert out["all_runs_img_s"]["trainer"] == [3.0, 5.0, 4.0]


@pytest.mark.parametrize(
    ("framework", "extra"),
    [
        (
            "pytorch",
            ["--arch", "resnet18", "--loaders", "cpu", "gpu-decode", "--forms", "folder", "shards"],
        ),
        ("tensorflow", ["--no-train"]),  # its training from a folder: test_tensorflow_trainer
    ],
)
def test_the_input_pipeline_benchmark_prints_a_record(framework, extra, jpeg_folder, tmp_path):
    out = tmp_path / "record.json"
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_data.py"),
            *("--framework", framework, "--data-dir", str(jpeg_folder)),
            *("--workers", "0", "1", "--batch-size", "4", "--image-size", "32"),
            *("--batches", "2", "--warmup", "1", "--train-steps", "2", "--repeats", "1"),
            *extra,
            *("--output", str(out)),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["benchmark"] == f"{framework}-input-pipeline"
    rates = record["loader_alone_img_s"]
    forms = ["folder", "shards"] if framework == "pytorch" else ["folder"]
    assert set(rates) == {f"{form} cpu workers={n}" for form in forms for n in (0, 1)}
    assert all(v > 0 for v in rates.values())
    if framework == "pytorch":  # no GPU here: the GPU decoder is listed with its reason
        assert "has none" in record["loaders_not_run"]["folder gpu-decode"]
        assert set(record["trainer_img_s"]) == {"synthetic", "folder", "shards"}
        for form in forms:
            ratio = record["trainer_img_s"][form] / record["trainer_img_s"]["synthetic"]
            assert record[f"{form}_to_synthetic"] == pytest.approx(ratio, abs=0.01)
            assert "--data-dir" in record["trainer_commands"][form]
    else:
        assert "trainer_img_s" not in record


def test_the_loader_memory_benchmark_prints_a_record(tmp_path):
    """Each loader process's memory, for the folder and for shards at each shuffle buffer."""
    out = tmp_path / "record.json"
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_loader_memory.py"),
            *("--images", "40", "--per-shard", "10", "--workers", "2", "--batches", "2"),
            *("--batch-size", "4", "--image-size", "32", "--shuffle-buffers", "5", "9"),
            *("--output", str(out)),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    record = json.loads(out.read_text())
    assert record["benchmark"] == "pytorch-loader-memory" and record["date"]
    assert record["images"]["count"] == 40 and record["batch_mib"] == round(
        4 * 3 * 32**2 / 2**20, 1
    )
    assert set(record["memory"]) == {
        "folder",
        "shards, shuffle buffer 5",
        "shards, shuffle buffer 9",
    }
    for form in record["memory"].values():
        assert len(form["loader_processes_mib"]) == 2
        for m in [*form["loader_processes_mib"], form["rank_mib"]]:
            assert m["rss"] >= m["pss"] >= m["uss"] > 0
