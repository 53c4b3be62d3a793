#!/usr/bin/env python3
"""Data-parallel training with TensorFlow and Keras: a skeleton for your model and data (CHANGE).
One process per node, or per srun task. SIGUSR1 or SIGTERM: finish the step, checkpoint, exit 0."""

import argparse
import json
import os
import signal
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow loads: no INFO lines
import tensorflow as tf
from tensorflow import keras
from tensorflow.keras import layers

MINIMUM_VERSIONS = {"tensorflow": "2.13"}  # the oldest release it runs on
BATCH, LR, LOG_EVERY, CHECKPOINT_EVERY = 32, 0.01, 100, 500  # CHANGE: batch size per replica
stop = []  # signals received


def make_strategy():
    """(strategy, rank, world): TF_CONFIG's workers (from srun's tasks if unset), else alone."""
    env, resolvers = os.environ, tf.distribute.cluster_resolver
    if "TF_CONFIG" not in env and int(env.get("SLURM_STEP_NUM_TASKS", "1")) > 1:
        n = int(env["SLURM_STEP_NUM_TASKS"])  # n slots a node, ports 8888, 8889, ...: no GPUs
        slurm = resolvers.SlurmClusterResolver(gpus_per_node=n, auto_set_gpu=False)
        task = {"type": "worker", "index": int(env["SLURM_PROCID"])}
        env["TF_CONFIG"] = json.dumps({"cluster": slurm.cluster_spec().as_dict(), "task": task})
    if "TF_CONFIG" not in env:
        return tf.distribute.MirroredStrategy(), 0, 1
    config = json.loads(env["TF_CONFIG"])  # each worker uses all the GPUs it sees
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    return strategy, config["task"]["index"], len(config["cluster"]["worker"])


def main():
    parser = argparse.ArgumentParser(description="Train one model on every worker of a job.")
    parser.add_argument("--steps", type=int, default=2000, help="optimizer steps in all")
    parser.add_argument("--checkpoint", default="checkpoints", help="a directory all workers see")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # each line reaches the job's log at once
    strategy, rank, world = make_strategy()
    for sig in (signal.SIGUSR1, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: stop.append(signum))
    global_batch = BATCH * strategy.num_replicas_in_sync
    with strategy.scope():  # CHANGE: your model and optimizer, made in this scope
        model = keras.Sequential([keras.Input([32]), layers.Dense(64, "relu"), layers.Dense(1)])
        optimizer = keras.optimizers.SGD(LR, momentum=0.9)
        optimizer.build(model.trainable_variables)  # its variables now, for a restore to fill
    loss_fn = keras.losses.MeanSquaredError(reduction="none")  # CHANGE: your loss, per sample
    ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer)
    ckpt.restore(tf.train.latest_checkpoint(args.checkpoint))  # resume from rank 0's, if any
    step = first = int(optimizer.iterations.numpy())
    if step:
        print(f"[resume] step={step} path={args.checkpoint}")
    x = tf.random.stateless_normal((8192, 32), seed=(0, 0))  # CHANGE: your data
    data = tf.data.Dataset.from_tensor_slices((x, tf.reduce_sum(x, axis=1, keepdims=True)))
    data = data.shuffle(8192, seed=0).repeat().batch(global_batch, drop_remainder=True)
    batches = iter(strategy.experimental_distribute_dataset(data.skip(step)))  # to all replicas

    def replica_step(inputs, targets, flag):
        with tf.GradientTape() as tape:
            per_sample = loss_fn(targets, model(inputs, training=True))
            loss = tf.nn.compute_average_loss(per_sample, global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))  # all-reduce  # noqa: B905
        return loss, flag

    @tf.function
    def train_step(inputs, targets, flag):  # flag: 1 where this worker was signalled
        loss, flag = strategy.run(replica_step, args=(inputs, targets, flag))
        return strategy.reduce("SUM", loss, axis=None), strategy.reduce("SUM", flag, axis=None)

    start, done, rate, seconds = time.perf_counter(), False, 0.0, 0.0
    while step < args.steps and not done:
        loss, flag = train_step(*next(batches), tf.constant(float(len(stop))))
        step += 1
        done = float(flag) > 0 or step == args.steps  # if any worker was signalled, all stop
        if step % LOG_EVERY == 0 or done:
            seconds = time.perf_counter() - start
            rate = (step - first) * global_batch / world / seconds
            line = f"step={step} loss={float(loss):.6f} lr={LR} img_s={rate:.1f}"
            print(f"[train] rank={rank}/{world} epoch={step * global_batch // len(x)} {line}")
        if step % CHECKPOINT_EVERY == 0 or done:  # every worker saves: a save may need them all,
            with tempfile.TemporaryDirectory() as scratch:  # but only rank 0's copy is kept
                keep = args.checkpoint if rank == 0 else scratch
                tf.train.CheckpointManager(ckpt, keep, max_to_keep=1).save(step)
    if rank == 0 and step < args.steps:  # stopped by a signal
        print(f"[preempted] step={step}")
    if rank == 0:
        print(f"[summary] ranks={world} steps={step} img_s={rate * world:.1f} time_s={seconds:.2f}")


if __name__ == "__main__":
    main()
