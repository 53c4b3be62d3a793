#!/usr/bin/env python3
"""Fine-tune a causal language model with Hugging Face's Trainer, from files on disk only.

    accelerate launch finetune_hf.py --model MODEL_DIR --data train.jsonl
    accelerate launch --config_file fsdp2.yaml finetune_hf.py --model MODEL_DIR --data train.txt
    torchrun --nproc-per-node=4 finetune_hf.py --model MODEL_DIR --data train.txt

MODEL_DIR holds a model and its tokenizer as save_pretrained writes them (what `hf download
REPO --local-dir MODEL_DIR` fetches on a login node). --data is a text file (.txt, one example a
line) or JSON Lines (.jsonl, one {"text": ...} object a line). Nothing is fetched from the
network: models load with local_files_only, and jobs set HF_HUB_OFFLINE=1.

The Trainer writes a checkpoint to --output-dir every --save-steps steps; run the same command
again and it resumes from the newest one. When training ends, rank 0 saves the model and
tokenizer there and prints one line:
  [finetune] ranks=2 parallel=MULTI_GPU steps=40 loss=2.345678 samples_s=12.3 time_s=45.67
A missing or unreadable model or data file stops it at once with one line on stderr, status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from itertools import chain
from pathlib import Path

import datasets
import torch
import transformers
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    Trainer,
    TrainingArguments,
    default_data_collator,
)
from transformers.trainer_utils import get_last_checkpoint

# The oldest releases this program runs on (transformers 4.46 added processing_class): it stops
# at start-up on older.
MINIMUM_VERSIONS = {"torch": "2.1", "transformers": "4.46", "datasets": "2.14"}
# --tiny (or TRAIN_TINY=1): a run of seconds on a CPU, as CI runs it (TRAIN_TINY_STEPS=N: N steps)
TINY = {"block_size": 32, "batch_size": 2, "max_steps": 4, "log_steps": 1, "workers": 0}
TINY.update(precision="fp32", save_steps=500)
DATA_KINDS = {".txt": "text", ".jsonl": "json", ".json": "json"}


class Abort(Exception):
    """A problem with the inputs: one line on stderr, exit status 2."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, help="model directory in save_pretrained layout")
    p.add_argument("--data", required=True, help="training text: a .txt or .jsonl file")
    p.add_argument("--text-field", default="text", help="the field of each JSON line to train on")
    p.add_argument("--output-dir", default="finetuned", help="checkpoints and the final model")
    p.add_argument("--block-size", type=int, default=1024, help="tokens per training sequence")
    p.add_argument("--batch-size", type=int, default=4, help="sequences per GPU per step")
    p.add_argument("--grad-accum", type=int, default=1, help="steps to accumulate gradients over")
    p.add_argument("--lr", type=float, default=2e-5, help="peak learning rate (AdamW, cosine)")
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--max-steps", type=int, default=-1, help="stop after this many steps")
    p.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    p.add_argument("--gradient-checkpointing", action="store_true", help="recompute activations")
    p.add_argument("--save-steps", type=int, default=500, help="steps between checkpoints")
    p.add_argument("--log-steps", type=int, default=10, help="steps between log lines")
    p.add_argument("--workers", type=int, default=4, help="data loader processes per rank")
    p.add_argument("--tiny", action="store_true", help="a run of seconds on a CPU (TRAIN_TINY=1)")
    args = p.parse_args(argv)
    if args.tiny or os.environ.get("TRAIN_TINY") == "1":
        vars(args).update(TINY)
        steps = os.environ.get("TRAIN_TINY_STEPS", "")
        args.max_steps = int(steps) if steps.isdigit() else args.max_steps
    return args


def check_versions() -> None:
    for module in (torch, transformers, datasets):
        have, oldest = module.__version__, MINIMUM_VERSIONS[module.__name__]
        if version(have) < version(oldest):
            raise Abort(f"needs {module.__name__} {oldest} or newer; this environment has {have}")


def version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("+")[0].split(".")[:2])


