"""The benchmark scripts run and print a complete JSON record (tiny settings: the figures
themselves are not judged here; results/ holds those of record)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TINY = ("--batch-size", "2", "--image-size", "32", "--steps", "1", "--warmup", "1")


# Each repeat starts the framework afresh: two for PyTorch (the best of them is the figure),
# one for TensorFlow, whose start-up dominates a tiny run.
@pytest.mark.parametrize(
    ("script", "trainer", "repeats"),
    [
        ("bench_pytorch.py", "train_resnet.py", 2),
        ("bench_tensorflow.py", "train_resnet_keras.py", 1),
    ],
)
def test_benchmark_prints_a_record(script, trainer, repeats, tmp_path):
    out = tmp_path / "record.json"
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / script),
            *TINY,
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
