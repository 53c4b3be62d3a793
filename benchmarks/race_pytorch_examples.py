#!/usr/bin/env python3
"""Images/s of examples/pytorch/train_resnet.py against pytorch/examples' imagenet/main.py.

What a user would otherwise pick: the reference ImageNet script, with its synthetic data
(``--dummy``) or, with ``--data-dir``, the same image folder as the trainer (which may read
shards of the same images instead, ``--trainer-data-dir``), at the settings given here for
both (model, batch, 224-pixel images, loader processes, threads, device) and at its own
defaults otherwise (fp32; the trainer's precision and memory format come through
``--trainer-flag``). The two run in turns, several rounds, the first of each round
alternating; every step prints a line (``--log-every 1`` and ``-p 1``), and both are timed
the same way, by the arrival of those lines here, over the steps after the warm-up. Prints
one JSON record: the rate of each per round, the per-round ratios and their median, and the
machine's load before each round (``/proc/loadavg``), since a busy machine slows single runs
at random.

The reference script is not part of this repository; give a copy of it:

    git clone --depth 1 https://github.com/pytorch/examples /tmp/pytorch-examples
    python benchmarks/race_pytorch_examples.py \\
        --reference /tmp/pytorch-examples/imagenet/main.py --rounds 5
    python benchmarks/race_pytorch_examples.py \\
        --reference /tmp/pytorch-examples/imagenet/main.py --device cuda \\
        --data-dir /dev/shm/jpegs --batch-size 256 --workers 15 --threads 1 --rounds 3 \\
        --trainer-flag=--precision=bf16 --trainer-flag=--channels-last   # a GPU node
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import record

TRAINER = record.ROOT / "examples" / "pytorch" / "train_resnet.py"
IMAGE_SIZE = 224  # what main.py --dummy makes
OURS, THEIRS = TRAINER.name, "pytorch/examples imagenet/main.py"
OUR_STEP = re.compile(r"^\[train\] .*\bstep=\d+")
THEIR_STEP = re.compile(r"^Epoch: \[\d+\]\[\s*\d+/\d+\]")


def our_command(args, workdir: Path) -> list[str]:
    total = args.warmup + args.steps + 1
    data = args.trainer_data_dir or args.data_dir
    return [
        sys.executable,
        str(TRAINER),
        *(["--data-dir", str(data)] if data else []),
        *("--arch", args.arch, "--device", args.device, "--batch-size", str(args.batch_size)),
        *("--image-size", str(IMAGE_SIZE), "--workers", str(args.workers)),
        *("--steps", str(total), "--steps-per-epoch", str(total), "--log-every", "1"),
        *("--checkpoint-every", str(10 * total), "--checkpoint-dir", str(workdir)),
        *args.trainer_flag,
    ]


def their_command(args) -> list[str]:
    """main.py at its defaults but for what both are given: fp32, its own transforms."""
    data = [str(args.data_dir)] if args.data_dir else ["--dummy"]
    return [
        sys.executable,
        str(args.reference),
        *data,
        *(["--no-accel"] if args.device == "cpu" else []),
        *("-a", args.arch, "-b", str(args.batch_size)),
        *("-j", str(args.workers), "-p", "1", "--epochs", "1"),
    ]


def timed_rate(cmd: list[str], step_line: re.Pattern, args, cwd: Path) -> float:
    """Images/s over args.steps steps after args.warmup, timed by the arrival of the lines that
    end each step; the process is stopped as soon as the last of them arrives."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(record.LAUNCHER_VARS)}
    env.update(PYTHONUNBUFFERED="1", OMP_NUM_THREADS=str(args.threads))
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    stamps, seen = [], []
    try:
        for line in proc.stdout:
            seen.append(line)
            if step_line.match(line):
                stamps.append(time.perf_counter())
                if len(stamps) > args.warmup + args.steps:
                    break
    finally:
        proc.kill()
        proc.wait()
    if len(stamps) <= args.warmup + args.steps:
        raise SystemExit(f"{cmd[1]} stopped after {len(stamps)} steps:\n{''.join(seen[-40:])}")
    seconds = stamps[-1] - stamps[args.warmup]
    return args.steps * args.batch_size / seconds


