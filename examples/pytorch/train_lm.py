#!/usr/bin/env python3
"""Fine-tune or pre-train a Hugging Face causal language model, on one device, with DDP or FSDP2.

Launch it the way your site launches parallel jobs; the script finds its rank itself:

    python train_lm.py --model DIR --data FILE                        # one process
    torchrun --standalone --nproc_per_node=4 train_lm.py --model DIR --data FILE
    srun python train_lm.py --model DIR --data FILE                   # one Slurm task per GPU

--model is a local directory in save_pretrained layout (what `hf download NAME --local-dir DIR`
writes): its weights are fine-tuned, or with --scratch a new model is built from its config.
--data is text you hold: .txt files (one document per line), .jsonl/.json or .parquet files (a
"text" field; `hf download` fetches a data set's Parquet files), or a folder written by datasets'
save_to_disk. It is tokenised once and cached
beside the data. Nothing is fetched from the network: HF_HUB_OFFLINE=1 is set here.

--parallel ddp keeps a whole model on each GPU; fsdp shards parameters, gradients and optimizer
state over the ranks (torch's fully_shard, one unit per transformer block). --lora-rank R trains
low-rank adapters (peft) instead of the weights. Checkpoints are sharded
(torch.distributed.checkpoint): a run resumes from the newest, on any number of ranks.
Needs torch, transformers and datasets (peft for --lora-rank), and job_runtime.py beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import re
import shutil
import time
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers and datasets read it

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_state_dict,
)
from torch.nn.parallel import DistributedDataParallel as DDP

from job_runtime import (
    Abort,
    StopFlag,
    UsageError,
    backend_for,
    check_versions,
    choose_device_type,
    exit_with,
    gather_states,
    join_group,
    launcher_env,
    limit_threads,
    local_device,
    log,
    rng_state,
    run_guarded,
    save_atomically,
    set_rng_state,
    warn,
)

# a single process saves and loads checkpoints without a process group, as meant
warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)

MINIMUM_VERSIONS = {"torch": "2.6", "transformers": "4.50"}
# --tiny (or TRAIN_TINY=1): a run of seconds on a CPU, the setting CI uses. These values replace
# whatever was given; TRAIN_TINY_STEPS=N sets the number of steps.
TINY = {"seq_len": 32, "global_batch_size": 4, "micro_batch_size": None, "steps": 4}
TINY_DEFAULTS = {"log_every": 1, "checkpoint_every": 2, "warmup_steps": 1}
CACHE_FORMAT = 1  # bump when the token cache's layout changes
# Peak dense bf16 matrix throughput of one device, TFLOP/s, for model FLOPs utilisation:
# NVIDIA H100/H200 SXM and GH200 989 (NVIDIA's H100 and GH200 data sheets; 1,979 with
# sparsity), A100 312 (A100 data sheet), AMD MI250X 383 per package of two GCDs, so 191.5 per
# GCD, which is one PyTorch device (AMD's MI250X data sheet). V100 has no bf16.
PEAK_TFLOPS = {"GH200": 989.0, "H200": 989.0, "H100": 989.0, "A100": 312.0, "MI250X": 191.5}

EPILOG = """\
batches and steps:
  One step is one optimizer update over --global-batch-size sequences of --seq-len tokens,
  whatever the number of ranks: each rank takes its share in micro-batches of
  --micro-batch-size (gradients accumulate over them). The data order depends on --seed only,
  so a run resumed on another number of ranks goes on with the same batches.

output (one line per event, flushed; rank 0 prints them):
  [train] rank=0/2 epoch=0 step=20 loss=2.345678 lr=0.000200 tokens_s=12345.6
  [checkpoint] step=500 path=checkpoints/step-00000500
  [resume] step=500 path=checkpoints/step-00000500
  [preempted] step=730
  [summary] ranks=2 steps=1000 tokens_s=24680.1 tokens_s_per_gpu=12340.0 mfu=0.412 time_s=99.9
  loss is the mean over the step's tokens; tokens_s counts the tokens of all ranks; mfu is
  model FLOPs utilisation (6 x parameters x tokens, 4 x with LoRA, plus attention), against the
  device's peak bf16 rate (--peak-tflops, or known for H100/H200/GH200/A100/MI250X).

checkpoints and preemption:
  Every --checkpoint-every steps and at the end, all ranks write <checkpoint-dir>/step-NNNNNNNN/
  (torch.distributed.checkpoint: each rank its shards). A new run resumes from the newest whole
  one. SIGUSR1 or SIGTERM makes every rank stop at the same step, checkpoint, and exit with 0.

