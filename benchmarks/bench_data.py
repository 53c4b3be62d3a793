#!/usr/bin/env python3
"""Images/s a trainer's input pipeline feeds from an image folder, and what training from the
folder costs against training on synthetic batches.

Two measurements, for examples/pytorch/train_resnet.py or (--framework tensorflow)
examples/tensorflow/train_resnet_keras.py:

* the loader alone: the trainer's own pipeline for the folder (its functions, imported), no
  model, for each --loaders choice and each --workers count (PyTorch: loader processes;
  TensorFlow: tf.data threads, 0 = tf.data's own choice). A loader that cannot run here (the
  GPU decoders on a machine without a GPU) is listed with the reason;
* the trainer: the same run on synthetic batches and on the folder, alternating --repeats
  times; the ratio of the best of each is what reading and decoding JPEGs costs the run.

Without --data-dir a folder of synthetic JPEGs is made first (benchmarks/make_jpeg_folder.py;
--images of them, 500 x 375 pixels as a typical ImageNet photo). Prints one JSON record;
``--output FILE`` also writes it. Not a test: the figures depend on the machine.

    python benchmarks/bench_data.py --workers 0 1 2                        # this machine's CPUs
    python benchmarks/bench_data.py --data-dir /path/to/imagenet --device cuda \\
        --loaders cpu gpu-decode dali --workers 4 8 16 --batch-size 256 \\
        --output results/bench/pytorch-data-h100.json                      # a GPU node
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path

import record

MAKE_SHARDS = record.ROOT / "examples" / "data" / "make_shards.py"
TRAINERS = {
    "pytorch": record.ROOT / "examples" / "pytorch" / "train_resnet.py",
    "tensorflow": record.ROOT / "examples" / "tensorflow" / "train_resnet_keras.py",
}


def load(path: Path):
    if str(path.parent) not in sys.path:  # train_resnet.py imports job_runtime.py beside it
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timed(batches, count: int, warmup: int, size_of) -> float:
    """Images/s over ``count`` batches after ``warmup`` untimed ones."""
    it = iter(batches)
    try:
        for _ in range(warmup):
            next(it)
        images, start = 0, time.perf_counter()
        for _ in range(count):
            images += size_of(next(it))
    except StopIteration:
        raise SystemExit(
            f"error: the data hold fewer than {warmup} + {count} batches: lower --warmup and "
            "--batches, or give more images"
        ) from None
    return images / (time.perf_counter() - start)


def pytorch_loader(trainer, args, loader: str, workers: int, data_dir: Path) -> float:
    import torch

    device = torch.device(args.device)
    targs = trainer.parse_args(
        [
            *("--data-dir", str(data_dir), "--loader", loader),
            *("--workers", str(workers), "--batch-size", str(args.batch_size)),
            *("--image-size", str(args.image_size), "--device", args.device),
        ]
    )
    trainer.check_loader(targs, device)  # Abort, naming the reason, where it cannot run
    batches = trainer.make_batches(targs, "train", 0, 1, device, num_classes=1000)
    batches.start(0, 0)

    def size_of(batch) -> int:
        if device.type == "cuda":
            torch.cuda.synchronize()
        return len(batch[1])

    return timed(batches, args.batches, args.warmup, size_of)


def tensorflow_loader(trainer, args, loader: str, workers: int, data_dir: Path) -> float:
    if loader != "cpu":
        raise ValueError("train_resnet_keras.py reads folders with tf.data only (--loaders cpu)")
    targs = trainer.parse_args(
        [
            *("--data-dir", str(data_dir), "--batch-size", str(args.batch_size)),
            *("--image-size", str(args.image_size), "--data-threads", str(workers)),
        ]
    )
    steps_per_epoch = max(1, len(targs.train_files[0]) // args.batch_size)
    total = args.warmup + args.batches
    strategy = trainer.tf.distribute.get_strategy()
    batches = trainer.train_input(targs, strategy, 0, total, steps_per_epoch)
    return timed(batches, args.batches, args.warmup, lambda batch: int(batch[-1].shape[0]))


def loader_rates(args) -> tuple[dict[str, float], dict[str, str]]:
    """Images/s of each (loader, workers) that runs here; the reason for each that does not."""
    trainer = load(TRAINERS[args.framework])
    measure = pytorch_loader if args.framework == "pytorch" else tensorflow_loader
    rates, not_run = {}, {}
    for form, data_dir in args.forms.items():
        for loader in args.loaders:
            for workers in args.workers:
                name = f"{form} {loader}"
                try:
                    rate = measure(trainer, args, loader, workers, data_dir)
                except (getattr(trainer, "Abort", ValueError), ValueError, ImportError) as exc:
                    not_run[name] = str(exc)
                    break
                rates[f"{name} workers={workers}"] = round(rate, 1)
                print(f"loader {name}, workers {workers}: {rate:.1f} img/s", file=sys.stderr)
    return rates, not_run


def training_rates(args) -> tuple[dict[str, list[float]], dict[str, str]]:
    """The trainer's [summary] rate on synthetic batches and on the folder, alternately."""
    trainer = TRAINERS[args.framework]
    common = [
        *("--batch-size", str(args.batch_size), "--image-size", str(args.image_size)),
        *("--steps", str(args.train_steps), "--arch", args.arch, "--log-every", "1000"),
    ]
    common += args.trainer_flag
    workers = "--workers" if args.framework == "pytorch" else "--data-threads"
    if args.framework == "pytorch":
        common += ["--device", args.device]
    kinds = {"synthetic": []}
    for form, data_dir in args.forms.items():
        kinds[form] = ["--data-dir", str(data_dir), workers, str(max(args.workers))]
    runs: dict[str, list[float]] = {kind: [] for kind in kinds}
    commands = {}
    for _ in range(max(1, args.repeats)):
        for kind, extra in kinds.items():
            with tempfile.TemporaryDirectory() as tmp:
                cmd = [sys.executable, str(trainer), *common, *extra]
                cmd += ["--checkpoint-dir", str(Path(tmp) / "ckpt")]
                rate, shown = record.trainer_rate(cmd, trainer)
            runs[kind].append(round(rate, 1))
            commands[kind] = " ".join(
                "DIR" if part.startswith(tempfile.gettempdir()) else part for part in shown.split()
            )
            print(f"trainer, {kind}: {rate:.1f} img/s", file=sys.stderr)
    return runs, commands


