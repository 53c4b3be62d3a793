#!/usr/bin/env python3
"""Train a torchvision image classifier (ResNet-50 by default) on one device or with DDP.

Launch it the way your site launches parallel jobs; the script finds its rank itself:

    python train_resnet.py                                    # one process, one GPU (or CPU)
    torchrun --standalone --nproc_per_node=4 train_resnet.py  # one node, one rank per GPU
    srun python train_resnet.py                               # one Slurm task per GPU
    jsrun -r1 -a6 -g6 python train_resnet.py                  # LSF/JSM (Summit): one rank per GPU
    mpirun -np 8 python train_resnet.py                       # Open MPI

Without --data-dir it trains on synthetic images, which measures throughput without any I/O.
It needs torch and torchvision, and job_runtime.py beside it: copy both into your job directory.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import re
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torchvision
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

import job_runtime  # beside this file: launch, ranks, signals, errors shared with train_lm.py
from job_runtime import (
    Abort,
    StopFlag,
    backend_for,
    check_versions,
    choose_device_type,
    cores_per_rank,
    exit_with,
    gather_states,
    join_group,
    launcher_env,
    limit_threads,
    loader_death,
    local_device,
    log,
    rng_state,
    run_guarded,
    save_atomically,
    set_rng_state,
    version_tuple,
    warn,
    watch_loader,
)

# The oldest releases this program runs on (CI runs it under them): it stops at start-up on older.
MINIMUM_VERSIONS = {"torch": "2.1", "torchvision": "0.16"}
# --tiny (or TRAIN_TINY=1): a run of a few seconds on a CPU, the setting CI uses. These values
# replace whatever was given; everything else keeps its value.
TINY = {"image_size": 32, "batch_size": 4, "steps": 6, "steps_per_epoch": 3, "workers": 0}
# ... and these replace only defaults, so that an explicit --log-every/--checkpoint-every stays.
TINY_DEFAULTS = {"log_every": 2, "checkpoint_every": 3}
EPILOG = """\
learning rate:
  The peak learning rate is --lr x global batch / 256 (global batch = ranks x --batch-size),
  reached by a linear warm-up over --warmup-epochs (at most a fifth of the run), then
  decayed to zero by a cosine. --lr defaults to 0.1 for sgd and 0.001 for adamw.

output (one line per event, flushed; every rank prints [train] lines):
  [train] rank=0/2 epoch=0 step=20 loss=6.912345 lr=0.100000 img_s=123.4
  [eval] rank=0/2 epoch=0 top1=0.0012 top5=0.0050 loss=6.912345
  [checkpoint] step=500 path=checkpoints/ckpt-step00000500.pt
  [resume] step=500 path=checkpoints/ckpt-step00000500.pt
  [preempted] step=730
  [summary] ranks=2 steps=1000 img_s=246.8 time_s=12.34
  step counts optimizer steps since the start of training; img_s in [train] is that rank's
  images/s since its previous line, in [summary] all ranks' images/s after --warmup-steps.

checkpoints and preemption:
  Rank 0 writes <checkpoint-dir>/ckpt-stepNNNNNNNN.pt every --checkpoint-every steps and at the
  end. A new run resumes from the newest checkpoint there that loads. SIGUSR1 or SIGTERM makes
  every rank stop at the same step: rank 0 checkpoints and the program exits with status 0.

devices:
  --device auto uses a GPU if PyTorch sees one. Inside a job that holds GPUs (Slurm's
  SLURM_GPUS_ON_NODE, or CUDA_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES) it needs one, as
  --device cuda does: a CPU-only PyTorch build, or no visible GPU, stops the run at once
  instead of training on the CPU. Only --tiny runs go on, on the CPU, with a warning.

--tiny / TRAIN_TINY=1:
  image-size 32, batch-size 4, steps 6, steps-per-epoch 3, workers 0; log-every 2 and
  checkpoint-every 3 unless given. TRAIN_TINY_STEPS=N makes a tiny run N steps long, and
  TRAIN_TINY_ARCH=NAME makes it build NAME (resnet18, say) unless --arch is given: a quicker
  check of a job's launch, data and checkpoints.
"""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the epilog's line breaks and shows each option's default when it has one."""

    def _get_help_string(self, action):
        text = action.help or ""
        shown = action.default is not None and action.default is not False
        if shown and action.default != argparse.SUPPRESS and "%(default)" not in text:
            text += " (default: %(default)s)"
        return text


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=EPILOG, formatter_class=HelpFormatter
    )
    models = sorted(torchvision.models.list_models(module=torchvision.models))
    data = p.add_argument_group("model and data")
    data.add_argument(
        "--arch",
        default="resnet50",
        choices=models,
        metavar="NAME",
        help="torchvision classification model: resnet18, resnet50, vit_b_16, ...",
    )
    data.add_argument(
        "--data-dir",
        type=Path,
        metavar="DIR",
        help="ImageNet-style folder, DIR/train/<class>/*.JPEG (and DIR/val/<class>/ for "
        "--eval-every-epoch), or WebDataset shards, DIR/train/*.tar (make_shards.py writes "
        "them); synthetic images if not given",
    )
    data.add_argument(
        "--num-classes",
        type=int,
        default=1000,
        metavar="N",
        help="classes of synthetic data (and of shards without a shards.json)",
    )
    data.add_argument("--image-size", type=int, default=224, metavar="PIXELS", help="crop size")
    data.add_argument(
        "--batch-size", type=int, default=64, metavar="N", help="images per rank per step"
    )
    data.add_argument(
        "--loader",
        choices=["cpu", "gpu-decode", "dali"],
        default="cpu",
        help="how --data-dir images are decoded: cpu (in the loader processes, with PIL), "
        "gpu-decode (the loader processes read the files, the GPU decodes them with nvJPEG "
        "through torchvision), dali (NVIDIA DALI reads, decodes on the GPU and augments; "
        "pip install nvidia-dali-cuda120 or -cuda130)",
    )
    data.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="data loader processes per rank (DALI threads with --loader dali); by default "
        "the rank's cores but one for --loader cpu on a GPU (at most 32), up to 4 for "
        "gpu-decode, 16 for dali, 1 when training on the CPU, none for synthetic data",
    )
    data.add_argument(
        "--mp-start-method",
        choices=["fork", "forkserver", "spawn"],
        help="how data loader processes start; by default forkserver under an MPI launcher "
        "(forked workers can crash there), fork otherwise",
    )

    length = p.add_argument_group("length")
    length.add_argument("--epochs", type=int, default=90, metavar="N", help="epochs to train")
    length.add_argument(
        "--steps", type=int, metavar="N", help="optimizer steps in total, instead of --epochs"
    )
    length.add_argument(
        "--steps-per-epoch",
        type=int,
        metavar="N",
        help="length of an epoch: 500 steps for synthetic data; caps a real-data epoch",
    )

    opt = p.add_argument_group("optimisation")
    opt.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd", help="optimizer")
    opt.add_argument(
        "--lr",
        type=float,
        help="learning rate for a global batch of 256 (see below); 0.1 for sgd, 0.001 for adamw",
    )
    opt.add_argument("--momentum", type=float, default=0.9, help="sgd's momentum")
    opt.add_argument(
        "--weight-decay", type=float, metavar="WD", help="1e-4 for sgd, 0.05 for adamw"
    )
    opt.add_argument("--label-smoothing", type=float, default=0.1, metavar="X", help="of the loss")
    opt.add_argument(
        "--warmup-epochs", type=float, default=5.0, metavar="X", help="learning-rate warm-up"
    )

    speed = p.add_argument_group("speed")
    speed.add_argument(
        "--precision",
        choices=["fp32", "bf16", "fp16"],
        default="fp32",
        help="autocast dtype; fp16 adds loss scaling; bf16 wants Ampere/MI200 or newer GPUs",
    )
    speed.add_argument(
        "--channels-last",
        action=argparse.BooleanOptionalAction,
        help="NHWC memory format; by default on when training on the CPU (oneDNN's faster "
        "layout), off on a GPU",
    )
    speed.add_argument("--compile", action="store_true", help="torch.compile the model")

    par = p.add_argument_group("devices and ranks")
    par.add_argument(
        "--device", choices=["auto", "cuda", "cpu"], default="auto", help="auto: cuda if any"
    )
    par.add_argument(
        "--backend",
        choices=["auto", "nccl", "gloo", "mpi"],
        default="auto",
        help="auto: nccl with GPUs (RCCL on ROCm builds), gloo on CPU",
    )

    ck = p.add_argument_group("checkpoints and output")
    ck.add_argument(
        "--checkpoint-dir",
        type=Path,
        default=Path("checkpoints"),
        metavar="DIR",
        help="where checkpoints are written and resumed from",
    )
    ck.add_argument("--checkpoint-every", type=int, default=500, metavar="N", help="steps")
    ck.add_argument("--keep", type=int, default=3, metavar="N", help="checkpoints kept")
    ck.add_argument("--log-every", type=int, default=20, metavar="N", help="steps")
    ck.add_argument(
        "--warmup-steps",
        type=int,
        default=5,
        metavar="N",
        help="first steps of a run left out of the [summary] throughput (at most half the run)",
    )
    ck.add_argument(
        "--eval-every-epoch",
        action="store_true",
        help="top-1/top-5 accuracy on held-out data (synthetic, or DIR/val) after each epoch",
    )

    misc = p.add_argument_group("reproducibility and CI")
    misc.add_argument("--seed", type=int, default=0, metavar="N", help="of weights and data")
    misc.add_argument(
        "--deterministic",
        action=argparse.BooleanOptionalAction,
        help="deterministic algorithms, for bit-reproducible runs on CPU; on by default on "
        "CPUs, off on GPUs",
    )
    misc.add_argument(
        "--tiny",
        action="store_true",
        help="a run of seconds on a CPU (see below); the environment variable TRAIN_TINY=1 "
        "does the same",
    )
    return p


