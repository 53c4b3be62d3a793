#!/usr/bin/env python3
"""Pack an ImageNet-style folder into WebDataset shards for train_resnet.py's --data-dir.

    python make_shards.py /path/to/imagenet /path/to/imagenet-shards --per-shard 1000 --jobs 16

reads SRC/<split>/<class>/<image> for each split present (train, val) and writes
DST/<split>/shard-NNNNNN.tar, each holding --per-shard samples: the image file as it was
(NAME.jpg, .png, ...) and its class number (NAME.cls: the class folders of train/ in sorted
order, from 0, as torchvision's ImageFolder numbers them), and DST/<split>/shards.json (the class
names and each shard's sample count, which the trainer reads instead of scanning the shards).
Training samples are shuffled before they are packed (--seed), so that each shard holds every
class; a shard of 1,000 ImageNet images is about 110 MB. Needs only `pip install webdataset`.

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

Every split is listed, and every label read, before the first shard is written. --jobs N writes
N shards at once, each in a process of its own. Each shard is written under a temporary name
and renamed when it is whole, so a conversion that stops (a job's time limit, say) picks up
where it was when it is run again with the same arguments: shards already written whole (their
members read back and checked against the plan) are kept, the rest written. A line on stderr
every --report-every shards says how far it has got, how fast, and how long is left.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import multiprocessing
import os
import random
import sys
import time
from contextlib import nullcontext
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
PLAN = ".make_shards.json"  # what the shards of a folder are to hold, for a later run to check


class Mistake(Exception):
    """Input that cannot be converted: printed as one line (error: ...), no traceback."""


def image_folder(root: Path, classes: list[str]) -> list[tuple[str, int]]:
    """The (path, class number) of every image under root/<class>/, numbered by ``classes``."""
    samples = []
    for name in sorted(e.name for e in os.scandir(root) if e.is_dir()):
        if name not in classes:
            raise Mistake(f"{root / name}: train/ has no class folder of that name")
        for dirpath, _, files in sorted(os.walk(root / name, followlinks=True)):
            for file in sorted(files):
                if Path(file).suffix.lower() in EXTENSIONS:
                    samples.append((os.path.join(dirpath, file), classes.index(name)))
    return samples


def flat_images(root: Path) -> list[Path]:
    """The images directly in root (a flat folder such as ImageNet's val/), by name."""
    return sorted(
        Path(e.path)
        for e in os.scandir(root)
        if e.is_file() and Path(e.name).suffix.lower() in EXTENSIONS
    )


def devkit_classes(meta: Path) -> dict[str, str]:
    """ILSVRC2012_ID -> class (WordNet id) from the devkit's meta.mat: its leaf synsets, read as
    torchvision's ImageNet dataset reads them (fields ILSVRC2012_ID, WNID, ..., num_children)."""
    try:
        from scipy.io import loadmat
    except ImportError:
        raise Mistake(
            f"{meta}: reading the devkit's meta.mat needs scipy (pip install scipy)"
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
        raise Mistake(f"--val-labels {path}: cannot be read ({exc})") from None
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
        raise Mistake(f"--val-labels {path}: {len(rows)} class numbers for {len(images)} images")
    meta = path.parent / "meta.mat"
    if not meta.is_file():
        raise Mistake(
            f"--val-labels {path}: its class numbers are named in the devkit's meta.mat, which "
            "is not beside it (ILSVRC2012_devkit_t12/data/ holds both)"
        )
    names = devkit_classes(meta)
    found = []
    for (line, (number,)), image in zip(rows, images, strict=True):
        if number not in names:
            raise Mistake(f"{path}:{line}: class number {number} is not in {meta}")
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
            raise Mistake(
                f"{path}:{line}: expected an image and its class, not {len(fields)} words"
            )
        name, label = fields
        if label in classes:
            labels[Path(name).stem] = classes.index(label)
        elif label.isdigit() and int(label) < len(classes):
            labels[Path(name).stem] = int(label)
        else:
            raise Mistake(
                f"{path}:{line}: {label!r} is neither a class folder of train/ nor a class "
                f"number below {len(classes)}"
            )
    missing = [image.name for image in images if image.stem not in labels]
    if missing:
        raise Mistake(
            f"--val-labels {path}: no class for {missing[0]} ({len(missing)} image(s) without one)"
        )
    return [labels[image.stem] for image in images]


def list_split(args, split: str, classes: list[str]) -> list[tuple[str, int]]:
    """(path, class number) of every image of SRC/<split>, in the order they are packed."""
    root = args.data_dir / split
    flat = flat_images(root)
    if flat and (split == "train" or args.val_labels is None):
        give = (
            "train/ needs a folder per class"
            if split == "train"
            else (
                "give their classes with --val-labels FILE (LOC_val_solution.csv, "
                "ILSVRC2012_validation_ground_truth.txt, or lines 'NAME CLASS')"
            )
        )
        raise Mistake(f"{root} holds {len(flat)} images in no class folder: {give}")
    samples = image_folder(root, classes)
    if flat:
        labels = val_labels(args.val_labels, flat, classes)
        samples += [(str(image), label) for image, label in zip(flat, labels, strict=True)]
    if not samples:
        raise Mistake(f"{root}: no images in class folders")
    if split == "train":  # evaluation data keep their order
        random.Random(args.seed).shuffle(samples)
    return samples


def shard_files(samples: list[tuple[str, int]], per_shard: int) -> list[list[tuple[str, str, int]]]:
    """The samples of each shard, as (image path, sample key, class number)."""
    keyed = [(path, f"{i:09d}", label) for i, (path, label) in enumerate(samples)]
    return [keyed[k : k + per_shard] for k in range(0, len(keyed), per_shard)]


def member_names(shard: list[tuple[str, str, int]]) -> list[str]:
    """The names of a shard's tar members: KEY.cls and KEY.jpg (or .png, ...) per sample."""
    names = []
    for path, key, _ in shard:
        names += [f"{key}.cls", f"{key}.{EXTENSIONS[Path(path).suffix.lower()]}"]
    return sorted(names)


def shard_name(k: int) -> str:
    return f"shard-{k:06d}.tar"


def is_whole(task: tuple[str, list[tuple[str, str, int]]]) -> bool:
    """Whether the tar file at a path holds a shard's members and nothing else (their headers
    are read, not their data: a file cut short fails to read to its end)."""
    import tarfile

    path, shard = task
    try:
        with tarfile.open(path) as tar:
            return sorted(tar.getnames()) == member_names(shard)
    except (tarfile.TarError, OSError):
        return False


def write_shard(task: tuple[str, int, list[tuple[str, str, int]]]) -> tuple[int, int, int]:
    """Write shard k of a split under a temporary name, then rename it: (k, samples, bytes)."""
    import webdataset as wds

    out, k, shard = task
    final = Path(out) / shard_name(k)
    partial = final.with_name(f".{final.stem}.partial")
    with open(partial, "wb") as f:
        with wds.TarWriter(f) as sink:
            for path, key, label in shard:
                ext = EXTENSIONS[Path(path).suffix.lower()]
                sink.write({"__key__": key, ext: Path(path).read_bytes(), "cls": label})
        f.flush()
        os.fsync(f.fileno())
    os.replace(partial, final)
    return k, len(shard), final.stat().st_size


class Progress:
    """A line on stderr every ``every`` shards: how many are done, how fast, how long is left."""

    def __init__(self, split: str, total: int, kept: int, every: int):
        self.split, self.total, self.every = split, total, every
        self.done, self.written, self.images = kept, 0, 0
        self.start = time.monotonic()

    def shard(self, images: int) -> None:
        self.done += 1
        self.written += 1
        self.images += images
        if self.written % self.every and self.done != self.total:
            return
        elapsed = max(time.monotonic() - self.start, 1e-9)
        left = (self.total - self.done) * elapsed / self.written
        hours, rest = divmod(round(left), 3600)
        print(
            f"{self.split}: {self.done}/{self.total} shards, {self.images / elapsed:.1f} "
            f"images/s, {hours}:{rest // 60:02d}:{rest % 60:02d} left",
            file=sys.stderr,
            flush=True,
        )


def plan_of(samples: list[tuple[str, int]], root: Path, per_shard: int) -> dict:
    """What a split's shards are to hold: the images (their paths under root and classes, in
    order, as a digest) and the shard size."""
    digest = hashlib.sha256()
    for path, label in samples:
        digest.update(f"{os.path.relpath(path, root)}\t{label}\n".encode())
    return {"images": len(samples), "per_shard": per_shard, "sha256": digest.hexdigest()}


def start_split(out: Path, plan: dict) -> None:
    """Check that out holds no shards of another conversion, record the plan, and remove the
    partial files of a conversion that was stopped."""
    out.mkdir(parents=True, exist_ok=True)
    recorded = out / PLAN
    earlier = json.loads(recorded.read_text()) if recorded.is_file() else None
    if earlier != plan and any(out.glob("shard-*.tar")):
        raise Mistake(
            f"{out} holds shards of another conversion (other images, --per-shard or --seed): "
            "remove them or choose another DST"
        )
    recorded.write_text(json.dumps(plan) + "\n")
    for stale in out.glob(".shard-*.partial"):
        stale.unlink()


def unwritten(split: str, out: Path, shards: list, each) -> list[int]:
    """The shards not yet written whole (checked with ``each``, a map), saying how many are."""
    checks = [(str(out / shard_name(k)), shard) for k, shard in enumerate(shards)]
    todo = [k for k, whole in enumerate(each(is_whole, checks)) if not whole]
    if len(todo) < len(shards):
        kept = len(shards) - len(todo)
        print(f"{split}: {kept} shard(s) already written whole: kept", file=sys.stderr)
    return todo


def write_split(args, split: str, samples: list[tuple[str, int]], classes: list[str]) -> dict:
    """Shards of the samples in DST/<split>; returns what shards.json says of them."""
    out = args.out / split
    shards = shard_files(samples, args.per_shard)
    start_split(out, plan_of(samples, args.data_dir / split, args.per_shard))
    parallel = args.jobs > 1 and len(shards) > 1
    with multiprocessing.Pool(min(args.jobs, len(shards))) if parallel else nullcontext() as pool:
        todo = unwritten(split, out, shards, pool.imap if parallel else map)
        every = args.report_every or max(1, len(shards) // 100)
        progress = Progress(split, len(shards), len(shards) - len(todo), every)
        each = pool.imap_unordered if parallel else map
        for _, count, _ in each(write_shard, ((str(out), k, shards[k]) for k in todo)):
            progress.shard(count)
        if parallel:  # let the writers end on their own (leaving the block would kill them)
            pool.close()
            pool.join()
    index = {
        "classes": classes,
        "shards": [{"file": shard_name(k), "samples": len(s)} for k, s in enumerate(shards)],
    }
    partial = out / ".shards.json.partial"
    partial.write_text(json.dumps(index, indent=1) + "\n")
    os.replace(partial, out / "shards.json")
    return index


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("data_dir", type=Path, metavar="SRC", help="holds train/<class>/<image>")
    p.add_argument("out", type=Path, metavar="DST", help="where the shards go")
    p.add_argument("--per-shard", type=int, default=1000, metavar="N", help="samples a shard")
    p.add_argument("--jobs", type=int, default=1, metavar="N", help="shards written at once")
    p.add_argument(
        "--val-labels",
        type=Path,
        metavar="FILE",
        help="the classes of the images directly in SRC/val/ (see above)",
    )
    p.add_argument("--seed", type=int, default=0, help="of the training samples' shuffle")
    p.add_argument("--splits", nargs="+", default=["train", "val"], metavar="SPLIT")
    p.add_argument(
        "--report-every",
        type=int,
        metavar="N",
        help="shards between progress lines (default: a hundredth of a split's shards)",
    )
    args = p.parse_args(argv)
    for name in ("per_shard", "jobs", "report_every"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    splits = [s for s in args.splits if (args.data_dir / s).is_dir()]
    if "train" not in splits:
        p.error(f"{args.data_dir}: no train/ directory in it (expected train/<class>/<image>)")
    if args.val_labels is not None and not args.val_labels.is_file():
        p.error(f"--val-labels {args.val_labels}: no such file")
    try:  # here, once: forked writer processes have it (it imports torch: seconds)
        import webdataset  # noqa: F401
    except ImportError as exc:
        p.error(f"writing shards needs webdataset ({exc}): pip install webdataset")
    classes = sorted(e.name for e in os.scandir(args.data_dir / "train") if e.is_dir())
    try:
        listed = {split: list_split(args, split, classes) for split in splits}
        for split in splits:
            index = write_split(args, split, listed[split], classes)
            print(
                f"{split}: {len(listed[split])} images of {len(classes)} classes in "
                f"{len(index['shards'])} shard(s), {args.out / split}",
                flush=True,
            )
    except Mistake as exc:
        raise SystemExit(f"error: {exc}") from None
    except OSError as exc:  # an image that cannot be read, a folder that cannot be written
        raise SystemExit(f"error: {exc}") from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
