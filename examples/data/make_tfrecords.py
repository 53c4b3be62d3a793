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

ImageNet's validation images often come in one flat folder, val/ILSVRC2012_val_00000001.JPEG
and so on, with their classes in a separate file; give it with --val-labels FILE. Its format is
recognised from its contents:

    LOC_val_solution.csv                   Kaggle's: ImageId,PredictionString (class first)
    ILSVRC2012_validation_ground_truth.txt the devkit's: one class number a line, for the images
                                           in name order; the devkit's data/meta.mat beside it
                                           maps the numbers to classes (needs scipy)
    lines "NAME CLASS"                     an image (its name, with or without its extension)
                                           and its class folder name, or its class number
                                           counted from 0 (as in Caffe's val.txt)

Every split is listed, and every label read, before the first file is written. --jobs threads
write that many files at once. Each file is written under a temporary name and renamed when it
is whole, so a conversion that stops (a job's time limit, say) picks up where it was when it is
run again with the same arguments: files already written whole (their records counted from the
record headers, the data skipped) are kept, the rest written. A line on stderr every
--report-every files says how far it has got, how fast, and how long is left.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import random
import re
import struct
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

IMAGE_SUFFIXES = {".jpeg", ".jpg", ".png", ".bmp", ".gif"}  # what the trainer's folder path reads
RECORD_NAME = re.compile(r"\.tfrecords?$|-\d+-of-\d+")  # how the trainer recognises the files
INDEX = "index.json"
PLAN = ".make_tfrecords.json"  # what the files of a folder are to hold, for a later run to check


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
        "--val-labels",
        type=Path,
        metavar="FILE",
        help="the classes of the images directly in IMAGES/val/ (see above)",
    )
    p.add_argument(
        "--report-every",
        type=int,
        help="files between progress lines (default: a hundredth of a split's files)",
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


def devkit_classes(meta: Path) -> dict[str, str]:
    """ILSVRC2012_ID -> class (WordNet id) from the devkit's meta.mat: its leaf synsets, read as
    torchvision's ImageNet dataset reads them (fields ILSVRC2012_ID, WNID, ..., num_children)."""
    try:
        from scipy.io import loadmat
    except ImportError:
        raise SystemExit(
            f"error: {meta}: reading the devkit's meta.mat needs scipy (pip install scipy)"
        ) from None
    synsets = loadmat(str(meta), squeeze_me=True)["synsets"]
    return {str(int(s[0])): str(s[1]) for s in synsets if int(s[4]) == 0}


def label_rows(path: Path) -> list[tuple[int, list[str]]]:
    """(line number, fields) of each line of a labels file that holds any. Kaggle's CSV file
    (a header starting ImageId,PredictionString) gives (image, the first word of its
    prediction string); other files give their whitespace-separated words."""
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise SystemExit(f"error: --val-labels {path}: cannot be read ({exc})") from None
    if not lines or not lines[0].startswith("ImageId,"):
        return [(n, line.split()) for n, line in enumerate(lines, 1) if line.strip()]
    rows = []
    for n, row in enumerate(csv.reader(lines[1:]), 2):
        if row:
            image, words = row[0], (row[1] if len(row) > 1 else "").split()
            rows.append((n, [image, *words[:1]]))
    return rows


def devkit_rows(path: Path, rows: list, images: list[Path]) -> list[tuple[int, list[str]]]:
    """The devkit's ground truth (class numbers, one a line, for the images in name order) as
    (line number, [image, class]), the numbers named by meta.mat beside the file."""
    if len(rows) != len(images):
        raise SystemExit(
            f"error: --val-labels {path}: {len(rows)} class numbers for {len(images)} images"
        )
    meta = path.parent / "meta.mat"
    if not meta.is_file():
        raise SystemExit(
            f"error: --val-labels {path}: its class numbers are named in the devkit's meta.mat, "
            "which is not beside it (ILSVRC2012_devkit_t12/data/ holds both)"
        )
    names = devkit_classes(meta)
    found = []
    for (line, (number,)), image in zip(rows, images, strict=True):
        if number not in names:
            raise SystemExit(f"error: {path}:{line}: class number {number} is not in {meta}")
        found.append((line, [image.name, names[number]]))
    return found


def val_labels(path: Path, images: list[Path], classes: list[str]) -> list[int]:
    """The class number of each of ``images`` (a flat folder, by name) from the labels file."""
    rows = label_rows(path)
    if rows and all(len(f) == 1 and f[0].isdigit() for _, f in rows):
        rows = devkit_rows(path, rows, images)
    labels: dict[str, int] = {}
    for line, fields in rows:
        if len(fields) != 2:
            raise SystemExit(
                f"error: {path}:{line}: expected an image and its class, not {len(fields)} words"
            )
        name, label = fields
        if label in classes:
            labels[Path(name).stem] = classes.index(label)
        elif label.isdigit() and int(label) < len(classes):
            labels[Path(name).stem] = int(label)
        else:
            raise SystemExit(
                f"error: {path}:{line}: {label!r} is neither a class folder of the first split "
                f"nor a class number below {len(classes)}"
            )
    missing = [image.name for image in images if image.stem not in labels]
    if missing:
        raise SystemExit(
            f"error: --val-labels {path}: no class for {missing[0]} ({len(missing)} image(s) "
            "without one)"
        )
    return [labels[image.stem] for image in images]


def list_split(
    folder: Path, classes: list[str], first: Path, labels: Path | None
) -> list[tuple[Path, int]]:
    """(image, label) for every image of folder/<class>/, the classes those of ``first``, and
    of the images directly in folder, their classes from ``labels``."""
    flat = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if flat and (folder == first or labels is None):
        give = (
            f"{first} needs a folder per class"
            if folder == first
            else (
                "give their classes with --val-labels FILE (LOC_val_solution.csv, "
                "ILSVRC2012_validation_ground_truth.txt, or lines 'NAME CLASS')"
            )
        )
        raise SystemExit(f"error: {folder} holds {len(flat)} images in no class folder: {give}")
    found = []
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        if sub.name not in classes:
            raise SystemExit(f"error: {sub}: {first} has no class folder of that name")
        label = classes.index(sub.name)
        found += [(f, label) for f in sorted(sub.iterdir()) if f.suffix.lower() in IMAGE_SUFFIXES]
    if flat:
        found += list(zip(flat, val_labels(labels, flat, classes), strict=True))
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


def record_count(path: Path) -> int | None:
    """The records of a TFRecord file, counted from their headers (each record is its length as
    8 bytes, 4 bytes of checksum, the data and 4 more), the data skipped; None for a file that
    does not end where a record does (one cut short, say) or cannot be read."""
    count = offset = 0
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            while offset < size:
                head = f.read(8)
                if len(head) < 8:
                    return None
                offset += 16 + struct.unpack("<Q", head)[0]
                f.seek(offset)
                count += 1
    except OSError:
        return None
    return count if offset == size else None


def plan_of(args, images: list[tuple[Path, int]], shards: int, root: Path) -> dict:
    """What a split's files are to hold: the images (their paths under root and labels, in
    order, as a digest), the number of files and the quality of re-encoded images."""
    digest = hashlib.sha256()
    for path, label in images:
        digest.update(f"{os.path.relpath(path, root)}\t{label}\n".encode())
    return {
        "images": len(images),
        "files": shards,
        "quality": args.quality,
        "sha256": digest.hexdigest(),
    }


def start_split(out: Path, plan: dict) -> None:
    """Check that out holds no TFRecord files of another conversion, record the plan, and
    remove the partial files of a conversion that was stopped."""
    out.mkdir(parents=True, exist_ok=True)
    recorded = out / PLAN
    earlier = json.loads(recorded.read_text(encoding="utf-8")) if recorded.is_file() else None
    if earlier != plan and any(RECORD_NAME.search(p.name) for p in out.iterdir()):
        raise SystemExit(
            f"error: {out} already holds TFRecord files of another conversion (other images or "
            "settings); remove them or choose another OUT"
        )
    recorded.write_text(json.dumps(plan) + "\n", encoding="utf-8")
    for stale in out.glob(".*.partial"):
        stale.unlink()


class Progress:
    """A line on stderr every ``every`` files: how many are done, how fast, how long is left."""

    def __init__(self, split: str, total: int, kept: int, every: int):
        self.split, self.total, self.every = split, total, every
        self.done, self.written, self.images = kept, 0, 0
        self.start = time.monotonic()

    def file(self, images: int) -> None:
        self.done += 1
        self.written += 1
        self.images += images
        if self.written % self.every and self.done != self.total:
            return
        elapsed = max(time.monotonic() - self.start, 1e-9)
        left = (self.total - self.done) * elapsed / self.written
        hours, rest = divmod(round(left), 3600)
        print(
            f"{self.split}: {self.done}/{self.total} files, {self.images / elapsed:.1f} "
            f"images/s, {hours}:{rest // 60:02d}:{rest % 60:02d} left",
            file=sys.stderr,
            flush=True,
        )


def convert(tf, args, split: str, images: list[tuple[Path, int]], classes: list[str]) -> dict:
    """Write the split's files (those not already whole) and its index; the index."""
    images = list(images)
    random.Random(args.seed).shuffle(images)
    n = len(images)
    shards = min(n, args.shards or -(-n // args.per_shard))  # no empty files
    out = args.out / split
    start_split(out, plan_of(args, images, shards, args.images / split))

    def name(k: int) -> str:
        return f"{split}-{k:05d}-of-{shards:05d}.tfrecord"

    def mine(k: int) -> list[tuple[Path, int]]:
        return images[k * n // shards : (k + 1) * n // shards]  # sizes differ by one at most

    def write(k: int) -> int:
        partial = out / f".{k:05d}.partial"  # a name the trainer does not take for a file
        with tf.io.TFRecordWriter(str(partial)) as writer:
            for image, label in mine(k):
                writer.write(example(tf, image, label, classes[label], args.quality))
        os.replace(partial, out / name(k))
        return len(mine(k))

    pool = ThreadPoolExecutor(max(1, args.jobs))
    try:
        counts = pool.map(lambda k: record_count(out / name(k)), range(shards))
        todo = [k for k, count in enumerate(counts) if count != len(mine(k))]
        if len(todo) < shards:
            kept = shards - len(todo)
            print(f"{split}: {kept} file(s) already written whole: kept", file=sys.stderr)
        every = args.report_every or max(1, shards // 100)
        progress = Progress(split, shards, shards - len(todo), every)
        for done in as_completed([pool.submit(write, k) for k in todo]):
            progress.file(done.result())
    finally:  # a bad image, Ctrl-C: the files not begun are not begun, partial ones removed
        pool.shutdown(cancel_futures=True)
        for stale in out.glob(".*.partial"):
            stale.unlink()
    files = {
        name(k): {"records": len(mine(k)), "bytes": (out / name(k)).stat().st_size}
        for k in range(shards)
    }
    index = {"classes": classes, "first_label": 0, "records": n, "files": files}
    partial = out / f".{INDEX}.partial"
    partial.write_text(json.dumps(index, indent=1) + "\n", encoding="utf-8")
    os.replace(partial, out / INDEX)
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
    for name in ("shards", "per_shard", "jobs", "report_every"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if not 1 <= args.quality <= 100:
        parser.error("--quality must be between 1 and 100")
    splits = [s for s in args.splits if args.index is None and (args.images / s).is_dir()]
    if args.index is None and (not splits or splits[0] != args.splits[0]):
        parser.error(f"{args.images}/{args.splits[0]}: no such directory (IMAGES/<split>/<class>/)")
    if args.val_labels is not None and not args.val_labels.is_file():
        parser.error(f"--val-labels {args.val_labels}: no such file")
    for split in splits:
        (args.out / split).mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's INFO and warnings: hidden
    import tensorflow as tf  # imported here, so that --help and mistakes answer at once

    if args.index is not None:
        index_existing(tf, args.index)
        return 0
    first = args.images / splits[0]
    classes = sorted(p.name for p in first.iterdir() if p.is_dir())
    images = {s: list_split(args.images / s, classes, first, args.val_labels) for s in splits}
    for split in splits:
        convert(tf, args, split, images[split], classes)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except OSError as exc:  # a folder that cannot be made or written, a file that cannot be read
        sys.exit(f"error: {exc}")
