"""A tiny seeded Llama-family model and a shared-prefix workload for the transformers integration's
tests, demo and benchmark: built from a config with random weights, nothing downloaded.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import torch


def _sdpa() -> str:
    """SDPA, kept by the engine: transformers before 5.22 switches a plain ``sdpa`` to flash attention when a
    flash package is installed, unless it is asked for ``paged|sdpa`` (a name 5.22+ deprecates)."""
    import transformers

    from kvcanary.integrations.transformers.version import parse_version

    return "paged|sdpa" if parse_version(transformers.__version__) < (5, 22) else "sdpa"


def tiny_llama(*, seed: int = 0, layers: int = 2, hidden: int = 64, heads: int = 4, kv_heads: int = 2,
               vocab: int = 192, dtype: torch.dtype = torch.float32, device: str = "cpu") -> Any:
    """A ``LlamaForCausalLM`` with seeded random weights (eval mode, SDPA attention)."""
    import transformers

    llama_config: Any = transformers.LlamaConfig
    llama: Any = transformers.LlamaForCausalLM
    torch.manual_seed(seed)
    cfg = llama_config(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=4096,
                      attn_implementation=_sdpa())
    model = llama(cfg).to(device=device, dtype=dtype).eval()
    return model


def tiny_hybrid(*, seed: int = 0, window: int = 6, hidden: int = 64, heads: int = 4, kv_heads: int = 2,
                vocab: int = 192, dtype: torch.dtype = torch.float32, device: str = "cpu") -> Any:
    """A ``Qwen2ForCausalLM`` (Llama family) whose first layer has a sliding window of ``window`` tokens and
    whose second has full attention: transformers gives it a sliding-window group beside the full one."""
    import transformers

    qwen2_config: Any = transformers.Qwen2Config
    qwen2: Any = transformers.Qwen2ForCausalLM
    torch.manual_seed(seed)
    cfg = qwen2_config(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
                       num_attention_heads=heads, num_key_value_heads=kv_heads, sliding_window=window,
                       use_sliding_window=True, layer_types=["sliding_attention", "full_attention"],
                       max_position_embeddings=4096, attn_implementation=_sdpa())
    return qwen2(cfg).to(device=device, dtype=dtype).eval()


def cb_config(*, page: int = 4, num_blocks: int = 96, max_batch_tokens: int = 64, max_requests: int = 4) -> Any:
    """Continuous-batching settings: small pages so requests allocate and free blocks, eager steps
    (no CUDA graphs, no compile), synchronous batching; the page-size field is named per release."""
    from transformers.generation import configuration_utils

    config_cls: Any = configuration_utils.ContinuousBatchingConfig
    names = {f.name for f in dataclasses.fields(config_cls)}
    size: dict[str, object] = {"page_size": page} if "page_size" in names else {"block_size": page}
    if "auto_switch_to_flash" in names:
        size["auto_switch_to_flash"] = False  # stay on SDPA: the same kernels with and without the canary
    return config_cls(num_blocks=num_blocks, max_batch_tokens=max_batch_tokens,
                                    max_requests_per_batch=max_requests, use_cuda_graph=False,
                                    use_async_batching=False, **size)


def shared_prefix_prompts(*, seed: int = 0, num: int = 8, prefix_len: int = 9, tail_len: int = 5,
                          vocab: int = 192) -> list[list[int]]:
    """``num`` prompts, three in four starting with a common prefix (so whichever requests the scheduler
    admits later find its blocks cached, and those admitted together share them after de-duplication),
    the rest unrelated; token 0 is never used."""
    rng = random.Random(seed)
    prefix = [rng.randrange(1, vocab) for _ in range(prefix_len)]
    prompts = []
    for i in range(num):
        tail = [rng.randrange(1, vocab) for _ in range(tail_len + i % 3)]
        prompts.append(prefix + tail if i % 4 != 3 else [rng.randrange(1, vocab) for _ in range(3 + i)] + tail)
    return prompts


def generate(model: Any, prompts: list[list[int]], *, max_new_tokens: int = 12, **cb: int) -> dict[str, list[int]]:
    """Greedy continuous-batching generation; ``request id -> generated tokens``."""
    import transformers

    generation_config: Any = transformers.GenerationConfig
    gc = generation_config(max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=-1, pad_token_id=0)
    out = model.generate_batch(prompts, generation_config=gc, continuous_batching_config=cb_config(**cb),
                               progress_bar=False)
    return {rid: list(o.generated_tokens) for rid, o in out.items()}
