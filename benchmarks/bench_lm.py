#!/usr/bin/env python3
"""Tokens/s of examples/pytorch/train_lm.py against transformers' Trainer at its defaults.

Both train the same model (a Llama written here, or --model), on the same token blocks (train_lm.py
tokenises the text once; benchmarks/hf_trainer_lm.py reads its cache), with the same sequence
length, sequences per optimizer step, learning rate, device and number of processes (one, or
torchrun's). Each side runs at its own defaults otherwise: train_lm.py with no other option, the
Trainer with only what must be set (see hf_trainer_lm.py); bf16 on the Trainer's side only where
train_lm.py uses bf16, which at its default (--precision auto) is on a GPU.

How they are timed, the same way for both: tokens are sequences x sequence length per optimizer
step. Each run does --warmup steps and then --steps timed ones; a line each side prints at the
end of step --warmup and of the last step (train_lm.py's [train] lines, every gcd(warmup, steps)
steps; the Trainer's from a callback, after waiting for the GPU as train_lm.py's loss does) is
stamped on arrival here, and the time between the two stamps counts. Start-up, tokenising and
the warm-up steps are left out, and each process is stopped once its last timed line arrives.
Each run is a fresh process. A round runs both, the first of a round alternating (train_lm.py
first in odd rounds), so that a machine whose load changes slows both alike; the figure is the
median of the per-round ratios, with their range. MFU is 6 x parameters x tokens plus attention
(train_lm.py's flops_per_token), over the device's peak (train_lm.py's table, or
--peak-tflops): for both sides, where a peak is known.

    python benchmarks/bench_lm.py --rounds 5 --output-dir results/bench        # this CPU
    python benchmarks/bench_lm.py --preset 350m --output-dir DIR               # one GPU
    python benchmarks/bench_lm.py --preset 350m --dry-run                      # the plan only

Prints one JSON record (when, where, on what, the settings, the commands, each round's figures,
the median ratio, the load average at the start, before each round and at the end) and writes it
into --output-dir (or to --output). --time-limit ends the benchmark after the last round that
fits.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import record

TRAINER = record.ROOT / "examples" / "pytorch" / "train_lm.py"
HF_SIDE = Path(__file__).resolve().parent / "hf_trainer_lm.py"
OURS, THEIRS = "train_lm.py", "transformers Trainer"
STEP_LINE = {
    OURS: re.compile(r"^\[train\] .*\bstep=(\d+)\b"),
    THEIRS: re.compile(r"^\[hf\] step=(\d+)"),
}
TRAINER_LOG_EVERY = 10  # train_lm.py's default --log-every


def clock() -> float:
    """Seconds, for the time limit and the length of rounds (not for the timed steps)."""
    return time.monotonic()


# Model shapes and runs. "tiny": a 2.5M-parameter Llama fine-tuned on a CPU. "350m": a
# Llama-shaped 350M model (Qwen-like grouped-query attention, 32,000 tokens) built new on both
# sides on one GPU, at train_lm.py's default sequence length and batch.
PRESETS = {
    "tiny": {
        "device": "cpu",
        "model": {"width": 256, "layers": 4, "positions": 128},
        "scratch": False,
        "seq_len": 128,
        "batch_size": 8,
        "warmup": 10,
        "steps": 20,
        "rounds": 5,
        "threads": 1,
        "time_limit": 7200,
    },
    "350m": {
        "device": "cuda",
        "model": {
            "width": 1024,
            "layers": 24,
            "positions": 2048,
            "vocab_size": 32000,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "intermediate_size": 2816,
        },
        "scratch": True,
        "seq_len": 1024,
        "batch_size": 32,
        "warmup": 10,
        "steps": 30,
        "rounds": 5,
        "threads": None,
        "time_limit": 540,
    },
}


# --------------------------------------------------------------------------- the two commands
def launch(args, script: Path) -> list[str]:
    if args.nproc == 1:
        return [sys.executable, str(script)]
    torchrun = Path(sys.executable).with_name("torchrun")
    return [str(torchrun), "--standalone", f"--nproc-per-node={args.nproc}", str(script)]


def our_command(args, work: Path, run: str) -> list[str]:
    """train_lm.py at its defaults but for what both are given."""
    return [*launch(args, args.trainer), *our_options(args, work, run)]


def our_options(args, work: Path, run: str) -> list[str]:
    cmd = ["--model", str(work / "model"), "--data", str(work / "text.jsonl")]
    cmd += ["--token-cache", str(work / "tokens"), "--seq-len", str(args.seq_len)]
    cmd += ["--global-batch-size", str(args.batch_size), "--steps", str(args.warmup + args.steps)]
    cmd += ["--device", args.device, "--checkpoint-dir", str(work / run)]
    every = math.gcd(args.warmup, args.steps)
    cmd += ["--log-every", str(every)] if every != TRAINER_LOG_EVERY else []
    cmd += ["--precision", args.precision] if args.precision != "auto" else []
    cmd += ["--scratch"] if args.scratch else []
    return cmd + args.trainer_flag


def their_command(args, work: Path, tokens: Path, run: str) -> list[str]:
    """hf_trainer_lm.py: the Trainer's defaults but for what both are given."""
    cmd = [*launch(args, HF_SIDE), "--model", str(work / "model"), "--tokens", str(tokens)]
    cmd += ["--batch-size", str(args.batch_size // args.nproc)]
    cmd += ["--steps", str(args.warmup + args.steps), "--mark", str(args.warmup)]
    cmd += ["--output-dir", str(work / run)]
    cmd += ["--bf16"] if bf16(args) else []
    cmd += ["--cpu"] if args.device == "cpu" else []
    return cmd + (["--scratch"] if args.scratch else [])


def bf16(args) -> bool:
    """Whether train_lm.py computes in bf16: --precision auto means bf16 on a GPU only."""
    return args.precision == "bf16" or (args.precision == "auto" and args.device == "cuda")


# --------------------------------------------------------------------------- running and timing
def environment(args) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(record.LAUNCHER_VARS)}
    env.update(PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1")
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    return env


def process_tree(root: int) -> dict[int, float]:
    """The live processes descended from ``root``, itself included, each with the CPU time (user
    and system, seconds) it has used; empty without Linux's /proc. torchrun's workers start
    sessions of their own, so the tree, not a process group, holds a run's processes."""
    table: dict[int, tuple[int, float]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # those after the name
        except (OSError, IndexError):
            continue  # a process that ended meanwhile
        ticks = int(fields[11]) + int(fields[12])  # utime, stime; fields[1] is the parent
        table[int(stat.parent.name)] = (int(fields[1]), ticks / os.sysconf("SC_CLK_TCK"))
    tree: dict[int, float] = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        if pid in table and pid not in tree:
            tree[pid] = table[pid][1]
            todo += [child for child, (parent, _) in table.items() if parent == pid]
    return tree


def cpu_seconds(root: int) -> float | None:
    return sum(process_tree(root).values()) or None


def stop(root: int) -> None:
    """SIGKILL to ``root`` and every process it started (torchrun's workers too)."""
    for pid in process_tree(root) or [root]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def timed_seconds(
    cmd: list[str], side: str, args, timeout: float
) -> tuple[float, float | None, str]:
    """Seconds between the line that ends step --warmup and the one that ends the last step, as
    they arrive, and the CPU time the process and its children used meanwhile (a figure that a
    busy machine disturbs less). The process, and any it started, is stopped at the last line,
    or at timeout. Returns the two and what the process printed until then."""
    first, last = args.warmup, args.warmup + args.steps
    proc = subprocess.Popen(
        cmd,
        env=environment(args),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # a signal meant for this script does not reach it
    )
    watchdog = threading.Timer(timeout, stop, (proc.pid,))
    watchdog.start()
    start = end = cpu_start = cpu_end = None
    seen: list[str] = []
    try:
        for line in proc.stdout:
            seen.append(line)
            m = STEP_LINE[side].match(line)
            step = int(m[1]) if m else None
            if step == first:
                start, cpu_start = time.perf_counter(), cpu_seconds(proc.pid)
            elif step == last:
                end, cpu_end = time.perf_counter(), cpu_seconds(proc.pid)
                break
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            stop(proc.pid)
        proc.wait()
    if start is None or end is None:
        why = f"was stopped after {timeout:.0f} s" if proc.returncode == -9 else "stopped"
        tail = "".join(seen[-30:])
        raise SystemExit(f"{side} {why} before step {last}: {' '.join(cmd)}\n{tail}")
    cpu = cpu_end - cpu_start if cpu_start is not None and cpu_end is not None else None
    return end - start, cpu, "".join(seen)


def precision_of(side: str, cmd: list[str], output: str) -> str | None:
    """bf16 or fp32: as train_lm.py's first line says (its default depends on its version and
    the device), or as the Trainer was told."""
    if side == THEIRS:
        return "bf16" if "--bf16" in cmd else "fp32"
    m = re.search(r", (bf16|fp32); \d+ sequences of", output)
    return m[1] if m else None


def load_average() -> list[float] | None:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except (OSError, ValueError):
        return None


def one_round(n: int, args, work: Path, tokens: Path, deadline: float) -> dict:
    order = (OURS, THEIRS) if n % 2 == 0 else (THEIRS, OURS)
    load, began = load_average(), clock()
    rates, cpu, precision = {}, {}, {}
    for side in order:
        run = f"run-{n}-{'ours' if side == OURS else 'hf'}"
        cmd = (
            our_command(args, work, run) if side == OURS else their_command(args, work, tokens, run)
        )
        seconds, cpu_s, output = timed_seconds(cmd, side, args, max(1.0, deadline - clock()))
        precision[side] = precision_of(side, cmd, output)
        rates[side] = args.steps * args.batch_size * args.seq_len / seconds
        cpu[side] = cpu_s / args.steps if cpu_s else None
    ratio = rates[OURS] / rates[THEIRS]
    took = clock() - began
    print(
        f"round {n + 1}: {OURS} {rates[OURS]:.1f} tokens/s, {THEIRS} {rates[THEIRS]:.1f} "
        f"tokens/s, ratio {ratio:.3f} (load {load}, {took:.0f} s)",
        file=sys.stderr,
        flush=True,
    )
    return {
        "first": order[0],
        "load": load,
        "seconds": round(took, 1),
        "tokens_s": rates,
        "ratio": ratio,
        "cpu_s_per_step": cpu,
        "precision": precision,
        "cpu_ratio": cpu[THEIRS] / cpu[OURS] if cpu[OURS] and cpu[THEIRS] else None,
    }


def race(args, work: Path, tokens: Path, deadline: float) -> tuple[list[dict], str | None]:
    """The rounds that fit before the deadline; why the rounds stopped early, if they did."""
    rounds: list[dict] = []
    for n in range(args.rounds):
        longest = max((r["seconds"] for r in rounds), default=0.0)
        if rounds and clock() + 1.1 * longest > deadline:
            return (
                rounds,
                f"--time-limit {args.time_limit} s: {len(rounds)} of {args.rounds} rounds",
            )
        try:
            rounds.append(one_round(n, args, work, tokens, deadline))
        except SystemExit:
            if not rounds or clock() < deadline:
                raise
            return rounds, f"--time-limit {args.time_limit} s reached during round {n + 1}"
    return rounds, None


# --------------------------------------------------------------------------- model, data, FLOPs
def prepare(args, work: Path) -> Path:
    """The model folder, the text and its token blocks in ``work``; the blocks' folder."""
    sys.path.insert(0, str(record.ROOT / "tests"))
    import tiny_lm  # a tokenizer trained here and a model of the preset's shape, offline
    import transformers

    transformers.utils.logging.disable_progress_bar()

    shape = dict(args.shape)
    size = {k: shape.pop(k) for k in ("width", "layers", "positions")}
    if args.model:
        (work / "model").symlink_to(args.model.resolve())
    else:
        tiny_lm.write_model(work / "model", "llama", weights=not args.scratch, **size, **shape)
    # about 13 tokens a document: enough for every step without a second pass over the data
    needed = (args.warmup + args.steps) * args.batch_size * args.seq_len
    tiny_lm.write_text(work / "text.jsonl", needed // 8 + 100)
    tokenise = [sys.executable, str(args.trainer), *our_options(args, work, "-")]
    r = subprocess.run(
        [*tokenise, "--tokenize-only"], env=environment(args), capture_output=True, text=True
    )
    if r.returncode != 0:
        raise SystemExit(f"tokenising failed:\n{r.stdout}\n{r.stderr}")
    (tokens,) = (work / "tokens").iterdir()  # train_lm.py's cache: one folder for these settings
    return tokens


def model_facts(args, work: Path, precision: dict) -> dict:
    """Parameters, FLOPs per token (train_lm.py's formula) and the device's peak, or None."""
    sys.path.insert(0, str(args.trainer.parent))
    import torch
    import train_lm
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(work / "model")
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    device = torch.device("cuda", 0) if args.device == "cuda" else torch.device("cpu")
    peak = train_lm.peak_flops(
        argparse.Namespace(peak_tflops=args.peak_tflops, precision=precision[OURS]), device
    )
    return {
        "model_type": config.model_type,
        "parameters": sum(p.numel() for p in model.parameters()),
        "config": {k: getattr(config, k, None) for k in CONFIG_FIELDS},
        "flops_per_token": train_lm.flops_per_token(model, config, args.seq_len, lora=False),
        "peak_tflops": peak / 1e12 if peak else None,
        "precision": precision,
    }


CONFIG_FIELDS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
)


# --------------------------------------------------------------------------- the record
def summarise(rounds: list[dict], facts: dict, args) -> dict:
    ratios = [r["ratio"] for r in rounds]
    rates = {side: [r["tokens_s"][side] for r in rounds] for side in (OURS, THEIRS)}
    peak = facts.get("peak_tflops")

    def mfu(rate: float) -> float | None:
        return (
            round(rate / args.nproc * facts["flops_per_token"] / (peak * 1e12), 4) if peak else None
        )

    out_rounds = [
        {
            **r,
            "tokens_s": {k: round(v, 1) for k, v in r["tokens_s"].items()},
            "mfu": {k: mfu(v) for k, v in r["tokens_s"].items()},
            "ratio": round(r["ratio"], 3),
            "cpu_s_per_step": {k: v and round(v, 4) for k, v in r["cpu_s_per_step"].items()},
            "cpu_ratio": r["cpu_ratio"] and round(r["cpu_ratio"], 3),
        }
        for r in rounds
    ]
    medians = {side: statistics.median(v) for side, v in rates.items()}
    cpu_ratios = [r["cpu_ratio"] for r in rounds if r["cpu_ratio"]]
    return {
        "median_tokens_s": {side: round(v, 1) for side, v in medians.items()},
        "median_tokens_s_per_process": {
            side: round(v / args.nproc, 1) for side, v in medians.items()
        },
        "median_mfu": {side: mfu(v) for side, v in medians.items()},
        "median_ratio": round(statistics.median(ratios), 3),
        "ratio_range": [round(min(ratios), 3), round(max(ratios), 3)],
        # the Trainer's CPU seconds a step over train_lm.py's: above 1, train_lm.py uses less
        "median_cpu_ratio": round(statistics.median(cpu_ratios), 3) if cpu_ratios else None,
        "cpu_ratio_range": [round(min(cpu_ratios), 3), round(max(cpu_ratios), 3)]
        if cpu_ratios
        else None,
        "rounds": out_rounds,
    }


def machine(args) -> dict:
    import accelerate
    import datasets
    import torch
    import transformers

    hardware = {
        "cpu": record.cpu_name(),
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)),
    }
    if args.device == "cuda":
        props = torch.cuda.get_device_properties(0)
        hardware.update(
            gpu=props.name,
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            cuda=torch.version.cuda,
        )
    software = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "accelerate": accelerate.__version__,
        "datasets": datasets.__version__,
    }
    return record.header(hardware, software)


