"""benchmarks/race_pytorch_examples.py: how it times the two programs and sums up the rounds.
The reference script is not part of the repository; a stand-in prints its progress lines."""

from __future__ import annotations

import sys

import pytest
from benchmark_scripts import ROOT, benchmark_module

sys.path.insert(0, str(ROOT / "benchmarks"))  # the scripts import record.py from beside them
try:
    race = benchmark_module("race_pytorch_examples")
finally:
    sys.path.pop(0)

STAND_IN = """
import sys, time
print("=> creating model 'resnet50'")
for i in range(1, int(sys.argv[-1]) + 1):
    time.sleep(0.05)
    print(f"Epoch: [0][{i:6d}/160146]\\tTime  0.050 ( 0.050)\\tLoss 6.9e+00")
"""


def stand_in(tmp_path, steps: int):
    ref = tmp_path / "main.py"
    ref.write_text(STAND_IN)
    args = race.parse_args(
        ["--reference", str(ref), "--batch-size", "4", "--warmup", "2", "--steps", "5"]
    )
    return args, [*race.their_command(args), str(steps)]


def test_steps_are_timed_by_their_lines_after_the_warm_up(tmp_path):
    args, cmd = stand_in(tmp_path, steps=1000)
    assert cmd[2:5] == ["--dummy", "--no-accel", "-a"] and "-p" in cmd
    rate = race.timed_rate(cmd, race.THEIR_STEP, args, tmp_path)
    # 5 steps of 4 images, each at least 0.05 s: 80 img/s at most (and the stand-in, which
    # would print for 50 s, was stopped after the 8th line)
    assert 0 < rate < 80 * 1.5


def test_a_program_that_stops_early_is_reported(tmp_path):
    args, cmd = stand_in(tmp_path, steps=3)
    with pytest.raises(SystemExit, match="stopped after 3 steps"):
        race.timed_rate(cmd, race.THEIR_STEP, args, tmp_path)


def test_our_step_lines_are_those_the_trainer_documents():
    trainer_doc = (ROOT / "examples" / "pytorch" / "train_resnet.py").read_text()
    documented = next(line.strip() for line in trainer_doc.splitlines() if "[train] rank=" in line)
    assert race.OUR_STEP.match(documented) and not race.THEIR_STEP.match(documented)


def test_rounds_are_summed_up_by_their_medians():
    rounds = [
        {"first": race.OURS, "load_1min": 1.0, "img_s": {race.OURS: a, race.THEIRS: b}}
        for a, b in [(4.0, 5.0), (5.0, 4.0), (4.6, 4.6)]
    ]
    for r in rounds:
        r["ratio"] = r["img_s"][race.OURS] / r["img_s"][race.THEIRS]
    summary = race.summarise(rounds)
    assert summary["median_ratio"] == 1.0 and summary["ratio_range"] == [0.8, 1.25]
    assert summary["median_img_s"] == {race.OURS: 4.6, race.THEIRS: 4.6}
    assert len(summary["rounds"]) == 3


def test_on_a_folder_both_read_it_and_the_trainer_may_read_shards_of_it(tmp_path, jpeg_folder):
    ref = tmp_path / "main.py"
    ref.write_text(STAND_IN)
    base = ["--reference", str(ref), "--data-dir", str(jpeg_folder), "--device", "cuda"]
    args = race.parse_args(base)
    theirs, ours = race.their_command(args), race.our_command(args, tmp_path)
    assert theirs[2] == str(jpeg_folder) and "--dummy" not in theirs and "--no-accel" not in theirs
    assert ours[ours.index("--data-dir") + 1] == str(jpeg_folder)
    assert ours[ours.index("--device") + 1] == "cuda"
    shards = tmp_path / "shards"
    (shards / "train").mkdir(parents=True)
    args = race.parse_args([*base, "--trainer-data-dir", str(shards)])
    ours = race.our_command(args, tmp_path)
    assert ours[ours.index("--data-dir") + 1] == str(shards)
    assert race.their_command(args)[2] == str(jpeg_folder)
    with pytest.raises(SystemExit):
        race.parse_args([*base, "--trainer-data-dir", str(tmp_path / "nothing")])
