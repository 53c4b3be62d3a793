#!/usr/bin/env python3
"""Train a Keras image classifier (ResNet50 by default) on one node or on several workers.

One process per node, or one per GPU: with more than one worker the script uses
tf.distribute.MultiWorkerMirroredStrategy and finds the other workers itself:

    python train_resnet_keras.py         # one process: one GPU, every local GPU, or the CPU
    srun python train_resnet_keras.py    # one worker per Slurm task (SlurmClusterResolver)
    TF_CONFIG='{...}' python train_resnet_keras.py    # any other launcher: standard TF_CONFIG

Without --data-dir it trains on synthetic images, which measures throughput without any I/O.
Every worker logs one line per --log-every steps:

    [train] rank=0/2 epoch=0 step=20 loss=6.912345 lr=0.100000 img_s=123.4

and worker 0 ends with ``[summary] ranks=2 steps=40 img_s=246.8 time_s=12.34``.

Why a hand-written loop (strategy.run) and not model.fit: with Keras 3, model.fit under
MultiWorkerMirroredStrategy stops with "ValueError: Attempt to convert a value (PerReplica...)"
(keras-team/keras#20585). The loop below works with Keras 3, the default since TensorFlow 2.16,
and with Keras 2 (TensorFlow 2.13 to 2.15), which many site installations still provide.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

# Hide the INFO lines of TensorFlow's C++ runtime but keep its warnings; this must be set
# before TensorFlow is imported. (TF 2.21 still prints "oneDNN custom operations are on"
# twice at import, whatever the level: harmless.)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

import tensorflow as tf

# The oldest release this program runs on (CI runs it under it): it stops at start-up on older.
MINIMUM_VERSIONS = {"tensorflow": "2.13"}
# Slurm sets these for the GPUs it gives a job or a job step; LSF and jsrun set
# CUDA_VISIBLE_DEVICES. With --device auto, any of them means the run must get a GPU.
GPU_JOB_VARIABLES = (
    "SLURM_GPUS_ON_NODE",
    "SLURM_JOB_GPUS",
    "SLURM_STEP_GPUS",
    "CUDA_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
)

# What --tiny (or TRAIN_TINY=1) changes: a run of a few seconds on a CPU, used by CI.
# The same values as the PyTorch trainer's --tiny.
TINY = {
    "image_size": 32,
    "batch_size": 4,
    "steps": 6,
    "steps_per_epoch": 3,
    "log_every": 2,
    "checkpoint_every": 3,
    "num_classes": 10,
}
TINY_SOFT = {"log_every", "checkpoint_every"}  # kept when given explicitly
TINY_EVAL_STEPS = 2  # --eval-steps above this is cut to it (0, no evaluation, stays 0)
IMAGE_SUFFIXES = {".jpeg", ".jpg", ".png", ".bmp", ".gif"}
# TFRecord files: *.tfrecord, or named as TensorFlow's ImageNet converter names them
# (train-00000-of-01024); index.json beside them holds their record counts and the class names.
RECORD_NAME = re.compile(r"\.tfrecords?$|-\d+-of-\d+")
RECORD_INDEX = "index.json"
CONVERTER = "examples/data/make_tfrecords.py"


# Not a keras.applications model: two convolutions and a classifier, for checking a job's
# launch, data and checkpoints in seconds (it learns little). Its dropout layer keeps the
# checkpointed random state of the larger models.
SMOKE_MODEL = "TinyCNN"


def keras_models() -> list[str]:
    apps = tf.keras.applications
    names = [n for n in dir(apps) if n[:1].isupper() and callable(getattr(apps, n))]
    return [*sorted(names), SMOKE_MODEL]


def tiny_cnn(weights, input_shape, classes, classifier_activation):
    """SMOKE_MODEL, called as a keras.applications model is (weights=None only)."""
    layers = tf.keras.layers
    return tf.keras.Sequential(
        [
            layers.Input(shape=input_shape),
            layers.Conv2D(16, 3, strides=2, use_bias=False),
            layers.BatchNormalization(),
            layers.ReLU(),
            layers.Conv2D(32, 3, strides=2, use_bias=False),
            layers.BatchNormalization(),
            layers.ReLU(),
            layers.GlobalAveragePooling2D(),
            layers.Dropout(0.1),
            layers.Dense(classes, activation=classifier_activation),
        ],
        name=SMOKE_MODEL,
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        epilog="Data: --data-dir DIR reads DIR/train (and DIR/val for --eval-steps), either an "
        "image folder (<class>/<image>) or TFRecord files with the index.json that "
        f"{CONVERTER} writes. From TFRecords each worker reads an equal share of the records, "
        "dealt anew every epoch: the files laid end to end in an order drawn from --seed and "
        "the epoch, and cut into one run of records per worker (whole batches; fewer than one "
        "batch per worker is left over), which it reads ten files at a time and shuffles in "
        "blocks of --shuffle-buffer. A run resumed from a "
        "checkpoint trains on the same images in the same order as one that was not stopped, "
        "given the same data, workers, --batch-size and --shuffle-buffer: which images a step "
        "gets and how they are cropped depend only on the seed, the epoch and the step, and "
        "from TFRecords the resumed run reads again, without decoding them, the records that "
        "its epoch's earlier steps used. "
        "Environment: TF_ENABLE_ONEDNN_OPTS=1 turns on oneDNN kernels on CPUs; it is the "
        "default on Intel CPUs and should be set on AMD CPUs (ARCHER2 reports a 12x speed-up). "
        "TF_CPP_MIN_LOG_LEVEL (default 1 here) hides TensorFlow's INFO lines.",
    )
    p.add_argument(
        "--arch",
        default="ResNet50",
        choices=keras_models(),
        metavar="NAME",
        help="a keras.applications model (ResNet50, ResNet101, MobileNetV2, EfficientNetB0, "
        f"...), or {SMOKE_MODEL}: two convolutions, to check a job's launch, data and "
        "checkpoints in seconds",
    )
    p.add_argument(
        "--data-dir",
        type=Path,
        help="ImageNet-style folder with train/<class>/*.JPEG (and optionally val/<class>/), "
        "or with TFRecord files train/*.tfrecord (or train-00000-of-01024, ...) and "
        f"train/{RECORD_INDEX} ({CONVERTER} writes both; optionally val/*.tfrecord), "
        "read by tf.data: files decoded in parallel on the CPU (of a JPEG only the crop window), "
        "batches prefetched while the GPU trains; synthetic images if omitted. NVIDIA DALI's "
        "TensorFlow plugin is not offered: pip compiles it against the TensorFlow release at "
        "hand unless that is one of the newest (a C++ compiler and the CUDA headers on the "
        "node), it runs on NVIDIA GPUs only (ARCHER2's and Frontier's are AMD), and its readers "
        "keep their own order, so a resumed run would not see the images an uninterrupted one "
        "sees",
    )
    p.add_argument(
        "--data-threads",
        type=int,
        default=0,
        help="threads that read and decode --data-dir images (0: tf.data sizes its pool, one "
        "thread per core)",
    )
    p.add_argument(
        "--shuffle-buffer",
        type=int,
        default=10000,
        help="TFRecords each worker shuffles together: it reads its files in blocks of this "
        "many records and shuffles each block (TensorFlow Models' ImageNet reader shuffles "
        "through a buffer of 10,000); it holds two or three blocks at once, 1.1 GB each for "
        "10,000 of ImageNet's JPEGs",
    )
    p.add_argument(
        "--label-offset",
        type=int,
        help="subtracted from each TFRecord's image/class/label to give the class, counted from "
        f"0; default: the first label in train/{RECORD_INDEX} (0 for {CONVERTER}, 1 for "
        "TF-slim's build_imagenet_data.py, which keeps 0 for a background class: give 0 to "
        "train its 1,001 outputs)",
    )
    p.add_argument("--num-classes", type=int, default=1000, help="classes of synthetic data")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--batch-size", type=int, default=64, help="images per GPU (per replica)")
    p.add_argument("--epochs", type=int, default=90)
    p.add_argument("--steps", type=int, help="stop after this many steps in total")
    p.add_argument(
        "--steps-per-epoch",
        type=int,
        help="length of an epoch in steps (default: 500 for synthetic data, one pass over "
        "the images for --data-dir)",
    )
    p.add_argument(
        "--lr",
        type=float,
        default=0.1,
        help="learning rate for a global batch of 256; scaled linearly with the global batch",
    )
    p.add_argument(
        "--warmup-epochs", type=float, default=5.0, help="linear LR warm-up, then cosine"
    )
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=5e-5)
    p.add_argument("--label-smoothing", type=float, default=0.1)
    p.add_argument(
        "--precision",
        choices=["fp32", "bf16", "fp16"],
        default="fp32",
        help="Keras mixed precision; fp16 adds loss scaling, bf16 needs Ampere or newer GPUs "
        "(or a CPU with AVX512_BF16/AMX)",
    )
    p.add_argument("--jit-compile", action="store_true", help="compile the train step with XLA")
    p.add_argument(
        "--device",
        choices=["auto", "gpu", "cpu"],
        default="auto",
        help="auto: the GPUs if TensorFlow sees any; inside a job that holds GPUs (Slurm, "
        "CUDA_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES) it needs them, as gpu does: a CPU-only "
        "TensorFlow or no visible GPU stops the run at once (--tiny runs warn and use the CPU)",
    )
    p.add_argument(
        "--intra-threads",
        type=int,
        default=0,
        help="threads one op may use (0: TensorFlow chooses, one per core; at most one per "
        "CPU this process may run on). With several workers on one node give each its share "
        "of the cores",
    )
    p.add_argument(
        "--inter-threads",
        type=int,
        default=0,
        help="ops run at the same time (0: TensorFlow chooses)",
    )
    p.add_argument(
        "--cluster",
        choices=["auto", "tf_config", "slurm", "none"],
        default="auto",
        help="where the list of workers comes from; auto: TF_CONFIG if set, else Slurm when "
        "srun started more than one task, else a single worker",
    )
    p.add_argument(
        "--port", type=int, default=8888, help="first gRPC port on each node (Slurm only)"
    )
    p.add_argument("--checkpoint-dir", type=Path, default=Path("checkpoints"))
    p.add_argument("--checkpoint-every", type=int, default=500, help="steps between checkpoints")
    p.add_argument("--keep", type=int, default=3, help="checkpoints to keep")
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument(
        "--warmup-steps", type=int, default=5, help="steps left out of the summary throughput"
    )
    p.add_argument(
        "--eval-steps",
        type=int,
        default=0,
        help="batches per worker to evaluate at the end of each epoch (0: no evaluation)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--deterministic",
        action="store_true",
        help="deterministic kernels (tf.config.experimental.enable_op_determinism); slower",
    )
    p.add_argument(
        "--tiny",
        action="store_true",
        help="CI setting: "
        + ", ".join(f"{k}={v}" for k, v in TINY.items())
        + f", eval-steps at most {TINY_EVAL_STEPS}; the environment variable TRAIN_TINY=1 "
        "does the same (TRAIN_TINY_STEPS=N sets the number of steps, TRAIN_TINY_ARCH=NAME the "
        "model where --arch is not given: a quicker check of a job's launch, data and "
        "checkpoints)",
    )
    return p


def list_images(folder: Path) -> tuple[list[str], list[int], list[str]]:
    classes = sorted(d.name for d in folder.iterdir() if d.is_dir())
    files, labels = [], []
    for label, name in enumerate(classes):
        for f in sorted((folder / name).iterdir()):
            if f.suffix.lower() in IMAGE_SUFFIXES:
                files.append(str(f))
                labels.append(label)
    return files, labels, classes


def parse_args(argv=None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.tiny or os.environ.get("TRAIN_TINY") == "1":
        for key, value in TINY.items():
            # logging and checkpoint intervals given on the command line are kept
            if key not in TINY_SOFT or getattr(args, key) == parser.get_default(key):
                setattr(args, key, value)
        args.eval_steps = min(args.eval_steps, TINY_EVAL_STEPS)
        if os.environ.get("TRAIN_TINY_STEPS"):
            args.steps = int(os.environ["TRAIN_TINY_STEPS"])
        if os.environ.get("TRAIN_TINY_ARCH") and args.arch == parser.get_default("arch"):
            args.arch = os.environ["TRAIN_TINY_ARCH"]
            if args.arch not in keras_models():
                parser.error(f"TRAIN_TINY_ARCH={args.arch}: not a keras.applications model")
    args.tiny = args.tiny or os.environ.get("TRAIN_TINY") == "1"
    for name in ("batch_size", "image_size", "log_every", "checkpoint_every", "keep"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.data_threads < 0:
        parser.error("--data-threads cannot be negative")
    if args.shuffle_buffer < 1:
        parser.error("--shuffle-buffer must be at least 1")
    args.train_files = args.val_files = args.train_records = args.val_records = None
    if args.data_dir is not None:
        train, val = args.data_dir / "train", args.data_dir / "val"
        if not args.data_dir.is_dir():
            parser.error(f"--data-dir {args.data_dir}: no such directory")
        if not train.is_dir() and record_files(args.data_dir):  # TF-slim's layout: one folder
            parser.error(
                f"--data-dir {args.data_dir}: TFRecord files but no train/ directory; link the "
                "training files into NEW/train/, the held-out ones into NEW/val/, and give "
                "--data-dir NEW"
            )
        if not train.is_dir():
            parser.error(f"--data-dir {args.data_dir}: no train/ directory in it")
        records = record_files(train)
        if records:
            try:
                use_records(args, records, record_files(val) if val.is_dir() else [])
            except ValueError as exc:
                parser.error(str(exc))
            return args
        files, labels, classes = list_images(train)
        if not files:
            suffixes = ", ".join(sorted(IMAGE_SUFFIXES))
            parser.error(
                f"--data-dir {args.data_dir}: train/ holds neither TFRecord files (*.tfrecord, "
                f"*-NNNNN-of-NNNNN) nor class directories with images ({suffixes})"
            )
        args.train_files, args.num_classes = (files, labels), len(classes)
        if val.is_dir():
            files, labels, _ = list_images(val)
            args.val_files = (files, labels) if files else None
    if args.label_offset is not None:
        parser.error("--label-offset applies to TFRecord files only (--data-dir with them)")
    return args


def record_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and RECORD_NAME.search(p.name))


def record_index(folder: Path, files: list[Path]) -> dict:
    """The index.json beside the TFRecord files, checked against them (ValueError if stale)."""
    path = folder / RECORD_INDEX
    again = f"write it with: python {CONVERTER} --index {folder}"
    if not path.is_file():
        raise ValueError(f"{folder} holds TFRecord files but no {RECORD_INDEX}; {again}")
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
        listed = {name: (int(f["records"]), int(f["bytes"])) for name, f in index["files"].items()}
        classes, first = [str(c) for c in index["classes"]], int(index["first_label"])
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"{path}: not an index as {CONVERTER} writes it ({exc!r})") from None
    for name in sorted({f.name for f in files} | listed.keys()):
        if name not in listed:
            raise ValueError(f"{folder / name}: not in {path}; {again}")
        if not (folder / name).is_file():
            raise ValueError(f"{path}: lists {name}, which is not in {folder}; {again}")
        size = (folder / name).stat().st_size
        if size != listed[name][1]:
            raise ValueError(
                f"{folder / name}: {size} bytes, but {path} says {listed[name][1]}; {again}"
            )
    counts = [listed[f.name][0] for f in files]
    return {"files": [str(f) for f in files], "records": counts, "classes": classes, "first": first}


def use_records(args, train: list[Path], val: list[Path]) -> None:
    """TFRecords: this run's files, their record counts, classes and label offset."""
    index = record_index(train[0].parent, train)
    first, classes = index["first"], index["classes"]
    if args.label_offset is None:
        args.label_offset = first
    elif args.label_offset > first:
        raise ValueError(
            f"--label-offset {args.label_offset}: the labels in {train[0].parent / RECORD_INDEX} "
            f"start at {first}, which would become {first - args.label_offset}"
        )
    args.train_records, args.num_classes = index, first + len(classes) - args.label_offset
    if val and (val[0].parent / RECORD_INDEX).is_file():
        other = record_index(val[0].parent, val)
        if (other["first"], other["classes"]) != (first, classes):
            raise ValueError(
                f"{val[0].parent / RECORD_INDEX}: its classes differ from those of "
                f"{train[0].parent / RECORD_INDEX}"
            )
    args.val_records = [str(f) for f in val] or None
    held_out = args.data_dir / "val"
    if not val and held_out.is_dir() and any(p.is_dir() for p in held_out.iterdir()):
        raise ValueError(
            f"{held_out} holds class folders, {train[0].parent} TFRecord files: convert both "
            f"({CONVERTER})"
        )