def default_name(args, head: dict) -> str:
    gpu = head["hardware"].get("gpu")
    where = (
        re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-") if gpu else f"cpu-{os.cpu_count()}core"
    )
    procs = f"-{args.nproc}proc" if args.nproc > 1 else ""
    return f"{where}-lm-{args.preset}{procs}-vs-hf-trainer.json"


# --------------------------------------------------------------------------- options
def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    p.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default="tiny",
        help="model shape and run (default: tiny)",
    )
    p.add_argument(
        "--model", type=Path, help="a save_pretrained folder instead of the preset's model"
    )
    p.add_argument(
        "--scratch", action=argparse.BooleanOptionalAction, help="new weights on both sides"
    )
    p.add_argument("--device", choices=["cpu", "cuda"])
    p.add_argument("--nproc", type=int, default=1, help="processes of each side (torchrun above 1)")
    p.add_argument("--seq-len", type=int)
    p.add_argument("--batch-size", type=int, help="sequences an optimizer step, all processes")
    p.add_argument("--warmup", type=int, help="untimed steps first")
    p.add_argument("--steps", type=int, help="timed steps")
    p.add_argument("--rounds", type=int)
    p.add_argument("--threads", type=int, help="OMP_NUM_THREADS of both (0: left unset)")
    p.add_argument(
        "--precision",
        choices=["auto", "bf16", "fp32"],
        default="auto",
        help="train_lm.py's; the Trainer's bf16 follows it",
    )
    p.add_argument(
        "--peak-tflops",
        type=float,
        help="the device's peak, for MFU (known for H100/H200/GH200/A100/MI250X)",
    )
    p.add_argument(
        "--trainer",
        type=Path,
        default=TRAINER,
        help="another copy of train_lm.py (job_runtime.py beside it), to compare versions",
    )
    p.add_argument(
        "--trainer-flag",
        action="append",
        default=[],
        metavar="FLAG",
        help="one more flag for train_lm.py (repeat it; e.g. --trainer-flag=--compile)",
    )
    p.add_argument("--time-limit", type=float, help="seconds for the whole benchmark")
    p.add_argument(
        "--workdir", type=Path, help="for the model, text and runs (default: a temporary folder)"
    )
    p.add_argument(
        "--output-dir", type=Path, help="write the record here, named by machine and preset"
    )
    p.add_argument("--output", type=Path, help="write the record to this file")
    p.add_argument("--dry-run", action="store_true", help="print the settings and commands only")
    args = p.parse_args(argv)
    preset = PRESETS[args.preset]
    for key, value in preset.items():
        if key != "model" and getattr(args, key) is None:
            setattr(args, key, value)
    args.shape = preset["model"]
    for name in ("nproc", "seq_len", "batch_size", "warmup", "steps", "rounds"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.batch_size % args.nproc:
        p.error(f"--batch-size {args.batch_size} is not a multiple of --nproc {args.nproc}")
    if args.model and not (args.model / "config.json").is_file():
        p.error(f"--model {args.model}: no config.json in it")
    if not args.model and args.seq_len > args.shape["positions"]:
        positions = args.shape["positions"]
        p.error(f"--seq-len {args.seq_len} is longer than the preset's {positions} positions")
    return args


def shown(cmd: list[str]) -> str:
    """A command as a reader would type it: python, torchrun and paths from the repository."""
    names = {sys.executable: "python", str(Path(sys.executable).with_name("torchrun")): "torchrun"}
    root = f"{record.ROOT}/"
    return " ".join(names.get(c, c.removeprefix(root)) for c in cmd)


def plan(args) -> dict:
    work = Path("WORK")
    tokens = work / "tokens" / "DIGEST"
    settings = {
        k: v
        for k, v in vars(args).items()
        if k not in ("output", "output_dir", "workdir", "dry_run")
    }
    settings["model"] = str(args.model) if args.model else None
    settings["trainer"] = shown([str(args.trainer)])
    return {
        "settings": settings,
        "commands": {
            OURS: shown(our_command(args, work, "RUN")),
            THEIRS: shown(their_command(args, work, tokens, "RUN")),
        },
    }


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.dry_run:
        print(json.dumps(plan(args), indent=2))
        return
    deadline = clock() + args.time_limit
    load_start = load_average()
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise SystemExit("bench_lm.py: --device cuda, but PyTorch sees no GPU here")
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        work = Path(tmp)
        tokens = prepare(args, work)
        rounds, stopped = race(args, work, tokens, deadline)
        facts = model_facts(args, work, rounds[0]["precision"])
    head = machine(args)
    out = {
        "benchmark": f"lm-{args.preset}-train_lm-vs-transformers-trainer",
        **head,
        **plan(args),
        "model": facts,
        "tokens_per_step": args.batch_size * args.seq_len,
        "load_average": {"start": load_start, "end": load_average()},
        "stopped_early": stopped,
        **summarise(rounds, facts, args),
    }
    s = out
    print(
        f"{OURS} {s['median_tokens_s'][OURS]} tokens/s, {THEIRS} {s['median_tokens_s'][THEIRS]} "
        f"tokens/s: median ratio {s['median_ratio']} over {len(rounds)} rounds "
        f"(range {s['ratio_range'][0]}-{s['ratio_range'][1]}); CPU time a step, the Trainer's "
        f"over train_lm.py's: {s['median_cpu_ratio']} (range {s['cpu_ratio_range']}); "
        f"MFU {s['median_mfu']}",
        file=sys.stderr,
    )
    target = args.output or (
        args.output_dir / default_name(args, head) if args.output_dir else None
    )
    record.write(out, target)
    if target:
        print(f"written to {target}", file=sys.stderr)


if __name__ == "__main__":
    main()