def parse_args(argv=None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.tiny or os.environ.get("TRAIN_TINY") == "1":
        args.tiny = True
        for key, value in TINY.items():
            setattr(args, key, value)
        for key, value in TINY_DEFAULTS.items():
            if getattr(args, key) == parser.get_default(key):
                setattr(args, key, value)
        if os.environ.get("TRAIN_TINY_STEPS", "").isdigit():
            args.steps = int(os.environ["TRAIN_TINY_STEPS"])
        if os.environ.get("TRAIN_TINY_ARCH") and args.arch == parser.get_default("arch"):
            args.arch = os.environ["TRAIN_TINY_ARCH"]
            if args.arch not in torchvision.models.list_models(module=torchvision.models):
                parser.error(f"TRAIN_TINY_ARCH={args.arch}: not a torchvision model")
    for name in ("batch_size", "image_size", "epochs", "log_every", "checkpoint_every", "keep"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    for name in ("steps", "steps_per_epoch"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if (args.workers or 0) < 0 or args.warmup_steps < 0:
        parser.error("--workers and --warmup-steps cannot be negative")
    if args.loader != "cpu" and args.data_dir is None:
        parser.error(f"--loader {args.loader} decodes the images of --data-dir: give it")
    if args.data_dir is not None:
        problem = data_format(args.data_dir, "train")[1]
        if problem is None and args.eval_every_epoch:
            problem = data_format(args.data_dir, "val")[1]
        if problem:
            parser.error(f"--data-dir {args.data_dir}: {problem}")
    if args.lr is None:
        args.lr = 0.1 if args.optimizer == "sgd" else 0.001
    if args.weight_decay is None:
        args.weight_decay = 1e-4 if args.optimizer == "sgd" else 0.05
    if args.backend == "mpi" and not dist.is_mpi_available():
        parser.error("--backend mpi: this PyTorch build has no MPI support (pip wheels never do)")
    return args


def data_format(root: Path, split: str) -> tuple[str | None, str | None]:
    """What root/split holds, cheaply (a full scan is slow on Lustre): ("shards", None) for
    WebDataset tar files, ("folder", None) for class directories of images, else (None, what
    is wrong)."""
    if not root.exists():
        return None, "no such directory"
    if not root.is_dir():
        return None, "not a directory"
    if not (root / split).is_dir():
        return None, f"no {split}/ directory in it (expected {split}/<class>/<image> files)"
    for entry in os.scandir(root / split):
        if entry.is_file() and entry.name.endswith(".tar"):
            return "shards", None
        if entry.is_dir() and any(True for _ in os.scandir(entry.path)):
            return "folder", None
    return None, (
        f"{split}/ holds neither class directories with images nor WebDataset shards "
        f"({split}/*.tar, written by make_shards.py)"
    )


# --------------------------------------------------------------------------- ranks and devices
def setup(args):
    """Rank, world size, device, process group for small messages, and a line about them."""
    launcher, rank, world, local_rank = launcher_env()
    use_cuda = choose_device_type(args.device, args.tiny, rank) == "cuda"
    if args.deterministic is None:
        args.deterministic = not use_cuda
    if use_cuda:
        if args.deterministic:  # cuBLAS needs this before its first call
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        # autotune convolutions for the fixed input shape; allow TF32 matmuls (Ampere+)
        torch.backends.cudnn.benchmark = not args.deterministic
        torch.set_float32_matmul_precision("high")
    device = local_device(use_cuda, local_rank)
    if args.deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
        # ... without also filling every new tensor with NaN first (newer PyTorch releases do in
        # deterministic mode): no kernel used here reads memory it has not written, and the
        # filling costs a few per cent of a CPU run
        fill = getattr(torch.utils, "deterministic", None)
        if hasattr(fill, "fill_uninitialized_memory"):
            fill.fill_uninitialized_memory = False
    limit_threads(launcher, rank, world)

    backend = backend_for(args.backend, use_cuda)
    control = join_group(backend, launcher, rank, world) if world > 1 else None
    # NHWC on the CPU: oneDNN's faster layout (measured: docs/howto/archer2/pytorch-cpu.md)
    if args.channels_last is None:
        args.channels_last = device.type == "cpu"
    about = (
        f"{args.arch}: {world} rank(s) ({launcher}), device {device.type}, "
        f"backend {backend if world > 1 else '-'}, batch {args.batch_size} per rank, "
        f"{'channels-last' if args.channels_last else 'channels-first'} memory format, "
        f"{torch.get_num_threads()} CPU thread(s) per rank, torch {torch.__version__}"
    )
    return rank, world, device, control, about


# --------------------------------------------------------------------------- data
# What the training loop iterates over, for every kind of input: an object with len() (batches
# in an epoch), images (how many the data set holds), start(epoch, done) (begin that epoch's
# iteration after `done` batches, as a resumed run must) and iteration over (images, labels).
# Images are uint8 (or 0-255 floats), 3 x size x size, normalised on the device by ToDevice.
def splitmix64(x: int) -> int:
    """A well-mixed 64-bit hash of x (the finaliser of the SplitMix64 generator)."""
    mask = (1 << 64) - 1
    x = (x + 0x9E3779B97F4A7C15) & mask
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & mask
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & mask
    return x ^ (x >> 31)


def seed_of(*parts: int) -> int:
    """A 32-bit seed mixed from all the parts (the CPU generator keeps only 32 bits)."""
    x = 0
    for part in parts:
        x = splitmix64(x ^ part)
    return x & 0xFFFFFFFF


class SyntheticBatches:
    """Random images and labels made where the model runs, a batch at a time: no loader
    processes and no copies, so throughput is the model's own. Batch i of an epoch on a rank
    depends only on (seed, split, rank, epoch, i), so a resumed run sees the batches an
    uninterrupted one would have seen."""

    def __init__(self, steps, batch, size, classes, seed, rank, device, split=0):
        self.steps, self.shape, self.classes = steps, (batch, 3, size, size), classes
        self.key, self.device = (seed, split, rank), device
        self.generator = torch.Generator(device=device)
        self.epoch = self.done = 0
        self.images = steps * batch

    def __len__(self) -> int:
        return self.steps

    def start(self, epoch: int, done: int) -> None:
        self.epoch, self.done = epoch, done

    def batch(self, epoch: int, i: int):
        g = self.generator.manual_seed(seed_of(*self.key, epoch, i))
        n = math.prod(self.shape)
        if self.device.type == "cpu":  # random 64-bit words viewed as bytes: 10x randint's speed
            words = torch.randint(
                -(2**63), 2**63 - 1, ((n + 7) // 8,), dtype=torch.int64, generator=g
            )
            images = words.view(torch.uint8)[:n].view(self.shape)
        else:
            images = torch.randint(
                0, 256, self.shape, dtype=torch.uint8, device=self.device, generator=g
            )
        labels = torch.randint(self.classes, self.shape[:1], device=self.device, generator=g)
        return images, labels

    def __iter__(self):
        return (self.batch(self.epoch, i) for i in range(self.done, self.steps))


class SeededSamples(Dataset):
    """An image folder whose random crops and flips for sample i in epoch e come from a seed made
    of (seed, e, i): the same whichever loader process makes it, and again after a resume."""

    def __init__(self, dataset, seed: int):
        self.dataset, self.seed = dataset, seed

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key):
        epoch, index = key
        with torch.random.fork_rng(devices=[]):  # leaves the caller's random stream alone
            torch.manual_seed(seed_of(self.seed, epoch, index))
            return self.dataset[index]


class ResumableSampler(DistributedSampler):
    """DistributedSampler that can start part-way into an epoch (after a resume), and that hands
    the dataset (epoch, index) pairs for SeededSamples."""

    skip = 0

    def start(self, epoch: int, done: int, batch_size: int) -> None:
        self.set_epoch(epoch)  # the shuffle depends on (seed, epoch) only
        self.skip = done * batch_size

    def __iter__(self):
        return iter([(self.epoch, i) for i in list(super().__iter__())[self.skip :]])

    def __len__(self) -> int:
        return self.num_samples - self.skip


class DataError(ValueError):
    """Data that cannot be read as it says it can (a shard that is not a tar file, say)."""


class LoaderBatches:
    """A DataLoader over an image folder or shards, with what runs on the batches after it (GPU
    decoding). ``source`` (the sampler, or the shard dataset) knows where an epoch starts. A
    loader process that dies, or data that cannot be read, ends the run with one line."""

    def __init__(self, loader, source, batch_size: int, images: int, after=None):
        self.loader, self.source, self.batch_size, self.after = loader, source, batch_size, after
        self.images = images

    def __len__(self) -> int:
        return len(self.loader)

    def start(self, epoch: int, done: int) -> None:
        self.source.start(epoch, done, self.batch_size)

    def __iter__(self):
        try:
            batches = iter(self.loader)
            watch_loader(batches)
            for batch in batches:
                yield batch if self.after is None else self.after(batch)
        except DataError as exc:  # from a loader process: the last line of its traceback
            raise Abort(str(exc).strip().splitlines()[-1].split("DataError: ", 1)[-1]) from None
        except RuntimeError as exc:
            if not str(exc).startswith("DataLoader worker"):
                raise
            raise Abort(loader_death(exc)) from None


# ----- CPU decoding, where a JPEG that will be scaled down is decoded smaller to begin with
def open_image(path):
    """The ImageFolder loader: the file opened, not yet decoded (see decode_reduced)."""
    from PIL import Image

    return Image.open(path)


def decode_reduced(image, factor: float):
    """``image`` (opened, not decoded) as RGB, decoded at 1/2, 1/4 or 1/8 of its size where
    what follows scales it down by at least that ``factor``: libjpeg's DCT scaling, through
    PIL's draft mode, skips most of the work of a full decode. Returns the image and the scale
    of its pixels to the file's."""
    width, height = image.size
    reduce = max([r for r in (2, 4, 8) if r <= factor], default=1)
    if reduce > 1 and image.format == "JPEG":
        image.draft("RGB", (width // reduce, height // reduce))
    return image.convert("RGB"), (width / image.size[0], height / image.size[1])


class ReducedResizedCrop:
    """torchvision's RandomResizedCrop then RandomHorizontalFlip (the same random draws, so the
    same boxes), on an image that is not yet decoded: the crop box is drawn from the file's
    size, then the file is decoded no larger than the crop needs."""

    def __init__(self, size: int):
        self.size = size

    def __call__(self, image):
        from PIL import Image
        from torchvision import transforms
        from torchvision.transforms import functional as F

        top, left, h, w = transforms.RandomResizedCrop.get_params(
            image, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)
        )
        flip = bool(torch.rand(1) < 0.5)
        decoded, (sx, sy) = decode_reduced(image, min(h, w) / self.size)
        if (sx, sy) == (1, 1):
            out = F.resized_crop(decoded, top, left, h, w, [self.size, self.size])
        else:
            box = (left / sx, top / sy, (left + w) / sx, (top + h) / sy)
            out = decoded.resize((self.size, self.size), Image.BILINEAR, box=box)
        return F.hflip(out) if flip else out


class ReducedCentreCrop:
    """Resize to 8/7 of the crop, then the centre crop (evaluation), decoding reduced."""

    def __init__(self, size: int):
        from torchvision import transforms

        self.short = size * 8 // 7
        self.steps = transforms.Compose(
            [transforms.Resize(self.short), transforms.CenterCrop(size)]
        )

    def __call__(self, image):
        return self.steps(decode_reduced(image, min(image.size) / self.short)[0])


def folder_transform(args, split: str):
    """RandomResizedCrop and flips for training, resize and centre crop for evaluation, as
    torchvision's ImageNet recipes do, on images opened but not decoded; uint8 tensors out (a
    quarter of float32's bytes)."""
    from torchvision import transforms

    crop = ReducedResizedCrop if split == "train" else ReducedCentreCrop
    return transforms.Compose([crop(args.image_size), transforms.PILToTensor()])


def loader_context(args) -> str | None:
    return job_runtime.loader_context(args.workers, args.mp_start_method)


def working_context(method: str | None, rank: int) -> str | None:
    return job_runtime.working_context(method, rank, ["torch", "torchvision", "PIL.Image"])


def folder_batches(args, split: str, rank: int, world: int, device) -> LoaderBatches:
    """The CPU loader (decoding in --workers processes) or, with --loader gpu-decode, loader
    processes that read the files and a GPU that decodes them."""
    gpu = args.loader == "gpu-decode"
    root = args.data_dir / split
    if gpu:
        dataset = torchvision.datasets.ImageFolder(
            root, loader=EncodedImage.read, transform=CropPlan(args.image_size, split == "train")
        )
    else:
        dataset = torchvision.datasets.ImageFolder(
            root, folder_transform(args, split), loader=open_image
        )
    train = split == "train"
    sampler = ResumableSampler(dataset, world, rank, shuffle=train, seed=args.seed, drop_last=train)
    loader = DataLoader(
        SeededSamples(dataset, args.seed + (split != "train")),
        batch_size=args.batch_size,
        sampler=sampler,
        num_workers=args.workers,
        collate_fn=collate_planned if gpu else None,
        drop_last=train,
        pin_memory=device.type == "cuda",
        persistent_workers=args.workers > 0,
        multiprocessing_context=working_context(loader_context(args), rank),
    )
    after = GpuDecoder(args.image_size, device) if gpu else None
    return LoaderBatches(loader, sampler, args.batch_size, len(dataset), after)


# ----- WebDataset shards: DIR/<split>/*.tar, each sample an image and its class (.cls)
IMAGE_KEYS = ("jpg", "jpeg", "png", "webp", "ppm", "pgm", "bmp", "tif", "tiff")
# Samples a loader process holds (as file bytes) to shuffle them: with ImageNet's photos, about
# 110 kB each, some 110 MB per loader process (docs/howto/data.md, "What a loader process holds")
SHUFFLE_BUFFER = 1000


def import_webdataset():
    try:
        import webdataset
    except ImportError as exc:
        raise Abort(
            f"reading WebDataset shards needs webdataset ({exc}): pip install webdataset"
        ) from None
    return webdataset


def tar_samples(tar):
    """The members of each sample of an open tar file, {extension: member}, in file order: a
    sample is the run of members whose names share a key (webdataset's rule). Only headers are
    read; tar.members is emptied as it goes, so memory stays flat however large the shard."""
    split = import_webdataset().tariterators.base_plus_ext
    key, sample = None, {}
    while (member := tar.next()) is not None:
        tar.members = []
        name, ext = split(member.name) if member.isfile() else (None, None)
        if name is None:
            continue
        if name != key and sample:
            yield sample
            sample = {}
        key = name
        sample[ext.lower()] = member
    if sample:
        yield sample


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (tarfile's can take several)."""
    return " ".join(str(exc).split())


def whole(sample: dict) -> str | None:
    """The image's extension if the sample has an image and a class (.cls), else None."""
    return next((k for k in IMAGE_KEYS if k in sample), None) if "cls" in sample else None


def shard_index(root: Path) -> tuple[list[tuple[str, int]], list[str] | None]:
    """(shard path, samples) for each root/*.tar, and the class names: from the shards.json that
    make_shards.py writes, else counted from the tar headers (samples with an image and a .cls)."""
    index = root / "shards.json"
    if index.is_file():
        import json

        data = json.loads(index.read_text())
        return [(str(root / s["file"]), int(s["samples"])) for s in data["shards"]], data.get(
            "classes"
        )
    import tarfile

    shards = []
    for path in sorted(root.glob("*.tar")):
        try:
            with tarfile.open(path) as tar:
                shards.append((str(path), sum(1 for s in tar_samples(tar) if whole(s))))
        except (tarfile.TarError, OSError) as exc:
            raise Abort(f"{path}: not a readable tar file ({one_line(exc)})") from None
    return shards, None


def deal_samples(
    counts: list[int], readers: int, batch: int, key: int | None = None
) -> list[list[tuple[int, int, int]]]:
    """The samples of shards holding ``counts`` samples dealt to ``readers``, each reader's share
    as pieces (shard, first sample, samples) of consecutive samples.

    The shards are laid end to end and cut into consecutive shares: with a ``key`` (training),
    in an order drawn from it (the same on every rank), into equal shares of whole batches,
    all that every reader can have; the samples left over, fewer than one batch per reader,
    are the last of that order, so a different few each epoch. Without one (evaluation), in
    shard order, into shares that differ by one sample at most: every sample is dealt. Either
    way each sample goes to one reader at most, whatever the shard size, and a reader's
    share crosses at most two shards that it shares with another reader."""
    total = sum(counts)
    order = list(range(len(counts)))
    if key is None:
        bounds = [k * total // readers for k in range(readers + 1)]
    else:
        random.Random(key).shuffle(order)
        share = total // readers // batch * batch
        bounds = [k * share for k in range(readers + 1)]
    dealt: list[list[tuple[int, int, int]]] = [[] for _ in range(readers)]
    reader, start = 0, 0
    for shard in order:
        end = start + counts[shard]
        while reader < readers and bounds[reader] < end:
            lo, hi = max(start, bounds[reader]), min(end, bounds[reader + 1])
            if hi > lo:
                dealt[reader].append((shard, lo - start, hi - lo))
            if bounds[reader + 1] > end:
                break  # this reader's share goes on in the next shard
            reader += 1
        start = end
    return dealt


def shard_range(path: str, first: int, count: int):
    """(image bytes, label) of samples first .. first + count - 1 of the shard at ``path`` (the
    samples with an image and a class, counted from 0): those before them are passed over,
    their headers read and their data skipped."""
    import tarfile

    seen = 0
    try:
        with tarfile.open(path) as tar:
            for sample in tar_samples(tar):
                image = whole(sample)
                if image is None:
                    continue
                if seen >= first:
                    data = tar.extractfile(sample[image]).read()
                    yield data, int(tar.extractfile(sample["cls"]).read())
                seen += 1
                if seen == first + count:
                    return
    except Exception as exc:  # tarfile's, the file system's, a .cls that is no number
        raise DataError(f"{path}: not a readable WebDataset shard ({one_line(exc)})") from None
    raise DataError(
        f"{path}: holds {seen} samples, fewer than its index says (at least {first + count}): "
        "write shards.json again"
    )


class ShardSamples(torch.utils.data.IterableDataset):
    """One rank's batches from WebDataset shards.

    Every epoch the samples of all shards are dealt anew (deal_samples) to the readers of all
    ranks, ``slots`` per rank (its loader processes, or the rank itself where there are none):
    each reader gets an equal share of whole batches, in pieces of shards, so that every rank
    takes the same number of steps and at most one batch per reader goes unread, whatever the
    shard size. A reader reads its pieces in an order drawn from (seed, epoch, rank, reader),
    through a shuffle buffer (webdataset's) drawn the same way, and decodes each sample with a
    crop seeded by its place in that stream. The DataLoader takes batch b of an epoch from
    reader b mod slots; a run resumed after ``done`` batches lets each reader pass over (read,
    not decode) the batches it had given, and starts the rotation at reader ``done`` mod slots:
    it sees what an uninterrupted run would have seen. Without shuffling (evaluation) every
    sample is read once, the last batch of a reader short.
    """

    def __init__(self, shards, rank, slots, world, batch_size, decode, collate, seed, train):
        self.shards, self.rank, self.slots, self.batch_size = shards, rank, slots, batch_size
        self.readers = world * slots
        self.decode, self.collate, self.seed, self.train = decode, collate, seed, train
        self.epoch = self.done = 0

    def start(self, epoch: int, done: int, batch_size: int) -> None:
        self.epoch, self.done = epoch, done

    def deal(self, epoch: int) -> list[list[tuple[int, int, int]]]:
        """This rank's readers' pieces of the shards in ``epoch``."""
        key = seed_of(self.seed, epoch) if self.train else None
        counts = [n for _, n in self.shards]
        dealt = deal_samples(counts, self.readers, self.batch_size, key)
        return dealt[self.rank * self.slots : (self.rank + 1) * self.slots]

    def __len__(self) -> int:
        if self.train:
            per_reader = sum(n for _, n in self.shards) // self.readers // self.batch_size
            return self.slots * per_reader - self.done
        shares = (sum(n for *_, n in pieces) for pieces in self.deal(0))
        return sum(math.ceil(n / self.batch_size) for n in shares)

    def samples(self, pieces: list[tuple[int, int, int]]):
        """The (image bytes, label) pairs of ``pieces``, in their order."""
        for shard, first, count in pieces:
            yield from shard_range(self.shards[shard][0], first, count)

    def __iter__(self):
        import itertools

        info = torch.utils.data.get_worker_info()
        workers, physical = (1, 0) if info is None else (info.num_workers, info.id)
        reader = (physical + self.done) % workers if self.train else physical
        pieces = self.deal(self.epoch)[reader]
        if self.train:
            rng = random.Random(seed_of(self.seed, self.epoch, self.rank, reader))
            rng.shuffle(pieces)
            stream = import_webdataset().filters.shuffle(SHUFFLE_BUFFER, rng=rng)(
                self.samples(pieces)
            )
            position = (self.done // workers + (reader < self.done % workers)) * self.batch_size
            stream = itertools.islice(stream, position, None)
        else:
            stream, position = self.samples(pieces), 0
        batch = []
        for data, label in stream:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed_of(self.seed, self.epoch, self.rank, reader, position))
                batch.append((self.decode(data), label))
            position += 1
            if len(batch) == self.batch_size:
                yield self.collate(batch)
                batch = []
        if batch:  # evaluation's last, short batch (a training share is whole batches)
            yield self.collate(batch)


def shard_batches(args, split: str, rank: int, world: int, device) -> LoaderBatches:
    """Batches from DIR/<split>/*.tar (WebDataset shards), decoded by the CPU loader or planned
    for the GPU decoder (--loader gpu-decode)."""
    import io

    from PIL import Image
    from torch.utils.data import default_collate

    shards, _ = shard_index(args.data_dir / split)
    train = split == "train"
    images = sum(n for _, n in shards)
    fill = images // (world * args.batch_size)  # readers per rank that get a batch each
    if train and args.workers > max(1, fill):
        if rank == 0:
            warn(
                f"{images} training images fill batches of {args.batch_size} for {fill} "
                f"loader process(es) on each of {world} rank(s): using {max(1, fill)}"
            )
        args.workers = max(1, fill)
    gpu = args.loader == "gpu-decode"
    if gpu:
        plan = CropPlan(args.image_size, train)

        def decode(data):
            return plan(EncodedImage.from_bytes(data))

        collate = collate_planned
    else:
        transform = folder_transform(args, split)

        def decode(data):
            return transform(Image.open(io.BytesIO(data)))

        collate = default_collate
    slots = max(1, args.workers)
    dataset = ShardSamples(
        shards,
        rank,
        slots,
        world,
        args.batch_size,
        decode,
        collate,
        args.seed + (not train),
        train,
    )
    loader = DataLoader(
        dataset,
        batch_size=None,  # the readers make the batches
        num_workers=args.workers,
        pin_memory=device.type == "cuda",
        multiprocessing_context=working_context(loader_context(args), rank),
    )
    after = GpuDecoder(args.image_size, device) if gpu else None
    return LoaderBatches(loader, dataset, args.batch_size, images, after)


# ----- --loader gpu-decode: loader processes read each file and plan its crop; the GPU decodes
class EncodedImage:
    """A file's bytes and its size, read without decoding (PIL reads only the header)."""

    def __init__(self, data: bytes, width: int, height: int, on_gpu: bool):
        self.data, self.width, self.height, self.on_gpu = data, width, height, on_gpu

    @classmethod
    def read(cls, path: str) -> EncodedImage:
        return cls.from_bytes(Path(path).read_bytes())

    @classmethod
    def from_bytes(cls, data: bytes) -> EncodedImage:
        import io

        from PIL import Image

        with Image.open(io.BytesIO(data)) as im:
            # nvJPEG decodes baseline and progressive colour JPEGs; others go the CPU's way
            on_gpu = im.format == "JPEG" and im.mode == "RGB"
            return cls(data, im.width, im.height, on_gpu)

    def decoded(self):
        import io

        from PIL import Image

        with Image.open(io.BytesIO(self.data)) as im:
            return im.convert("RGB")


class CropPlan:
    """The crop box and flip of one image, drawn as RandomResizedCrop and RandomHorizontalFlip
    draw them (training), or the centre crop of the evaluation transform. Images that the GPU
    cannot decode are decoded, cropped and resized here."""

    def __init__(self, size: int, train: bool):
        self.size, self.train = size, train

    def __call__(self, image: EncodedImage):
        from torchvision import transforms

        h, w = image.height, image.width
        if self.train:
            box = transforms.RandomResizedCrop.get_params(
                torch.empty(1, 1, 1).expand(3, h, w), scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)
            )
            flip = bool(torch.rand(1) < 0.5)
        else:  # resize the short side to 8/7 of the crop, take the centre crop
            side = min(h, w) * 7 // 8
            box, flip = ((h - side) // 2, (w - side) // 2, side, side), False
        if image.on_gpu:
            payload = torch.frombuffer(bytearray(image.data), dtype=torch.uint8)
        else:
            from torchvision.transforms import functional as F

            payload = F.pil_to_tensor(F.resized_crop(image.decoded(), *box, [self.size] * 2))
            payload = payload.flip(-1) if flip else payload
        return payload, box, flip


def collate_planned(samples):
    """(list of JPEG bytes or decoded images, crop boxes, flips, labels)."""
    planned, labels = zip(*samples)  # noqa: B905 - pairs; zip(strict=) is Python 3.10+
    payloads, boxes, flips = zip(*planned)  # noqa: B905
    return list(payloads), torch.tensor(boxes), torch.tensor(flips), torch.tensor(labels)


class GpuDecoder:
    """Decodes a batch of JPEGs on the GPU (nvJPEG through torchvision.io.decode_jpeg), then
    crops and resizes the whole batch in one call (torchvision.ops.roi_align, which averages
    bilinear samples over each output pixel's area, as an antialiased resize does): the CPU
    only reads files. On the CPU the same steps run with libjpeg-turbo (the tests' way)."""

    def __init__(self, size: int, device):
        from torchvision.io import ImageReadMode, decode_jpeg

        self.size, self.device = size, device
        self.decode, self.rgb = decode_jpeg, ImageReadMode.RGB
        # torchvision 0.19+ decodes a list in one nvJPEG call on a GPU (0.19's CPU one: no list)
        self.batched = device.type == "cuda" and version_tuple(torchvision.__version__) >= (0, 19)

    def decode_all(self, jpegs: list) -> list:
        if not jpegs:
            return []
        if self.device.type == "cuda":
            # nvJPEG's hardware decoder (A100, H100) writes its output before work already
            # queued on the stream has run, into memory that PyTorch's allocator may have just
            # handed back from that work: wrong numbers, or NaN losses, far from the decoder.
            # Wait for the stream first (pytorch/vision#9606, meta-pytorch/torchcodec#1634).
            torch.cuda.current_stream(self.device).synchronize()
        if self.batched:
            return self.decode(jpegs, mode=self.rgb, device=self.device)
        return [self.decode(j, mode=self.rgb, device=self.device) for j in jpegs]

    def __call__(self, batch):
        payloads, boxes, flips, labels = batch
        on_gpu = [p.dim() == 1 for p in payloads]
        decoded = self.decode_all([p for p, gpu in zip(payloads, on_gpu) if gpu])  # noqa: B905
        crops = iter(
            image[:, top : top + h, left : left + w]
            for image, (top, left, h, w) in zip(decoded, boxes[on_gpu].tolist())  # noqa: B905
        )
        out = torch.empty(len(payloads), 3, self.size, self.size, device=self.device)
        gpu_rows = [i for i, gpu in enumerate(on_gpu) if gpu]
        for rows in self.groups(gpu_rows, boxes):
            out[rows] = self.resize([next(crops) for _ in rows])
        for i in (i for i, gpu in enumerate(on_gpu) if not gpu):  # done on the CPU
            out[i] = payloads[i].to(self.device, non_blocking=True)
        gpu_flips = flips.to(self.device) & torch.tensor(on_gpu, device=self.device)
        out = torch.where(gpu_flips[:, None, None, None], out.flip(-1), out)
        return out, labels

    @staticmethod
    def groups(rows: list[int], boxes, limit: int = 1 << 28) -> list[list[int]]:
        """``rows`` in consecutive groups whose canvas (see resize) stays under ``limit`` bytes
        of float32: a batch of ImageNet-sized crops is one group; huge photos make several."""
        out: list[list[int]] = []
        tall = wide = 0
        for i in rows:
            h, w = int(boxes[i, 2]) + 1, int(boxes[i, 3]) + 1
            grown = (max(tall, h), max(wide, w))
            if out and (len(out[-1]) + 1) * 3 * grown[0] * grown[1] * 4 > limit:
                out.append([])
                grown = (h, w)
            elif not out:
                out.append([])
            out[-1].append(i)
            tall, wide = grown
        return out

    def resize(self, crops: list) -> torch.Tensor:
        """The crops (uint8, 3 x h x w each) resized to size x size in one roi_align call."""
        from torchvision.ops import roi_align

        # each crop into the corner of one canvas a pixel larger than the largest, its last row
        # and column repeated once: samples at a crop's far edges then blend with its own edge,
        # as a resize of the crop alone does, not with the canvas
        tall = max(c.shape[1] for c in crops) + 1
        wide = max(c.shape[2] for c in crops) + 1
        canvas = torch.zeros(len(crops), 3, tall, wide, dtype=torch.uint8, device=self.device)
        for i, crop in enumerate(crops):
            h, w = crop.shape[1:]
            canvas[i, :, :h, :w] = crop
            canvas[i, :, h, :w] = crop[:, -1]
            canvas[i, :, : h + 1, w] = canvas[i, :, : h + 1, w - 1]
        rois = torch.zeros(len(crops), 5, device=self.device)
        rois[:, 0] = torch.arange(len(crops), device=self.device)  # which canvas image
        sizes = torch.tensor([c.shape[1:] for c in crops], dtype=torch.float32)
        rois[:, 3:] = sizes.flip(1).to(self.device)  # x2, y2 = w, h
        size = (self.size, self.size)
        return roi_align(canvas.float(), rois, size, sampling_ratio=-1, aligned=True).clamp_(0, 255)


# ----- --loader dali: NVIDIA DALI reads, decodes (GPU) and augments
def import_dali():
    """DALI's modules, or an Abort that says how to install it."""
    try:
        from nvidia.dali import fn, pipeline_def, types
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy
    except ImportError as exc:
        cuda = (torch.version.cuda or "12").split(".")[0]
        raise Abort(
            f"--loader dali needs NVIDIA DALI ({exc}): pip install nvidia-dali-cuda{cuda}0, "
            "or use --loader gpu-decode (torchvision only)"
        ) from None
    return fn, pipeline_def, types, DALIGenericIterator, LastBatchPolicy


class DaliBatches:
    """A DALI pipeline: files read by DALI's threads (--workers of them), JPEGs decoded on the
    GPU with a random crop (training) and resized there. A resumed run carries on with the right
    number of steps, but not with the images an uninterrupted run would have used."""

    def __init__(self, args, split: str, rank: int, world: int, device):
        fn, pipeline_def, types, Iterator, LastBatchPolicy = import_dali()
        from torchvision.datasets.folder import IMG_EXTENSIONS, find_classes, make_dataset

        root = args.data_dir / split
        samples = make_dataset(str(root), find_classes(str(root))[1], IMG_EXTENSIONS)
        random.Random(args.seed).shuffle(samples)  # no run of one class after another
        train, size = split == "train", args.image_size

        @pipeline_def(
            batch_size=args.batch_size,
            num_threads=max(1, args.workers),
            device_id=device.index,
            seed=seed_of(args.seed, rank),
        )
        def pipeline():
            jpegs, labels = fn.readers.file(
                files=[s[0] for s in samples],
                labels=[s[1] for s in samples],
                shard_id=rank,
                num_shards=world,
                random_shuffle=train,
                name="Reader",
            )
            if train:
                images = fn.decoders.image_random_crop(
                    jpegs,
                    device="mixed",
                    output_type=types.RGB,
                    random_area=[0.08, 1.0],
                    random_aspect_ratio=[3 / 4, 4 / 3],
                )
                images = fn.resize(images, resize_x=size, resize_y=size)
                mirror = fn.random.coin_flip(probability=0.5)
            else:
                images = fn.decoders.image(jpegs, device="mixed", output_type=types.RGB)
                images = fn.resize(images, resize_shorter=size * 8 // 7)
                mirror = 0
            images = fn.crop_mirror_normalize(
                images, dtype=types.UINT8, output_layout="CHW", crop=(size, size), mirror=mirror
            )
            return images, labels.gpu()

        drop = LastBatchPolicy.DROP if train else LastBatchPolicy.PARTIAL
        self.iterator = Iterator(
            [pipeline()],
            ["images", "labels"],
            reader_name="Reader",
            last_batch_policy=drop,
            auto_reset=True,
        )
        self.done, self.images = 0, len(samples)

    def __len__(self) -> int:
        return len(self.iterator)

    def start(self, epoch: int, done: int) -> None:
        self.done = done

    def __iter__(self):
        for i, out in enumerate(self.iterator):
            if i >= len(self) - self.done:
                break
            yield out[0]["images"], out[0]["labels"].reshape(-1).long()


# Why the GPU loaders cannot run on AMD GPUs. torchvision's releases decode JPEGs on a GPU with
# nvJPEG only: the rocJPEG decoder merged for ROCm (pytorch/vision#9342) was removed again before
# any release (pytorch/vision#9591), and ROCm builds fail with "not compiled with nvJPEG support"
# (pytorch/vision#8856).
ROCM_LOADERS = {
    "gpu-decode": "torchvision decodes JPEGs on NVIDIA GPUs only (nvJPEG); use --loader cpu",
    "dali": "DALI is built for NVIDIA GPUs only; use --loader cpu",
}


def check_loader(args, device) -> None:
    """Stop at once when --loader cannot work here (--tiny runs fall back to the CPU loader)."""
    if args.loader == "cpu" or args.data_dir is None:
        return
    hip = getattr(torch.version, "hip", None)
    if hip:  # a property of the build, so --tiny runs stop too: the job script needs changing
        why = ROCM_LOADERS[args.loader]
        raise Abort(f"--loader {args.loader}: {why}, and this PyTorch is built for ROCm ({hip})")
    problem = None
    if device.type != "cuda":
        problem = f"it decodes on a GPU and this run has none (device {device.type})"
    if problem and args.tiny:
        warn(f"--loader {args.loader}: {problem}; --tiny uses the CPU loader instead")
        args.loader = "cpu"
    elif problem:
        raise Abort(f"--loader {args.loader}: {problem}")
    elif args.loader == "dali":
        import_dali()
    elif not hasattr(torchvision.io, "decode_jpeg"):  # torchvision 0.29 deprecated its decoders
        raise Abort(
            f"--loader gpu-decode: torchvision {torchvision.__version__} has no decode_jpeg; "
            "use --loader dali"
        )


def loader_workers(args, world: int, device) -> int:
    """Loader processes (DALI threads) per rank: --workers, or by default all the rank's cores
    but the one the training loop runs on, for decoding on the CPU; fewer for the GPU loaders,
    whose workers only read files; none for synthetic data, made on the device."""
    if args.workers is not None:
        return args.workers
    if args.data_dir is None:
        return 0
    if device.type != "cuda":
        return 1  # the training itself needs the cores
    spare = max(1, cores_per_rank(world) - 1)
    return min(spare, {"cpu": 32, "gpu-decode": 4, "dali": 16}[args.loader])


def classes_of(args, root: Path) -> int:
    """How many classes the training data has: its class folders, or the classes that
    shards.json lists (--num-classes for shards without one)."""
    if data_format(args.data_dir, "train")[0] == "shards":
        return len(shard_index(root)[1] or range(args.num_classes))
    from torchvision.datasets.folder import find_classes

    return len(find_classes(str(root))[0])


def make_batches(args, split: str, rank: int, world: int, device, num_classes: int):
    if args.data_dir is None:
        steps = args.steps_per_epoch or 500
        if split != "train":
            steps = max(1, steps // 10)
        return SyntheticBatches(
            steps,
            args.batch_size,
            args.image_size,
            num_classes,
            args.seed,
            rank,
            device,
            split=int(split != "train"),
        )
    shards = data_format(args.data_dir, split)[0] == "shards"
    if args.loader == "dali" and shards:
        raise Abort("--loader dali reads image folders: use --loader cpu or gpu-decode for shards")
    if args.loader == "dali":
        return DaliBatches(args, split, rank, world, device)
    if shards:
        return shard_batches(args, split, rank, world, device)
    return folder_batches(args, split, rank, world, device)


class ToDevice:
    """Copy a batch to the device and normalise it there (as transforms.Normalize would)."""

    def __init__(self, device, memory_format):
        self.device, self.memory_format = device, memory_format
        self.mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1) * 255
        self.std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1) * 255

    def __call__(self, images, labels):
        images = images.to(self.device, non_blocking=True).float()
        images = ((images - self.mean) / self.std).contiguous(memory_format=self.memory_format)
        return images, labels.to(self.device, non_blocking=True)


# --------------------------------------------------------------------------- checkpoints
CKPT = re.compile(r"ckpt-step(\d+)\.pt$")


def checkpoints(directory: Path) -> list[Path]:
    """Checkpoints in directory, oldest first."""
    found = [p for p in directory.glob("ckpt-step*.pt") if CKPT.search(p.name)]
    return sorted(found, key=lambda p: int(CKPT.search(p.name)[1]))


def save_checkpoint(args, model, optimizer, scaler, step, epoch, rank, world, device, control):
    """Collective: every rank hands rank 0 its random-number state; rank 0 writes the file."""
    if world > 1:
        rngs = gather_states(rng_state(device), rank, world, control)
    else:
        rngs = [rng_state(device)]
    if rank != 0:
        return
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scaler": scaler.state_dict(),
        "step": step,
        "epoch": epoch,
        "world": world,
        "rng": rngs,
    }
    directory = args.checkpoint_dir
    final = directory / f"ckpt-step{step:08d}.pt"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        save_atomically(state, final)  # a job killed mid-write leaves the older ones whole
        for old in checkpoints(directory)[: -args.keep]:
            old.unlink(missing_ok=True)
    except OSError as exc:
        raise Abort(f"cannot write checkpoint {final}: {exc.strerror or exc}") from None
    log(f"[checkpoint] step={step} path={final}")


def check_state(state, path: Path, model) -> str | None:
    """Why a loaded checkpoint cannot be used, or None."""
    if not isinstance(state, dict):
        return "not a checkpoint of this program"
    missing = {"model", "optimizer", "scaler", "step", "epoch", "rng"} - set(state)
    if missing:
        return f"lacks {', '.join(sorted(missing))}"
    if state["step"] != int(CKPT.search(path.name)[1]):
        return f"holds step {state['step']}, not the step in its name"
    ours = model.state_dict()
    theirs = state["model"]
    if set(ours) != set(theirs) or any(ours[k].shape != theirs[k].shape for k in ours):
        return "its model does not match --arch/--num-classes"
    return None


def find_checkpoint(directory: Path, model):
    """The newest checkpoint that loads and fits the model; damaged ones are skipped."""
    for stale in directory.glob(".ckpt-*.tmp"):  # left by a job killed while writing
        stale.unlink(missing_ok=True)
    for path in reversed(checkpoints(directory)):
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
            problem = check_state(state, path, model)
        except Exception as exc:  # a truncated file can fail in many ways
            text = str(exc).strip().splitlines()
            problem = f"{type(exc).__name__}: {text[0] if text else ''}"
        if problem is None:
            return path, state
        warn(f"skipping checkpoint {path}: {problem}")
    return None, None


# --------------------------------------------------------------------------- training
def learning_rate(step: int, peak: float, warmup: int, total: int) -> float:
    """Linear warm-up to peak over `warmup` steps, then cosine decay towards zero."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * peak * (1 + math.cos(math.pi * progress))


def grad_scaler(device_type: str, enabled: bool):
    """Loss scaling for fp16. PyTorch 2.3 made torch.amp.GradScaler take the device; before
    that only CUDA had one (torch.cuda.amp.GradScaler), so fp16 on a CPU runs unscaled there."""
    if hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler(device_type, enabled=enabled)
    return torch.cuda.amp.GradScaler(enabled=enabled and device_type == "cuda")


def logits_of(output):
    # inception_v3 and googlenet return (logits, auxiliary logits...) while training
    return output[0] if isinstance(output, tuple) else output


def evaluate(model, batches, to_device, dtype, world, epoch, rank):
    device = to_device.device
    model.eval()
    totals = torch.zeros(4, dtype=torch.float64, device=device)  # top1, top5, loss sum, count
    batches.start(0, 0)
    with torch.no_grad(), torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
        for images, labels in batches:
            images, labels = to_device(images, labels)
            logits = logits_of(model(images)).float()
            top = logits.topk(min(5, logits.shape[1]), dim=1).indices
            hits = top == labels[:, None]
            totals[0] += hits[:, 0].sum()
            totals[1] += hits.any(dim=1).sum()
            totals[2] += nn.functional.cross_entropy(logits, labels, reduction="sum")
            totals[3] += labels.numel()
    if world > 1:
        dist.all_reduce(totals)
    model.train()
    top1, top5, loss, n = totals.tolist()
    n = max(n, 1)
    if rank == 0:
        log(
            f"[eval] rank={rank}/{world} epoch={epoch} top1={top1 / n:.4f} "
            f"top5={top5 / n:.4f} loss={loss / n:.6f}"
        )


def main(argv=None) -> int:
    check_versions(Path(__file__).name, MINIMUM_VERSIONS, torch, torchvision)
    args = parse_args(argv)
    rank, world, device, control, about = setup(args)
    stop = StopFlag()  # before the slow part: an unhandled SIGUSR1 would end the process
    if rank == 0:
        log(about)

    # ----- data
    check_loader(args, device)
    args.workers = loader_workers(args, world, device)
    num_classes = args.num_classes
    if args.data_dir is not None:
        num_classes = classes_of(args, args.data_dir / "train")
        if rank == 0:
            log(f"data: {args.data_dir}, loader {args.loader}, {args.workers} worker(s) per rank")
    batches = make_batches(args, "train", rank, world, device, num_classes)
    if len(batches) == 0:
        raise Abort(
            f"{batches.images} training images are fewer than one batch on each of {world} "
            f"rank(s) ({args.batch_size} each)"
        )
    steps_per_epoch = min(len(batches), args.steps_per_epoch or len(batches))
    total = args.steps or args.epochs * steps_per_epoch
    val_batches = None
    if args.eval_every_epoch:
        val_batches = make_batches(args, "val", rank, world, device, num_classes)

    # ----- model, optimiser, mixed precision
    torch.manual_seed(args.seed)  # the same initial weights everywhere
    model = torchvision.models.get_model(args.arch, weights=None, num_classes=num_classes)
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    model = model.to(device, memory_format=memory_format)
    to_device = ToDevice(device, memory_format)
    if args.optimizer == "sgd":
        optimizer = torch.optim.SGD(
            model.parameters(), lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay
        )
    else:
        optimizer = torch.optim.AdamW(
            model.parameters(), lr=args.lr, weight_decay=args.weight_decay
        )
    dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[args.precision]
    # fp16 gradients underflow without loss scaling; bf16 has fp32's range and needs none
    scaler = grad_scaler(device.type, enabled=args.precision == "fp16")
    criterion = nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
    peak_lr = args.lr * args.batch_size * world / 256  # linear scaling rule
    warmup_lr = min(round(args.warmup_epochs * steps_per_epoch), total // 5)
    random.seed(args.seed + rank)
    torch.manual_seed(args.seed + rank)  # dropout and friends differ between ranks

    # ----- resume: rank 0 picks the checkpoint, every rank loads that one
    step = 0
    path, state = find_checkpoint(args.checkpoint_dir, model) if rank == 0 else (None, None)
    if world > 1:
        chosen = [str(path) if path else None]
        dist.broadcast_object_list(chosen, src=0, group=control)
        if chosen[0] and rank != 0:
            path = Path(chosen[0])
            state = torch.load(path, map_location="cpu", weights_only=True)
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scaler.load_state_dict(state["scaler"])
        step = state["step"]
        if len(state["rng"]) == world:
            set_rng_state(state["rng"][rank], device)
        elif rank == 0:
            warn(f"checkpoint written by {len(state['rng'])} rank(s), now {world}: new data order")
        if rank == 0:
            log(f"[resume] step={step} path={path}")
        del state
    if step >= total and rank == 0:
        log(f"already trained for {step} steps (of {total}): nothing to do")

    if world > 1:
        model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    raw_model = model.module if isinstance(model, DDP) else model
    train_model = torch.compile(model) if args.compile else model
    model.train()

    # ----- training loop
    first_step = step
    timed_steps = max(0, min(args.warmup_steps, (total - first_step) // 2))  # left out of img_s
    start = time.perf_counter()
    timed_from = start if timed_steps == 0 else None
    interval_start, interval_images = start, 0
    saved_at, preempted = step, False
    while step < total and not preempted:
        epoch = step // steps_per_epoch
        batches.start(epoch, step % steps_per_epoch)  # a resumed run starts mid-epoch
        for images, labels in batches:
            images, labels = to_device(images, labels)
            lr = learning_rate(step, peak_lr, warmup_lr, total)
            for group in optimizer.param_groups:
                group["lr"] = lr
            with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
                loss = criterion(logits_of(train_model(images)), labels)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            step += 1
            interval_images += images.shape[0]

            if step - first_step == timed_steps:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                timed_from = time.perf_counter()
            if step % args.log_every == 0 or step == total:
                value = loss.item()  # waits for the GPU
                now = time.perf_counter()
                rate = interval_images / max(now - interval_start, 1e-9)
                log(
                    f"[train] rank={rank}/{world} epoch={epoch} step={step} "
                    f"loss={value:.6f} lr={lr:.6f} img_s={rate:.1f}"
                )
                if not math.isfinite(value):
                    raise Abort(f"loss is {value} at step {step}: lower --lr, or use bf16 or fp32")
                interval_start, interval_images = now, 0
            if step % args.checkpoint_every == 0 and step < total:
                save_checkpoint(
                    args, raw_model, optimizer, scaler, step, epoch, rank, world, device, control
                )
                saved_at = step
            if val_batches is not None and step % steps_per_epoch == 0:
                evaluate(raw_model, val_batches, to_device, dtype, world, epoch, rank)
            # every rank takes part in this check at every step, so all stop at the same one
            preempted = step < total and stop.agreed(world, control)
            if preempted or step >= total or step % steps_per_epoch == 0:
                break

    if device.type == "cuda":  # the last steps' kernels finish before the clock stops
        torch.cuda.synchronize()
    end = time.perf_counter()
    if saved_at != step:  # the final (or preemption) checkpoint, outside the timing
        save_checkpoint(
            args, raw_model, optimizer, scaler, step, epoch, rank, world, device, control
        )
    if rank == 0:
        if preempted:
            log(f"[preempted] step={step}")
        timed_images = (step - first_step - timed_steps) * args.batch_size * world
        rate = timed_images / (end - timed_from) if timed_from and timed_images > 0 else 0.0
        log(f"[summary] ranks={world} steps={step} img_s={rate:.1f} time_s={end - start:.2f}")
    if world > 1:
        dist.barrier(group=control)
        dist.destroy_process_group()
    return 0


def run(argv=None) -> int:
    """main() with the errors a user can cause reported in one line, without a traceback."""
    return run_guarded(main, argv)


if __name__ == "__main__":
    exit_with(run)
