#!/usr/bin/env python3
"""Pack an ImageNet-style folder into WebDataset shards for train_resnet.py's --data-dir.

    python make_shards.py /path/to/imagenet /path/to/imagenet-shards --per-shard 1000

reads DIR/<split>/<class>/<image> for each split present (train, val) and writes
OUT/<split>/shard-NNNNNN.tar, each holding --per-shard samples: the image file as it was
(NAME.jpg, .png, ...) and its class number (NAME.cls, the class folders in sorted order, from
0, as torchvision's ImageFolder numbers them), and OUT/<split>/shards.json (the class names and
each shard's sample count, which the trainer reads instead of scanning the shards). Training
samples are shuffled before they are packed (--seed), so that each shard holds every class; a
shard of 1,000 ImageNet images is about 110 MB. Needs only `pip install webdataset`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path

# the image files ImageFolder reads, and the key each is stored under
EXTENSIONS = {
    ".jpg": "jpg",
    ".jpeg": "jpg",
    ".png": "png",
    ".ppm": "ppm",
    ".bmp": "bmp",
    ".pgm": "pgm",
    ".tif": "tif",
    ".tiff": "tif",
    ".webp": "webp",
}


def image_folder(root: Path) -> tuple[list[str], list[tuple[str, int]]]:
    """The class names and the (path, class number) of every image under root/<class>/."""
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
    samples = []
    for label, name in enumerate(classes):
        for dirpath, _, files in sorted(os.walk(root / name, followlinks=True)):
            for file in sorted(files):
                if Path(file).suffix.lower() in EXTENSIONS:
                    samples.append((os.path.join(dirpath, file), label))
    return classes, samples


def write_split(root: Path, out: Path, per_shard: int, shuffle_seed: int | None) -> dict:
    """Shards of root/<class>/<image> in out/; returns what shards.json says of them."""
    import webdataset as wds

    classes, samples = image_folder(root)
    if not samples:
        raise SystemExit(f"error: {root}: no images in class folders")
    if shuffle_seed is not None:
        random.Random(shuffle_seed).shuffle(samples)
    out.mkdir(parents=True, exist_ok=True)
    pattern = str(out / "shard-%06d.tar")
    with wds.ShardWriter(pattern, maxcount=per_shard, maxsize=float("inf"), verbose=0) as sink:
        for i, (path, label) in enumerate(samples):
            ext = EXTENSIONS[Path(path).suffix.lower()]
            sink.write({"__key__": f"{i:09d}", ext: Path(path).read_bytes(), "cls": label})
    counts = [min(per_shard, len(samples) - start) for start in range(0, len(samples), per_shard)]
    index = {
        "classes": classes,
        "shards": [{"file": f"shard-{k:06d}.tar", "samples": n} for k, n in enumerate(counts)],
    }
    (out / "shards.json").write_text(json.dumps(index, indent=1) + "\n")
    return index


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data_dir", type=Path, metavar="DIR", help="holds train/<class>/<image>")
    p.add_argument("out", type=Path, metavar="OUT", help="where the shards go")
    p.add_argument("--per-shard", type=int, default=1000, metavar="N", help="samples a shard")
    p.add_argument("--seed", type=int, default=0, help="of the training samples' shuffle")
    p.add_argument("--splits", nargs="+", default=["train", "val"], metavar="SPLIT")
    args = p.parse_args(argv)
    if args.per_shard < 1:
        p.error("--per-shard must be at least 1")
    splits = [s for s in args.splits if (args.data_dir / s).is_dir()]
    if "train" not in splits:
        p.error(f"{args.data_dir}: no train/ directory in it (expected train/<class>/<image>)")
    for split in splits:
        seed = args.seed if split == "train" else None  # evaluation data keeps its order
        index = write_split(args.data_dir / split, args.out / split, args.per_shard, seed)
        samples = sum(s["samples"] for s in index["shards"])
        print(
            f"{split}: {samples} images of {len(index['classes'])} classes in "
            f"{len(index['shards'])} shard(s), {args.out / split}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
