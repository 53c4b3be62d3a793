#!/usr/bin/env python3
"""Write a synthetic ImageNet-style JPEG folder: OUT/train/<class>/*.JPEG and OUT/val/<class>/.

The images are made to cost what ImageNet's cost to read and decode: 500x375 pixels by default
(ImageNet's most common size), JPEG quality 90, with smooth shapes, texture and noise that
compress to about 110 KB each, near ImageNet's average file size. Every file depends only on
(--seed, split, class, index), so the same command writes the same bytes on any machine with the
same Pillow. Needs numpy and Pillow, which torchvision and TensorFlow installations have.

    python benchmarks/make_jpeg_folder.py /tmp/jpegs                     # 10 classes, 1,000 images
    python benchmarks/make_jpeg_folder.py --classes 100 --train-per-class 260 --jobs 16 \\
        "$TMPDIR/jpegs"                                                   # 26,000: a GPU benchmark
"""

from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image

SPLITS = ("train", "val")
DEFAULT_SIZE = (500, 375)


def class_name(label: int) -> str:
    """ImageNet-style synset names: n00000000, n00000001, ..."""
    return f"n{label:08d}"


def image(seed: int, split: int, label: int, index: int, size: tuple[int, int]) -> Image.Image:
    """One picture: a class colour, large smooth shapes, mid-sized texture and pixel noise."""
    width, height = size
    rng = np.random.default_rng([seed, split, label, index])
    tint = np.random.default_rng([seed, label]).uniform(60, 190, 3)  # shared by the class

    def smooth(cells_x: int, cells_y: int, scale: float) -> np.ndarray:
        coarse = rng.normal(0, scale, (cells_y, cells_x, 3)).astype(np.float32)
        planes = [
            Image.fromarray(coarse[..., c], mode="F").resize((width, height), Image.BICUBIC)
            for c in range(3)
        ]
        return np.stack([np.asarray(p) for p in planes], axis=-1)

    pixels = tint + smooth(6, 5, 45) + smooth(width // 10, height // 10, 22)
    pixels += smooth(width // 2, height // 2, 30) + rng.normal(0, 10, (height, width, 3))
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), mode="RGB")


def write_one(job: tuple) -> int:
    out, seed, split, label, index, size, quality = job
    path = Path(out) / SPLITS[split] / class_name(label) / f"{class_name(label)}_{index}.JPEG"
    image(seed, split, label, index, size).save(path, format="JPEG", quality=quality)
    return path.stat().st_size


def make_folder(
    out: Path,
    classes: int,
    train_per_class: int,
    val_per_class: int,
    *,
    size: tuple[int, int] = DEFAULT_SIZE,
    quality: int = 90,
    seed: int = 0,
    jobs: int = 1,
) -> tuple[int, int]:
    """Write the folder; (number of images, bytes written)."""
    counts = (train_per_class, val_per_class)
    work = []
    for split, per_class in enumerate(counts):
        for label in range(classes if per_class else 0):
            (out / SPLITS[split] / class_name(label)).mkdir(parents=True, exist_ok=True)
            work += [(str(out), seed, split, label, i, size, quality) for i in range(per_class)]
    if jobs > 1 and len(work) > jobs:
        with ProcessPoolExecutor(jobs) as pool:
            sizes = list(pool.map(write_one, work, chunksize=16))
    else:
        sizes = [write_one(job) for job in work]
    return len(sizes), sum(sizes)


def parse_size(text: str) -> tuple[int, int]:
    try:
        width, height = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not WIDTHxHEIGHT, e.g. 500x375") from None
    if width < 8 or height < 8:
        raise argparse.ArgumentTypeError(f"{text!r}: at least 8x8 pixels")
    return width, height


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("out", type=Path, help="the folder to write (train/ and val/ go in it)")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--train-per-class", type=int, default=100, metavar="N")
    p.add_argument("--val-per-class", type=int, default=10, metavar="N")
    p.add_argument("--size", type=parse_size, default=DEFAULT_SIZE, metavar="WxH")
    p.add_argument("--quality", type=int, default=90, help="JPEG quality, 1-95")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes")
    args = p.parse_args(argv)
    if args.classes < 1 or args.train_per_class < 1 or args.val_per_class < 0:
        p.error("--classes and --train-per-class must be at least 1, --val-per-class at least 0")
    if not 1 <= args.quality <= 95:
        p.error("--quality must be between 1 and 95")
    if args.out.exists() and any(args.out.iterdir()):
        p.error(f"{args.out} exists and is not empty")
    n, total = make_folder(
        args.out,
        args.classes,
        args.train_per_class,
        args.val_per_class,
        size=args.size,
        quality=args.quality,
        seed=args.seed,
        jobs=max(1, args.jobs),
    )
    print(f"{n} images, {total / 2**20:.1f} MiB ({total / n / 1024:.0f} KiB each) in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
