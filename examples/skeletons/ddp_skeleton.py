#!/usr/bin/env python3
"""Data-parallel training with PyTorch DDP, one process per GPU: a skeleton for your own model
and data (CHANGE). SIGUSR1 or SIGTERM: finish the step, checkpoint, exit 0; a rerun resumes."""

import argparse
import itertools
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

# Each launcher's rank, world size and local rank (rank on its node): the first one set wins.
LAUNCHERS = [
    ("RANK", "WORLD_SIZE", "LOCAL_RANK"),  # torchrun
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),  # mpirun
    ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID"),  # srun's tasks, not the batch shell
]
MEET = "export MASTER_PORT=29500 MASTER_ADDR=$(scontrol show hostnames | head -n 1)"
MINIMUM_VERSIONS = {"torch": "2.1"}  # the oldest release it runs on
BATCH, LR, LOG_EVERY, CHECKPOINT_EVERY = 32, 0.01, 100, 500  # CHANGE: batch size is per rank
stop = []  # signals received


def main():
    parser = argparse.ArgumentParser(description="Train one model on every rank of a job.")
    parser.add_argument("--steps", type=int, default=2000, help="optimizer steps in all")
    parser.add_argument("--checkpoint", default="checkpoint.pt", help="rank 0 writes it")
    args = parser.parse_args()
    env = os.environ
    names = next((names for names in LAUNCHERS if names[0] in env), None)
    rank, world, local = [int(env[name]) for name in names] if names else (0, 1, 0)  # or alone
    if not {"MASTER_ADDR", "MASTER_PORT"} <= env.keys():  # where the ranks meet: srun says not
        sys.exit(f"error: MASTER_ADDR or MASTER_PORT is not set: use torchrun, or first {MEET}")
    device, backend = torch.device("cpu"), "gloo"
    if torch.cuda.is_available():  # one GPU per rank, picked by its rank on the node
        device, backend = torch.device("cuda", local % torch.cuda.device_count()), "nccl"
        torch.cuda.set_device(device)
    dist.init_process_group(backend, rank=rank, world_size=world)
    for sig in (signal.SIGUSR1, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: stop.append(signum))

    x = torch.randn(8192, 32, generator=torch.Generator().manual_seed(0))  # CHANGE: your data
    data = TensorDataset(x, x.sum(dim=1, keepdim=True))  # (the same on every rank)
    sampler = DistributedSampler(data, seed=0)  # deals it out: each rank its own part
    loader = DataLoader(data, batch_size=BATCH, sampler=sampler, drop_last=True)
    # CHANGE: your model, loss and optimizer.
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
    loss_fn = nn.MSELoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    step = 0
    if os.path.exists(args.checkpoint):  # resume: every rank reads the file rank 0 wrote
        state = torch.load(args.checkpoint, map_location=device, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = state["step"]
        print(f"[resume] step={step} path={args.checkpoint}", flush=True)
    ddp = nn.parallel.DistributedDataParallel(model)  # starts every rank from rank 0's weights
    os.makedirs(os.path.dirname(args.checkpoint) or ".", exist_ok=True)

    first, start, done, rate, seconds = step, time.perf_counter(), False, 0.0, 0.0
    while step < args.steps and not done:
        epoch = step // len(loader)  # a resumed run goes on in the same epoch, at the same batch
        sampler.set_epoch(epoch)  # a new order each epoch, the same on every rank
        for inputs, targets in itertools.islice(loader, step % len(loader), None):
            loss = loss_fn(ddp(inputs.to(device)), targets.to(device))
            optimizer.zero_grad()
            loss.backward()  # DDP averages the gradients of all ranks here
            optimizer.step()
            step += 1
            flag = torch.tensor([len(stop)], device=device)  # if any rank was signalled,
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # all stop after this same step
            done = flag.item() > 0 or step == args.steps
            if step % LOG_EVERY == 0 or done:  # flush: each line reaches the job's log at once
                seconds = time.perf_counter() - start
                rate = (step - first) * BATCH / seconds
                line = f"epoch={epoch} step={step} loss={loss:.6f} lr={LR} img_s={rate:.1f}"
                print(f"[train] rank={rank}/{world} {line}", flush=True)
            if rank == 0 and (step % CHECKPOINT_EVERY == 0 or done):
                state = dict(model=model.state_dict(), optimizer=optimizer.state_dict(), step=step)
                torch.save(state, args.checkpoint + ".tmp")  # a temporary file, then a rename:
                os.replace(args.checkpoint + ".tmp", args.checkpoint)  # never half a checkpoint
            if done:
                break
    if rank == 0 and step < args.steps:  # stopped by a signal
        print(f"[preempted] step={step}")
    if rank == 0:
        print(f"[summary] ranks={world} steps={step} img_s={rate * world:.1f} time_s={seconds:.2f}")
    dist.barrier()  # rank 0 may still be saving: a rank that left first broke gloo's exit
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
