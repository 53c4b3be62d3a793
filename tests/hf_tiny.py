"""A tiny GPT-2-style model and its tokenizer, written with save_pretrained, and a text to train on.

No network here: the tokenizer is a byte-level BPE trained on the text itself (the `tokenizers`
library), and the model a two-layer GPT-2 with random weights. What `hf download` would put in a
model folder (config.json, model.safetensors, tokenizer.json, tokenizer_config.json, ...) is
what this writes.
"""

from __future__ import annotations

from pathlib import Path

# A short text with enough repetition for the loss to fall within a few steps.
LINES = [
    "the cluster runs jobs on nodes with four gpus each",
    "a job script asks for nodes, tasks and time",
    "the scheduler starts the job when the nodes are free",
    "accelerate starts one process for each gpu of a node",
    "the model learns to predict the next word of the text",
]


def write_text(path: Path, repeat: int = 40) -> Path:
    path.write_text("\n".join(LINES * repeat) + "\n", encoding="utf-8")
    return path


def write_jsonl(path: Path, repeat: int = 40, field: str = "text") -> Path:
    import json

    rows = [json.dumps({field: line}) for line in LINES * repeat]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def write_model(folder: Path, vocab: int = 300, layers: int = 2, width: int = 32) -> Path:
    """A save_pretrained folder: a byte-level BPE tokenizer and a GPT-2 with random weights."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(LINES, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")
    fast.save_pretrained(folder)
    config = GPT2Config(
        vocab_size=len(fast),
        n_positions=64,
        n_embd=width,
        n_layer=layers,
        n_head=2,
        bos_token_id=fast.eos_token_id,
        eos_token_id=fast.eos_token_id,
    )
    GPT2LMHeadModel(config).save_pretrained(folder)
    return folder
