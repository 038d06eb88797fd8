"""A tiny random-weight Llama and a small word-level tokenizer with a chat template, saved with
``save_pretrained``: a model directory ``transformers serve`` loads like any other, nothing downloaded.

The vocabulary is fixed (role markers, special tokens, ``w0`` ... ``wN``); the tokenizer splits on whitespace,
so ``"w3 w17"`` is two tokens and decoding joins tokens with spaces (one text per token sequence). The
generation config turns the end-of-sequence token off, so every request generates exactly ``max_tokens``
tokens: what a test comparing runs token for token wants.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

SPECIAL = ["<pad>", "<unk>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def vocabulary(size: int) -> list[str]:
    """The special tokens, then ``w0``, ``w1`` ... up to ``size`` tokens in all."""
    if size <= len(SPECIAL) + 8:
        raise ValueError(f"kv-canary: the tiny model's vocab_size must be > {len(SPECIAL) + 8}, got {size}")
    return SPECIAL + [f"w{i}" for i in range(size - len(SPECIAL))]


def tiny_tokenizer(vocab_size: int = 192) -> Any:
    """A ``PreTrainedTokenizerFast`` over :func:`vocabulary` with the chat template."""
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {tok: i for i, tok in enumerate(vocabulary(vocab_size))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast_cls: Any = transformers.PreTrainedTokenizerFast
    fast = fast_cls(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token="<pad>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny_model(path: str | Path, *, seed: int = 0, vocab_size: int = 192, layers: int = 2, hidden: int = 64,
                     heads: int = 4, kv_heads: int = 2) -> Path:
    """Save a seeded random-weight ``LlamaForCausalLM`` (float32) and its tokenizer into ``path``."""
    import torch
    import transformers

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = tiny_tokenizer(vocab_size)
    torch.manual_seed(seed)
    cfg: Any = transformers.LlamaConfig(
        vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=1024, initializer_range=0.5,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    llama: Any = transformers.LlamaForCausalLM
    generation: Any = transformers.GenerationConfig
    model = llama(cfg).eval()
    model.generation_config = generation(
        do_sample=False, eos_token_id=-1, pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def prompts(n: int, *, seed: int = 0, words: int = 7, vocab_size: int = 192) -> list[str]:
    """``n`` different user messages of ``words`` vocabulary words each (distinct first words, so no two
    requests share their first KV block)."""
    rng = random.Random(seed)
    count = vocab_size - len(SPECIAL)
    firsts = rng.sample(range(count), n)
    return [" ".join([f"w{firsts[i]}"] + [f"w{rng.randrange(count)}" for _ in range(words - 1)]) for i in range(n)]
