#!/usr/bin/env python3
"""Train a torchvision image classifier (ResNet-50 by default) with Horovod, one rank per GPU.

    horovodrun -np 4 python train_resnet_hvd.py           # or srun / jsrun / mpirun
    OMP_NUM_THREADS=1 horovodrun -np 2 --gloo -H localhost:2 python train_resnet_hvd.py --tiny

The Horovod twin of train_resnet.py: the same model, data, options (where Horovod has them),
log lines and checkpoints. Horovod's last release is 0.28.1 (2023) and does not build against
current PyTorch as released (see the Horovod how-to page); prefer train_resnet.py for new work.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import signal
import sys
import tempfile
import time
from pathlib import Path

import horovod.torch as hvd
import torch
import torch.nn as nn
import torchvision
from torch.utils.data import DataLoader, Dataset, DistributedSampler

# The oldest releases this program runs on: it stops at start-up on older ones.
MINIMUM_VERSIONS = {"torch": "2.1", "torchvision": "0.16", "horovod": "0.28"}
# Variables that say the job holds GPUs (Slurm; LSF and jsrun set CUDA_VISIBLE_DEVICES).
GPU_JOB_VARIABLES = ("SLURM_GPUS_ON_NODE", "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
TINY = {"image_size": 32, "batch_size": 4, "steps": 6, "steps_per_epoch": 3, "workers": 0}
TINY_DEFAULTS = {"log_every": 2, "checkpoint_every": 3}  # replace defaults only


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        epilog="Log lines, checkpoints and --tiny (or TRAIN_TINY=1) are those of "
        "train_resnet.py; see its --help.",
    )
    p.add_argument("--arch", default="resnet50", help="torchvision classification model")
    p.add_argument("--data-dir", type=Path, help="DIR/train/<class>/*.JPEG; synthetic if not set")
    p.add_argument("--num-classes", type=int, default=1000, help="classes of synthetic data")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--batch-size", type=int, default=64, help="images per rank per step")
    p.add_argument("--workers", type=int, default=4, help="data loader processes per rank")
    p.add_argument("--epochs", type=int, default=90)
    p.add_argument("--steps", type=int, help="optimizer steps in total (instead of --epochs)")
    p.add_argument("--steps-per-epoch", type=int, help="500 for synthetic data")
    p.add_argument("--lr", type=float, default=0.1, help="for a global batch of 256")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=1e-4)
    p.add_argument("--label-smoothing", type=float, default=0.1)
    p.add_argument("--warmup-epochs", type=float, default=5.0)
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32")
    p.add_argument("--fp16-allreduce", action="store_true", help="send gradients as fp16")
    p.add_argument("--checkpoint-dir", type=Path, default=Path("checkpoints"))
    p.add_argument("--checkpoint-every", type=int, default=500)
    p.add_argument("--keep", type=int, default=3)
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--warmup-steps", type=int, default=5, help="left out of [summary] img_s")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--device",
        choices=["auto", "cuda", "cpu"],
        default="auto",
        help="auto: a GPU if any; inside a job that holds GPUs, a GPU or stop (as train_resnet.py)",
    )
    p.add_argument("--tiny", action="store_true", help="CI setting (also TRAIN_TINY=1)")
    args = p.parse_args(argv)
    if args.tiny or os.environ.get("TRAIN_TINY") == "1":
        args.tiny = True
        vars(args).update(TINY)
        for key, value in TINY_DEFAULTS.items():
            if getattr(args, key) == p.get_default(key):
                setattr(args, key, value)
        if os.environ.get("TRAIN_TINY_STEPS", "").isdigit():
            args.steps = int(os.environ["TRAIN_TINY_STEPS"])
    if args.data_dir is not None and not (args.data_dir / "train").is_dir():
        p.error(f"--data-dir {args.data_dir}: no train/ directory in it")
    return args


def check_versions() -> None:
    """Stop at once, naming the version needed, on a framework older than MINIMUM_VERSIONS."""
    for name in MINIMUM_VERSIONS:
        have = getattr(sys.modules.get(name), "__version__", None)
        if isinstance(have, str) and version_tuple(have) < version_tuple(MINIMUM_VERSIONS[name]):
            sys.exit(
                f"error: {Path(__file__).name} needs {name} {MINIMUM_VERSIONS[name]} or newer; "
                f"this environment has {have}"
            )


def version_tuple(text: str) -> tuple[int, ...]:
    m = re.match(r"\d+(?:\.\d+)*", text)
    return tuple(int(part) for part in m[0].split(".")) if m else ()


def gpus_granted() -> str | None:
    """The variable saying that this job holds GPUs (as NAME=VALUE), or None."""
    for var in GPU_JOB_VARIABLES:
        value = os.environ.get(var, "").strip()
        none = ("", "0") if var == "SLURM_GPUS_ON_NODE" else ("", "-1", "NoDevFiles")
        if value not in none:
            return f"{var}={value}"
    return None


def choose_device(args) -> torch.device:
    """This rank's device. A run that asks for a GPU (--device cuda, or auto in a job that holds
    GPUs) and gets none stops here, naming the cause; --tiny runs go on on the CPU, warning."""
    wanted = "--device cuda" if args.device == "cuda" else None
    if args.device == "auto":
        wanted = gpus_granted()
    problem = None
    if wanted and torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
        problem = f"this PyTorch ({torch.__version__}) is a CPU-only build"
    elif wanted and not torch.cuda.is_available():
        problem = f"PyTorch {torch.__version__} sees no GPU"
    if problem and not args.tiny:
        sys.exit(f"error: {wanted} asks for a GPU, but {problem}")
    if problem:
        print(f"warning: {wanted}: {problem}; --tiny runs on the CPU", file=sys.stderr)
    elif wanted or (args.device == "auto" and torch.cuda.is_available()):
        return torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
    return torch.device("cpu")


def grad_scaler(device_type: str, enabled: bool):
    """torch.amp.GradScaler(device) is PyTorch 2.3+; before, only CUDA had a scaler."""
    if hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler(device_type, enabled=enabled)
    return torch.cuda.amp.GradScaler(enabled=enabled and device_type == "cuda")


class SyntheticImages(Dataset):
    """Sample i depends only on (seed, i): a resumed run sees the batches it would have seen."""

    def __init__(self, length: int, size: int, classes: int, seed: int):
        self.length, self.size, self.classes, self.seed = length, size, classes, seed

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        g = torch.Generator().manual_seed(splitmix64((self.seed << 42) + index) & 0xFFFFFFFF)
        n = 3 * self.size * self.size
        words = torch.randint(-(2**63), 2**63 - 1, ((n + 7) // 8,), dtype=torch.int64, generator=g)
        image = words.view(torch.uint8)[:n].view(3, self.size, self.size)
        return image, int(torch.randint(self.classes, (1,), generator=g))


def splitmix64(x: int) -> int:
    """Mixes all 64 bits of x into the 32 that the CPU generator keeps of its seed."""
    mask = (1 << 64) - 1
    x = (x + 0x9E3779B97F4A7C15) & mask
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & mask
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & mask
    return x ^ (x >> 31)


def learning_rate(step: int, peak: float, warmup: int, total: int) -> float:
    """Linear warm-up, then cosine decay (as train_resnet.py)."""
    if step < warmup:
        return peak * (step + 1) / warmup
    return 0.5 * peak * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))


def checkpoints(directory: Path) -> list[Path]:
    found = [(int(m[1]), p) for p in directory.glob("ckpt-step*.pt") if (m := CKPT.search(p.name))]
    return [p for _, p in sorted(found)]


CKPT = re.compile(r"ckpt-step(\d+)\.pt$")


def save(args, state: dict) -> None:
    """Rank 0 only: temporary file in the same directory, fsync, rename (atomic)."""
    args.checkpoint_dir.mkdir(parents=True, exist_ok=True)
    final = args.checkpoint_dir / f"ckpt-step{state['step']:08d}.pt"
    fd, tmp = tempfile.mkstemp(dir=args.checkpoint_dir, prefix=".ckpt-", suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, final)
    for old in checkpoints(args.checkpoint_dir)[: -args.keep]:
        old.unlink(missing_ok=True)
    print(f"[checkpoint] step={state['step']} path={final}", flush=True)


def newest_checkpoint(directory: Path):
    for path in reversed(checkpoints(directory)):
        try:
            return torch.load(path, map_location="cpu", weights_only=True), path
        except Exception as exc:  # truncated or damaged: try the one before
            print(f"warning: skipping checkpoint {path}: {exc}", file=sys.stderr, flush=True)
    return None, None


def main() -> int:
    check_versions()
    args = parse_args()
    hvd.init()
    rank, world = hvd.rank(), hvd.size()
    device = choose_device(args)
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.backends.cudnn.benchmark = True
    stop = {"raised": False}  # SIGUSR1/SIGTERM: all ranks stop at the next step (see train_resnet)
    for sig in (signal.SIGUSR1, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.update(raised=True))

    if args.data_dir is None:
        spe = args.steps_per_epoch or 500
        length = spe * args.batch_size * world
        dataset = SyntheticImages(length, args.image_size, args.num_classes, args.seed)
        classes = args.num_classes
    else:
        from torchvision import transforms

        tf = transforms.Compose(
            [
                transforms.RandomResizedCrop(args.image_size),
                transforms.RandomHorizontalFlip(),
                transforms.PILToTensor(),
            ]
        )
        dataset = torchvision.datasets.ImageFolder(args.data_dir / "train", tf)
        classes = len(dataset.classes)
    sampler = DistributedSampler(dataset, world, rank, shuffle=True, seed=args.seed, drop_last=True)
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        sampler=sampler,
        num_workers=args.workers,
        drop_last=True,
        pin_memory=device.type == "cuda",
        persistent_workers=args.workers > 0,
        # forked loader workers can crash under MPI (Horovod PR #1824): use forkserver
        multiprocessing_context="forkserver" if args.workers > 0 else None,
    )
    spe = min(len(loader), args.steps_per_epoch or len(loader))
    total = args.steps or args.epochs * spe

    torch.manual_seed(args.seed)
    # No channels-last memory format here, unlike train_resnet.py: Horovod 0.28.1 broadcasts
    # and averages contiguous tensors only ("Tensor is required to be contiguous.")
    model = torchvision.models.get_model(args.arch, weights=None, num_classes=classes)
    model = model.to(device)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    # Wrap before loading a checkpoint: DistributedOptimizer is a new optimizer over the same
    # parameters, without the state (momenta) of the one it wraps.
    optimizer = hvd.DistributedOptimizer(
        torch.optim.SGD(
            model.parameters(), lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay
        ),
        named_parameters=model.named_parameters(),
        compression=compression,
    )
    scaler = grad_scaler(device.type, enabled=args.precision == "fp16")
    step = 0
    if rank == 0:
        state, path = newest_checkpoint(args.checkpoint_dir)
        if state is not None:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            scaler.load_state_dict(state["scaler"])
            step = state["step"]
            print(f"[resume] step={step} path={path}", flush=True)
    # every rank starts from rank 0's weights, optimizer state and step
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    step = hvd.broadcast_object(step, root_rank=0, name="step")

    dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[args.precision]
    criterion = nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
    mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1) * 255
    peak = args.lr * args.batch_size * world / 256
    warm = min(round(args.warmup_epochs * spe), total // 5)
    first, timed = step, max(0, min(args.warmup_steps, (total - step) // 2))
    start = tick = time.perf_counter()
    timed_from, seen, saved, preempted = (start if timed == 0 else None), 0, step, False

    def snapshot() -> dict:
        return {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scaler": scaler.state_dict(),
            "step": step,
        }

    while step < total and not preempted:
        epoch = step // spe
        sampler.set_epoch(epoch)
        skip = step % spe  # batches of this epoch done before a resume
        for i, (images, labels) in enumerate(loader):
            if i < skip:
                continue
            images = (images.to(device).float() - mean) / std
            labels = labels.to(device)
            lr = learning_rate(step, peak, warm, total)
            for group in optimizer.param_groups:
                group["lr"] = lr
            optimizer.zero_grad()  # Horovod 0.28.1 takes no arguments here (grads go to None)
            with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
                loss = criterion(model(images), labels)
            scaler.scale(loss).backward()
            optimizer.synchronize()  # the all-reduce, before the scaler looks at the gradients
            with optimizer.skip_synchronize():
                scaler.step(optimizer)
            scaler.update()
            step += 1
            seen += images.shape[0]
            if step - first == timed:
                timed_from = time.perf_counter()
            if step % args.log_every == 0 or step == total:
                value, now = loss.item(), time.perf_counter()
                print(
                    f"[train] rank={rank}/{world} epoch={epoch} step={step} loss={value:.6f} "
                    f"lr={lr:.6f} img_s={seen / (now - tick):.1f}",
                    flush=True,
                )
                tick, seen = now, 0
            if step % args.checkpoint_every == 0 and rank == 0:
                save(args, snapshot())
                saved = step
            if step < total:  # any rank's signal stops every rank at this step
                flag = torch.tensor(float(stop["raised"]))
                preempted = hvd.allreduce(flag, op=hvd.Sum, name="stop").item() > 0
            if preempted or step >= total or step % spe == 0:
                break

    end = time.perf_counter()
    if rank == 0:
        if saved != step:
            save(args, snapshot())
        if preempted:
            print(f"[preempted] step={step}", flush=True)
        images = (step - first - timed) * args.batch_size * world
        rate = images / (end - timed_from) if timed_from and images > 0 else 0.0
        print(
            f"[summary] ranks={world} steps={step} img_s={rate:.1f} time_s={end - start:.2f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