def check_inputs(args: argparse.Namespace) -> None:
    """Stop before anything is written when a path is not what it must be."""
    if not (Path(args.model) / "config.json").is_file():
        raise Abort(f"--model {args.model}: no config.json there (a save_pretrained directory)")
    data = Path(args.data)
    if data.suffix not in DATA_KINDS or not data.is_file():
        raise Abort(f"--data {data}: not a .txt or .jsonl file")


def load_model(path: str):
    """The tokenizer and model in ``path``, never from the hub."""
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise Abort(f"--model {path}: {str(exc).strip().splitlines()[0]}") from None
    return tokenizer, model


def load_blocks(args: argparse.Namespace, tokenizer) -> datasets.Dataset:
    """The text cut into --block-size token blocks, each its own label (causal LM)."""
    kind = DATA_KINDS[Path(args.data).suffix]
    try:
        raw = datasets.load_dataset(kind, data_files=args.data, split="train")
    except Exception as exc:  # datasets wraps a bad line in errors of its own
        raise Abort(f"--data {args.data}: {str(exc).strip().splitlines()[0]}") from None
    if args.text_field not in raw.column_names:
        raise Abort(f"--data {args.data}: no {args.text_field!r} field in {raw.column_names}")

    def tokenize(batch):
        return tokenizer(batch[args.text_field])

    def group(batch):
        ids = list(chain.from_iterable(batch["input_ids"]))
        n = len(ids) // args.block_size * args.block_size
        blocks = [ids[i : i + args.block_size] for i in range(0, n, args.block_size)]
        return {"input_ids": blocks, "labels": [list(b) for b in blocks]}

    tokens = raw.map(tokenize, batched=True, remove_columns=raw.column_names)
    blocks = tokens.map(group, batched=True, batch_size=None, remove_columns=tokens.column_names)
    if len(blocks) == 0:
        raise Abort(f"--data {args.data}: less text than one block of {args.block_size} tokens")
    return blocks


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        check_versions()
        check_inputs(args)
        training = TrainingArguments(
            output_dir=args.output_dir,
            per_device_train_batch_size=args.batch_size,
            gradient_accumulation_steps=args.grad_accum,
            learning_rate=args.lr,
            lr_scheduler_type="cosine",
            num_train_epochs=args.epochs,
            max_steps=args.max_steps,
            bf16=args.precision == "bf16",
            logging_steps=args.log_steps,
            save_steps=args.save_steps,
            save_total_limit=2,
            dataloader_num_workers=args.workers,
            ddp_find_unused_parameters=False,  # a language model uses all its weights
            disable_tqdm=True,  # log lines, not progress bars, in a batch job's output
            report_to="none",
        )
        started = int(os.environ.get("WORLD_SIZE", "1"))  # what the launcher started
        if training.world_size != started:
            raise Abort(
                f"started as {started} processes, but they formed no group: no GPU here? "
                "(on CPUs, run with ACCELERATE_USE_CPU=1)"
            )
        with training.main_process_first(desc="loading"):  # rank 0 fills the datasets cache
            tokenizer, model = load_model(args.model)
            if args.gradient_checkpointing:
                model.gradient_checkpointing_enable()
            blocks = load_blocks(args, tokenizer)
    except Abort as exc:
        print(f"{Path(__file__).name}: error: {exc}", file=sys.stderr)
        return 2
    trainer = Trainer(
        model=model,
        args=training,
        train_dataset=blocks,
        processing_class=tokenizer,
        data_collator=default_data_collator,
    )
    last = get_last_checkpoint(args.output_dir) if Path(args.output_dir).is_dir() else None
    result = trainer.train(resume_from_checkpoint=last)
    trainer.save_model(args.output_dir)  # every rank takes part (FSDP gathers the weights)
    if trainer.is_world_process_zero():
        m = result.metrics
        print(
            f"[finetune] ranks={training.world_size} "
            f"parallel={trainer.accelerator.distributed_type.value} steps={result.global_step} "
            f"loss={result.training_loss:.6f} samples_s={m['train_samples_per_second']:.1f} "
            f"time_s={m['train_runtime']:.2f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