def load_average() -> float | None:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def race(args, workdir: Path) -> dict:
    """The rounds: both programs once each, the first of a round alternating."""
    rounds = []
    for n in range(args.rounds):
        load = load_average()
        rates = {}
        order = (OURS, THEIRS) if n % 2 == 0 else (THEIRS, OURS)
        for name in order:
            if name == OURS:
                rates[name] = timed_rate(our_command(args, workdir), OUR_STEP, args, workdir)
            else:
                rates[name] = timed_rate(their_command(args), THEIR_STEP, args, workdir)
        ratio = rates[OURS] / rates[THEIRS]
        rounds.append({"first": order[0], "load_1min": load, "img_s": rates, "ratio": ratio})
        print(
            f"round {n + 1}: {OURS} {rates[OURS]:.2f} img/s, reference {rates[THEIRS]:.2f} "
            f"img/s, ratio {ratio:.3f} (load {load})",
            file=sys.stderr,
            flush=True,
        )
    return summarise(rounds)


def summarise(rounds: list[dict]) -> dict:
    rates = {name: [r["img_s"][name] for r in rounds] for name in (OURS, THEIRS)}
    ratios = [r["ratio"] for r in rounds]
    return {
        "median_img_s": {name: round(statistics.median(v), 2) for name, v in rates.items()},
        "median_ratio": round(statistics.median(ratios), 3),
        "ratio_range": [round(min(ratios), 3), round(max(ratios), 3)],
        "rounds": [
            {
                **r,
                "img_s": {k: round(v, 2) for k, v in r["img_s"].items()},
                "ratio": round(r["ratio"], 3),
            }
            for r in rounds
        ],
    }


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--reference", type=Path, required=True, help="a copy of imagenet/main.py")
    p.add_argument("--arch", default="resnet50", help="torchvision model")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where both train")
    p.add_argument(
        "--data-dir",
        type=Path,
        help="an ImageNet-style folder (train/<class>/, val/<class>/) both read; synthetic "
        "images (main.py --dummy) without it",
    )
    p.add_argument(
        "--trainer-data-dir",
        type=Path,
        help="what the trainer reads instead of --data-dir: the same images as WebDataset "
        "shards (examples/data/make_shards.py), say",
    )
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--workers", type=int, default=1, help="data loader processes of each")
    p.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS of each")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument(
        "--trainer-flag",
        action="append",
        default=[],
        metavar="FLAG",
        help="one more flag for the trainer (repeat it; e.g. --trainer-flag=--no-deterministic "
        "to see what the CPU's default deterministic algorithms cost)",
    )
    p.add_argument("--output", type=Path, help="also write the JSON record here")
    args = p.parse_args(argv)
    if not args.reference.is_file():
        p.error(f"--reference {args.reference}: no such file")
    for name in ("data_dir", "trainer_data_dir"):
        folder = getattr(args, name)
        if folder is not None and not (folder / "train").is_dir():
            p.error(f"--{name.replace('_', '-')} {folder}: no train/ directory in it")
    for name in ("batch_size", "threads", "warmup", "steps", "rounds"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.workers < 0:
        p.error("--workers cannot be negative")
    return args


def versions() -> dict:
    import torch  # here, not at the top: the tests of this script need no PyTorch
    import torchvision

    return {"torch": torch.__version__, "torchvision": torchvision.__version__}


def main(argv=None) -> None:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        result = race(args, Path(tmp))
    out = {
        "benchmark": f"{args.arch}-pytorch-trainer-vs-pytorch-examples-imagenet",
        **record.header(
            hardware={"cpu": record.cpu_name(), "cores": os.cpu_count()},
            software=versions(),
        ),
        "settings": {
            **{k: v for k, v in vars(args).items() if k not in ("output", "reference")},
            "image_size": IMAGE_SIZE,
        },
        "commands": {
            OURS: " ".join([OURS, *our_command(args, Path("CKPT"))[2:]]),
            THEIRS: " ".join(["main.py", *their_command(args)[2:]]),
        },
        **result,
    }
    record.write(out, args.output)


if __name__ == "__main__":
    main()
