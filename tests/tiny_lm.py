"""A tiny causal language model and a text file to fine-tune it on, written here, offline.

The tokenizer is a byte-level BPE trained on the text with Hugging Face's `tokenizers`, and the
model a GPT-2 or Llama of two layers of width 32 with new weights, both saved with
save_pretrained: the layout `hf download` writes, which is what the language-model programs
read. Dropout is off, so that a run is the same whatever the number of ranks. Larger shapes
(benchmarks/bench_lm.py) replace fields of the config, and may keep the config without weights
for a run that builds its model new (train_lm.py --scratch).
"""

from __future__ import annotations

import json
from pathlib import Path

WORDS = "the quick brown fox jumps over a lazy dog while seven cats sleep near old red barns"


def documents(count: int = 400) -> list[str]:
    """Short documents with a pattern a tiny model learns within a few steps."""
    words = WORDS.split()
    return [
        " ".join(words[(i + k) % len(words)] for k in range(8 + i % 5)) + f" {i % 10}"
        for i in range(count)
    ]


def write_model(
    out: Path,
    kind: str = "gpt2",
    positions: int = 64,
    width: int = 32,
    layers: int = 2,
    weights: bool = True,
    **fields,
) -> Path:
    """The tokenizer and the model (its config alone with weights=False) in ``out``; ``fields``
    replace those of the config (vocab_size larger than the tokenizer's, num_attention_heads,
    intermediate_size, ...)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        LlamaConfig,
        LlamaForCausalLM,
        PreTrainedTokenizerFast,
    )

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(documents(), trainer)
    end = "<|endoftext|>"
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token=end, bos_token=end)
    eos = tokenizer.eos_token_id
    common = {"vocab_size": len(tokenizer), "eos_token_id": eos, "bos_token_id": eos}
    if kind == "gpt2":
        no_dropout = {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}
        shape = {"n_positions": positions, "n_embd": width, "n_layer": layers, "n_head": 2}
        config = GPT2Config(**{**common, **no_dropout, **shape, **fields})
        model_class = GPT2LMHeadModel
    else:
        shape = {
            "hidden_size": width,
            "intermediate_size": 2 * width,
            "num_hidden_layers": layers,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "max_position_embeddings": positions,
            "tie_word_embeddings": False,
        }
        config = LlamaConfig(**{**common, **shape, **fields})
        model_class = LlamaForCausalLM
    if weights:
        model_class(config).save_pretrained(out)
    else:
        config.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def write_text(out: Path, count: int = 400) -> Path:
    """The documents as JSON lines, {"text": ...} each."""
    out.write_text("".join(json.dumps({"text": d}) + "\n" for d in documents(count)))
    return out
