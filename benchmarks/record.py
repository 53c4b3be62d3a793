"""What the benchmark scripts share: running a trainer for its [summary] rate, comparing it with
a plain loop over several alternating runs, and the JSON record they print."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# A launcher's variables would make a trainer wait for ranks or workers that never come.
LAUNCHER_VARS = (
    "SLURM_",
    "OMPI_",
    "PMIX_",
    "PMI_",
    "JSM_",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "TF_CONFIG",
    "TRAIN_TINY",
)


def trainer_rate(cmd: list[str], trainer: Path) -> tuple[float, str]:
    """Run a trainer's command line; its [summary] images/s and the command as shown."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCHER_VARS)}
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    m = re.search(r"^\[summary\] .*\bimg_s=([\d.]+)", r.stdout, re.MULTILINE)
    if r.returncode != 0 or not m:
        raise SystemExit(f"the trainer failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    shown = [Path(c).name if c in (sys.executable, str(trainer)) else c for c in cmd]
    return float(m[1]), " ".join(shown)


def compare(
    repeats: int,
    trainer: Callable[[Path], tuple[float, str]],
    plain: Callable[[], float],
) -> tuple[dict[str, list[float]], str]:
    """Trainer and plain loop, alternately, ``repeats`` times: every rate, and the command."""
    runs: dict[str, list[float]] = {"trainer": [], "plain": []}
    command = ""
    for _ in range(max(1, repeats)):
        with tempfile.TemporaryDirectory() as tmp:
            rate, command = trainer(Path(tmp))
        runs["trainer"].append(rate)
        runs["plain"].append(plain())
    return runs, command


def cpu_name() -> str:
    try:
        names = re.findall(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
    except OSError:
        names = []
    return names[0] if names else platform.processor() or platform.machine()


def git_commit() -> str | None:
    try:
        r = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
        )
    except OSError:
        return None
    return r.stdout.strip() or None


def header(hardware: dict, software: dict) -> dict:
    """What every record starts with: when, which commit, on what, with which versions."""
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "hardware": hardware,
        "software": {"python": platform.python_version(), **software},
    }


def write(record: dict, output: Path | None) -> None:
    """Print the record as JSON; also write it to output when given."""
    text = json.dumps(record, indent=2)
    print(text)
    if output:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text + "\n")


def emit(
    args,
    benchmark: str,
    trainer_name: str,
    runs: dict[str, list[float]],
    command: str,
    hardware: dict,
    software: dict,
) -> None:
    """Print the JSON record (the best run of each counts); --output also writes it."""
    ours, plain = max(runs["trainer"]), max(runs["plain"])
    record = {
        "benchmark": benchmark,
        **header(hardware, software),
        "settings": {k: v for k, v in vars(args).items() if k != "output"},
        "trainer_command": command,
        "img_s": {trainer_name: round(ours, 1), "plain loop": round(plain, 1)},
        "ratio": round(ours / plain, 3),
        "all_runs_img_s": {k: [round(v, 1) for v in vs] for k, vs in runs.items()},
    }
    write(record, args.output)


def add_common_arguments(p, *, gpu: bool) -> None:
    """Options both scripts take, with defaults for a GPU or a CPU."""
    p.add_argument("--batch-size", type=int, default=256 if gpu else 8)
    p.add_argument("--image-size", type=int, default=224 if gpu else 64)
    p.add_argument("--steps", type=int, default=50 if gpu else 10, help="timed steps")
    p.add_argument("--warmup", type=int, default=10 if gpu else 2, help="untimed steps first")
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32")
    p.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="runs of each, alternating; the best of each counts (a shared or busy machine "
        "slows single runs down at random)",
    )
    p.add_argument("--output", type=Path, help="also write the JSON record here")