# --------------------------------------------------------------------------- versions, devices
def version_tuple(text: str) -> tuple[int, ...]:
    """(2, 14, 1) for "2.14.1": the leading numbers of a version."""
    m = re.match(r"\d+(?:\.\d+)*", text)
    return tuple(int(part) for part in m[0].split(".")) if m else ()


def check_versions() -> None:
    """Stop at once on a TensorFlow older than MINIMUM_VERSIONS, naming the version needed."""
    have, oldest = getattr(tf, "__version__", None), MINIMUM_VERSIONS["tensorflow"]
    if isinstance(have, str) and version_tuple(have) < version_tuple(oldest):
        raise SystemExit(
            f"error: {Path(__file__).name} needs tensorflow {oldest} or newer; "
            f"this environment has {have}"
        )


def gpus_granted() -> str | None:
    """The variable saying that this job holds GPUs (as NAME=VALUE), or None."""
    for var in GPU_JOB_VARIABLES:
        value = os.environ.get(var, "").strip()
        # SLURM_GPUS_ON_NODE is a count; the others list devices ("-1" hides them all)
        none = ("", "0") if var == "SLURM_GPUS_ON_NODE" else ("", "-1", "NoDevFiles")
        if value not in none:
            return f"{var}={value}"
    return None


def missing_gpu() -> str | None:
    """Why TensorFlow cannot use a GPU here, or None if it can."""
    build = tf.sysconfig.get_build_info()
    if not (build.get("is_cuda_build") or build.get("is_rocm_build")):
        return (
            f"this TensorFlow ({tf.__version__}) is a CPU-only build: install a CUDA or ROCm "
            "build (not tensorflow-cpu)"
        )
    if not tf.config.list_physical_devices("GPU"):
        return f"TensorFlow {tf.__version__} sees no GPU on {os.uname().nodename}"
    return None


