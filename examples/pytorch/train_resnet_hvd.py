#!/usr/bin/env python3
"""Train torchvision's ResNet-50 with Horovod (one process per GPU), on synthetic images.

    horovodrun -np 4 python train_resnet_hvd.py          # or: srun / jsrun / mpirun
    OMP_NUM_THREADS=1 horovodrun -np 2 --gloo -H localhost:2 python train_resnet_hvd.py --tiny

Horovod's last release is 0.28.1 (2023). It does not build against current PyTorch as released:
install it with --no-build-isolation after raising its C++ standard to 17 (see the how-to page).
Prefer torchrun + DistributedDataParallel (train_resnet.py) for new work.
Logs use the same line format as train_resnet.py.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

import horovod.torch as hvd
import torch
import torch.nn.functional as F
import torchvision

TINY = {"image_size": 32, "batch_size": 4, "steps": 6, "log_every": 2, "num_classes": 10}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", default="resnet50")
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--batch-size", type=int, default=64, help="images per GPU")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--lr", type=float, default=0.1, help="for 256 images; scaled by world size")
    p.add_argument("--precision", choices=["fp32", "fp16"], default="fp32")
    p.add_argument("--fp16-allreduce", action="store_true", help="compress gradients to fp16")
    p.add_argument("--checkpoint-dir", type=Path, default=Path("checkpoints-hvd"))
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--tiny", action="store_true", help="CI setting (also TRAIN_TINY=1)")
    args = p.parse_args(argv)
    if args.tiny or os.environ.get("TRAIN_TINY") == "1":
        for key, value in TINY.items():
            setattr(args, key, value)
    return args


def main() -> int:
    args = parse_args()
    hvd.init()
    rank, world = hvd.rank(), hvd.size()
    device = torch.device("cpu")
    if torch.cuda.is_available():
        torch.cuda.set_device(hvd.local_rank())
        device = torch.device("cuda", hvd.local_rank())
    torch.manual_seed(0)

    model = torchvision.models.get_model(args.arch, weights=None, num_classes=args.num_classes).to(
        device
    )
    optimizer = torch.optim.SGD(
        model.parameters(), lr=args.lr * args.batch_size * world / 256, momentum=0.9
    )
    step = 0
    ckpt = args.checkpoint_dir / "last.pt"
    if rank == 0 and ckpt.is_file():
        state = torch.load(ckpt, map_location="cpu")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = state["step"]
        print(f"[resume] step={step} path={ckpt}", flush=True)
    # every rank starts from rank 0's weights, optimizer state and step
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    step = int(hvd.broadcast(torch.tensor(step), root_rank=0, name="step"))
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    optimizer = hvd.DistributedOptimizer(
        optimizer, named_parameters=model.named_parameters(), compression=compression
    )
    scaler = torch.amp.GradScaler(device.type, enabled=args.precision == "fp16")

    stop = {"raised": False}
    for sig in (signal.SIGUSR1, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.update(raised=True))

    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
    labels = torch.randint(args.num_classes, (args.batch_size,), device=device)
    start = tick = time.perf_counter()
    done = 0
    while step < args.steps:
        if hvd.allreduce(torch.tensor(float(stop["raised"])), op=hvd.Max, name="stop") > 0:
            if rank == 0:
                _save(ckpt, model, optimizer, step)
                print(f"[preempted] step={step}", flush=True)
            return 0
        with torch.autocast(device.type, dtype=torch.float16, enabled=args.precision == "fp16"):
            loss = F.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        step += 1
        done += 1
        if step % args.log_every == 0:
            now = time.perf_counter()
            rate = args.log_every * args.batch_size / (now - tick)
            print(
                f"[train] rank={rank}/{world} epoch=0 step={step} loss={loss.item():.6f} "
                f"lr={optimizer.param_groups[0]['lr']:.6f} img_s={rate:.1f}",
                flush=True,
            )
            tick = now
    elapsed = time.perf_counter() - start
    if rank == 0:
        _save(ckpt, model, optimizer, step)
        print(
            f"[summary] ranks={world} steps={step} "
            f"img_s={done * args.batch_size * world / elapsed:.1f} time_s={elapsed:.2f}",
            flush=True,
        )
    return 0


def _save(path: Path, model, optimizer, step: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(
        {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, tmp
    )
    os.replace(tmp, path)  # a reader never sees a half-written checkpoint


if __name__ == "__main__":
    sys.exit(main())
