#!/usr/bin/env python3
"""Images/s of examples/tensorflow/train_resnet_keras.py against a plain Keras training loop.

Both train the same keras.applications model with the same batch, precision, optimizer and
loss on the same device, one process each. The plain loop runs a tf.function training step on
one batch that already sits on the device; the trainer makes its synthetic batches with
tf.data, runs its step under a tf.distribute strategy, and checks for preemption and
checkpoints, so the ratio is what the trainer's input pipeline and bookkeeping cost. Prints one
JSON record (hardware, versions, settings, date, commit); ``--output FILE`` also writes it.
Not a test: the figures depend on the machine.

    python benchmarks/bench_tensorflow.py --batch-size 8 --image-size 64 --steps 10   # a CPU
    python benchmarks/bench_tensorflow.py --batch-size 256 --precision bf16 --jit-compile \\
        --output results/bench/tensorflow-gpu.json                                   # a GPU node
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import record

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # after the log level is set

TRAINER = record.ROOT / "examples" / "tensorflow" / "train_resnet_keras.py"


def plain_loop(args) -> float:
    """The least a training step can do: images/s after ``args.warmup`` untimed steps."""
    if args.precision != "fp32":
        policy = {"bf16": "mixed_bfloat16", "fp16": "mixed_float16"}[args.precision]
        tf.keras.mixed_precision.set_global_policy(policy)
    tf.keras.backend.clear_session()  # a fresh graph for each repeat
    tf.keras.utils.set_random_seed(0)
    model = getattr(tf.keras.applications, args.arch)(
        weights=None,
        input_shape=(args.image_size, args.image_size, 3),
        classes=1000,
        classifier_activation=None,
    )
    lr = 0.1 * args.batch_size / 256  # the trainer's peak rate for one worker
    optimizer = tf.keras.optimizers.SGD(learning_rate=lr, momentum=0.9, weight_decay=5e-5)
    if args.precision == "fp16":
        optimizer = tf.keras.mixed_precision.LossScaleOptimizer(optimizer)
    loss_fn = tf.keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1)
    images = tf.random.uniform([args.batch_size, args.image_size, args.image_size, 3])
    labels = tf.one_hot(tf.random.uniform([args.batch_size], 0, 1000, tf.int32), 1000)

    def gradients():
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, tf.cast(model(images, training=True), tf.float32))
            scaled = optimizer.scale_loss(loss) if args.precision == "fp16" else loss
        return tape.gradient(scaled, model.trainable_variables)

    if args.jit_compile:
        gradients = tf.function(gradients, jit_compile=True)

    @tf.function
    def step():
        optimizer.apply_gradients(zip(gradients(), model.trainable_variables, strict=True))

    for _ in range(args.warmup):
        step()
    _ = model.trainable_variables[0].numpy()  # wait for the device
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    _ = model.trainable_variables[0].numpy()
    return args.steps * args.batch_size / (time.perf_counter() - start)


def trainer(args, workdir: Path) -> tuple[float, str]:
    """The trainer's [summary] images/s over the same steps, and its command line."""
    total = args.steps + args.warmup
    cmd = [
        sys.executable,
        str(TRAINER),
        *("--arch", args.arch, "--batch-size", str(args.batch_size)),
        *("--image-size", str(args.image_size), "--precision", args.precision),
        *("--steps", str(total), "--steps-per-epoch", str(total)),
        *("--warmup-steps", str(args.warmup), "--log-every", str(total)),
        *("--checkpoint-every", str(10 * total), "--checkpoint-dir", str(workdir)),
    ]
    cmd += ["--jit-compile"] if args.jit_compile else []
    return record.trainer_rate(cmd, TRAINER)


def hardware() -> dict:
    out: dict = {"cpu": record.cpu_name(), "cores": os.cpu_count()}
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
        out.update(gpu=details.get("device_name"), gpus=len(gpus))
    return out


def main() -> None:
    gpu = bool(tf.config.list_physical_devices("GPU"))
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--arch", default="ResNet50", help="keras.applications model")
    record.add_common_arguments(p, gpu=gpu)
    p.add_argument("--jit-compile", action="store_true", help="XLA (both loops)")
    args = p.parse_args()
    if args.warmup < 1 or args.steps < args.warmup:
        p.error("--warmup must be at least 1 and --steps at least --warmup")
    if not hasattr(tf.keras.applications, args.arch):
        p.error(f"--arch {args.arch}: not a keras.applications model")

    runs, command = record.compare(
        args.repeats, lambda tmp: trainer(args, tmp), lambda: plain_loop(args)
    )
    record.emit(
        args,
        f"{args.arch.lower()}-keras-trainer-vs-plain-loop",
        TRAINER.name,
        runs,
        command,
        hardware(),
        {"tensorflow": tf.__version__, "keras": tf.keras.__version__},
    )


if __name__ == "__main__":
    main()
