#!/usr/bin/env python3
"""Train a Keras image classifier (ResNet50 by default) on one device or on several workers.

With more than one worker it uses tf.distribute.MultiWorkerMirroredStrategy; the cluster comes
from TF_CONFIG if set, otherwise from Slurm (one worker per srun task):

    python train_resnet_keras.py           # one process, every local GPU (MirroredStrategy)
    srun python train_resnet_keras.py      # one worker per Slurm task

Without --data-dir it trains on synthetic images. Every worker logs one line per --log-every:

    [train] rank=0/2 epoch=0 step=20 loss=6.912345 lr=0.100000 img_s=123.4

and worker 0 ends with ``[summary] ranks=2 steps=40 img_s=246.8 time_s=12.34``.

The training loop is written out (strategy.run) rather than using model.fit: with Keras 3,
model.fit under MultiWorkerMirroredStrategy fails with "Attempt to convert a value
(PerReplica...)" (keras-team/keras#20585); a custom loop works with Keras 2 and 3.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import signal
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # keep warnings, drop C++ INFO lines

import tensorflow as tf

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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--arch", default="ResNet50", help="a keras.applications model name")
    p.add_argument(
        "--data-dir",
        type=Path,
        help="ImageNet-style folder with train/<class>/*.JPEG; synthetic if omitted",
    )
    p.add_argument("--num-classes", type=int, default=1000, help="classes of synthetic data")
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--batch-size", type=int, default=64, help="images per worker and step")
    p.add_argument("--epochs", type=int, default=90)
    p.add_argument("--steps", type=int, help="stop after this many steps in total")
    p.add_argument("--steps-per-epoch", type=int, default=500)
    p.add_argument(
        "--lr",
        type=float,
        default=0.1,
        help="learning rate for a global batch of 256, scaled linearly",
    )
    p.add_argument("--warmup-epochs", type=float, default=5.0)
    p.add_argument("--label-smoothing", type=float, default=0.1)
    p.add_argument(
        "--precision",
        choices=["fp32", "bf16", "fp16"],
        default="fp32",
        help="Keras mixed precision; fp16 uses loss scaling",
    )
    p.add_argument("--jit-compile", action="store_true", help="compile the step with XLA")
    p.add_argument(
        "--intra-threads", type=int, default=0, help="threads inside one op (0: TensorFlow chooses)"
    )
    p.add_argument(
        "--inter-threads",
        type=int,
        default=0,
        help="ops run at once (0: TensorFlow chooses). On AMD CPUs also set "
        "TF_ENABLE_ONEDNN_OPTS=1 (ARCHER2 reports a 12x speed-up)",
    )
    p.add_argument("--cluster", choices=["auto", "tf_config", "slurm", "none"], default="auto")
    p.add_argument("--port", type=int, default=8888, help="worker port for the Slurm resolver")
    p.add_argument("--checkpoint-dir", type=Path, default=Path("checkpoints"))
    p.add_argument("--checkpoint-every", type=int, default=500)
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--warmup-steps", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--tiny",
        action="store_true",
        help="CI setting: "
        + ", ".join(f"{k}={v}" for k, v in TINY.items())
        + "; the environment variable TRAIN_TINY=1 does the same",
    )
    return p


def parse_args(argv=None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.tiny or os.environ.get("TRAIN_TINY") == "1":
        for key, value in TINY.items():
            # logging and checkpoint intervals given on the command line are kept
            if key not in TINY_SOFT or getattr(args, key) == parser.get_default(key):
                setattr(args, key, value)
        if os.environ.get("TRAIN_TINY_STEPS"):
            args.steps = int(os.environ["TRAIN_TINY_STEPS"])
    if args.data_dir is not None and not (args.data_dir / "train").is_dir():
        parser.error(f"--data-dir {args.data_dir}: no train/ directory in it")
    if not hasattr(tf.keras.applications, args.arch):
        parser.error(f"--arch {args.arch}: not a keras.applications model")
    return args


def make_strategy(args):
    """(strategy, rank, world size) from TF_CONFIG, Slurm, or a single process."""
    mode = args.cluster
    if mode == "auto":
        if "TF_CONFIG" in os.environ:
            mode = "tf_config"
        elif int(os.environ.get("SLURM_NTASKS", "1")) > 1 and "SLURM_PROCID" in os.environ:
            mode = "slurm"
        else:
            mode = "none"
    if mode == "none":
        if len(tf.config.list_physical_devices("GPU")) > 1:
            return tf.distribute.MirroredStrategy(), 0, 1  # every GPU of this node
        return tf.distribute.get_strategy(), 0, 1
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.NCCL
        if tf.config.list_physical_devices("GPU")
        else tf.distribute.experimental.CommunicationImplementation.RING
    )
    if mode == "slurm":
        # Reads SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_STEP_NODELIST and
        # SLURM_STEP_TASKS_PER_NODE, as srun sets them; workers listen on --port upwards.
        # The resolver numbers the tasks of a node by handing out its GPUs, so on CPU nodes
        # (no GPUs, no nvidia-smi) it would fail or list no tasks at all. There, give it one
        # pretend GPU per task and tell it not to set CUDA_VISIBLE_DEVICES.
        gpu_args = {}
        if not tf.config.list_physical_devices("GPU"):
            per_node = max(
                int(n)
                for n in re.findall(
                    r"(\d+)(?:\(x\d+\))?", os.environ.get("SLURM_STEP_TASKS_PER_NODE", "1")
                )
            )
            gpu_args = {"gpus_per_node": per_node, "gpus_per_task": 1, "auto_set_gpu": False}
        resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(
            port_base=args.port, **gpu_args
        )
        strategy = tf.distribute.MultiWorkerMirroredStrategy(
            cluster_resolver=resolver, communication_options=options
        )
    else:
        strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    resolver = strategy.cluster_resolver
    rank = resolver.task_id or 0
    return strategy, rank, strategy.num_replicas_in_sync


def synthetic_dataset(args, world: int, rank: int) -> tf.data.Dataset:
    """Images that depend only on (seed, index): a resumed run sees the same batches."""
    size, classes = args.image_size, args.num_classes

    def make(index):
        seed = tf.stack([tf.cast(args.seed, tf.int64), index])
        image = tf.random.stateless_normal([size, size, 3], seed=seed)
        label = tf.random.stateless_uniform([], seed=seed + 1, maxval=classes, dtype=tf.int64)
        return image, label

    return tf.data.Dataset.range(rank, 2**62, world).map(make)


def folder_dataset(args) -> tuple[tf.data.Dataset, int]:
    ds = tf.keras.utils.image_dataset_from_directory(
        args.data_dir / "train",
        image_size=(args.image_size, args.image_size),
        batch_size=None,
        shuffle=True,
        seed=args.seed,
    )
    classes = len(ds.class_names)
    ds = ds.map(lambda x, y: (tf.image.random_flip_left_right(x) / 127.5 - 1.0, y))
    return ds.repeat(), classes


class StopFlag:
    """Set by SIGUSR1/SIGTERM: the job is close to its time limit or being cancelled."""

    def __init__(self):
        self.raised = False
        for sig in (signal.SIGUSR1, signal.SIGTERM):
            signal.signal(sig, self._handler)

    def _handler(self, signum, frame):
        self.raised = True


def main(argv=None) -> int:
    args = parse_args(argv)
    tf.config.threading.set_intra_op_parallelism_threads(args.intra_threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.inter_threads)
    for gpu in tf.config.list_physical_devices("GPU"):
        tf.config.experimental.set_memory_growth(gpu, True)
    if args.precision != "fp32":
        tf.keras.mixed_precision.set_global_policy(
            "mixed_bfloat16" if args.precision == "bf16" else "mixed_float16"
        )
    strategy, rank, world = make_strategy(args)
    if world > 1 and "OMP_NUM_THREADS" not in os.environ and rank == 0:
        print(
            "warning: OMP_NUM_THREADS is not set; ranks sharing a node may oversubscribe its cores",
            flush=True,
        )
    tf.keras.utils.set_random_seed(args.seed)

    if args.data_dir is None:
        per_worker, classes = synthetic_dataset(args, world, rank), args.num_classes
    else:
        per_worker, classes = folder_dataset(args)
        per_worker = per_worker.shard(world, rank)
    per_worker = per_worker.batch(args.batch_size, drop_remainder=True)
    global_batch = args.batch_size * world
    steps_per_epoch = args.steps_per_epoch
    total = args.steps or args.epochs * steps_per_epoch

    with strategy.scope():
        model = getattr(tf.keras.applications, args.arch)(
            weights=None, input_shape=(args.image_size, args.image_size, 3), classes=classes
        )
        optimizer = tf.keras.optimizers.SGD(learning_rate=args.lr, momentum=0.9)
        if args.precision == "fp16":
            optimizer = tf.keras.mixed_precision.LossScaleOptimizer(optimizer)
        step_var = tf.Variable(0, dtype=tf.int64, trainable=False)
        loss_fn = tf.keras.losses.CategoricalCrossentropy(
            label_smoothing=args.label_smoothing, reduction="none"
        )

    # Every worker writes a checkpoint (the collective needs all of them); only the chief's is
    # kept, the others go to a scratch directory that is removed at once.
    ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step_var)
    chief = rank == 0
    ckpt_dir = args.checkpoint_dir if chief else args.checkpoint_dir / f".worker{rank}"
    manager = tf.train.CheckpointManager(ckpt, str(ckpt_dir), max_to_keep=3)
    restored = None
    for path in reversed(manager.checkpoints):
        try:
            ckpt.restore(path).expect_partial()
            restored = path
            break
        except (tf.errors.OpError, ValueError) as exc:
            print(f"warning: skipping unreadable checkpoint {path}: {exc}", flush=True)
    if restored and chief:
        print(f"[resume] step={int(step_var.numpy())} path={restored}", flush=True)

    def save() -> str:
        path = manager.save(checkpoint_number=int(step_var.numpy()))
        if not chief:
            tf.io.gfile.rmtree(str(ckpt_dir))
        return path

    start = int(step_var.numpy())
    # Each worker already reads its own shard, so tell the strategy not to shard again.
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    dataset = strategy.experimental_distribute_dataset(
        per_worker.skip(start).prefetch(tf.data.AUTOTUNE).with_options(options)
    )
    peak = args.lr * global_batch / 256
    warmup = max(1, int(args.warmup_epochs * steps_per_epoch))

    def lr_at(step):
        step = tf.cast(step, tf.float32)
        warm = peak * (step + 1) / warmup
        progress = tf.minimum(1.0, (step - warmup) / max(1, total - warmup))
        cosine = 0.5 * peak * (1 + tf.cos(math.pi * progress))
        return tf.where(step < warmup, warm, cosine)

    def train_step(images, labels):
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            onehot = tf.one_hot(labels, classes)
            per_example = loss_fn(onehot, tf.cast(logits, tf.float32))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
            scaled = optimizer.scale_loss(loss) if hasattr(optimizer, "scale_loss") else loss
        grads = tape.gradient(scaled, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    @tf.function(jit_compile=args.jit_compile or None)
    def distributed_step(images, labels, lr):
        optimizer.learning_rate.assign(lr)
        per_replica = strategy.run(train_step, args=(images, labels))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    @tf.function
    def agree(flag):
        # SUM of 0/1 flags: positive when any worker was signalled
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(lambda: flag), axis=None)

    stop = StopFlag()
    t0 = interval_t = time.perf_counter()
    timed_from, timed_steps, interval_steps = None, 0, 0
    iterator = iter(dataset)
    step = start
    while step < total:
        if float(agree(tf.constant(1.0 if stop.raised else 0.0))) > 0:
            path = save()
            if chief:
                print(f"[checkpoint] step={step} path={path}", flush=True)
                print(f"[preempted] step={step}", flush=True)
            return 0
        images, labels = next(iterator)
        lr = lr_at(step)
        loss = distributed_step(images, labels, lr)
        step += 1
        step_var.assign(step)
        interval_steps += 1
        if step == min(args.warmup_steps, total - 1):
            timed_from, timed_steps = time.perf_counter(), 0
        elif timed_from is not None:
            timed_steps += 1
        if step % args.log_every == 0 or step == total:
            now = time.perf_counter()
            rate = interval_steps * args.batch_size / max(now - interval_t, 1e-9)
            print(
                f"[train] rank={rank}/{world} epoch={(step - 1) // steps_per_epoch} "
                f"step={step} loss={float(loss):.6f} lr={float(lr):.6f} img_s={rate:.1f}",
                flush=True,
            )
            interval_t, interval_steps = now, 0
        if step % args.checkpoint_every == 0:
            path = save()
            if chief:
                print(f"[checkpoint] step={step} path={path}", flush=True)
    end = time.perf_counter()
    if step % args.checkpoint_every:
        save()
    if chief:
        timed = end - timed_from if timed_from else end - t0
        rate = timed_steps * global_batch / max(timed, 1e-9) if timed_steps else 0.0
        print(
            f"[summary] ranks={world} steps={step} img_s={rate:.1f} time_s={end - t0:.2f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
    except (tf.errors.OpError, OSError) as exc:
        sys.exit(f"error: {type(exc).__name__}: {str(exc).splitlines()[0]}")
