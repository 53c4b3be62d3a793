#!/usr/bin/env python3
"""Train a torchvision image classifier (ResNet-50 by default) on one device or with DDP.

Launch it the way your site launches parallel jobs; the script reads its rank from the launcher:

    python train_resnet.py                                   # one process
    torchrun --standalone --nproc_per_node=4 train_resnet.py # one node, one worker per GPU
    srun python train_resnet.py                              # one Slurm task per GPU
    jsrun -r1 -a6 -g6 python train_resnet.py                 # LSF/JSM (one rank per GPU)

Without --data-dir it trains on synthetic images, which measures throughput without any I/O.
Every rank logs one line per --log-every steps:

    [train] rank=0/4 epoch=0 step=20 loss=6.912345 lr=0.100000 img_s=812.3

and rank 0 ends with ``[summary] ranks=4 steps=400 img_s=3240.9 time_s=51.12``.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
import torchvision
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

# What --tiny (or TRAIN_TINY=1) changes: a run of a few seconds on a CPU, used by CI.
TINY = {
    "image_size": 32,
    "batch_size": 4,
    "steps": 6,
    "steps_per_epoch": 3,
    "workers": 0,
    "log_every": 2,
    "checkpoint_every": 3,
    "num_classes": 10,
}
TINY_SOFT = {"log_every", "checkpoint_every"}  # kept when given explicitly


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--arch", default="resnet50", help="any torchvision classification model")
    p.add_argument(
        "--data-dir",
        type=Path,
        help="ImageNet-style folder with train/<class>/*.JPEG; synthetic if omitted",
    )
    p.add_argument("--num-classes", type=int, default=1000, help="classes of synthetic data")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--batch-size", type=int, default=64, help="images per GPU (per rank)")
    p.add_argument("--epochs", type=int, default=90)
    p.add_argument("--steps", type=int, help="stop after this many optimizer steps in total")
    p.add_argument("--steps-per-epoch", type=int, default=500, help="length of a synthetic epoch")
    p.add_argument(
        "--lr",
        type=float,
        default=0.1,
        help="learning rate for a global batch of 256; scaled linearly with the "
        "global batch (ranks x --batch-size)",
    )
    p.add_argument("--warmup-epochs", type=float, default=5.0)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=5e-5)
    p.add_argument("--label-smoothing", type=float, default=0.1)
    p.add_argument(
        "--precision",
        choices=["fp32", "bf16", "fp16"],
        default="fp32",
        help="fp16 uses loss scaling; bf16 needs Ampere or newer GPUs",
    )
    p.add_argument("--channels-last", action="store_true", help="NHWC memory format")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--workers", type=int, default=4, help="data loader processes per rank")
    p.add_argument(
        "--mp-start-method",
        choices=["fork", "forkserver", "spawn"],
        help="how loader workers start; default forkserver under MPI launchers "
        "(forked workers can crash there), else fork",
    )
    p.add_argument(
        "--backend",
        choices=["auto", "nccl", "gloo", "mpi"],
        default="auto",
        help="auto: nccl (RCCL on ROCm) with GPUs, gloo on CPU",
    )
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--checkpoint-dir", type=Path, default=Path("checkpoints"))
    p.add_argument("--checkpoint-every", type=int, default=500, help="steps between checkpoints")
    p.add_argument("--keep", type=int, default=3, help="checkpoints to keep")
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument(
        "--warmup-steps", type=int, default=5, help="steps left out of the summary throughput"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--tiny",
        action="store_true",
        help="CI setting: "
        + ", ".join(f"{k}={v}" for k, v in TINY.items())
        + "; the environment variable TRAIN_TINY=1 does the same",
    )
    return p


def parse_args(argv=None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.tiny or os.environ.get("TRAIN_TINY") == "1":
        for key, value in TINY.items():
            # logging and checkpoint intervals given on the command line are kept
            if key not in TINY_SOFT or getattr(args, key) == parser.get_default(key):
                setattr(args, key, value)
        if os.environ.get("TRAIN_TINY_STEPS"):
            args.steps = int(os.environ["TRAIN_TINY_STEPS"])
    if args.data_dir is not None:
        train = args.data_dir / "train"
        if not train.is_dir():
            parser.error(f"--data-dir {args.data_dir}: no train/ directory in it")
        if not any(p.is_dir() for p in train.iterdir()):
            parser.error(f"--data-dir {args.data_dir}: train/ holds no class directories")
    if args.arch not in torchvision.models.list_models(module=torchvision.models):
        parser.error(f"--arch {args.arch}: not a torchvision classification model")
    return args


# --------------------------------------------------------------------------- distribution
def launcher_env() -> tuple[int, int, int, str]:
    """(rank, world size, local rank, launcher) from whichever launcher started us."""
    env = os.environ
    for rank, size, local, name in [
        ("RANK", "WORLD_SIZE", "LOCAL_RANK", "torchrun"),
        ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "srun"),
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "mpi"),
        ("JSM_NAMESPACE_RANK", "JSM_NAMESPACE_SIZE", "JSM_NAMESPACE_LOCAL_RANK", "jsrun"),
        ("PMIX_RANK", "WORLD_SIZE", "LOCAL_RANK", "pmix"),
    ]:
        if rank in env and size in env:
            return int(env[rank]), int(env[size]), int(env.get(local, 0)), name
    return 0, 1, 0, "none"


def setup_distributed(args) -> tuple[int, int, int, torch.device]:
    rank, world, local, launcher = launcher_env()
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if use_cuda:
        torch.cuda.set_device(local % torch.cuda.device_count())
        device = torch.device("cuda", torch.cuda.current_device())
        torch.backends.cudnn.benchmark = True
    else:
        device = torch.device("cpu")
    if world > 1:
        if launcher != "torchrun":
            for var in ("MASTER_ADDR", "MASTER_PORT"):
                if var not in os.environ:
                    sys.exit(
                        f"error: {var} is not set; {launcher} does not set it. In the job "
                        "script: export MASTER_ADDR=$(scontrol show hostnames "
                        '"$SLURM_JOB_NODELIST" | head -n 1) MASTER_PORT=29500'
                    )
            os.environ.setdefault("RANK", str(rank))
            os.environ.setdefault("WORLD_SIZE", str(world))
            if "OMP_NUM_THREADS" not in os.environ:
                # torchrun sets OMP_NUM_THREADS=1; ranks started by hand otherwise each use
                # every core of the node and slow each other down
                per_node = int(os.environ.get("SLURM_NTASKS_PER_NODE", "0") or 0) or world
                torch.set_num_threads(max(1, (os.cpu_count() or 1) // per_node))
                if rank == 0:
                    print(
                        f"warning: OMP_NUM_THREADS is not set; using "
                        f"{torch.get_num_threads()} threads per rank",
                        flush=True,
                    )
        backend = args.backend
        if backend == "auto":
            backend = "nccl" if use_cuda else "gloo"
        dist.init_process_group(backend, rank=rank, world_size=world)
    return rank, world, local, device


# --------------------------------------------------------------------------- data
class SyntheticImages(Dataset):
    """Random images whose content depends only on (seed, index): resumed runs see the same."""

    def __init__(self, length: int, size: int, classes: int, seed: int):
        self.length, self.size, self.classes, self.seed = length, size, classes, seed

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        image = torch.randn(3, self.size, self.size, generator=g)
        label = int(torch.randint(self.classes, (1,), generator=g))
        return image, label


def build_dataset(args, world: int):
    if args.data_dir is None:
        length = args.steps_per_epoch * args.batch_size * world
        return SyntheticImages(length, args.image_size, args.num_classes, args.seed)
    from torchvision import transforms

    tf = transforms.Compose(
        [
            transforms.RandomResizedCrop(args.image_size),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
        ]
    )
    return torchvision.datasets.ImageFolder(args.data_dir / "train", transform=tf)


def mp_context(args, launcher: str):
    if args.workers == 0:
        return None
    method = args.mp_start_method
    if method is None:
        under_mpi = any(k.startswith(("OMPI_", "PMIX_", "JSM_")) for k in os.environ)
        method = "forkserver" if under_mpi else "fork"
    return method


# --------------------------------------------------------------------------- checkpoints
def checkpoints(directory: Path) -> list[Path]:
    return sorted(directory.glob("ckpt-step*.pt"))


def save_checkpoint(directory: Path, state: dict, keep: int) -> Path:
    """Write atomically: a reader never sees a half-written file."""
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"ckpt-step{state['step']:08d}.pt"
    tmp = directory / f".{final.name}.tmp"
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, final)
    for old in checkpoints(directory)[:-keep]:
        old.unlink(missing_ok=True)
    return final


def load_newest(directory: Path):
    """The newest checkpoint that loads; a damaged one is skipped with a warning."""
    for path in reversed(checkpoints(directory)):
        try:
            return path, torch.load(path, map_location="cpu", weights_only=False)
        except Exception as exc:  # a truncated file raises many kinds of errors
            print(f"warning: skipping unreadable checkpoint {path}: {exc}", flush=True)
    return None, None


class StopFlag:
    """Set by SIGUSR1/SIGTERM: the job is about to hit its time limit or be cancelled."""

    def __init__(self):
        self.raised = False
        for sig in (signal.SIGUSR1, signal.SIGTERM):
            signal.signal(sig, self._handler)

    def _handler(self, signum, frame):
        self.raised = True

    def agreed(self, device, world: int) -> bool:
        """All ranks stop at the same step: one rank's signal stops everyone."""
        if world == 1:
            return self.raised
        flag = torch.tensor([1.0 if self.raised else 0.0], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())


