#!/usr/bin/env python3
"""Images/s of examples/pytorch/train_resnet.py against a plain training loop of the same model.

Both run the same model, batch, precision and memory format on the same device, on synthetic
data already on the device, so the figure compares the trainers' per-step overhead (the
preemption check, learning-rate schedule, logging) with the bare minimum. Prints one JSON
record; ``--output FILE`` also writes it (results data for the pages: hardware, versions,
settings, date, commit).

    python benchmarks/bench_pytorch.py --device cpu --batch-size 8 --image-size 64 --steps 10
    python benchmarks/bench_pytorch.py --device cuda --batch-size 256 --precision bf16 \\
        --channels-last --compile                     # on a GPU node
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import torchvision

ROOT = Path(__file__).resolve().parent.parent
TRAINER = ROOT / "examples" / "pytorch" / "train_resnet.py"


def plain_loop(args) -> float:
    device = torch.device(args.device)
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    model = torchvision.models.get_model(args.arch, weights=None, num_classes=1000)
    model = model.to(device, memory_format=fmt)
    step_model = torch.compile(model) if args.compile else model
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
    x = x.to(memory_format=fmt)
    y = torch.randint(1000, (args.batch_size,), device=device)
    dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[args.precision]
    scaler = torch.amp.GradScaler(device.type, enabled=args.precision == "fp16")

    def step():
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            loss = F.cross_entropy(step_model(x), y)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    for _ in range(args.warmup):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return args.steps * args.batch_size / (time.perf_counter() - t0)


def trainer(args, workdir: Path) -> float:
    cmd = [
        sys.executable,
        str(TRAINER),
        "--arch",
        args.arch,
        "--device",
        args.device,
        "--batch-size",
        str(args.batch_size),
        "--image-size",
        str(args.image_size),
        "--steps",
        str(args.steps + args.warmup),
        "--warmup-steps",
        str(args.warmup),
        "--precision",
        args.precision,
        "--workers",
        "0",
        "--log-every",
        "1000000",
        "--checkpoint-every",
        "1000000",
        "--checkpoint-dir",
        str(workdir),
        "--steps-per-epoch",
        str(args.steps + args.warmup),
    ]
    cmd += ["--channels-last"] if args.channels_last else []
    cmd += ["--compile"] if args.compile else []
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    m = re.search(r"\[summary\] .*img_s=([\d.]+)", out)
    if not m:
        raise SystemExit(f"no summary line in the trainer's output:\n{out}")
    return float(m[1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", default="resnet50")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--output", type=Path)
    args = p.parse_args()
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        ours = trainer(args, Path(tmp))
    plain = plain_loop(args)
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    record = {
        "benchmark": f"{args.arch}-pytorch",
        "date": dt.date.today().isoformat(),
        "commit": commit,
        "hardware": torch.cuda.get_device_name()
        if args.device == "cuda"
        else f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads",
        "software": {
            "torch": torch.__version__,
            "torchvision": torchvision.__version__,
            "python": platform.python_version(),
        },
        "settings": {k: v for k, v in vars(args).items() if k != "output"},
        "img_s": {"train_resnet.py": round(ours, 1), "plain loop": round(plain, 1)},
        "ratio": round(ours / plain, 3),
    }
    text = json.dumps(record, indent=2)
    print(text)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text + "\n")


if __name__ == "__main__":
    main()