def versions(framework: str) -> dict[str, str]:
    if framework == "pytorch":
        import torch
        import torchvision

        return {"torch": torch.__version__, "torchvision": torchvision.__version__}
    import tensorflow as tf

    return {"tensorflow": tf.__version__}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--framework", choices=sorted(TRAINERS), default="pytorch")
    p.add_argument("--data-dir", type=Path, help="an ImageNet-style folder (train/<class>/)")
    p.add_argument("--images", type=int, default=400, help="without --data-dir: JPEGs to make")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="PyTorch's device")
    p.add_argument("--loaders", nargs="+", default=["cpu"], choices=["cpu", "gpu-decode", "dali"])
    p.add_argument("--workers", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--batches", type=int, default=10, help="timed batches of the loader alone")
    p.add_argument("--warmup", type=int, default=2, help="untimed batches first")
    p.add_argument("--arch", help="the trainer's model (default: resnet50 / ResNet50)")
    p.add_argument("--train-steps", type=int, default=6, help="steps of each training run")
    p.add_argument("--repeats", type=int, default=2, help="training runs of each kind")
    p.add_argument("--no-train", action="store_true", help="the loader alone")
    p.add_argument(
        "--forms",
        nargs="+",
        default=["folder"],
        choices=["folder", "shards"],
        help="what the data is read from: the folder, and (PyTorch) WebDataset shards of the "
        "same images made with examples/data/make_shards.py",
    )
    p.add_argument(
        "--trainer-flag",
        action="append",
        default=[],
        metavar="FLAG",
        help="one more flag for every training run (repeat it: --trainer-flag=--precision=bf16)",
    )
    p.add_argument("--output", type=Path, help="also write the JSON record here")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    args.forms_wanted = args.forms
    args.arch = args.arch or ("resnet50" if args.framework == "pytorch" else "ResNet50")
    with tempfile.TemporaryDirectory() as tmp:
        made = args.data_dir is None
        if made:
            per_class = max(1, args.images // 4)
            load(Path(__file__).with_name("make_jpeg_folder.py")).make_folder(
                Path(tmp), 4, per_class, 1, size=(500, 375)
            )
            args.data_dir = Path(tmp)
        args.forms = {"folder": args.data_dir}
        if "shards" in args.forms_wanted:
            shards = Path(tmp) / "shards"
            load(MAKE_SHARDS).main([str(args.data_dir), str(shards), "--per-shard", "100"])
            args.forms["shards"] = shards
        if "folder" not in args.forms_wanted:
            del args.forms["folder"]
        rates, not_run = loader_rates(args)
        runs, commands = ({}, {}) if args.no_train else training_rates(args)
        settings = {k: v for k, v in vars(args).items() if k not in ("output", "forms")}
        settings["data_dir"] = (
            f"{args.images} synthetic JPEGs, 500x375" if made else str(args.data_dir)
        )
    result = {
        "benchmark": f"{args.framework}-input-pipeline",
        **record.header(
            {"cpu": record.cpu_name(), "cores": os.cpu_count()}, versions(args.framework)
        ),
        "settings": settings,
        "loader_alone_img_s": rates,
        "loaders_not_run": not_run,
    }
    if runs:
        result["trainer_img_s"] = {k: max(v) for k, v in runs.items()}
        result["all_runs_img_s"] = runs
        for form in args.forms:
            ratio = max(runs[form]) / max(runs["synthetic"])
            result[f"{form}_to_synthetic"] = round(ratio, 3)
        result["trainer_commands"] = commands
    record.write(result, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
