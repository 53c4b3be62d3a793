"""benchmarks/bench_lm.py: train_lm.py against transformers' Trainer, timed alike, in
alternating rounds. One real round on the CPU with the tiniest model (the record, not the
figures, is judged here: results/bench/ holds those of record); the rest with stand-ins."""

from __future__ import annotations

import json
import subprocess
import sys

import own_network
import pytest
from benchmark_scripts import ROOT, benchmark_module

sys.path.insert(0, str(ROOT / "benchmarks"))  # the script imports record.py from beside it
try:
    bench = benchmark_module("bench_lm")
finally:
    sys.path.pop(0)

SCRIPT = ROOT / "benchmarks" / "bench_lm.py"


def test_one_cpu_round_writes_a_record_of_both_sides(tiny_lm, tmp_path):
    out = tmp_path / "records"
    argv = [sys.executable, str(SCRIPT), "--model", str(tiny_lm["llama"]), "--seq-len", "32"]
    argv += ["--batch-size", "4", "--warmup", "1", "--steps", "2", "--rounds", "1"]
    argv += ["--workdir", str(tmp_path), "--output-dir", str(out)]
    r = subprocess.run(
        own_network.command(argv), cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    (path,) = out.iterdir()
    assert path.name == f"cpu-{bench.os.cpu_count()}core-lm-tiny-vs-hf-trainer.json"
    rec = json.loads(path.read_text())
    assert rec["hardware"]["cores"] >= 1 and rec["hardware"]["cpu"]
    assert {"torch", "transformers", "accelerate", "datasets"} <= set(rec["software"])
    assert rec["settings"]["steps"] == 2 and rec["tokens_per_step"] == 4 * 32
    (round_,) = rec["rounds"]
    rates = round_["tokens_s"]
    assert set(rates) == {bench.OURS, bench.THEIRS} and all(v > 0 for v in rates.values())
    ours, theirs = rates[bench.OURS], rates[bench.THEIRS]  # rounded to 0.1, the ratio to 0.001
    low, high = (ours - 0.05) / (theirs + 0.05), (ours + 0.05) / (theirs - 0.05)
    assert low - 0.0005 <= rec["median_ratio"] <= high + 0.0005
    assert rec["ratio_range"] == [rec["median_ratio"]] * 2 and round_["first"] == bench.OURS
    cpu = round_["cpu_s_per_step"]
    assert cpu[bench.OURS] > 0 and cpu[bench.THEIRS] > 0 and rec["median_cpu_ratio"] > 0
    assert len(rec["load_average"]["start"]) == 3 and len(rec["load_average"]["end"]) == 3
    # on a CPU: fp32 on both sides, and no MFU (no peak is known)
    assert rec["model"]["precision"] == {bench.OURS: "fp32", bench.THEIRS: "fp32"}
    assert rec["model"]["parameters"] > 0 and rec["model"]["flops_per_token"] > 0
    assert rec["median_mfu"] == {bench.OURS: None, bench.THEIRS: None}
    assert "--log-every 1" in rec["commands"][bench.OURS]
    assert (
        "--cpu" in rec["commands"][bench.THEIRS] and "--bf16" not in rec["commands"][bench.THEIRS]
    )
    assert "median ratio" in r.stderr and not list(tmp_path.glob("tmp*"))  # work folder gone


def test_the_gpu_plan_is_one_command(capsys):
    bench.main(["--preset", "350m", "--dry-run"])
    plan = json.loads(capsys.readouterr().out)
    ours, theirs = plan["commands"][bench.OURS].split(), plan["commands"][bench.THEIRS].split()
    assert ours[:2] == ["python", "examples/pytorch/train_lm.py"]
    assert theirs[:2] == ["python", "benchmarks/hf_trainer_lm.py"]
    # the same model, new on both sides; bf16 on both (train_lm.py's default on a GPU)
    assert "--scratch" in ours and "--scratch" in theirs and "--precision" not in ours
    assert "--bf16" in theirs and "--cpu" not in theirs
    assert ours[ours.index("--device") + 1] == "cuda"
    assert ours[ours.index("--global-batch-size") + 1] == theirs[theirs.index("--batch-size") + 1]
    assert ours[ours.index("--steps") + 1] == theirs[theirs.index("--steps") + 1] == "40"
    assert theirs[theirs.index("--mark") + 1] == "10" and "--log-every" not in ours
    settings = plan["settings"]
    assert settings["time_limit"] <= 570 and settings["seq_len"] == 1024
    assert settings["shape"]["width"] == 1024 and settings["shape"]["layers"] == 24


def test_processes_share_the_batch(capsys):
    bench.main(["--nproc", "2", "--dry-run", "--precision", "bf16"])
    commands = json.loads(capsys.readouterr().out)["commands"]
    ours, theirs = commands[bench.OURS].split(), commands[bench.THEIRS].split()
    assert ours[:3] == theirs[:3] == ["torchrun", "--standalone", "--nproc-per-node=2"]
    assert ours[ours.index("--global-batch-size") + 1] == "8"
    assert theirs[theirs.index("--batch-size") + 1] == "4"  # per process
    assert "--bf16" in theirs and ours[ours.index("--precision") + 1] == "bf16"
    with pytest.raises(SystemExit):
        bench.parse_args(["--nproc", "3"])  # 8 sequences do not share among 3


def stub_rounds(monkeypatch, seconds: dict[str, list[float]]):
    """timed_seconds replaced: each side takes the next of its times; the order is noted."""
    order = []
    times = {side: iter(values) for side, values in seconds.items()}

    def timed(cmd, side, args, timeout):
        order.append(side)
        seconds = next(times[side])
        return seconds, 2 * seconds, "llama: ... device cpu, backend -, fp32; 408 sequences of"

    monkeypatch.setattr(bench, "timed_seconds", timed)
    return order


def test_rounds_alternate_and_the_median_ratio_is_the_figure(monkeypatch, tmp_path):
    args = bench.parse_args(["--rounds", "3", "--warmup", "2", "--steps", "4"])
    order = stub_rounds(monkeypatch, {bench.OURS: [2.0, 1.0, 4.0], bench.THEIRS: [4.0, 1.0, 2.0]})
    rounds, stopped = bench.race(args, tmp_path, tmp_path, bench.clock() + 100)
    assert stopped is None
    assert order == [bench.OURS, bench.THEIRS, bench.THEIRS, bench.OURS, bench.OURS, bench.THEIRS]
    facts = {"flops_per_token": 1e6, "peak_tflops": 1.0}
    summary = bench.summarise(rounds, facts, args)
    assert [r["ratio"] for r in summary["rounds"]] == [2.0, 1.0, 0.5]
    assert summary["median_ratio"] == 1.0 and summary["ratio_range"] == [0.5, 2.0]
    tokens = 4 * 8 * 128  # timed steps x sequences x length
    assert summary["median_tokens_s"][bench.OURS] == tokens / 2.0
    assert summary["median_mfu"][bench.OURS] == round(tokens / 2.0 * 1e6 / 1e12, 4)
    assert summary["median_cpu_ratio"] == 1.0 and summary["cpu_ratio_range"] == [0.5, 2.0]
    assert summary["rounds"][0]["cpu_s_per_step"] == {bench.OURS: 1.0, bench.THEIRS: 2.0}
    assert summary["rounds"][0]["precision"] == {bench.OURS: "fp32", bench.THEIRS: "fp32"}


def test_the_time_limit_ends_the_rounds_that_would_not_fit(monkeypatch, tmp_path):
    args = bench.parse_args(["--rounds", "5"])
    stub_rounds(monkeypatch, {bench.OURS: [1.0] * 5, bench.THEIRS: [1.0] * 5})
    clock = iter(range(0, 1000, 10))  # every reading of the clock 10 s later
    monkeypatch.setattr(bench, "clock", lambda: next(clock))
    rounds, stopped = bench.race(args, tmp_path, tmp_path, deadline=45)
    assert 1 <= len(rounds) < 5 and "--time-limit" in stopped


STAND_IN = "import sys\nfor i in range(1, int(sys.argv[1]) + 1):\n    print(f'[hf] step={i}')\n"


def test_a_side_that_stops_before_its_last_step_is_reported(tmp_path):
    args = bench.parse_args(["--warmup", "2", "--steps", "3"])
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    cmd = [sys.executable, str(script), "9"]
    seconds, cpu, printed = bench.timed_seconds(cmd, bench.THEIRS, args, 60)
    assert 0 <= seconds < 60 and 0 <= cpu < 60 and printed.splitlines()[-1] == "[hf] step=5"
    with pytest.raises(SystemExit, match="stopped before step 5"):
        bench.timed_seconds([sys.executable, str(script), "4"], bench.THEIRS, args, 60)


def test_the_step_lines_are_those_each_side_prints():
    trainer_doc = (ROOT / "examples" / "pytorch" / "train_lm.py").read_text()
    documented = next(line.strip() for line in trainer_doc.splitlines() if "[train] rank=" in line)
    assert bench.STEP_LINE[bench.OURS].match(documented)[1] == "20"
    hf_side = (ROOT / "benchmarks" / "hf_trainer_lm.py").read_text()
    assert 'print(f"[hf] step={state.global_step}"' in hf_side


PARENT = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
print("started", flush=True)
time.sleep(600)
"""


def test_a_run_is_stopped_with_the_processes_it_started(tmp_path):
    """As torchrun's workers are: in sessions of their own, busy; their CPU time counts."""
    parent = bench.subprocess.Popen(
        [sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout.readline() == "started\n"
        deadline = bench.time.monotonic() + 60
        while len(bench.process_tree(parent.pid)) < 2 and bench.time.monotonic() < deadline:
            bench.time.sleep(0.1)
        tree = bench.process_tree(parent.pid)
        (child,) = set(tree) - {parent.pid}
        bench.time.sleep(1.0)
        assert bench.cpu_seconds(parent.pid) > sum(tree.values())  # the busy child's time
    finally:
        bench.stop(parent.pid)
    parent.wait(timeout=60)
    deadline = bench.time.monotonic() + 60
    while bench.process_tree(child) and bench.time.monotonic() < deadline:
        bench.time.sleep(0.1)  # a zombie until init reaps it
    assert not bench.process_tree(child) or open(f"/proc/{child}/stat").read().split()[2] == "Z"
