#!/usr/bin/env python3
"""transformers' Trainer at its defaults on train_lm.py's token blocks: the other side of
benchmarks/bench_lm.py.

What a user writes with the Trainer for causal-LM training (as transformers' run_clm.py does:
labels are the input ids, the model shifts them): the model from a save_pretrained folder (or
new from its config, --scratch), the token blocks train_lm.py cached (a datasets save_to_disk
folder of "input_ids"), and TrainingArguments with only what must be set: the output folder,
the batch, the steps, the learning rate, bf16 when asked (on a GPU), no reports, no
checkpoints and no progress bar. Everything else is the Trainer's default (AdamW fused, a linear
schedule, gradients clipped at 1.0, its data loader and DDP settings).

    python benchmarks/hf_trainer_lm.py --model DIR --tokens DIR --batch-size 8 --steps 30 \\
        --mark 10
    torchrun --standalone --nproc-per-node 2 benchmarks/hf_trainer_lm.py ...   # DDP

Prints ``[hf] step=N`` at the end of step --mark and of the last step, after waiting for the
GPU: bench_lm.py times the steps between the two lines.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers and datasets read it


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, required=True, help="save_pretrained folder")
    p.add_argument("--scratch", action="store_true", help="new weights from its config")
    p.add_argument("--tokens", type=Path, required=True, help="train_lm.py's cached blocks")
    p.add_argument("--batch-size", type=int, required=True, help="sequences a process a step")
    p.add_argument("--steps", type=int, required=True, help="optimizer steps")
    p.add_argument("--mark", type=int, required=True, help="the step whose end starts the clock")
    p.add_argument("--lr", type=float, default=2e-5, help="train_lm.py's default")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast (the Trainer's bf16=True)")
    p.add_argument("--cpu", action="store_true", help="the CPU even where a GPU is")
    p.add_argument("--output-dir", type=Path, help="the Trainer's (default: a temporary folder)")
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    import datasets
    import torch
    from transformers import (
        AutoConfig,
        AutoModelForCausalLM,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    class StepMarks(TrainerCallback):
        """One line at the end of the marked steps, once the device has done them."""

        def on_step_end(self, targs, state, control, **kwargs):
            if state.global_step in (args.mark, args.steps):
                if torch.cuda.is_available() and not args.cpu:
                    torch.cuda.synchronize()
                if state.is_world_process_zero:
                    print(f"[hf] step={state.global_step}", flush=True)

    datasets.disable_progress_bars()
    blocks = datasets.load_from_disk(str(args.tokens))
    blocks = blocks.map(lambda b: {"labels": b["input_ids"]}, batched=True, keep_in_memory=True)
    if args.scratch:
        config = AutoConfig.from_pretrained(args.model)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    else:
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    with tempfile.TemporaryDirectory() as tmp:
        targs = TrainingArguments(
            output_dir=str(args.output_dir or tmp),
            per_device_train_batch_size=args.batch_size,
            max_steps=args.steps,
            learning_rate=args.lr,
            bf16=args.bf16,
            use_cpu=args.cpu,
            report_to="none",
            save_strategy="no",
            disable_tqdm=True,
        )
        Trainer(model=model, args=targs, train_dataset=blocks, callbacks=[StepMarks()]).train()


if __name__ == "__main__":
    main()
