#!/usr/bin/env python3
"""Train a Keras ResNet50 (or --arch) with Horovod (horovod.tensorflow), one process per GPU.

    horovodrun -np 4 python train_resnet_keras_hvd.py   # or srun / mpirun / jsrun: a task per GPU

Each rank trains on a fixed batch of synthetic images: it measures throughput, not accuracy.
Horovod's last release (0.28.1, June 2023) predates Keras 3: its horovod.tensorflow.keras
wrappers, DistributedGradientTape and broadcast_variables expect tf.Variable objects, which Keras
3 variables are not. So this script broadcasts the initial values and averages the gradients
itself (hvd.broadcast, hvd.grouped_allreduce) in a hand-written loop. Building 0.28.1 against
TensorFlow 2.21 needs C++17 (horovod#3996) and leaving out Horovod's XLA ops, whose headers the
TensorFlow wheel does not ship (docs/howto/horovod.md). For new work prefer
train_resnet_keras.py (tf.distribute, no extra package); the log lines are the same.
Hand launches (srun, mpirun) do not set OMP_NUM_THREADS: set it to the cores per rank.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # hide C++ INFO lines, keep warnings

import horovod.tensorflow as hvd
import tensorflow as tf

TINY = {"image_size": 32, "batch_size": 4, "steps": 6, "log_every": 2, "num_classes": 10}
# The oldest releases this program runs on: it stops at start-up on older ones.
MINIMUM_VERSIONS = {"tensorflow": "2.13", "horovod": "0.28"}
# Variables that say the job holds GPUs (Slurm; LSF and jsrun set CUDA_VISIBLE_DEVICES).
GPU_JOB_VARIABLES = ("SLURM_GPUS_ON_NODE", "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--arch",
        default="ResNet50",
        choices=sorted(n for n in dir(tf.keras.applications) if n[:1].isupper()),
        metavar="NAME",
        help="a keras.applications model (as train_resnet_keras.py)",
    )
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--batch-size", type=int, default=64, help="images per GPU (per rank)")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--lr", type=float, default=0.1, help="for 256 images; scaled linearly")
    p.add_argument("--fp16-allreduce", action="store_true", help="send gradients as fp16")
    p.add_argument("--checkpoint-dir", type=Path, default=Path("checkpoints-hvd"))
    p.add_argument("--checkpoint-every", type=int, default=500)
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument(
        "--device",
        choices=["auto", "gpu", "cpu"],
        default="auto",
        help="auto: the GPUs if any; inside a job that holds GPUs, a GPU or stop "
        "(as train_resnet_keras.py)",
    )
    p.add_argument(
        "--tiny", action="store_true", help="CI setting (also TRAIN_TINY=1; TRAIN_TINY_STEPS=N)"
    )
    args = p.parse_args(argv)
    if args.tiny or os.environ.get("TRAIN_TINY") == "1":
        args.tiny = True
        for key, value in TINY.items():
            setattr(args, key, value)
        if os.environ.get("TRAIN_TINY_STEPS", "").isdigit():
            args.steps = int(os.environ["TRAIN_TINY_STEPS"])
    return args


def version_tuple(text: str) -> tuple[int, ...]:
    m = re.match(r"\d+(?:\.\d+)*", text)
    return tuple(int(part) for part in m[0].split(".")) if m else ()


def check_versions() -> None:
    """Stop at once, naming the version needed, on a framework older than MINIMUM_VERSIONS."""
    for name, oldest in MINIMUM_VERSIONS.items():
        have = getattr(sys.modules.get(name), "__version__", None)
        if isinstance(have, str) and version_tuple(have) < version_tuple(oldest):
            sys.exit(
                f"error: {Path(__file__).name} needs {name} {oldest} or newer; "
                f"this environment has {have}"
            )


def gpus_granted() -> str | None:
    """The variable saying that this job holds GPUs (as NAME=VALUE), or None."""
    for var in GPU_JOB_VARIABLES:
        value = os.environ.get(var, "").strip()
        none = ("", "0") if var == "SLURM_GPUS_ON_NODE" else ("", "-1", "NoDevFiles")
        if value not in none:
            return f"{var}={value}"
    return None


def visible_gpus(args) -> list:
    """The GPUs to use. A run that asks for one (--device gpu, or auto in a job that holds GPUs)
    and sees none stops here, naming the cause; --tiny runs go on on the CPU, warning."""
    if args.device == "cpu":
        tf.config.set_visible_devices([], "GPU")
        return []
    wanted = "--device gpu" if args.device == "gpu" else gpus_granted()
    gpus = tf.config.list_physical_devices("GPU")
    build = tf.sysconfig.get_build_info()
    problem = None
    if not (build.get("is_cuda_build") or build.get("is_rocm_build")):
        problem = f"this TensorFlow ({tf.__version__}) is a CPU-only build"
    elif not gpus:
        problem = f"TensorFlow {tf.__version__} sees no GPU"
    if wanted and problem and not args.tiny:
        sys.exit(f"error: {wanted} asks for a GPU, but {problem}")
    if wanted and problem:
        print(f"warning: {wanted}: {problem}; --tiny runs on the CPU", flush=True)
    return gpus


def main() -> int:
    check_versions()
    args = parse_args()
    hvd.init()
    rank, world = hvd.rank(), hvd.size()
    gpus = visible_gpus(args)
    if gpus:  # one GPU per process
        gpu = gpus[hvd.local_rank() % len(gpus)]
        tf.config.set_visible_devices(gpu, "GPU")
        tf.config.experimental.set_memory_growth(gpu, True)

    model = getattr(tf.keras.applications, args.arch)(
        weights=None,
        input_shape=(args.image_size, args.image_size, 3),
        classes=args.num_classes,
        classifier_activation=None,
    )
    global_batch = args.batch_size * world
    optimizer = tf.keras.optimizers.SGD(args.lr * global_batch / 256, momentum=0.9)
    optimizer.build(model.trainable_variables)
    step_var = tf.Variable(0, dtype=tf.int64, trainable=False)
    ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step_var)
    manager = tf.train.CheckpointManager(ckpt, str(args.checkpoint_dir), max_to_keep=3)
    if manager.latest_checkpoint:  # every rank reads rank 0's files (a shared file system)
        ckpt.restore(manager.latest_checkpoint)
        if rank == 0:
            print(f"[resume] step={int(step_var)} path={manager.latest_checkpoint}", flush=True)
    # Every rank starts from rank 0's weights and momenta. hvd.broadcast_variables expects
    # tf.Variable objects, which Keras 3 variables are not: broadcast their values one by one.
    for i, var in enumerate(model.variables + optimizer.variables):
        var.assign(hvd.broadcast(tf.convert_to_tensor(var), root_rank=0, name=f"init.{i}"))

    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    shape = [args.batch_size, args.image_size, args.image_size, 3]
    images = tf.random.stateless_normal(shape, seed=[rank, 0])
    labels = tf.random.stateless_uniform(
        [args.batch_size], seed=[rank, 1], maxval=args.num_classes, dtype=tf.int64
    )

    @tf.function
    def train_step():
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(images, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        # Average the gradients over the ranks. (hvd.DistributedGradientTape does this for
        # tf.Variables, but calls .ref() on each source, which Keras 3 variables lack.)
        grads = hvd.grouped_allreduce(grads, op=hvd.Average, compression=compression)
        # (no zip(strict=True): Python 3.9, which some sites' stacks still have, lacks it)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))  # noqa: B905
        return hvd.allreduce(loss)

    def save() -> None:
        if rank == 0:
            path = manager.save(checkpoint_number=int(step_var))
            print(f"[checkpoint] step={int(step_var)} path={path}", flush=True)

    stop = {"raised": False}  # SIGUSR1 (#SBATCH --signal=USR1@120) or SIGTERM: save and leave
    for sig in (signal.SIGUSR1, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.update(raised=True))
    start = tick = time.perf_counter()
    done = 0
    while int(step_var) < args.steps:
        if float(hvd.allreduce(tf.constant(float(stop["raised"])), op=hvd.Sum)) > 0:
            save()
            if rank == 0:
                print(f"[preempted] step={int(step_var)}", flush=True)
            return 0
        loss = train_step()
        step_var.assign_add(1)
        done += 1
        step = int(step_var)
        if step % args.log_every == 0:
            now = time.perf_counter()
            print(
                f"[train] rank={rank}/{world} epoch=0 step={step} loss={float(loss):.6f} "
                f"lr={float(optimizer.learning_rate):.6f} "
                f"img_s={args.log_every * args.batch_size / (now - tick):.1f}",
                flush=True,
            )
            tick = now
        if step % args.checkpoint_every == 0:
            save()
    elapsed = time.perf_counter() - start
    if done and int(step_var) % args.checkpoint_every:
        save()
    if rank == 0:
        print(
            f"[summary] ranks={world} steps={int(step_var)} "
            f"img_s={done * global_batch / elapsed:.1f} time_s={elapsed:.2f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