--tiny / TRAIN_TINY=1:
  seq-len 32, global batch 4 (one sequence per micro-batch on each rank), 4 steps, log every
  step, checkpoint every 2: a check of a job's launch, model, data and checkpoints in seconds.
"""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    def _get_help_string(self, action):
        text = action.help or ""
        shown = action.default is not None and action.default is not False
        if shown and action.default != argparse.SUPPRESS and "%(default)" not in text:
            text += " (default: %(default)s)"
        return text


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=EPILOG, formatter_class=HelpFormatter
    )
    data = p.add_argument_group("model and data")
    data.add_argument(
        "--model",
        type=Path,
        required=True,
        metavar="DIR",
        help="model directory in save_pretrained layout (config.json, weights, tokenizer)",
    )
    data.add_argument(
        "--scratch",
        action="store_true",
        help="pre-train: a new model from --model's config, with random weights",
    )
    data.add_argument(
        "--data",
        type=Path,
        nargs="+",
        required=True,
        metavar="PATH",
        help=".txt, .jsonl/.json or .parquet files, or a save_to_disk directory",
    )
    data.add_argument("--text-field", default="text", metavar="NAME", help="of JSON records")
    data.add_argument(
        "--token-cache",
        type=Path,
        metavar="DIR",
        help="where the tokenised data is kept (default: beside the first --data, PATH.tokens)",
    )
    data.add_argument(
        "--tokenize-only",
        action="store_true",
        help="tokenise --data into the cache and stop (run it on a login or CPU node first)",
    )
    data.add_argument(
        "--seq-len",
        type=int,
        metavar="N",
        help="tokens a sequence (default: 1024, or the model's positions if fewer)",
    )

    length = p.add_argument_group("batch and length")
    length.add_argument(
        "--global-batch-size", type=int, default=32, metavar="N", help="sequences a step"
    )
    length.add_argument(
        "--micro-batch-size",
        type=int,
        metavar="N",
        help="sequences a rank processes at once (default: its whole share of the batch)",
    )
    length.add_argument("--epochs", type=int, default=1, metavar="N", help="passes over the data")
    length.add_argument("--steps", type=int, metavar="N", help="optimizer steps, instead")

    opt = p.add_argument_group("optimisation")
    opt.add_argument("--lr", type=float, default=2e-5, help="peak learning rate (AdamW)")
    opt.add_argument(
        "--weight-decay", type=float, default=0.0, metavar="WD", help="AdamW's decoupled decay"
    )
    opt.add_argument("--warmup-steps", type=int, default=100, metavar="N", help="linear warm-up")
    opt.add_argument("--max-grad-norm", type=float, default=1.0, metavar="X", help="0: no clip")

    tune = p.add_argument_group("what is trained")
    tune.add_argument(
        "--lora-rank", type=int, default=0, metavar="R", help="train LoRA adapters of rank R"
    )
    tune.add_argument("--lora-alpha", type=float, default=16.0, metavar="A", help="LoRA scale")
    tune.add_argument(
        "--lora-dropout", type=float, default=0.0, metavar="P", help="dropout before LoRA"
    )
    tune.add_argument(
        "--lora-targets",
        default="all-linear",
        metavar="NAMES",
        help="modules given adapters: all-linear, or comma-separated names (q_proj,v_proj)",
    )

    speed = p.add_argument_group("memory and speed")
    speed.add_argument(
        "--parallel",
        choices=["ddp", "fsdp"],
        default="ddp",
        help="ddp: a whole model on each rank; fsdp: parameters, gradients and optimizer state "
        "sharded over the ranks",
    )
    speed.add_argument(
        "--precision",
        choices=["auto", "bf16", "fp32"],
        default="auto",
        help="bf16: matrix products in bfloat16, weights and optimizer state in fp32; auto: bf16 "
        "on a GPU, fp32 on a CPU (most CPUs have no bfloat16 arithmetic: on a 2-core AMD EPYC, "
        "bf16 steps took 13 times as long)",
    )
    speed.add_argument(
        "--activation-checkpointing",
        action="store_true",
        help="recompute each block's activations in the backward pass: less memory, ~1/3 more time",
    )
    speed.add_argument("--compile", action="store_true", help="torch.compile each block")
    speed.add_argument(
        "--peak-tflops", type=float, metavar="X", help="a device's peak, for the MFU figure"
    )
    speed.add_argument(
        "--memory-report",
        action="store_true",
        help="print each rank's peak memory: the GPU's allocator peak, or on a CPU what torch's "
        "memory tracker counts (weights, gradients, optimizer state, activations), which is slow",
    )

    par = p.add_argument_group("devices and ranks")
    par.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    par.add_argument(
        "--backend",
        choices=["auto", "nccl", "gloo"],
        default="auto",
        help="auto: nccl with GPUs (RCCL on ROCm builds), gloo on CPU",
    )

    ck = p.add_argument_group("checkpoints and output")
    ck.add_argument(
        "--checkpoint-dir",
        type=Path,
        default=Path("checkpoints"),
        metavar="DIR",
        help="where step-N/ checkpoints go, and a run resumes from",
    )
    ck.add_argument("--checkpoint-every", type=int, default=500, metavar="N", help="steps")
    ck.add_argument("--keep", type=int, default=2, metavar="N", help="checkpoints kept")
    ck.add_argument(
        "--output",
        type=Path,
        metavar="DIR",
        help="save the trained model (LoRA: the adapters) in save_pretrained layout at the end",
    )
    ck.add_argument("--log-every", type=int, default=10, metavar="N", help="steps")
    ck.add_argument("--seed", type=int, default=0, metavar="N", help="of new weights and data")
    ck.add_argument(
        "--tiny", action="store_true", help="a run of seconds on a CPU (also TRAIN_TINY=1)"
    )
    return p


def parse_args(argv=None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.tiny or os.environ.get("TRAIN_TINY") == "1":
        args.tiny = True
        for key, value in TINY.items():
            setattr(args, key, value)
        for key, value in TINY_DEFAULTS.items():
            if getattr(args, key) == parser.get_default(key):
                setattr(args, key, value)
        if os.environ.get("TRAIN_TINY_STEPS", "").isdigit():
            args.steps = int(os.environ["TRAIN_TINY_STEPS"])
    for name in ("global_batch_size", "epochs", "log_every", "checkpoint_every", "keep"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    for path in args.data:
        if not path.exists():
            parser.error(f"--data {path}: no such file or directory")
    for name in ("seq_len", "steps", "micro_batch_size"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.lora_rank < 0 or args.warmup_steps < 0:
        parser.error("--lora-rank and --warmup-steps cannot be negative")
    return args


# --------------------------------------------------------------------------- model
def read_config(args):
    """The model's config, from --model only; a wrong directory is a one-line error."""
    from transformers import AutoConfig

    where = args.model
    if not (where / "config.json").is_file():
        what = "no such directory" if not where.exists() else "no config.json in it"
        raise UsageError(
            f"--model {where}: {what}. Download the model on a login node first, e.g. "
            f"hf download NAME --local-dir {where}"
        )
    try:
        config = AutoConfig.from_pretrained(where, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--model {where}: {str(exc).strip().splitlines()[0]}") from None
    positions = getattr(config, "max_position_embeddings", None) or getattr(
        config, "n_positions", None
    )
    if args.seq_len is None:
        args.seq_len = min(1024, positions or 1024)
    if positions and args.seq_len > positions:
        raise UsageError(
            f"--seq-len {args.seq_len} is longer than {where.name}'s {positions} positions: "
            f"use --seq-len {positions} or less"
        )
    return config


# What a model folder holds its tokenizer in (without one, transformers makes an empty one)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "spiece.model")


def load_tokenizer(args):
    from transformers import AutoTokenizer

    if not any((args.model / name).is_file() for name in TOKENIZER_FILES):
        raise UsageError(
            f"--model {args.model}: no usable tokenizer (none of {', '.join(TOKENIZER_FILES)}): "
            "download the whole model folder"
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(args.model, local_files_only=True)
    except Exception as exc:  # a damaged file: KeyError, ValueError, OSError, tokenizers' own
        why = f"{type(exc).__name__}: {exc}".strip()
        raise UsageError(f"--model {args.model}: no usable tokenizer ({why})") from None
    if tokenizer.eos_token_id is None:
        raise UsageError(f"--model {args.model}: its tokenizer has no end-of-text token")
    return tokenizer


def build_model(args, config):
    """The transformers model with fp32 weights: loaded, or new (--scratch); LoRA adapters on
    top with --lora-rank. Returns (model, the classes of its transformer blocks)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(args.seed)  # the same new weights on every rank
    if args.scratch:
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    else:
        try:
            model = AutoModelForCausalLM.from_pretrained(
                args.model, local_files_only=True, dtype=torch.float32
            )
        except (OSError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0]
            raise UsageError(f"--model {args.model}: cannot load its weights ({first})") from None
    block_classes = set(getattr(model, "_no_split_modules", None) or [])
    model.config.use_cache = False  # the key/value cache serves generation, not training
    if args.activation_checkpointing:
        keywords = {"use_reentrant": False}
        if hasattr(model, "activation_checkpointing_enable"):  # its name from transformers 5.x
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=keywords)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=keywords)
    if args.lora_rank:
        from peft import LoraConfig, get_peft_model

        targets = args.lora_targets
        adapters = LoraConfig(
            r=args.lora_rank,
            lora_alpha=args.lora_alpha,
            lora_dropout=args.lora_dropout,
            target_modules=targets if targets == "all-linear" else targets.split(","),
            task_type="CAUSAL_LM",
        )
        try:
            model = get_peft_model(model, adapters)
        except ValueError as exc:
            raise UsageError(f"--lora-targets {targets}: {exc}") from None
    return model, block_classes


def blocks_of(model, block_classes: set[str]) -> list[torch.nn.Module]:
    """The model's transformer blocks (GPT2Block, LlamaDecoderLayer, ...): the units FSDP
    shards and gathers one at a time, and torch.compile compiles."""
    return [m for m in model.modules() if type(m).__name__ in block_classes]


def parallelize(args, model, block_classes, device, world):
    """The model on its device: compiled per block, then wrapped for DDP or sharded by FSDP2."""
    blocks = blocks_of(model, block_classes)
    if args.compile:
        for block in blocks:
            block.compile()
    if args.parallel == "fsdp":
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        bf16 = args.precision == "bf16"
        policy = MixedPrecisionPolicy(
            param_dtype=torch.bfloat16 if bf16 else None, reduce_dtype=torch.float32
        )
        if world > 1 or device.type == "cuda":
            from torch.distributed.device_mesh import init_device_mesh

            mesh = init_device_mesh(device.type, (world,))
            for block in blocks:  # each block gathered in the forward pass, freed after it
                fully_shard(block, mesh=mesh, mp_policy=policy)
            fully_shard(model, mesh=mesh, mp_policy=policy)  # embeddings, norm, output layer
            return model
    model.to(device)
    if world > 1:
        return DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    return model


# --------------------------------------------------------------------------- data
def read_documents(path: Path, field: str) -> list[str]:
    """The documents of one file: a line of .txt, a record of .jsonl, or an item of a .json list.
    A line that is not JSON, or a record without ``field``, is an error naming file and line."""
    if path.suffix == ".txt":
        return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if path.suffix == ".parquet":  # what the Hub holds data sets as (hf download)
        import pyarrow.parquet as pq

        try:
            columns = pq.read_schema(path).names
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
            raise UsageError(f"--data {path}: not a Parquet file ({exc})") from None
        if field not in columns:
            raise UsageError(
                f'--data {path}: no column "{field}" (has {", ".join(columns)}; see --text-field)'
            )
        return pq.read_table(path, columns=[field]).column(field).to_pylist()
    if path.suffix not in {".jsonl", ".json"}:
        raise UsageError(
            f"--data {path}: not .txt, .jsonl, .json or .parquet (nor a save_to_disk folder)"
        )
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json" and text.lstrip().startswith("["):
        try:
            records = [(i + 1, r) for i, r in enumerate(json.loads(text))]
        except json.JSONDecodeError as exc:
            raise UsageError(f"{path}:{exc.lineno}: not JSON ({exc.msg})") from None
    else:
        records = []
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    records.append((number, json.loads(line)))
                except json.JSONDecodeError as exc:
                    raise UsageError(f"{path}:{number}: not a JSON record ({exc.msg})") from None
    for where, record in records:
        if not isinstance(record, dict) or not isinstance(record.get(field), str):
            raise UsageError(f'{path}:{where}: no text field "{field}" (see --text-field)')
    return [record[field] for _, record in records]


def read_text(args):
    """--data as a datasets.Dataset with one column, "text"."""
    import datasets

    paths = args.data
    if len(paths) == 1 and paths[0].is_dir():
        try:
            data = datasets.load_from_disk(str(paths[0]))
        except (FileNotFoundError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0]
            raise UsageError(f"--data {paths[0]}: not a save_to_disk folder ({first})") from None
        if isinstance(data, datasets.DatasetDict):
            if "train" not in data:
                raise UsageError(f"--data {paths[0]}: no train split (has {', '.join(data)})")
            data = data["train"]
        if args.text_field not in data.column_names:
            raise UsageError(
                f'--data {paths[0]}: no column "{args.text_field}" (has '
                f"{', '.join(data.column_names)}; see --text-field)"
            )
        data = data.select_columns([args.text_field])
        return data if args.text_field == "text" else data.rename_column(args.text_field, "text")
    documents = []
    for path in paths:
        if path.is_dir():
            raise UsageError(f"--data {path}: a folder must be the only --data")
        documents += read_documents(path, args.text_field)
    return datasets.Dataset.from_dict({"text": documents})


def cache_dir(args, tokenizer) -> Path:
    """Where the token blocks of this data, tokenizer and --seq-len are kept: a folder named by
    a digest of what they were made from, so that a change makes a new one."""
    stamp = hashlib.sha256(f"{CACHE_FORMAT} {args.seq_len} {args.text_field}".encode())
    for path in args.data:
        for f in sorted(path.rglob("*")) if path.is_dir() else [path]:
            if f.is_file():
                stat = f.stat()
                stamp.update(f"{f.resolve()} {stat.st_size} {stat.st_mtime_ns}".encode())
    for name in sorted(os.listdir(args.model)):
        if name.startswith("tokenizer") or name in {"vocab.json", "merges.txt"}:
            stamp.update((args.model / name).read_bytes())
    base = args.token_cache or args.data[0].with_name(args.data[0].name + ".tokens")
    return base / stamp.hexdigest()[:16]


def tokenize(args, tokenizer, where: Path) -> None:
    """Tokenise --data, join the documents with the end-of-text token, cut the stream into
    blocks of --seq-len tokens (the last part block is dropped) and save them at ``where``."""
    text = read_text(args)
    eos, n = tokenizer.eos_token_id, args.seq_len

    def blocks(batch):
        ids = tokenizer(batch["text"], add_special_tokens=False)["input_ids"]
        stream = [token for doc in ids for token in [*doc, eos]]
        return {"input_ids": [stream[i : i + n] for i in range(0, len(stream) - n + 1, n)]}

    # batches of documents are joined, not the whole set: at most one part block is dropped
    # per 1,000 documents
    cores = len(os.sched_getaffinity(0))
    processes = min(cores, max(1, len(text) // 10_000)) if cores > 1 else None
    tokens = text.map(
        blocks, batched=True, batch_size=1000, remove_columns=["text"], num_proc=processes
    )
    if len(tokens) == 0:
        raise UsageError(f"--data holds fewer than --seq-len {n} tokens: nothing to train on")
    tmp = where.with_name(where.name + f".tmp{os.getpid()}")
    try:
        where.parent.mkdir(parents=True, exist_ok=True)
        tokens.save_to_disk(str(tmp))
    except OSError as exc:
        what = f"cannot write the token cache {where}: {exc.strerror}"
        raise Abort(f"{what} (see --token-cache)") from None
    try:
        os.replace(tmp, where)
    except OSError:  # another job made it meanwhile (a folder is not replaced): use theirs
        shutil.rmtree(tmp, ignore_errors=True)
        if not where.is_dir():
            raise


def token_blocks(args, tokenizer, rank: int, world: int, control):
    """The token blocks of --data, made by rank 0 if they are not cached yet. A problem with the
    data stops every rank with the same one-line error."""
    import datasets

    datasets.disable_progress_bars()
    where = cache_dir(args, tokenizer)
    problem = None
    if rank == 0 and not where.is_dir():
        log(f"tokenising {len(args.data)} input(s) into {where}")
        try:
            tokenize(args, tokenizer, where)
        except Abort as exc:  # UsageError too
            problem = (type(exc), str(exc))
    if world > 1:
        shared = [problem]
        dist.broadcast_object_list(shared, src=0, group=control)
        problem = shared[0]
    if problem:
        raise problem[0](problem[1])
    return datasets.load_from_disk(str(where)).with_format("torch")


class Batches:
    """The step's sequences for this rank. Each epoch is a permutation of all blocks drawn from
    --seed and the epoch alone; step s takes blocks [s*G, (s+1)*G) of it and rank r its r-th
    share, in micro-batches. Whatever the number of ranks, a step sees the same sequences."""

    def __init__(self, blocks, global_batch: int, micro: int, rank: int, world: int, seed: int):
        self.blocks, self.global_batch, self.micro = blocks, global_batch, micro
        self.rank, self.world, self.seed = rank, world, seed
        self.steps_per_epoch = len(blocks) // global_batch
        self.order, self.epoch = None, None

    def step(self, step: int) -> list[torch.Tensor]:
        epoch, within = divmod(step, self.steps_per_epoch)
        if epoch != self.epoch:
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            self.order, self.epoch = torch.randperm(len(self.blocks), generator=generator), epoch
        share = self.global_batch // self.world
        first = within * self.global_batch + self.rank * share
        mine = self.order[first : first + share].tolist()
        return [
            self.blocks[mine[i : i + self.micro]]["input_ids"] for i in range(0, share, self.micro)
        ]


# --------------------------------------------------------------------------- checkpoints
STEP_DIR = re.compile(r"^step-(\d{8})$")


def checkpoints(directory: Path) -> list[Path]:
    """Whole checkpoints in directory, oldest first (a whole one has its trainer state)."""
    found = [p for p in directory.glob("step-*") if STEP_DIR.match(p.name)]
    whole = [p for p in found if (p / "trainer.pt").is_file() and (p / ".metadata").is_file()]
    return sorted(whole, key=lambda p: p.name)


def model_and_optimizer_state(args, model, optimizer) -> tuple[dict, dict]:
    """State dicts with one name per parameter however the model is wrapped (DDP, FSDP2,
    compiled); with LoRA only the adapters (the frozen weights come from --model)."""
    options = StateDictOptions(ignore_frozen_params=bool(args.lora_rank))
    return get_state_dict(model, optimizer, options=options)


def save_checkpoint(args, model, optimizer, step, rank, world, device, control) -> None:
    """Collective: every rank writes its shards; rank 0 adds the trainer state (step, every
    rank's random-number state) and then moves the folder into place."""
    final = args.checkpoint_dir / f"step-{step:08d}"
    partial = args.checkpoint_dir / f".step-{step:08d}.partial"
    model_state, optim_state = model_and_optimizer_state(args, model, optimizer)
    rngs = (
        gather_states(rng_state(device), rank, world, control) if world > 1 else [rng_state(device)]
    )
    try:
        if rank == 0:
            shutil.rmtree(partial, ignore_errors=True)  # of a job killed while writing
            partial.mkdir(parents=True)
        if world > 1:
            dist.barrier(group=control)
        dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=partial)
        if rank == 0:
            save_atomically({"step": step, "world": world, "rng": rngs}, partial / "trainer.pt")
            shutil.rmtree(final, ignore_errors=True)
            os.replace(partial, final)
            for old in checkpoints(args.checkpoint_dir)[: -args.keep]:
                shutil.rmtree(old, ignore_errors=True)
    except OSError as exc:
        raise Abort(f"cannot write checkpoint {final}: {exc.strerror or exc}") from None
    if world > 1:
        dist.barrier(group=control)
    if rank == 0:
        log(f"[checkpoint] step={step} path={final}")


def resume(args, model, optimizer, rank, world, device) -> int:
    """Load the newest whole checkpoint, if any (every rank reads its shards); return its step."""
    found = checkpoints(args.checkpoint_dir) if args.checkpoint_dir.is_dir() else []
    if not found:
        return 0
    path = found[-1]
    trainer = torch.load(path / "trainer.pt", map_location="cpu", weights_only=True)
    model_state, optim_state = model_and_optimizer_state(args, model, optimizer)
    state = {"model": model_state, "optim": optim_state}
    try:
        dcp.load(state, checkpoint_id=path)
    except (Exception, dcp.CheckpointException) as exc:  # another model, or --lora-rank
        failures = getattr(exc, "failures", None)  # a CheckpointException: each rank's error
        reason = next(iter(failures.values())) if failures else exc
        reason = reason[0] if isinstance(reason, tuple) else reason
        first = str(reason).strip().splitlines()[0]
        raise Abort(f"checkpoint {path} does not fit this model: {first[:200]}") from None
    options = StateDictOptions(strict=not args.lora_rank)
    set_state_dict(
        model,
        optimizer,
        model_state_dict=state["model"],
        optim_state_dict=state["optim"],
        options=options,
    )
    if trainer["world"] == world:
        set_rng_state(trainer["rng"][rank], device)
    elif rank == 0:
        warn(f"checkpoint written by {trainer['world']} rank(s), now {world}: new dropout draws")
    if rank == 0:
        log(f"[resume] step={trainer['step']} path={path}")
    return trainer["step"]


def save_model(args, model, tokenizer, rank: int) -> None:
    """The trained model (LoRA: the adapters) and tokenizer in save_pretrained layout."""
    options = StateDictOptions(
        full_state_dict=True, cpu_offload=True, ignore_frozen_params=bool(args.lora_rank)
    )
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    state = get_model_state_dict(model, options=options)  # collective under FSDP
    if rank == 0:
        unwrapped = model.module if isinstance(model, DDP) else model
        unwrapped.save_pretrained(args.output, state_dict=state)
        tokenizer.save_pretrained(args.output)
        log(f"model saved in {args.output}")


# --------------------------------------------------------------------------- training
def learning_rate(step: int, peak: float, warmup: int, total: int) -> float:
    """Linear warm-up to peak over `warmup` steps, then cosine decay towards zero."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * peak * (1 + math.cos(math.pi * progress))


def flops_per_token(model, config, seq_len: int, lora: bool) -> float:
    """Model FLOPs of a forward and backward pass per token: 6 x the parameters that multiply
    (all but the input and position embeddings, which are looked up; the output layer counts
    even when it shares the input embeddings' weights), 4 x with LoRA (no weight gradients),
    plus attention's score and value products, 12 x layers x width x sequence (PaLM, app. B)."""
    looked_up = {id(model.get_input_embeddings().weight)}
    params = sum(
        p.numel()
        for name, p in model.named_parameters()
        if id(p) not in looked_up and not name.endswith("wpe.weight")
    )
    output = model.get_output_embeddings()
    if output is not None and id(output.weight) in looked_up:
        params += output.weight.numel()
    layers = getattr(config, "num_hidden_layers", 0)
    width = getattr(config, "hidden_size", 0)
    return (4 if lora else 6) * params + 12 * layers * width * seq_len


def peak_flops(args, device) -> float | None:
    if args.peak_tflops:
        return args.peak_tflops * 1e12
    if device.type != "cuda" or args.precision != "bf16":
        return None
    name = torch.cuda.get_device_name(device)
    return next((tf * 1e12 for key, tf in PEAK_TFLOPS.items() if key in name), None)


def memory_tracker(args, model, optimizer, device):
    """On a CPU with --memory-report: torch's memory tracker, started (it sees every tensor the
    steps make, by kind); None otherwise."""
    if not args.memory_report or device.type != "cpu":
        return None
    if args.lora_rank:
        warn(
            "--memory-report on a CPU cannot measure a LoRA run: torch's tracker puts a hook on "
            "every parameter's gradient, and frozen weights have none"
        )
        return None
    if args.parallel == "fsdp" and dist.is_initialized():
        from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

        tracker = FSDPMemTracker(model, optimizer)
    else:
        from torch.distributed._tools.mem_tracker import MemTracker

        tracker = MemTracker()
        tracker.track_external(model, optimizer)
    tracker.__enter__()
    return tracker


def report_memory(tracker, device, rank: int, world: int) -> None:
    """[memory] peak_mib: this rank's peak; on a CPU, also its parts at the peak."""
    mib = 2**20
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device) / mib
        log(f"[memory] rank={rank}/{world} peak_mib={peak:.1f}")
        return
    if tracker is None:
        return
    tracker.__exit__(None, None, None)
    parts = {
        str(k).split(".")[-1].lower(): v
        for k, v in tracker.get_tracker_snapshot("peak")[device].items()
    }
    shown = " ".join(
        f"{name}_mib={parts.get(key, 0) / mib:.1f}"
        for name, key in (("weights", "param"), ("grads", "grad"), ("optim", "opt"), ("act", "act"))
    )
    log(f"[memory] rank={rank}/{world} peak_mib={parts['total'] / mib:.1f} {shown}")


def setup(args):
    launcher, rank, world, local_rank = launcher_env()
    use_cuda = choose_device_type(args.device, args.tiny, rank) == "cuda"
    device = local_device(use_cuda, local_rank)
    if args.precision == "auto":
        args.precision = "bf16" if use_cuda else "fp32"
    if use_cuda:
        torch.set_float32_matmul_precision("high")  # TF32 for what stays in fp32
    limit_threads(launcher, rank, world)
    backend = backend_for(args.backend, use_cuda)
    control = join_group(backend, launcher, rank, world) if world > 1 else None
    micro = args.micro_batch_size or args.global_batch_size // world
    if args.global_batch_size % (world * micro):
        raise UsageError(
            f"--global-batch-size {args.global_batch_size} is not a multiple of {world} rank(s) "
            f"x --micro-batch-size {micro}"
        )
    args.micro_batch_size = micro
    return launcher, rank, world, device, control, backend


def main(argv=None) -> int:
    args = parse_args(argv)  # before transformers: --help and option errors need none of it
    import transformers

    transformers.utils.logging.disable_progress_bar()
    check_versions("train_lm.py", MINIMUM_VERSIONS, torch, transformers)
    config = read_config(args)
    tokenizer = load_tokenizer(args)
    if args.tokenize_only:
        token_blocks(args, tokenizer, 0, 1, None)
        return 0
    launcher, rank, world, device, control, backend = setup(args)
    stop = StopFlag()  # before the slow part: an unhandled SIGUSR1 would end the process
    blocks = token_blocks(args, tokenizer, rank, world, control)
    batches = Batches(blocks, args.global_batch_size, args.micro_batch_size, rank, world, args.seed)
    if batches.steps_per_epoch == 0:
        raise UsageError(
            f"--data holds {len(blocks)} sequences of {args.seq_len} tokens, fewer than one "
            f"--global-batch-size ({args.global_batch_size})"
        )
    total = args.steps or args.epochs * batches.steps_per_epoch

    model, block_classes = build_model(args, config)
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    all_params = sum(p.numel() for p in model.parameters())
    per_token = flops_per_token(model, config, args.seq_len, bool(args.lora_rank))
    model = parallelize(args, model, block_classes, device, world)
    params = [p for p in model.parameters() if p.requires_grad]
    # fused: one kernel for all parameters, on a CPU as on a GPU (the same AdamW update)
    optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=args.weight_decay, fused=True)
    if rank == 0:
        log(
            f"{config.model_type} {'new' if args.scratch else args.model.name}: "
            f"{all_params:,} parameters, {trained:,} trained; {world} rank(s) "
            f"({launcher}), {args.parallel}, device {device.type}, backend "
            f"{backend if world > 1 else '-'}, {args.precision}; {len(blocks)} sequences of "
            f"{args.seq_len} tokens, {args.global_batch_size} a step in micro-batches of "
            f"{args.micro_batch_size}; torch {torch.__version__}"
        )
    step = resume(args, model, optimizer, rank, world, device)
    if step >= total and rank == 0:
        log(f"already trained for {step} steps (of {total}): nothing to do")
    # fp32 weights, bf16 products: autocast (FSDP2's policy casts the sharded weights instead)
    autocast = args.precision == "bf16" and args.parallel == "ddp"
    accumulate = len(batches.step(step)) if step < total else 1
    model.train()

    tracker = memory_tracker(args, model, optimizer, device)
    first_step, saved_at, preempted = step, step, False
    tokens_step = args.global_batch_size * args.seq_len
    peak = peak_flops(args, device)
    start = interval_start = time.perf_counter()
    while step < total and not preempted:
        lr = learning_rate(step, args.lr, args.warmup_steps, total)
        for group in optimizer.param_groups:
            group["lr"] = lr
        loss_sum = torch.zeros((), device=device)
        for i, micro in enumerate(batches.step(step)):
            ids = micro.to(device, non_blocking=True)
            sync = world == 1 or i == accumulate - 1 or not isinstance(model, DDP)
            context = model.no_sync() if not sync else contextlib.nullcontext()
            with context, torch.autocast(device.type, torch.bfloat16, enabled=autocast):
                loss = model(input_ids=ids, labels=ids).loss / accumulate
            loss.backward()
            loss_sum += loss.detach()
        if args.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(params, args.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if tracker is not None:
            tracker.reset_mod_stats()  # its per-module figures are of one step at a time
        step += 1
        if step % args.log_every == 0 or step == total:
            if world > 1:
                dist.all_reduce(loss_sum, op=dist.ReduceOp.AVG)
            value = loss_sum.item()  # waits for the device
            now = time.perf_counter()
            steps_done = min(args.log_every, step - first_step)
            rate = steps_done * tokens_step / max(now - interval_start, 1e-9)
            if rank == 0:
                log(
                    f"[train] rank={rank}/{world} epoch={(step - 1) // batches.steps_per_epoch} "
                    f"step={step} loss={value:.6f} lr={lr:.6f} tokens_s={rate:.1f}"
                )
            if not math.isfinite(value):
                raise Abort(f"loss is {value} at step {step}: lower --lr")
            interval_start = now
        if step % args.checkpoint_every == 0 and step < total:
            save_checkpoint(args, model, optimizer, step, rank, world, device, control)
            saved_at = step
        preempted = step < total and stop.agreed(world, control)

    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    if args.memory_report:
        report_memory(tracker, device, rank, world)
    if saved_at != step:
        save_checkpoint(args, model, optimizer, step, rank, world, device, control)
    if args.output and not preempted:
        save_model(args, model, tokenizer, rank)
    if rank == 0:
        if preempted:
            log(f"[preempted] step={step}")
        rate = (step - first_step) * tokens_step / elapsed if step > first_step else 0.0
        per_gpu = rate / world
        mfu = f"{per_gpu * per_token / peak:.3f}" if peak else "-"
        memory = ""
        if device.type == "cuda":
            memory = f" peak_gib={torch.cuda.max_memory_allocated(device) / 2**30:.2f}"
        log(
            f"[summary] ranks={world} steps={step} tokens_s={rate:.1f} "
            f"tokens_s_per_gpu={per_gpu:.1f} mfu={mfu}{memory} time_s={elapsed:.2f}"
        )
    if world > 1:
        dist.barrier(group=control)
        dist.destroy_process_group()
    return 0


def run(argv=None) -> int:
    """main() with the errors a user can cause reported in one line, without a traceback."""
    return run_guarded(main, argv, memory_hint="lower --micro-batch-size, or use --parallel fsdp")


if __name__ == "__main__":
    exit_with(run)