def choose_devices(args) -> None:
    """Hide the GPUs for --device cpu; stop if a run that asks for a GPU cannot have one."""
    if args.device == "cpu":
        tf.config.set_visible_devices([], "GPU")
        return
    wanted = "--device gpu" if args.device == "gpu" else gpus_granted()
    problem = missing_gpu() if wanted else None
    if problem and not args.tiny:
        raise SystemExit(f"error: {wanted} asks for a GPU, but {problem}")
    if problem:
        print(f"warning: {wanted} asks for a GPU, but {problem}; --tiny runs on the CPU")


# --------------------------------------------------------------------------- distribution
def slurm_cluster(port: int):
    """The workers of this job step, from the variables srun sets in every task.

    SlurmClusterResolver reads SLURM_PROCID (this task's rank), SLURM_STEP_NUM_TASKS,
    SLURM_STEP_NODELIST (e.g. nid[001234-001235]) and SLURM_STEP_TASKS_PER_NODE (e.g. 4(x2));
    the tasks of a node listen on ports --port, --port+1, ... By default it also counts the
    node's GPUs (CUDA_VISIBLE_DEVICES, else nvidia-smi) and deals them out to the tasks. That
    fails on CPU nodes (no nvidia-smi) and when Slurm has already bound one GPU to each task
    (--gpus-per-task, --gpu-bind), so it is given one slot per task here and the GPUs are
    chosen in make_strategy instead.
    """
    needed = [
        "SLURM_PROCID",
        "SLURM_STEP_NUM_TASKS",
        "SLURM_STEP_NODELIST",
        "SLURM_STEP_TASKS_PER_NODE",
    ]
    missing = [v for v in needed if v not in os.environ]
    if missing:
        raise SystemExit(
            f"error: --cluster slurm: {', '.join(missing)} not set; start one worker per task "
            "with srun (or use --cluster tf_config with TF_CONFIG)"
        )
    from tensorflow.python.distribute.cluster_resolver import slurm_cluster_resolver as scr

    per_node = max(scr.expand_tasks_per_node(os.environ["SLURM_STEP_TASKS_PER_NODE"]))
    resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(
        port_base=port, gpus_per_node=per_node, gpus_per_task=1, auto_set_gpu=False
    )
    return resolver.cluster_spec(), resolver.task_type, resolver.task_id


