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
import datetime as dt
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # after the log level is set

ROOT = Path(__file__).resolve().parent.parent
TRAINER = ROOT / "examples" / "tensorflow" / "train_resnet_keras.py"
# A launcher's variables would make the trainer wait for workers that never come.
LAUNCHER_VARS = ("SLURM_", "OMPI_", "PMIX_", "PMI_", "JSM_", "TF_CONFIG", "TRAIN_TINY")


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
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCHER_VARS)}
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    m = re.search(r"^\[summary\] .*\bimg_s=([\d.]+)", r.stdout, re.MULTILINE)
    if r.returncode != 0 or not m:
        raise SystemExit(f"the trainer failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    shown = [Path(c).name if c in (sys.executable, str(TRAINER)) else c for c in cmd]
    return float(m[1]), " ".join(shown)


def hardware() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        names = re.findall(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
        cpu = names[0] if names else cpu
    except OSError:
        pass
    out: dict = {"cpu": cpu, "cores": os.cpu_count()}
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
        out.update(gpu=details.get("device_name"), gpus=len(gpus))
    return out


def git_commit() -> str | None:
    try:
        r = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
        )
    except OSError:
        return None
    return r.stdout.strip() or None


def main() -> None:
    gpu = bool(tf.config.list_physical_devices("GPU"))
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--arch", default="ResNet50", help="keras.applications model")
    p.add_argument("--batch-size", type=int, default=256 if gpu else 8)
    p.add_argument("--image-size", type=int, default=224 if gpu else 64)
    p.add_argument("--steps", type=int, default=50 if gpu else 10, help="timed steps")
    p.add_argument("--warmup", type=int, default=10 if gpu else 2, help="untimed steps first")
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32")
    p.add_argument("--jit-compile", action="store_true", help="XLA (both loops)")
    p.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="runs of each, alternating; the best of each counts (a shared or busy machine "
        "slows single runs down at random)",
    )
    p.add_argument("--output", type=Path, help="also write the JSON record here")
    args = p.parse_args()
    if args.warmup < 1 or args.steps < args.warmup:
        p.error("--warmup must be at least 1 and --steps at least --warmup")
    if not hasattr(tf.keras.applications, args.arch):
        p.error(f"--arch {args.arch}: not a keras.applications model")

    runs: dict[str, list[float]] = {"trainer": [], "plain": []}
    for _ in range(max(1, args.repeats)):
        with tempfile.TemporaryDirectory() as tmp:
            rate, command = trainer(args, Path(tmp))
        runs["trainer"].append(rate)
        runs["plain"].append(plain_loop(args))
    ours, plain = max(runs["trainer"]), max(runs["plain"])
    record = {
        "benchmark": f"{args.arch.lower()}-keras-trainer-vs-plain-loop",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "hardware": hardware(),
        "software": {
            "python": platform.python_version(),
            "tensorflow": tf.__version__,
            "keras": tf.keras.__version__,
        },
        "settings": {k: v for k, v in vars(args).items() if k != "output"},
        "trainer_command": command,
        "img_s": {"train_resnet_keras.py": round(ours, 1), "plain loop": round(plain, 1)},
        "ratio": round(ours / plain, 3),
        "all_runs_img_s": {k: [round(v, 1) for v in vs] for k, vs in runs.items()},
    }
    text = json.dumps(record, indent=2)
    print(text)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text + "\n")


if __name__ == "__main__":
    main()
