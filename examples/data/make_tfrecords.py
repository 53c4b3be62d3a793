#!/usr/bin/env python3
"""Convert an image folder to the TFRecord files that train_resnet_keras.py --data-dir reads.

    python make_tfrecords.py IMAGES OUT                  # IMAGES/train/<class>/*, IMAGES/val/...
    python make_tfrecords.py --shards 1024 --jobs 16 IMAGES OUT
    python make_tfrecords.py --index DIR                 # TFRecord files made elsewhere

writes OUT/<split>/<split>-00000-of-00008.tfrecord, ... and OUT/<split>/index.json. Each record is
a tf.train.Example with the features of TensorFlow's ImageNet converter (TF-slim's
build_imagenet_data.py): image/encoded (JPEG bytes), image/height, image/width, image/format,
image/filename, image/class/label (int64) and image/class/text (the class folder's name).

Labels count from 0, in the sorted order of the class folder names of the first split, as
torchvision's ImageFolder and the trainer's image-folder path number them. (TF-slim's ImageNet
files count from 1 and keep 0 for a background class; the trainer's --label-offset handles both.)
JPEG files are copied unchanged once they decode; other images (PNG, GIF, BMP) and CMYK JPEGs are
decoded and stored as RGB JPEGs (--quality). The images are shuffled (--seed) before they are
dealt out to the files, so that every file holds a mix of classes.

index.json holds the class names in label order, the first label, and the records and bytes of
every file: the trainer reads it instead of counting records, and stops when a file has changed.
--index writes one for existing files (it reads every record once, and names a damaged file).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

IMAGE_SUFFIXES = {".jpeg", ".jpg", ".png", ".bmp", ".gif"}  # what the trainer's folder path reads
RECORD_NAME = re.compile(r"\.tfrecords?$|-\d+-of-\d+")  # how the trainer recognises the files
INDEX = "index.json"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("images", type=Path, nargs="?", help="folder with <split>/<class>/<image>")
    p.add_argument("out", type=Path, nargs="?", help="where <split>/*.tfrecord files go")
    size = p.add_mutually_exclusive_group()
    size.add_argument(
        "--shards",
        type=int,
        help="files per split; at least the number of workers that will read them (each "
        "reads its own files), best a multiple of it",
    )
    size.add_argument(
        "--per-shard",
        type=int,
        default=1024,
        help="images per file when --shards is not given (TF-slim's ImageNet files hold about "
        "1,250, some 140 MB)",
    )
    p.add_argument(
        "--splits",
        type=lambda text: text.split(","),
        default="train,val",
        help="the splits to convert, if present; the first must be",
    )
    p.add_argument("--quality", type=int, default=95, help="JPEG quality of re-encoded images")
    p.add_argument("--seed", type=int, default=0, help="the order images are dealt to files in")
    p.add_argument(
        "--jobs",
        type=int,
        default=min(8, os.cpu_count() or 1),
        help="files written at the same time, by as many threads",
    )
    p.add_argument(
        "--index",
        type=Path,
        metavar="DIR",
        help="instead of converting: read the TFRecord files in DIR (*.tfrecord, *-of-*) and "
        "write DIR/index.json; the first label is the smallest one found (1 for TF-slim's "
        "ImageNet files), the class names come from image/class/synset or image/class/text",
    )
    return p


def list_split(folder: Path, classes: list[str], first: Path) -> list[tuple[Path, int]]:
    """(image, label) for every image of folder/<class>/; the classes are those of ``first``."""
    found = []
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        if sub.name not in classes:
            raise SystemExit(f"error: {sub}: {first} has no class folder of that name")
        label = classes.index(sub.name)
        found += [(f, label) for f in sorted(sub.iterdir()) if f.suffix.lower() in IMAGE_SUFFIXES]
    if not found:
        suffixes = ", ".join(sorted(IMAGE_SUFFIXES))
        raise SystemExit(f"error: {folder} holds no images in class folders ({suffixes})")
    return found


def as_jpeg(tf, path: Path, quality: int) -> tuple[bytes, int, int]:
    """The image as RGB or greyscale JPEG bytes, and its height and width."""
    data = path.read_bytes()
    try:
        if data[:3] == b"\xff\xd8\xff":
            image = tf.io.decode_jpeg(data)  # decoded once, so that a damaged file shows now
            if int(tf.io.extract_jpeg_shape(data)[2]) in (1, 3):  # not CMYK (decoded as RGB)
                return data, image.shape[0], image.shape[1]
        else:
            image = tf.io.decode_image(data, channels=3, expand_animations=False)
    except tf.errors.OpError as exc:
        first = (exc.message or str(exc)).strip().splitlines()[0]
        raise SystemExit(f"error: {path}: not an image TensorFlow can decode ({first})") from None
    jpeg = tf.io.encode_jpeg(image, quality=quality).numpy()
    return jpeg, image.shape[0], image.shape[1]


def example(tf, path: Path, label: int, name: str, quality: int) -> bytes:
    data, height, width = as_jpeg(tf, path, quality)

    def ints(v):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))

    def text(v):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v]))

    features = {
        "image/encoded": text(data),
        "image/format": text(b"JPEG"),
        "image/height": ints(height),
        "image/width": ints(width),
        "image/filename": text(path.name.encode()),
        "image/class/label": ints(label),
        "image/class/text": text(name.encode()),
    }
    return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()


def convert(tf, args, split: str, images: list[tuple[Path, int]], classes: list[str]) -> dict:
    """Write the split's files and its index; the index."""
    images = list(images)
    random.Random(args.seed).shuffle(images)
    n = len(images)
    shards = min(n, args.shards or -(-n // args.per_shard))  # no empty files
    out = args.out / split

    def name(k: int) -> str:
        return f"{split}-{k:05d}-of-{shards:05d}.tfrecord"

    def write(k: int) -> tuple[str, int]:
        path = out / name(k)
        mine = images[k * n // shards : (k + 1) * n // shards]  # sizes differ by one at most
        with tf.io.TFRecordWriter(str(path)) as writer:
            for image, label in mine:
                writer.write(example(tf, image, label, classes[label], args.quality))
        return path.name, len(mine)

    try:
        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            written = dict(pool.map(write, range(shards)))
    except BaseException:  # a bad image, Ctrl-C: no half-written split is left behind
        for k in range(shards):
            (out / name(k)).unlink(missing_ok=True)
        raise
    files = {
        name: {"records": count, "bytes": (out / name).stat().st_size}
        for name, count in written.items()
    }
    index = {"classes": classes, "first_label": 0, "records": n, "files": files}
    (out / INDEX).write_text(json.dumps(index, indent=1) + "\n", encoding="utf-8")
    print(f"{split}: {n} images of {len(classes)} classes in {shards} files in {out}", flush=True)
    return index


def index_existing(tf, folder: Path) -> dict:
    """Count the records of the TFRecord files in folder; their labels give the classes."""
    files = sorted(p for p in folder.glob("*") if p.is_file() and RECORD_NAME.search(p.name))
    if not files:
        raise SystemExit(f"error: {folder} holds no TFRecord files (*.tfrecord, *-NNNNN-of-NNNNN)")
    spec = {
        "image/class/label": tf.io.FixedLenFeature([], tf.int64, -1),
        "image/class/synset": tf.io.FixedLenFeature([], tf.string, ""),
        "image/class/text": tf.io.FixedLenFeature([], tf.string, ""),
    }
    names: dict[int, str] = {}
    counts = {}
    for path in files:
        count = 0
        try:
            for batch in tf.data.TFRecordDataset(str(path)).batch(1024):
                parsed = tf.io.parse_example(batch, spec)
                count += len(batch)
                for label, synset, text in zip(*(parsed[k].numpy() for k in spec)):  # noqa: B905
                    if label < 0:
                        raise SystemExit(f"error: {path}: a record has no image/class/label")
                    names.setdefault(int(label), (synset or text).decode() or str(label))
        except tf.errors.OpError as exc:
            reason = re.search(r"corrupted record at \d+", str(exc))
            why = reason[0] if reason else str(exc).strip().splitlines()[0]
            raise SystemExit(f"error: {path}: damaged TFRecord file ({why})") from None
        counts[path.name] = {"records": count, "bytes": path.stat().st_size}
    first, last = min(names), max(names)
    classes = [names.get(label, str(label)) for label in range(first, last + 1)]
    total = sum(c["records"] for c in counts.values())
    index = {"classes": classes, "first_label": first, "records": total, "files": counts}
    try:
        (folder / INDEX).write_text(json.dumps(index, indent=1) + "\n", encoding="utf-8")
    except OSError as exc:  # a shared, read-only copy: index links to it instead
        raise SystemExit(
            f"error: cannot write {folder / INDEX} ({exc.strerror}); link the files into a "
            "folder of your own and index that"
        ) from None
    print(f"{folder}: {total} records, labels {first}..{last}, {len(files)} files", flush=True)
    return index


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.index is None and (args.images is None or args.out is None):
        parser.error("give IMAGES and OUT, or --index DIR")
    if args.index is not None and args.images is not None:
        parser.error("--index DIR takes no IMAGES or OUT")
    for name in ("shards", "per_shard", "jobs"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if not 1 <= args.quality <= 100:
        parser.error("--quality must be between 1 and 100")
    splits = [s for s in args.splits if args.index is None and (args.images / s).is_dir()]
    if args.index is None and (not splits or splits[0] != args.splits[0]):
        parser.error(f"{args.images}/{args.splits[0]}: no such directory (IMAGES/<split>/<class>/)")
    for split in splits:
        out = args.out / split
        if out.is_dir() and any(RECORD_NAME.search(p.name) for p in out.iterdir()):
            parser.error(f"{out} already holds TFRecord files; remove them or choose another OUT")
        out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's INFO and warnings: hidden
    import tensorflow as tf  # imported here, so that --help and mistakes answer at once

    if args.index is not None:
        index_existing(tf, args.index)
        return 0
    first = args.images / splits[0]
    classes = sorted(p.name for p in first.iterdir() if p.is_dir())
    images = {split: list_split(args.images / split, classes, first) for split in splits}
    for split in splits:
        convert(tf, args, split, images[split], classes)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except OSError as exc:  # a folder that cannot be made or written, a file that cannot be read
        sys.exit(f"error: {exc}")
