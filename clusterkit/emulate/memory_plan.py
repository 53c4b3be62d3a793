"""Will it fit: the memory one GPU needs to fine-tune a causal language model with train_lm.py,
and how many GPUs of a site's node type a run needs.

The model's states are counted exactly from its shape: fp32 weights (4 bytes a parameter),
fp32 gradients (4) and AdamW's two moments (8) for each trained parameter; FSDP divides them by
the number of ranks, LoRA trains only the adapters (rank x (inputs + outputs) for each adapted
linear layer) and keeps the frozen weights. On top come the copies each way of training makes
(bf16 copies of the weights under autocast, DDP's gradient buckets, the one or two transformer
blocks FSDP gathers at a time) and the activations the backward pass needs: bytes per token and
layer, linear in the width and the MLP's width, measured with torch's memory tracker in tiny
runs of train_lm.py on a CPU (:data:`ACTIVATION_BYTES`; ``tests/test_memory_plan.py`` holds the
planner to those runs within 25 %), plus the logits of the output layer and, where the
attention kernel materialises them (the CPU's; not the flash kernels of GPUs), the attention
scores. Activation checkpointing keeps only each block's input and recomputes one block at a
time.

The figures leave out what the framework itself holds (the CUDA context, NCCL's buffers, the
allocator's fragmentation: a few GB on a GPU), which :data:`RESERVED_GB` keeps aside.

``python -m clusterkit plan --site isambard-ai --model Qwen2.5-7B --parallel fsdp`` prints a
plan; ``--config DIR/config.json`` reads any model's shape.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

GB = 10**9
# Kept aside on every GPU for what the plan does not count (CUDA/ROCm context, NCCL/RCCL
# buffers, allocator fragmentation): a judgement, not a measurement
RESERVED_GB = 4.0

# Activation bytes a token needs per transformer layer: c_h * width + c_f * MLP width, by how
# the layer computes. Fitted to torch's memory tracker in train_lm.py runs on a CPU (2026-11-28,
# torch 2.14.1, transformers 5.24.0; GPT-2 and Llama blocks of width 256, 4 layers, 128 tokens
# a sequence, micro-batches of 4 and 8; tests/test_memory_plan.py): "autocast" is bf16 products
# with fp32 weights (the DDP path), "bf16" weights cast by FSDP's mixed-precision policy,
# "fp32" no mixed precision.
ACTIVATION_BYTES = {"autocast": (23.0, 5.5), "bf16": (15.0, 3.5), "fp32": (9.0, 22.0)}
SCORE_BYTES = 10  # per score element where attention materialises them: fp32 scores, softmax, bf16
LOGIT_BYTES = 12  # per logit: the layer's output, its fp32 copy for the loss, log-softmax


@dataclass(frozen=True)
class Shape:
    """What the plan needs of a model: read from its config.json."""

    name: str
    layers: int
    width: int
    mlp_width: int
    heads: int
    kv_heads: int
    vocab: int
    tied: bool  # the output layer shares the input embeddings' weights
    gated_mlp: bool  # three MLP matrices (Llama, Qwen) rather than two (GPT-2)
    positions: int | None = None
    source: str = ""

    @classmethod
    def from_config(cls, config: dict, name: str = "", source: str = "") -> Shape:
        width = config.get("hidden_size") or config["n_embd"]
        gpt2 = config.get("model_type") == "gpt2"
        heads = config.get("num_attention_heads") or config["n_head"]
        return cls(
            name=name or config.get("_name_or_path", "") or config.get("model_type", "model"),
            layers=config.get("num_hidden_layers") or config["n_layer"],
            width=width,
            mlp_width=config.get("intermediate_size") or config.get("n_inner") or 4 * width,
            heads=heads,
            kv_heads=config.get("num_key_value_heads") or heads,
            vocab=config["vocab_size"],
            tied=config.get("tie_word_embeddings", True),
            gated_mlp=not gpt2,
            positions=config.get("max_position_embeddings") or config.get("n_positions"),
            source=source,
        )

    @classmethod
    def from_file(cls, path: Path) -> Shape:
        path = Path(path)
        path = path / "config.json" if path.is_dir() else path
        return cls.from_config(
            json.loads(path.read_text()), name=path.parent.name, source=str(path)
        )

    # -- parameters
    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    def linear_layers(self) -> list[tuple[int, int]]:
        """(inputs, outputs) of each linear layer of one block: what LoRA adapts."""
        kv = self.kv_heads * self.head_dim
        h, f = self.width, self.mlp_width
        if not self.gated_mlp:  # GPT-2: fused q,k,v; output; MLP up and down
            return [(h, 3 * h), (h, h), (h, f), (f, h)]
        return [(h, h), (h, kv), (h, kv), (h, h), (h, f), (h, f), (f, h)]

    def block_params(self) -> int:
        weights = sum(i * o for i, o in self.linear_layers())
        return weights + 4 * self.width  # norms and biases, roughly

    def params(self) -> int:
        embeddings = self.vocab * self.width * (1 if self.tied else 2)
        positions = (self.positions or 0) * self.width if not self.gated_mlp else 0
        return self.layers * self.block_params() + embeddings + positions + self.width

    def lora_params(self, rank: int) -> int:
        return self.layers * sum(rank * (i + o) for i, o in self.linear_layers())


# Models the site pages plan for: their config.json on the Hugging Face Hub
MODELS = {
    "Qwen2.5-0.5B": Shape(
        "Qwen2.5-0.5B", 24, 896, 4864, 14, 2, 151936, True, True, 32768,
        "config.json of Qwen/Qwen2.5-0.5B on the Hugging Face Hub",
    ),
    "Qwen2.5-7B": Shape(
        "Qwen2.5-7B", 28, 3584, 18944, 28, 4, 152064, False, True, 131072,
        "config.json of Qwen/Qwen2.5-7B on the Hugging Face Hub",
    ),
}  # fmt: skip


@dataclass(frozen=True)
class Run:
    """How train_lm.py trains: its options that decide memory."""

    parallel: str = "ddp"  # ddp | fsdp
    ranks: int = 1
    precision: str = "bf16"  # bf16 | fp32
    lora_rank: int = 0
    micro_batch: int = 1
    seq_len: int = 1024
    activation_checkpointing: bool = False
    scores_in_memory: bool = False  # attention scores kept (the CPU's kernel); GPUs: flash


@dataclass(frozen=True)
class Plan:
    """Bytes one rank holds at its peak, by part."""

    weights: float
    gradients: float
    optimizer: float
    copies: float
    activations: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.copies + self.activations


def plan(shape: Shape, run: Run) -> Plan:
    params = shape.params()
    trained = shape.lora_params(run.lora_rank) if run.lora_rank else params
    shards = run.ranks if run.parallel == "fsdp" else 1
    adapters = trained if run.lora_rank else 0
    weights = 4 * (params + adapters) / shards
    gradients = 4 * trained / shards
    optimizer = 8 * trained / shards
    copies = _copies(shape, run, trained)
    return Plan(weights, gradients, optimizer, copies, _activations(shape, run))


def _copies(shape: Shape, run: Run, trained: int) -> float:
    """What each way of training adds: bf16 copies of the weights under autocast (frozen
    weights are cast anew at each use), DDP's gradient buckets, FSDP's gathered blocks."""
    if run.parallel == "fsdp":
        size = 2 if run.precision == "bf16" else 4
        # two blocks gathered (one computing, one prefetched) and one block's full gradient
        return shape.block_params() * (2 * size + 4)
    copies = 2 * trained if run.precision == "bf16" else 0
    if run.ranks > 1:
        copies += 4 * trained
    return copies


def _activations(shape: Shape, run: Run) -> float:
    kind = "fp32" if run.precision == "fp32" else ("bf16" if run.parallel == "fsdp" else "autocast")
    c_h, c_f = ACTIVATION_BYTES[kind]
    tokens = run.micro_batch * run.seq_len
    per_layer = tokens * (c_h * shape.width + c_f * shape.mlp_width)
    if run.scores_in_memory:
        per_layer += tokens * shape.heads * run.seq_len * SCORE_BYTES
    logits = tokens * shape.vocab * LOGIT_BYTES
    if not run.activation_checkpointing:
        return shape.layers * per_layer + logits
    kept = 2 if kind == "bf16" else 4  # each block's input, in the residual stream's type
    return shape.layers * tokens * shape.width * kept + per_layer + logits


def gpus_needed(shape: Shape, run: Run, gpu_gb: float, most: int = 512) -> int | None:
    """The fewest GPUs of ``gpu_gb`` that hold the run: 1 when a whole copy fits (DDP, LoRA),
    else the fewest FSDP ranks (powers of two up to ``most``); None if none does."""
    room = (gpu_gb - RESERVED_GB) * GB
    if run.parallel == "ddp":
        return 1 if plan(shape, replace(run, ranks=1)).total <= room else None
    n = 1
    while n <= most:
        if plan(shape, replace(run, ranks=n)).total <= room:
            return n
        n *= 2
    return None


def fits(shape: Shape, run: Run, gpu_gb: float) -> bool:
    return plan(shape, run).total <= (gpu_gb - RESERVED_GB) * GB


# The runs the language-model pages plan, as their job scripts train (micro-batch, sequence)
RECIPES = [
    ("Qwen2.5-0.5B", "all weights, DDP", Run("ddp", 1, "bf16", 0, 8, 1024)),
    ("Qwen2.5-7B", "LoRA rank 16, checkpointing", Run("ddp", 1, "bf16", 16, 4, 2048, True)),
    ("Qwen2.5-7B", "all weights, DDP", Run("ddp", 1, "bf16", 0, 1, 2048, True)),
    ("Qwen2.5-7B", "all weights, FSDP, checkpointing", Run("fsdp", 8, "bf16", 0, 2, 2048, True)),
]


def gpu_types(site) -> list:
    """The node types of a site that have GPUs with a known memory size."""
    return [
        nt
        for nt in site.node_types.values()
        if nt.gpus and (nt.raw.get("gpus") or {}).get("memory_gb")
    ]


def site_rows(site) -> list[list[str]]:
    """One row per recipe and GPU node type: model, how it trains, GB per GPU at the recipe's
    rank count (FSDP: 8 ranks), and the fewest GPUs of that type that hold it."""
    rows = []
    for nt in gpu_types(site):
        memory = nt.raw["gpus"]["memory_gb"]
        for model, how, run in RECIPES:
            shape = MODELS[model]
            need = gpus_needed(shape, run, memory)
            per_gpu = plan(shape, run).total / GB
            rows.append(
                [
                    model,
                    how,
                    f"{run.micro_batch} x {run.seq_len}",
                    nt.gpu_model if "GB" in nt.gpu_model else f"{nt.gpu_model} ({memory:g} GB)",
                    f"{per_gpu:.1f}" + (f" at {run.ranks} ranks" if run.parallel == "fsdp" else ""),
                    "does not fit" if need is None else str(need),
                ]
            )
    return rows


HEADERS = [
    "Model",
    "Training",
    "Micro-batch x tokens",
    "GPU",
    "GB a GPU",
    f"GPUs needed ({RESERVED_GB:g} GB of each kept aside)",
]


def add_arguments(p) -> None:
    """The options of ``python -m clusterkit plan`` (train_lm.py's names where it has them)."""
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--model", choices=sorted(MODELS), help="a model the pages plan for")
    what.add_argument(
        "--config", type=Path, metavar="PATH", help="a model's config.json (or folder)"
    )
    p.add_argument("--site", help="a profile of sites/: plan for each of its GPU node types")
    p.add_argument("--gpu-gb", type=float, metavar="GB", help="or a GPU of this memory")
    p.add_argument("--parallel", choices=["ddp", "fsdp"], default="ddp")
    p.add_argument("--ranks", type=int, default=1, metavar="N", help="FSDP's ranks")
    p.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    p.add_argument("--lora-rank", type=int, default=0, metavar="R")
    p.add_argument("--micro-batch-size", type=int, default=1, metavar="N")
    p.add_argument("--seq-len", type=int, default=1024, metavar="N")
    p.add_argument("--activation-checkpointing", action="store_true")


def main(args) -> int:
    """Print the plan of one run, and the GPUs it needs of each kind asked about."""
    shape = MODELS[args.model] if args.model else Shape.from_file(args.config)
    run = Run(
        args.parallel, args.ranks, args.precision, args.lora_rank, args.micro_batch_size,
        args.seq_len, args.activation_checkpointing,
    )  # fmt: skip
    p = plan(shape, run)
    trained = shape.lora_params(run.lora_rank) if run.lora_rank else shape.params()
    print(
        f"{shape.name}: {shape.params() / 1e9:.3f} billion parameters, {trained / 1e9:.3f} trained"
    )
    for part in ("weights", "gradients", "optimizer", "copies", "activations", "total"):
        print(f"  {part:<12} {getattr(p, part) / GB:8.1f} GB a rank")
    gpus = []
    if args.site:
        from clusterkit.sites.profiles import load_site

        gpus = [
            (nt.gpu_model, nt.raw["gpus"]["memory_gb"]) for nt in gpu_types(load_site(args.site))
        ]
    if args.gpu_gb:
        gpus.append((f"a {args.gpu_gb:g} GB GPU", args.gpu_gb))
    for name, memory in gpus:
        need = gpus_needed(shape, run, memory)
        said = "does not fit" if need is None else f"needs {need} GPU(s)"
        print(f"{name} ({memory:g} GB, {RESERVED_GB:g} kept aside): {said}")
    return 0
