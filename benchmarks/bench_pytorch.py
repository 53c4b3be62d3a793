#!/usr/bin/env python3
"""Images/s of examples/pytorch/train_resnet.py against a plain training loop of the same model.

Both train the same model with the same batch, precision, memory format and optimizer on the
same device, one process each. The plain loop feeds one batch that already sits on the device;
the trainer makes a new synthetic batch on the device every step and checks for preemption at
every step, so the ratio is what the trainer's input pipeline and bookkeeping cost. Prints one
JSON record (hardware, versions, settings, date, commit); ``--output FILE`` also writes it.
Not a test: the figures depend on the machine.

    python benchmarks/bench_pytorch.py --device cpu --batch-size 8 --image-size 64 --steps 10
    python benchmarks/bench_pytorch.py --device cuda --batch-size 256 --precision bf16 \\
        --channels-last --compile --output results/bench/pytorch-h100.json    # a GPU node
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import record
import torch
import torch.nn as nn
import torchvision

TRAINER = record.ROOT / "examples" / "pytorch" / "train_resnet.py"


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
    # the plain loop's memory format, said outright: the trainer's default depends on the device
    cmd += ["--channels-last" if args.channels_last else "--no-channels-last"]
    cmd += ["--compile"] if args.compile else []
    return record.trainer_rate(cmd, TRAINER)


def hardware(device: str) -> dict:
    out = {
        "cpu": record.cpu_name(),
        "cpu_threads": torch.get_num_threads(),
        "cores": os.cpu_count(),
    }
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


def main() -> None:
    cuda = torch.cuda.is_available()
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--arch", default="resnet50", help="torchvision model")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if cuda else "cpu")
    record.add_common_arguments(p, gpu=cuda)
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--compile", action="store_true", help="torch.compile (both loops)")
    p.add_argument(
        "--workers", type=int, default=8 if cuda else 0, help="the trainer's loader processes"
    )
    args = p.parse_args()
    if args.device == "cuda" and not cuda:
        p.error("--device cuda: no GPU here")
    if args.warmup < 1 or args.steps < args.warmup:
        p.error("--warmup must be at least 1 and --steps at least --warmup")

    runs, command = record.compare(
        args.repeats, lambda tmp: trainer(args, tmp), lambda: plain_loop(args)
    )
    record.emit(
        args,
        f"{args.arch}-pytorch-trainer-vs-plain-loop",
        TRAINER.name,
        runs,
        command,
        hardware(args.device),
        {"torch": torch.__version__, "torchvision": torchvision.__version__},
    )


if __name__ == "__main__":
    main()