# --------------------------------------------------------------------------- training
def lr_at(step: int, args, steps_per_epoch: int, total: int, world: int) -> float:
    peak = args.lr * args.batch_size * world / 256
    warmup = max(1, int(args.warmup_epochs * steps_per_epoch))
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * peak * (1 + math.cos(math.pi * min(1.0, progress)))


def main(argv=None) -> int:
    args = parse_args(argv)
    rank, world, _, device = setup_distributed(args)
    _, _, _, launcher = launcher_env()
    torch.manual_seed(args.seed)
    if device.type == "cpu":
        torch.use_deterministic_algorithms(True)

    dataset = build_dataset(args, world)
    # The sampler's order depends only on (seed, epoch), so a resumed run sees the same batches.
    sampler = DistributedSampler(dataset, world, rank, shuffle=True, seed=args.seed, drop_last=True)
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        sampler=sampler,
        num_workers=args.workers,
        drop_last=True,
        pin_memory=device.type == "cuda",
        persistent_workers=args.workers > 0,
        multiprocessing_context=mp_context(args, launcher),
    )
    steps_per_epoch = len(loader)
    if steps_per_epoch == 0:
        sys.exit(f"error: {len(dataset)} images are fewer than one batch per rank")
    total = args.steps or args.epochs * steps_per_epoch

    num_classes = args.num_classes if args.data_dir is None else len(dataset.classes)
    model = torchvision.models.get_model(args.arch, weights=None, num_classes=num_classes)
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    model = model.to(device, memory_format=memory_format)
    optimizer = torch.optim.SGD(
        model.parameters(), lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay
    )
    scaler = torch.amp.GradScaler(device.type, enabled=args.precision == "fp16")
    dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[args.precision]

    step = 0
    path, state = load_newest(args.checkpoint_dir)
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scaler.load_state_dict(state["scaler"])
        step = state["step"]
        if rank == 0:
            print(f"[resume] step={step} path={path}", flush=True)
    if world > 1:
        model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    train_model = torch.compile(model) if args.compile else model

    stop = StopFlag()
    start_time = time.perf_counter()
    timed_from, timed_images = None, 0
    interval_start, interval_images = time.perf_counter(), 0
    loss = torch.tensor(0.0)
    while step < total:
        epoch = step // steps_per_epoch
        sampler.set_epoch(epoch)
        skip = step - epoch * steps_per_epoch  # batches of this epoch done before a resume
        for i, (images, labels) in enumerate(loader):
            if i < skip:
                continue
            if step >= total:
                break
            if stop.agreed(device, world):
                if rank == 0:
                    if step % args.checkpoint_every:  # not saved at this step already
                        ckpt = save_checkpoint(
                            args.checkpoint_dir, _state(model, optimizer, scaler, step), args.keep
                        )
                        print(f"[checkpoint] step={step} path={ckpt}", flush=True)
                    print(f"[preempted] step={step}", flush=True)
                _finish(world)
                return 0
            images = images.to(device, non_blocking=True, memory_format=memory_format)
            labels = labels.to(device, non_blocking=True)
            lr = lr_at(step, args, steps_per_epoch, total, world)
            for group in optimizer.param_groups:
                group["lr"] = lr
            with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
                logits = train_model(images)
                loss = F.cross_entropy(logits, labels, label_smoothing=args.label_smoothing)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            step += 1
            interval_images += images.shape[0]
            if step == min(args.warmup_steps, total - 1):
                timed_from, timed_images = time.perf_counter(), 0
            elif timed_from is not None:
                timed_images += images.shape[0]
            if step % args.log_every == 0 or step == total:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                now = time.perf_counter()
                rate = interval_images / max(now - interval_start, 1e-9)
                print(
                    f"[train] rank={rank}/{world} epoch={epoch} step={step} "
                    f"loss={loss.item():.6f} lr={lr:.6f} img_s={rate:.1f}",
                    flush=True,
                )
                interval_start, interval_images = now, 0
            if step % args.checkpoint_every == 0 and rank == 0:
                ckpt = save_checkpoint(
                    args.checkpoint_dir, _state(model, optimizer, scaler, step), args.keep
                )
                print(f"[checkpoint] step={step} path={ckpt}", flush=True)
    end = time.perf_counter()
    elapsed = end - start_time
    if rank == 0:
        save_checkpoint(args.checkpoint_dir, _state(model, optimizer, scaler, step), args.keep)
        timed = end - timed_from if timed_from else elapsed
        rate = timed_images * world / max(timed, 1e-9) if timed_images else 0.0
        print(
            f"[summary] ranks={world} steps={step} img_s={rate:.1f} time_s={elapsed:.2f}",
            flush=True,
        )
    _finish(world)
    return 0


def _state(model, optimizer, scaler, step: int) -> dict:
    raw = model.module if isinstance(model, DDP) else model
    return {
        "model": raw.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scaler": scaler.state_dict(),
        "step": step,
    }


def _finish(world: int) -> None:
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
