#!/usr/bin/env python3
"""Memory that one loader process of examples/pytorch/train_resnet.py holds, for WebDataset
shards and for an image folder, measured on this machine.

The trainer's own loader (its functions, imported) reads a folder of synthetic JPEGs
(benchmarks/make_jpeg_folder.py, 500 x 375 pixels as a typical ImageNet photo), or the same
images packed into shards, through --workers loader processes, with each --shuffle-buffer given
(the trainer's SHUFFLE_BUFFER, which only the shard loader uses). After --batches batches,
enough for each reader's buffer to fill, it reads each loader process's memory from Linux's
/proc/PID/smaps_rollup: RSS (all pages it maps, counting those it shares with the rank it was
forked from), PSS (shared pages divided among their sharers) and USS (its private pages: what
it adds to the job's memory), and the rank's own RSS. No model is built. Prints one JSON
record; --output FILE also writes it. Not a test: the figures depend on the machine.

    python benchmarks/bench_loader_memory.py --output results/bench/cpu-2core-loader-memory.json
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import platform
import sys
import tempfile
from pathlib import Path

import record

TRAINER = record.ROOT / "examples" / "pytorch" / "train_resnet.py"
MAKE_SHARDS = record.ROOT / "examples" / "data" / "make_shards.py"


def load(path: Path):
    if str(path.parent) not in sys.path:  # train_resnet.py imports job_runtime.py beside it
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def memory_mib(pid: int) -> dict[str, float]:
    """RSS, PSS and USS (private pages) of a process, in MiB, from /proc/PID/smaps_rollup."""
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, value, *_ = line.split()
        fields[name.rstrip(":")] = int(value) / 1024  # kB
    uss = fields["Private_Clean"] + fields["Private_Dirty"]
    return {"rss": round(fields["Rss"], 1), "pss": round(fields["Pss"], 1), "uss": round(uss, 1)}


def measure(trainer, args, data_dir: Path, buffer: int) -> dict:
    """Each loader process's memory after --batches batches of an epoch, and the rank's."""
    import torch

    trainer.SHUFFLE_BUFFER = buffer  # read by the loader processes, forked after this
    targs = trainer.parse_args(
        [
            *("--data-dir", str(data_dir), "--workers", str(args.workers)),
            *("--batch-size", str(args.batch_size), "--image-size", str(args.image_size)),
            *("--device", "cpu", "--mp-start-method", "fork"),
        ]
    )
    batches = trainer.make_batches(targs, "train", 0, 1, torch.device("cpu"), 1000)
    batches.start(0, 0)
    loader = iter(batches.loader)
    try:
        for _ in range(args.batches):
            next(loader)
        processes = [memory_mib(w.pid) for w in loader._workers]
    finally:
        loader._shutdown_workers()
    return {"loader_processes_mib": processes, "rank_mib": memory_mib(os.getpid())}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--images", type=int, default=1600, help="training images made")
    p.add_argument("--per-shard", type=int, default=100, help="images a shard")
    p.add_argument("--workers", type=int, default=2, help="loader processes")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--image-size", type=int, default=224, help="crop size")
    p.add_argument(
        "--shuffle-buffers",
        type=int,
        nargs="+",
        default=[10, 300],
        metavar="N",
        help="shuffle buffers to measure the shard loader with",
    )
    p.add_argument(
        "--batches",
        type=int,
        default=20,
        help="batches taken before measuring: a buffer of N fills once its reader has given "
        "about N - 100 samples (webdataset's shuffle starts giving at 100, then reads two for "
        "each it gives), if the reader's share is more than about 2N + 100",
    )
    p.add_argument("--output", type=Path, help="also write the JSON record here")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    import PIL
    import torch
    import torchvision
    import webdataset

    trainer = load(TRAINER)
    make_jpeg_folder = load(Path(__file__).with_name("make_jpeg_folder.py"))
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder, shards = Path(tmp) / "jpegs", Path(tmp) / "shards"
        made, size = make_jpeg_folder.make_folder(folder, 10, args.images // 10, 0)
        with contextlib.redirect_stdout(sys.stderr):
            load(MAKE_SHARDS).main([str(folder), str(shards), "--per-shard", str(args.per_shard)])
        results["folder"] = measure(trainer, args, folder, trainer.SHUFFLE_BUFFER)
        for buffer in args.shuffle_buffers:
            results[f"shards, shuffle buffer {buffer}"] = measure(trainer, args, shards, buffer)
    batch_mib = args.batch_size * 3 * args.image_size**2 / 2**20
    out = {
        "benchmark": "pytorch-loader-memory",
        **record.header(
            {"cpu": record.cpu_name(), "cores": os.cpu_count(), "machine": platform.machine()},
            {
                "torch": torch.__version__,
                "torchvision": torchvision.__version__,
                "webdataset": webdataset.__version__,
                "pillow": PIL.__version__,
            },
        ),
        "settings": {k: v for k, v in vars(args).items() if k != "output"},
        "images": {"count": made, "mean_kib": round(size / made / 1024, 1)},
        "batch_mib": round(batch_mib, 1),
        "memory": results,
    }
    record.write(out, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