def choose_cluster(args) -> str:
    if args.cluster != "auto":
        return args.cluster
    if "TF_CONFIG" in os.environ:
        return "tf_config"
    step_tasks = int(os.environ.get("SLURM_STEP_NUM_TASKS") or 0)
    job_tasks = int(os.environ.get("SLURM_NTASKS") or 1)
    if "SLURM_PROCID" in os.environ and (step_tasks or job_tasks) > 1:
        return "slurm"
    if job_tasks > 1:
        print(
            f"warning: SLURM_NTASKS={job_tasks} but this is a single task; start the script "
            "with srun to train on all of them. Training alone.",
            flush=True,
        )
    return "none"


def make_strategy(args):
    """(strategy, rank, workers, workers on this node); configures devices first."""
    mode = choose_cluster(args)
    if mode == "none":
        spec, task_type, task_id = tf.train.ClusterSpec({}), None, None
    elif mode == "slurm":
        spec, task_type, task_id = slurm_cluster(args.port)
    else:
        if "TF_CONFIG" not in os.environ:
            raise SystemExit("error: --cluster tf_config: TF_CONFIG is not set")
        try:
            resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
            spec, task_type, task_id = resolver.cluster_spec(), resolver.task_type, resolver.task_id
        except (ValueError, KeyError, TypeError) as exc:
            raise SystemExit(f"error: TF_CONFIG is not valid: {exc}") from None
        if task_type is None or task_id is None:
            raise SystemExit('error: TF_CONFIG has no "task": {"type": "worker", "index": N}')
    tasks = spec.as_dict().get("chief", []) + spec.as_dict().get("worker", [])
    rank, per_node, local = 0, 1, 0
    if tasks:
        me = spec.task_address(task_type, task_id)
        rank = tasks.index(me)
        same_node = [t for t in tasks if t.rsplit(":", 1)[0] == me.rsplit(":", 1)[0]]
        per_node, local = len(same_node), same_node.index(me)

    # Devices must be set up before TensorFlow's runtime starts (before the strategy and any op).
    gpus = tf.config.list_physical_devices("GPU")
    if per_node > 1 and len(gpus) >= per_node:
        gpus = [gpus[local]]  # several workers see all of the node's GPUs: one each
        tf.config.set_visible_devices(gpus, "GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)  # no grabbing all memory at start

    if not tasks:
        if len(gpus) > 1:
            return tf.distribute.MirroredStrategy(), 0, 1, 1
        return tf.distribute.get_strategy(), 0, 1, 1
    impl = tf.distribute.experimental.CommunicationImplementation
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=impl.NCCL if gpus else impl.RING  # RING: gRPC all-reduce between CPUs
    )
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        spec,
        task_type=task_type,
        task_id=task_id,
        num_accelerators={"GPU": len(gpus)},
        rpc_layer="grpc",
    )
    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        cluster_resolver=resolver, communication_options=options
    )
    return strategy, rank, len(tasks), per_node


# --------------------------------------------------------------------------- data
# Every sample has a global position: step * global batch + replica * batch + i. What a worker
# reads depends only on (seed, position), so a resumed run sees the batches it would have seen.
# Images leave tf.data as uint8 (a quarter of float32's bytes to copy to the GPU) and are
# scaled to [-1, 1] on the device (normalize).
def synthetic_sample(args):
    size, classes, seed = args.image_size, args.num_classes, args.seed

    def make(position):
        key = tf.stack([tf.constant(seed, tf.int64), position])
        image = tf.random.stateless_uniform([size, size, 3], seed=key, maxval=256, dtype=tf.int32)
        other = key + tf.constant([1, 0], tf.int64)  # an independent stream for the label
        label = tf.random.stateless_uniform([], seed=other, maxval=classes, dtype=tf.int64)
        return tf.cast(image, tf.uint8), label

    return make


def normalize(images):
    return tf.cast(images, tf.float32) / 127.5 - 1.0


