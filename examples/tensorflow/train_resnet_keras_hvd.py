#!/usr/bin/env python3
"""Train a Keras ResNet50 with Horovod (one process per GPU), on synthetic images.

    horovodrun -np 4 python train_resnet_keras_hvd.py     # or: srun / jsrun / mpirun

Horovod's last release (0.28.1, 2023) needs C++17 patches to build against TensorFlow 2.21's
headers; prefer train_resnet_keras.py (tf.distribute) for new work. Same log format.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

import horovod.tensorflow as hvd
import tensorflow as tf

TINY = {"image_size": 32, "batch_size": 4, "steps": 6, "log_every": 2, "num_classes": 10}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--batch-size", type=int, default=64, help="images per GPU")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--lr", type=float, default=0.1, help="for 256 images; scaled by world size")
    p.add_argument("--fp16-allreduce", action="store_true", help="compress gradients to fp16")
    p.add_argument("--checkpoint-dir", type=Path, default=Path("checkpoints-hvd"))
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--tiny", action="store_true", help="CI setting (also TRAIN_TINY=1)")
    args = p.parse_args(argv)
    if args.tiny or os.environ.get("TRAIN_TINY") == "1":
        for key, value in TINY.items():
            setattr(args, key, value)
    return args


def main() -> int:
    args = parse_args()
    hvd.init()
    rank, world = hvd.rank(), hvd.size()
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:  # one GPU per process
        tf.config.set_visible_devices(gpus[hvd.local_rank() % len(gpus)], "GPU")

    model = tf.keras.applications.ResNet50(
        weights=None, input_shape=(args.image_size, args.image_size, 3), classes=args.num_classes
    )
    optimizer = tf.keras.optimizers.SGD(args.lr * args.batch_size * world / 256, momentum=0.9)
    step_var = tf.Variable(0, dtype=tf.int64, trainable=False)
    ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step_var)
    manager = tf.train.CheckpointManager(ckpt, str(args.checkpoint_dir), max_to_keep=2)
    if manager.latest_checkpoint:
        ckpt.restore(manager.latest_checkpoint)
        if rank == 0:
            print(f"[resume] step={int(step_var)} path={manager.latest_checkpoint}", flush=True)
    compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy()
    images = tf.random.normal([args.batch_size, args.image_size, args.image_size, 3])
    labels = tf.random.uniform([args.batch_size], maxval=args.num_classes, dtype=tf.int64)

    @tf.function
    def train_step(first: bool):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(images, training=True))
        tape = hvd.DistributedGradientTape(tape, compression=compression)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        if first:  # after the first step every variable exists: start all ranks equal
            hvd.broadcast_variables(model.variables, root_rank=0)
            hvd.broadcast_variables(optimizer.variables, root_rank=0)
        return loss

    stop = {"raised": False}
    for sig in (signal.SIGUSR1, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.update(raised=True))
    start = tick = time.perf_counter()
    done, first = 0, True
    while int(step_var) < args.steps:
        if float(hvd.allreduce(tf.constant(float(stop["raised"])), op=hvd.Max)) > 0:
            if rank == 0:
                manager.save(checkpoint_number=int(step_var))
                print(f"[preempted] step={int(step_var)}", flush=True)
            return 0
        loss = train_step(first)
        first = False
        step_var.assign_add(1)
        done += 1
        step = int(step_var)
        if step % args.log_every == 0:
            now = time.perf_counter()
            rate = args.log_every * args.batch_size / (now - tick)
            print(
                f"[train] rank={rank}/{world} epoch=0 step={step} loss={float(loss):.6f} "
                f"lr={float(optimizer.learning_rate):.6f} img_s={rate:.1f}",
                flush=True,
            )
            tick = now
    elapsed = time.perf_counter() - start
    if rank == 0:
        manager.save(checkpoint_number=int(step_var))
        print(
            f"[summary] ranks={world} steps={int(step_var)} "
            f"img_s={done * args.batch_size * world / elapsed:.1f} time_s={elapsed:.2f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
