#!/usr/bin/env python3
"""Images/s of examples/pytorch/train_resnet.py against a plain training loop of the same model.

Both train the same model with the same batch, precision, memory format and optimizer on the
same device, one process each. The plain loop feeds one batch that already sits on the device;
the trainer makes its synthetic batches on the CPU (in --workers loader processes) and copies
them over, and checks for preemption at every step, so the ratio is what the trainer's input
pipeline and bookkeeping cost. Prints one JSON record (hardware, versions, settings, date,
commit); ``--output FILE`` also writes it. Not a test: the figures depend on the machine.

    python benchmarks/bench_pytorch.py --device cpu --batch-size 8 --image-size 64 --steps 10
    python benchmarks/bench_pytorch.py --device cuda --batch-size 256 --precision bf16 \\
        --channels-last --compile --output results/bench/pytorch-h100.json    # a GPU node
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn as nn
import torchvision

ROOT = Path(__file__).resolve().parent.parent
TRAINER = ROOT / "examples" / "pytorch" / "train_resnet.py"
# A launcher's variables would make the trainer wait for ranks that never come.
LAUNCHER_VARS = ("SLURM_", "OMPI_", "PMIX_", "PMI_", "JSM_", "RANK", "WORLD_SIZE", "LOCAL_RANK")


def plain_loop(args) -> float:
    """The least a training step can do: images/s after `args.warmup` untimed steps."""
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
        torch.set_float32_matmul_precision("high")  # as the trainer does
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    torch.manual_seed(0)
    model = torchvision.models.get_model(args.arch, weights=None, num_classes=1000)
    model = model.to(device, memory_format=fmt)
    step_model = torch.compile(model) if args.compile else model
    lr = 0.1 * args.batch_size / 256  # the trainer's peak rate for one rank
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=1e-4)
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
    images = images.contiguous(memory_format=fmt)
    labels = torch.randint(1000, (args.batch_size,), device=device)
    dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[args.precision]
    scaler = torch.amp.GradScaler(device.type, enabled=args.precision == "fp16")

    def step():
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            loss = criterion(step_model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    for _ in range(args.warmup):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return args.steps * args.batch_size / (time.perf_counter() - start)


def trainer(args, workdir: Path) -> tuple[float, str]:
    """The trainer's [summary] images/s over the same steps, and its command line."""
    total = args.steps + args.warmup
    cmd = [
        sys.executable,
        str(TRAINER),
        *("--arch", args.arch, "--device", args.device, "--batch-size", str(args.batch_size)),
        *("--image-size", str(args.image_size), "--precision", args.precision),
        *("--steps", str(total), "--steps-per-epoch", str(total)),
        *("--warmup-steps", str(args.warmup), "--workers", str(args.workers)),
        *("--log-every", str(total), "--checkpoint-every", str(10 * total)),
        *("--checkpoint-dir", str(workdir), "--no-deterministic"),
    ]
    cmd += ["--channels-last"] if args.channels_last else []
    cmd += ["--compile"] if args.compile else []
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCHER_VARS)}
    env.pop("TRAIN_TINY", None)
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    m = re.search(r"^\[summary\] .*\bimg_s=([\d.]+)", r.stdout, re.MULTILINE)
    if r.returncode != 0 or not m:
        raise SystemExit(f"the trainer failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    shown = [Path(c).name if c in (sys.executable, str(TRAINER)) else c for c in cmd]
    return float(m[1]), " ".join(shown)


def hardware(device: str) -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        names = re.findall(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
        cpu = names[0] if names else cpu
    except OSError:
        pass
    out = {"cpu": cpu, "cpu_threads": torch.get_num_threads(), "cores": os.cpu_count()}
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        out.update(
            gpu=props.name,
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            cuda=torch.version.cuda,
            hip=torch.version.hip,
            cudnn=torch.backends.cudnn.version(),
        )
    return out


def git_commit() -> str | None:
    try:
        r = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
        )
    except OSError:
        return None
    return r.stdout.strip() or None


def main() -> None:
    cuda = torch.cuda.is_available()
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--arch", default="resnet50", help="torchvision model")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if cuda else "cpu")
    p.add_argument("--batch-size", type=int, default=256 if cuda else 8)
    p.add_argument("--image-size", type=int, default=224 if cuda else 64)
    p.add_argument("--steps", type=int, default=50 if cuda else 10, help="timed steps")
    p.add_argument("--warmup", type=int, default=10 if cuda else 2, help="untimed steps first")
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--compile", action="store_true", help="torch.compile (both loops)")
    p.add_argument(
        "--workers", type=int, default=8 if cuda else 0, help="the trainer's loader processes"
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="runs of each, alternating; the best of each counts (a shared or busy machine "
        "slows single runs down at random)",
    )
    p.add_argument("--output", type=Path, help="also write the JSON record here")
    args = p.parse_args()
    if args.device == "cuda" and not cuda:
        p.error("--device cuda: no GPU here")
    if args.warmup < 1 or args.steps < args.warmup:
        p.error("--warmup must be at least 1 and --steps at least --warmup")

    runs: dict[str, list[float]] = {"trainer": [], "plain": []}
    for _ in range(max(1, args.repeats)):
        with tempfile.TemporaryDirectory() as tmp:
            rate, command = trainer(args, Path(tmp))
        runs["trainer"].append(rate)
        runs["plain"].append(plain_loop(args))
    ours, plain = max(runs["trainer"]), max(runs["plain"])
    record = {
        "benchmark": f"{args.arch}-pytorch-trainer-vs-plain-loop",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "hardware": hardware(args.device),
        "software": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "torchvision": torchvision.__version__,
        },
        "settings": {k: v for k, v in vars(args).items() if k != "output"},
        "trainer_command": command,
        "img_s": {"train_resnet.py": round(ours, 1), "plain loop": round(plain, 1)},
        "ratio": round(ours / plain, 3),
        "all_runs_img_s": {k: [round(v, 1) for v in vs] for k, vs in runs.items()},
    }
    text = json.dumps(record, indent=2)
    print(text)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text + "\n")


if __name__ == "__main__":
    main()
