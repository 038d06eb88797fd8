"""A tiny decoder-only transformer whose attention really reads the paged KV pool.

Per layer: RMSNorm, QKV projection, RoPE at the fed positions, the new K/V written into the pool at
``out_cache_loc`` (the SWA pool through the full→SWA LUT for sliding-window layers), then each row's
queries attend over its keys gathered back from the pool through ``req_to_token``. Random weights.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from kvcanary.demo.engine.config import ModelConfig


@dataclass(frozen=True)
class RowMeta:
    """A batch row for attention: its req_to_token row, tokens already cached, tokens fed, first flat token."""

    row: int
    prefix: int
    extend: int
    start: int


@dataclass(frozen=True)
class ModelInput:
    input_ids: torch.Tensor  # int64 [T]
    positions: torch.Tensor  # int64 [T]
    out_cache_loc: torch.Tensor  # int64 [T], full-pool slots
    rows: tuple[RowMeta, ...]


class KvAccess:
    """What a layer needs from the pools; implemented by the engine (it knows FULL vs SWA)."""

    def write(self, layer: int, loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        raise NotImplementedError

    def gather(self, layer: int, row: RowMeta, key_scale: float) -> tuple[torch.Tensor, torch.Tensor, int]:
        """K ``[n, kv, d]`` already multiplied by ``key_scale``, V, and the sequence index of the first key
        (keys are consecutive: the row's cached prefix, or its window, plus the tokens just written)."""
        raise NotImplementedError


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotate pairs of ``x [T, heads, d]`` by angle ``position * theta^(-2i/d)``."""
    d = x.shape[-1]
    inv = theta ** (-torch.arange(0, d, 2, dtype=torch.float32, device=x.device) / d)
    ang = positions.to(torch.float32)[:, None] * inv[None, :]
    cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x1 * cos - x2 * sin
    out[..., 1::2] = x1 * sin + x2 * cos
    return out


def _rms(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


class TinyTransformer:
    """Weights drawn from ``config.seed``; ``window(layer)`` gives each layer's sliding window (0 = full)."""

    def __init__(self, config: ModelConfig, *, device: torch.device, window: Callable[[int], int]) -> None:
        self.config = config
        self.device = device
        self.window = window
        g = torch.Generator().manual_seed(config.seed)
        c = config

        def w(*shape: int) -> torch.Tensor:
            return (torch.randn(*shape, generator=g) / math.sqrt(shape[0])).to(device)

        self.embed = torch.randn(c.vocab_size, c.hidden, generator=g).to(device)
        self.layers = [
            {"wq": w(c.hidden, c.n_heads * c.head_dim), "wk": w(c.hidden, c.n_kv_heads * c.head_dim),
             "wv": w(c.hidden, c.n_kv_heads * c.head_dim), "wo": w(c.n_heads * c.head_dim, c.hidden),
             "w1": w(c.hidden, c.mlp_hidden), "w2": w(c.mlp_hidden, c.hidden)}
            for _ in range(c.n_layers)
        ]
        self.lm_head = w(c.hidden, c.vocab_size)

    def forward(self, inp: ModelInput, kv: KvAccess) -> torch.Tensor:
        """Logits ``[T, vocab]``; writes every layer's K/V for the fed tokens into the pool."""
        c = self.config
        h = self.embed[inp.input_ids]
        t = h.shape[0]
        scale = 1.0 / math.sqrt(c.head_dim)
        for li, p in enumerate(self.layers):
            x = _rms(h)
            q = rope((x @ p["wq"]).view(t, c.n_heads, c.head_dim), inp.positions, c.rope_theta)
            k = rope((x @ p["wk"]).view(t, c.n_kv_heads, c.head_dim), inp.positions, c.rope_theta)
            v = (x @ p["wv"]).view(t, c.n_kv_heads, c.head_dim)
            kv.write(li, inp.out_cache_loc, k, v)
            attn = torch.zeros(t, c.n_heads, c.head_dim, device=h.device)
            win = self.window(li)
            for row in inp.rows:
                if row.extend <= 0:
                    continue
                keys, vals, first = kv.gather(li, row, scale)
                qr = q[row.start : row.start + row.extend]
                attn[row.start : row.start + row.extend] = _attend(qr, row.prefix, keys, vals, first, win)
            h = h + attn.reshape(t, -1) @ p["wo"]
            h = h + torch.relu(_rms(h) @ p["w1"]) @ p["w2"]
        return _rms(h) @ self.lm_head


def _attend(q: torch.Tensor, q_first: int, k: torch.Tensor, v: torch.Tensor, k_first: int,
            window: int) -> torch.Tensor:
    """Causal (and windowed) GQA by sequence index: query ``i`` sees keys ``j <= i`` (and ``j > i - window``).
    Positions only enter through RoPE, as in real engines. ``k`` comes pre-scaled from the gather."""
    qidx = torch.arange(q.shape[0], device=q.device) + q_first
    kidx = torch.arange(k.shape[0], device=q.device) + k_first
    rep = q.shape[1] // k.shape[1]
    kk = k.repeat_interleave(rep, dim=1)  # [n, h, d]
    vv = v.repeat_interleave(rep, dim=1)
    scores = torch.einsum("qhd,nhd->hqn", q, kk)
    mask = kidx[None, :] <= qidx[:, None]
    if window > 0:
        mask &= kidx[None, :] > qidx[:, None] - window
    scores = scores.masked_fill(~mask[None], float("-inf"))
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return torch.einsum("hqn,nhd->qhd", probs, vv)