def crop_window(shape, train: bool, key):
    """[top, left, height, width] of the part of an image to keep: for training a random box of
    8-100 % of the area with an aspect ratio between 3:4 and 4:3 (as RandomResizedCrop and the
    ImageNet recipes draw it); for evaluation the centred square of 7/8 of the short side."""
    if train:
        whole = tf.constant([0.0, 0.0, 1.0, 1.0], shape=[1, 1, 4])
        begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
            shape,
            bounding_boxes=whole,
            seed=key,
            min_object_covered=0.0,
            aspect_ratio_range=(3 / 4, 4 / 3),
            area_range=(0.08, 1.0),
            max_attempts=10,
            use_image_if_no_bounding_boxes=True,
        )
        return tf.stack([begin[0], begin[1], size[0], size[1]])
    height, width = shape[0], shape[1]
    side = tf.minimum(height, width) * 7 // 8
    return tf.stack([(height - side) // 2, (width - side) // 2, side, side])


def file_sample(args, train: bool):
    decode = image_sample(args, train)

    def load(position, path, label):
        return decode(position, tf.io.read_file(path), label)

    return load


def image_sample(args, train: bool):
    """(position, encoded image, label) -> (image, label): the crop, scaling and flip of the
    image folder and of TFRecords alike."""
    size, seed = args.image_size, args.seed

    def load(position, data, label):
        key = tf.stack([tf.constant(seed, tf.int64), position])
        box_key = key + tf.constant([2, 0], tf.int64)

        def jpeg():  # decodes only the window: most of the cost of a small crop is skipped
            window = crop_window(tf.io.extract_jpeg_shape(data), train, box_key)
            return tf.image.decode_and_crop_jpeg(data, window, channels=3)

        def other():  # PNG, GIF, BMP: decode the whole image, then crop
            image = tf.io.decode_image(data, channels=3, expand_animations=False)
            top, left, height, width = tf.unstack(crop_window(tf.shape(image), train, box_key))
            return image[top : top + height, left : left + width]

        image = tf.image.resize(tf.cond(tf.io.is_jpeg(data), jpeg, other), [size, size])
        if train:
            image = tf.image.stateless_random_flip_left_right(image, seed=key)
        return tf.cast(tf.round(image), tf.uint8), tf.cast(label, tf.int64)

    return load


RECORD_FEATURES = {  # the features of TensorFlow's ImageNet TFRecords that training needs
    "image/encoded": tf.io.FixedLenFeature([], tf.string),
    "image/class/label": tf.io.FixedLenFeature([], tf.int64),
}


def record_sample(args, train: bool):
    """(position, serialized tf.train.Example) -> (image, label), its label range checked."""
    decode, offset, classes = image_sample(args, train), args.label_offset, args.num_classes

    def load(position, record):
        features = tf.io.parse_single_example(record, RECORD_FEATURES)
        label = features["image/class/label"] - offset
        in_range = tf.logical_and(label >= 0, label < classes)
        message = f"image/class/label - {offset} (--label-offset) is outside 0..{classes - 1}:"
        with tf.control_dependencies([tf.debugging.Assert(in_range, [message, label])]):
            return decode(position, tf.identity(features["image/encoded"]), label)

    return load


def record_pieces(counts: list[int], seed: int, epoch, worker: int, share: int):
    """One worker's share of the TFRecord files in an epoch, as (file, records skipped,
    records read) tensors: the files laid end to end in an order drawn from (--seed, epoch),
    the same on every worker, and worker k takes records k * share .. (k + 1) * share - 1 of
    that run. Each record goes to one worker at most, whatever the number of files; a worker
    reads past the start of at most one file. ``epoch`` may be a tensor (inside tf.data)."""
    counts = tf.constant(counts, tf.int64)
    key = tf.stack([tf.constant(seed, tf.int64), -1 - tf.cast(epoch, tf.int64)])
    order = tf.argsort(tf.random.stateless_uniform(tf.shape(counts), seed=key))
    ends = tf.cumsum(tf.gather(counts, order))
    starts = ends - tf.gather(counts, order)
    lo = tf.maximum(starts, worker * share)
    hi = tf.minimum(ends, (worker + 1) * share)
    mine = hi > lo
    return (
        tf.boolean_mask(order, mine),
        tf.boolean_mask(lo - starts, mine),
        tf.boolean_mask(hi - lo, mine),
    )


def record_epoch(args, worker: int, workers: int, per_epoch: int):
    """epoch -> this worker's serialized records for it: its share of the records (see
    record_pieces), its pieces of files in an order drawn from (--seed, epoch, worker), ten
    read at a time, shuffled in blocks of --shuffle-buffer (shuffle_block).

    Not tf.data's shuffle: its seed must be known before the epoch is (a seed computed from the
    epoch fails when the global seed is 0), so it would draw the same every epoch."""
    names = tf.constant(args.train_records["files"])
    counts = args.train_records["records"]

    def read(epoch):
        key = tf.stack([tf.constant(args.seed, tf.int64), epoch * workers + worker])
        files, skips, takes = record_pieces(counts, args.seed, epoch, worker, per_epoch)
        order = tf.argsort(tf.random.stateless_uniform(tf.shape(files), seed=key))
        return (
            tf.data.Dataset.from_tensor_slices(
                (
                    tf.gather(names, tf.gather(files, order)),
                    tf.gather(skips, order),
                    tf.gather(takes, order),
                )
            )
            .interleave(
                lambda name, skip, take: tf.data.TFRecordDataset(name).skip(skip).take(take),
                cycle_length=min(10, len(counts)),
                num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=True,  # the order of the records must not depend on timing
            )
            .batch(args.shuffle_buffer)
            .enumerate()
            .map(lambda i, block: shuffle_block(key, i, block))
            .prefetch(1)  # the next block is read while this one is used
            .unbatch()
        )

    return read


def shuffle_block(key, i, block):
    """The records of block i in an order that depends only on (key, i)."""
    seed = tf.random.experimental.stateless_fold_in(key, i)
    return tf.gather(block, tf.argsort(tf.random.stateless_uniform(tf.shape(block), seed=seed)))


def record_steps(args, workers: int, per_worker: int) -> int:
    """Steps in one epoch over TFRecords: each worker's equal share of the records (see
    record_pieces), in whole batches."""
    records = sum(args.train_records["records"])
    share = records // workers
    if share < per_worker:
        raise SystemExit(
            f"error: the {records} TFRecords are fewer than one batch ({per_worker}) for each "
            f"of the {workers} workers"
        )
    return min(args.steps_per_epoch or share // per_worker, share // per_worker)


def damaged_record(files: list[str], exc: Exception) -> str:
    """The error line for data that do not read: the first of ``files`` (those a worker was
    reading) that does not read to its end, found by reading them one by one."""
    for path in files:
        try:
            tf.data.TFRecordDataset(path).reduce(0, lambda n, _: n + 1)
        except tf.errors.DataLossError as damage:
            found = re.search(r"corrupted record at \d+", str(damage))
            return f"error: {path}: damaged TFRecord file ({found[0] if found else 'unreadable'})"
    return error_line(exc)


def worker_files(args, epochs, worker: int, workers: int, per_worker: int, steps: int):
    """The TFRecord files a worker reads in ``epochs``, each once, in order."""
    files = []
    for epoch in epochs:
        counts = args.train_records["records"]
        mine = record_pieces(counts, args.seed, epoch, worker, steps * per_worker)[0]
        files += [args.train_records["files"][i] for i in mine.numpy()]
    return list(dict.fromkeys(files))


def error_line(exc: BaseException) -> str:
    """error: TYPE: the first line of the message, less the graph function that raised it."""
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"error: {type(exc).__name__}: {re.sub(r'^[{][{].*?[}][}] *', '', first)}"


def input_options(args) -> tf.data.Options:
    options = tf.data.Options()
    if args.data_threads:  # else tf.data sizes its own pool
        options.threading.private_threadpool_size = args.data_threads
    return options


def train_records(args, ctx, start: int, total: int, steps_per_epoch: int) -> tf.data.Dataset:
    """This worker's serialized records for steps start..total-1. A resumed run reads the
    records of its epoch's earlier steps again, and drops them undecoded."""
    per_worker = args.batch_size * ctx.num_replicas_in_sync // ctx.num_input_pipelines
    worker, workers = ctx.input_pipeline_id, ctx.num_input_pipelines
    read = record_epoch(args, worker, workers, steps_per_epoch * per_worker)
    first_epoch = start // steps_per_epoch
    return (
        tf.data.Dataset.range(first_epoch, math.ceil(total / steps_per_epoch))
        .flat_map(read)
        .skip((start - first_epoch * steps_per_epoch) * per_worker)
        .take((total - start) * per_worker)
    )


def train_input(args, strategy, start: int, total: int, steps_per_epoch: int):
    per_replica = args.batch_size
    global_batch = per_replica * strategy.num_replicas_in_sync

    def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        per_worker = per_replica * ctx.num_replicas_in_sync // ctx.num_input_pipelines
        first = ctx.input_pipeline_id * per_worker  # offset of this worker within a step
        positions = tf.data.Dataset.range(start, total).flat_map(
            lambda s: tf.data.Dataset.range(
                s * global_batch + first, s * global_batch + first + per_worker
            )
        )
        if args.train_records is not None:
            ds = tf.data.Dataset.zip(
                (positions, train_records(args, ctx, start, total, steps_per_epoch))
            )
            ds = ds.map(record_sample(args, train=True), num_parallel_calls=tf.data.AUTOTUNE)
        elif args.train_files is None:
            ds = positions.map(synthetic_sample(args), num_parallel_calls=tf.data.AUTOTUNE)
        else:
            files, labels = (tf.constant(x) for x in args.train_files)
            n = len(args.train_files[0])

            def epoch(e):
                # a fresh order every epoch, the same one for every worker and every run
                order = tf.argsort(tf.random.stateless_uniform([n], seed=tf.stack([args.seed, e])))
                step_ids = tf.range(steps_per_epoch, dtype=tf.int64)[:, None]
                position = (e * steps_per_epoch + step_ids) * global_batch + first
                position += tf.range(per_worker, dtype=tf.int64)[None, :]
                position = tf.reshape(position, [-1])
                picked = tf.gather(
                    order, tf.cast(position - e * steps_per_epoch * global_batch, tf.int32)
                )
                return tf.data.Dataset.from_tensor_slices(
                    (position, tf.gather(files, picked), tf.gather(labels, picked))
                )

            first_epoch = start // steps_per_epoch
            ds = (
                tf.data.Dataset.range(first_epoch, math.ceil(total / steps_per_epoch))
                .flat_map(epoch)
                .skip((start - first_epoch * steps_per_epoch) * per_worker)
                .take((total - start) * per_worker)
                .map(file_sample(args, train=True), num_parallel_calls=tf.data.AUTOTUNE)
            )
        ds = ds.batch(per_replica, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
        return ds.with_options(input_options(args))

    return strategy.distribute_datasets_from_function(dataset_fn)


def eval_input(args, strategy):
    """Held-out images: val/ of --data-dir, or synthetic images from a different seed."""
    per_replica = args.batch_size

    def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        n = args.eval_steps * per_replica * ctx.num_replicas_in_sync // ctx.num_input_pipelines
        if args.val_records is not None:
            ds = tf.data.Dataset.from_tensor_slices(args.val_records).interleave(
                tf.data.TFRecordDataset,
                cycle_length=min(10, len(args.val_records)),
                num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=True,
            )
            ds = ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).repeat().take(n)
            ds = tf.data.Dataset.zip((tf.data.Dataset.range(n), ds))
            ds = ds.map(record_sample(args, train=False), num_parallel_calls=tf.data.AUTOTUNE)
        elif args.val_files is None:
            held_out = argparse.Namespace(**{**vars(args), "seed": args.seed + 1_000_003})
            first = ctx.input_pipeline_id * n
            ds = tf.data.Dataset.range(first, first + n).map(synthetic_sample(held_out))
        else:
            ds = tf.data.Dataset.from_tensor_slices(
                (tf.range(len(args.val_files[0]), dtype=tf.int64), *args.val_files)
            )
            ds = ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).repeat().take(n)
            ds = ds.map(file_sample(args, train=False), num_parallel_calls=tf.data.AUTOTUNE)
        ds = ds.batch(per_replica, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
        return ds.with_options(input_options(args))

    return strategy.distribute_datasets_from_function(dataset_fn)


# --------------------------------------------------------------------------- preemption
class StopFlag:
    """Set by SIGUSR1/SIGTERM: the job is close to its time limit or being cancelled.

    With ``#SBATCH --signal=USR1@120`` Slurm signals every task 120 s before the time limit;
    the workers agree to stop at the same step, checkpoint, print ``[preempted] step=N`` and
    exit 0, and the job script can ``scontrol requeue $SLURM_JOB_ID`` to carry on from the
    checkpoint. ``--signal=B:USR1@120`` signals only the batch shell: start srun in the
    background, ``trap 'kill -USR1 $pid' USR1`` and ``wait`` (srun passes USR1 on to its tasks).
    scancel and the time limit send SIGTERM, handled the same way.
    """

    def __init__(self):
        self.raised = False
        for sig in (signal.SIGUSR1, signal.SIGTERM):
            signal.signal(sig, self._handler)

    def _handler(self, signum, frame):
        self.raised = True


# --------------------------------------------------------------------------- checkpoints
def checkpoint_prefixes(directory: Path) -> list[str]:
    """Checkpoints in the directory, newest first (by step; the index file is not trusted)."""
    found = []
    for index in directory.glob("ckpt-*.index"):
        number = index.name[len("ckpt-") : -len(".index")]
        if number.isdigit():
            found.append((int(number), str(index.with_suffix(""))))
    return [prefix for _, prefix in sorted(found, reverse=True)]


def restore_newest(ckpt: tf.train.Checkpoint, directory: Path) -> str | None:
    """Restore the newest checkpoint that loads; a damaged one is skipped with a warning."""
    for prefix in checkpoint_prefixes(directory):
        try:
            ckpt.restore(prefix).assert_existing_objects_matched()
            return prefix
        except Exception as exc:  # a damaged file raises many kinds of errors
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            print(f"warning: skipping unreadable checkpoint {prefix}: {first}", flush=True)
    return None


# --------------------------------------------------------------------------- Keras 2 and 3
# TensorFlow 2.16 moved tf.keras to Keras 3; sites still offer 2.13-2.15 with Keras 2. The few
# places where the two differ are here.
def use_checkpointable_random_state() -> None:
    """Keras 2 draws dropout masks from random ops whose state no checkpoint holds; switched to
    tf.random.Generator, it keeps that state in variables (Keras 3 always does)."""
    experimental = getattr(tf.keras.backend, "experimental", None)
    if hasattr(experimental, "enable_tf_random_generator"):
        experimental.enable_tf_random_generator()


def random_state_variables(model) -> list:
    """The variables holding the random state of the model's dropout layers, which
    tf.train.Checkpoint does not reach through the model: Keras 3's seed generators, or the
    state of each Keras 2 layer's generator (made now, so that a restore can fill it)."""
    found = [v for v in model.non_trainable_variables if "seed_generator" in getattr(v, "path", "")]
    for layer in model.layers:
        keras2 = getattr(layer, "_random_generator", None)
        if hasattr(keras2, "_maybe_init"):
            keras2._maybe_init()
            if getattr(keras2, "_generator", None) is not None:
                found.append(keras2._generator.state)
    return found


def scale_loss(optimizer, loss):
    """fp16 loss scaling: Keras 3's scale_loss, Keras 2's get_scaled_loss."""
    if hasattr(optimizer, "scale_loss"):
        return optimizer.scale_loss(loss)
    return optimizer.get_scaled_loss(loss)


def unscale_gradients(optimizer, grads):
    """Keras 3 unscales inside apply_gradients; Keras 2 needs get_unscaled_gradients first."""
    if hasattr(optimizer, "get_unscaled_gradients"):
        return optimizer.get_unscaled_gradients(grads)
    return grads


# --------------------------------------------------------------------------- training
def lr_at(step: int, args, steps_per_epoch: int, total: int, global_batch: int) -> float:
    peak = args.lr * global_batch / 256
    warmup = max(1, int(args.warmup_epochs * steps_per_epoch))
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * peak * (1 + math.cos(math.pi * min(1.0, progress)))


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity: what srun's binding gave it)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def capped_threads(wanted: int) -> int:
    """--intra-threads, at most one per CPU this process may use: more only take turns on the
    same cores (an srun without --cpus-per-task binds each task to one core, for example)."""
    cpus = usable_cpus()
    if wanted <= cpus:
        return wanted
    print(
        f"warning: --intra-threads {wanted} is more than the {cpus} CPU(s) this process may "
        f"run on; using {cpus}",
        flush=True,
    )
    return cpus


def main(argv=None) -> int:
    # each line in one write (PYTHONUNBUFFERED makes print() write its newline apart, and the
    # lines of workers that share a pipe then run into one another)
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True, write_through=False)
    check_versions()
    args = parse_args(argv)
    args.intra_threads = capped_threads(args.intra_threads)
    # Thread pools can only be sized before TensorFlow's runtime starts.
    tf.config.threading.set_intra_op_parallelism_threads(args.intra_threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.inter_threads)
    choose_devices(args)
    strategy, rank, workers, per_node = make_strategy(args)
    if rank == 0 and per_node > 1 and "OMP_NUM_THREADS" not in os.environ:
        print(
            f"warning: OMP_NUM_THREADS is not set and {per_node} workers share this node; "
            "set it and --intra-threads to (cores per node) / (workers per node)",
            flush=True,
        )
    if rank == 0 and args.data_dir is not None:
        read = args.train_records["files"] if args.train_records else args.train_files[0]
        kind = "TFRecord file(s)" if args.train_records else "image(s)"
        print(f"data: {args.data_dir}, loader tf.data, {len(read)} training {kind}", flush=True)
    use_checkpointable_random_state()
    tf.keras.utils.set_random_seed(args.seed)
    if args.deterministic:
        tf.config.experimental.enable_op_determinism()
    if args.precision != "fp32":
        policy = {"bf16": "mixed_bfloat16", "fp16": "mixed_float16"}[args.precision]
        tf.keras.mixed_precision.set_global_policy(policy)

    replicas = strategy.num_replicas_in_sync
    global_batch = args.batch_size * replicas
    per_worker = global_batch // workers
    steps_per_epoch = args.steps_per_epoch or 500
    if args.train_records is not None:
        steps_per_epoch = record_steps(args, workers, per_worker)
    elif args.train_files is not None:
        available = len(args.train_files[0]) // global_batch
        if available == 0:
            raise SystemExit(
                f"error: {len(args.train_files[0])} images are fewer than one global batch "
                f"({global_batch})"
            )
        steps_per_epoch = min(args.steps_per_epoch or available, available)
    total = args.steps or args.epochs * steps_per_epoch
    classes = args.num_classes

    with strategy.scope():
        build = tiny_cnn if args.arch == SMOKE_MODEL else getattr(tf.keras.applications, args.arch)
        model = build(
            weights=None,
            input_shape=(args.image_size, args.image_size, 3),
            classes=classes,
            classifier_activation=None,  # logits; the loss applies softmax in float32
        )
        optimizer = tf.keras.optimizers.SGD(
            learning_rate=args.lr, momentum=args.momentum, weight_decay=args.weight_decay
        )
        if args.precision == "fp16":
            optimizer = tf.keras.mixed_precision.LossScaleOptimizer(optimizer)
        optimizer.build(model.trainable_variables)  # create slots now so restore fills them
        step_var = tf.Variable(0, dtype=tf.int64, trainable=False)
        epoch_var = tf.Variable(0, dtype=tf.int64, trainable=False)
        rng = random_state_variables(model)
    loss_fn = tf.keras.losses.CategoricalCrossentropy(
        from_logits=True, label_smoothing=args.label_smoothing, reduction="none"
    )

    # Checkpoints: every worker must take part in saving (the variables are mirrored, and
    # saving may synchronise), but only the chief's copy is kept; the others write to a
    # private temporary directory that is deleted at once. All workers restore from the
    # chief's directory, so --checkpoint-dir must be on a file system every node sees.
    # The random state of dropout layers is saved too (random_state_variables), so that a
    # resumed run draws the masks the uninterrupted run would have drawn.
    ckpt = tf.train.Checkpoint(
        model=model, optimizer=optimizer, step=step_var, epoch=epoch_var, rng=rng
    )
    chief = rank == 0
    restored = restore_newest(ckpt, args.checkpoint_dir)
    start = int(step_var.numpy()) if restored else 0
    if restored and chief:
        print(f"[resume] step={start} path={restored}", flush=True)
    if chief:
        manager = tf.train.CheckpointManager(ckpt, str(args.checkpoint_dir), max_to_keep=args.keep)

    def save(step: int) -> None:
        step_var.assign(step)
        epoch_var.assign(step // steps_per_epoch)
        if chief:
            path = manager.save(checkpoint_number=step)
            print(f"[checkpoint] step={step} path={path}", flush=True)
        else:
            scratch = tempfile.mkdtemp(prefix=f"ckpt-worker{rank}-")
            tf.train.CheckpointManager(ckpt, scratch, max_to_keep=1).save(checkpoint_number=step)
            shutil.rmtree(scratch, ignore_errors=True)

    def compute_gradients(images, labels):
        with tf.GradientTape() as tape:
            logits = tf.cast(model(normalize(images), training=True), tf.float32)
            per_example = loss_fn(tf.one_hot(labels, classes), logits)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
            scaled = scale_loss(optimizer, loss) if args.precision == "fp16" else loss
        grads = tape.gradient(scaled, model.trainable_variables)
        return loss, unscale_gradients(optimizer, grads) if args.precision == "fp16" else grads

    if args.jit_compile:  # XLA for the forward and backward pass; the all-reduce stays outside
        compute_gradients = tf.function(compute_gradients, jit_compile=True)

    def replica_step(images, labels):
        loss, grads = compute_gradients(images, labels)
        # apply_gradients sums the gradients over all replicas (an all-reduce) before updating
        # (no zip(strict=True): Python 3.9, which some sites' stacks still have, lacks it)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))  # noqa: B905
        return loss

    @tf.function
    def train_step(images, labels, lr):
        optimizer.learning_rate.assign(lr)
        losses = strategy.run(replica_step, args=(images, labels))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    @tf.function
    def any_worker_stopping(flag):
        # the sum over all workers of 0 (carry on) or 1 (signalled)
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: flag), axis=None)

    def stop_requested() -> bool:
        if workers == 1:
            return stop.raised
        # one worker's signal stops every worker at the same step
        return float(any_worker_stopping(tf.constant(float(stop.raised)))) > 0

    @tf.function
    def eval_step(images, labels):
        def replica_fn(images, labels):
            logits = tf.cast(model(normalize(images), training=False), tf.float32)
            loss = tf.reduce_sum(loss_fn(tf.one_hot(labels, classes), logits))
            hits = [
                tf.reduce_sum(tf.cast(tf.math.in_top_k(labels, logits, k), tf.float32))
                for k in (1, min(5, classes))
            ]
            return tf.stack([*hits, loss, tf.cast(tf.shape(labels)[0], tf.float32)])

        totals = strategy.run(replica_fn, args=(images, labels))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, totals, axis=None)

    def evaluate(epoch: int) -> None:
        sums = tf.zeros([4])
        for images, labels in eval_input(args, strategy):
            sums += eval_step(images, labels)
        top1, top5, loss, n = (float(x) for x in sums)
        print(
            f"[eval] rank={rank}/{workers} epoch={epoch} top1={top1 / n:.4f} "
            f"top5={top5 / n:.4f} loss={loss / n:.4f}",
            flush=True,
        )

    stop = StopFlag()
    iterator = iter(train_input(args, strategy, start, total, steps_per_epoch))
    untimed = min(args.warmup_steps, max(0, total - start - 1))  # clamped for short runs
    t0 = interval_start = time.perf_counter()
    timed_from = t0 if untimed == 0 else None
    interval_steps, step, saved_at, loss = 0, start, start, None
    while step < total:
        if stop_requested():
            iterator = None  # released early, as below
            if saved_at != step:
                save(step)
            if chief:
                print(f"[preempted] step={step}", flush=True)
            return 0
        epoch = step // steps_per_epoch
        try:
            images, labels = next(iterator)
        except tf.errors.DataLossError as exc:  # a damaged TFRecord file: name it
            # (reading runs ahead of training into the next epoch, by a shuffle block)
            files = worker_files(
                args, (epoch, epoch + 1), rank, workers, per_worker, steps_per_epoch
            )
            raise SystemExit(damaged_record(files, exc)) from None
        lr = lr_at(step, args, steps_per_epoch, total, global_batch)
        loss = train_step(images, labels, tf.constant(lr, tf.float32))
        step += 1
        interval_steps += 1
        if step - start == untimed:
            float(loss)  # wait for the step to finish before starting the clock
            timed_from = time.perf_counter()
        if step % args.log_every == 0 or step == total:
            loss_value = float(loss)  # waits for the step to finish
            now = time.perf_counter()
            rate = interval_steps * per_worker / max(now - interval_start, 1e-9)
            print(
                f"[train] rank={rank}/{workers} epoch={epoch} step={step} "
                f"loss={loss_value:.6f} lr={lr:.6f} img_s={rate:.1f}",
                flush=True,
            )
            interval_start, interval_steps = now, 0
        if args.eval_steps and (step % steps_per_epoch == 0 or step == total):
            began = time.perf_counter()
            evaluate(epoch)
            spent = time.perf_counter() - began  # left out of the training throughput
            interval_start += spent
            timed_from = timed_from + spent if timed_from is not None else None
        if step % args.checkpoint_every == 0:
            save(step)
            saved_at = step
    if loss is not None:
        float(loss)  # wait for the last step
    end = time.perf_counter()
    # Release the input pipeline while every worker is still running: with TF 2.21 a worker
    # that drops its distributed iterator after another worker has exited waits about 10 s.
    iterator = None
    if saved_at != step:
        save(step)
    if chief:
        timed_steps = step - start - untimed
        rate = timed_steps * global_batch / max(end - (timed_from or t0), 1e-9)
        print(
            f"[summary] ranks={workers} steps={step} img_s={rate:.1f} time_s={end - t0:.2f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
    except (tf.errors.OpError, OSError, RuntimeError, ValueError) as exc:
        sys.exit(error_line(exc))
