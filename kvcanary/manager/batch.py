"""CanaryBatch: an engine-neutral description of one forward, as the canary needs it.

Rows: ``req_pool_indices`` (0 = padding row), ``prefix_lens`` (tokens already in the KV), ``extend_lens``
(tokens this forward writes). Tokens, flat and grouped by row in row order, padding rows last:
``input_ids``, ``positions`` and ``out_cache_loc`` (full-pool slot; -1 = not written). Any engine's forward
modes map onto it (decode: extend 1; target verify: extend = draft tokens; draft extend: prefix = seq - extend).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

_INT_DTYPES = (torch.int32, torch.int64)


def _check_index_tensor(name: str, t: torch.Tensor, device: torch.device) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"kv-canary: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in _INT_DTYPES:
        raise TypeError(f"kv-canary: {name} must have dtype torch.int32 or torch.int64, got {t.dtype}")
    if t.ndim != 1:
        raise ValueError(f"kv-canary: {name} must be 1-D, got shape {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"kv-canary: {name} must be on the pool's device {device}, got {t.device}")


@dataclass(frozen=True, kw_only=True)
class ExpectedTokens:
    """Host snapshot of each row's own token ids (``origin_input_ids + output_ids``), for VERIFY_TOKEN.

    ``flat``: int64 CPU ``[Σ lens]``, the rows' ids concatenated in row order; ``lens``: int64 CPU ``[bs]``
    (0 for padding rows). Taken on the host before the forward, so checking it costs no device sync.
    """

    flat: torch.Tensor
    lens: torch.Tensor

    @classmethod
    def from_lists(cls, rows: list[list[int]]) -> ExpectedTokens:
        """From each row's token ids (an empty list for a padding row)."""
        flat = [t for r in rows for t in r]
        lens = [len(r) for r in rows]
        return cls(flat=torch.tensor(flat, dtype=torch.int64), lens=torch.tensor(lens, dtype=torch.int64))

    def validate(self, bs: int) -> None:
        """Host tensors of the right kind, one length per row, lengths summing to ``flat``'s size."""
        for name, t in (("flat", self.flat), ("lens", self.lens)):
            if t.device.type != "cpu" or t.dtype != torch.int64 or t.ndim != 1:
                raise ValueError(f"kv-canary: ExpectedTokens.{name} must be a 1-D int64 CPU tensor, got "
                                 f"{t.dtype} {tuple(t.shape)} on {t.device}")
        if self.lens.shape[0] != bs:
            raise RuntimeError(f"kv-canary: req_all_ids_lens length {self.lens.shape[0]} != batch_size {bs}; "
                               "ForwardBatch snapshot diverged")
        if bs and int(self.lens.min()) < 0:
            raise ValueError("kv-canary: ExpectedTokens.lens must be >= 0 (tokens per row), got "
                             f"{int(self.lens.min())}")
        total = int(self.lens.sum()) if bs else 0
        if total != self.flat.numel():
            raise RuntimeError(f"kv-canary: cumsum(req_all_ids_lens)={total} != req_all_ids_flat.numel()="
                               f"{self.flat.numel()}; snapshot inconsistent")


@dataclass(frozen=True, kw_only=True)
class CanaryBatch:
    """One forward. ``expected_tokens`` is required when the manager checks VERIFY_TOKEN;
    ``expected_input_tokens`` / ``expected_input_positions`` (an oracle's, per flat token) when it runs the
    write-time input assert."""

    req_pool_indices: torch.Tensor
    prefix_lens: torch.Tensor
    extend_lens: torch.Tensor
    input_ids: torch.Tensor
    positions: torch.Tensor
    out_cache_loc: torch.Tensor
    expected_tokens: ExpectedTokens | None = None
    expected_input_tokens: torch.Tensor | None = None
    expected_input_positions: torch.Tensor | None = None

    @property
    def batch_size(self) -> int:
        """Request rows of the forward, padding rows included."""
        return int(self.req_pool_indices.shape[0])

    @property
    def num_tokens(self) -> int:
        """Tokens of the forward (the flat token arrays' length)."""
        return int(self.input_ids.shape[0])

    def validate(self, device: torch.device) -> None:
        """Shapes, dtypes and devices only: no device value is read."""
        rows = ("req_pool_indices", "prefix_lens", "extend_lens")
        toks = ("input_ids", "positions", "out_cache_loc")
        for name in rows + toks:
            _check_index_tensor(name, getattr(self, name), device)
        for group in (rows, toks):
            n = getattr(self, group[0]).shape[0]
            for name in group[1:]:
                if getattr(self, name).shape[0] != n:
                    raise ValueError(f"kv-canary: {name} length must equal {group[0]} length {n}, "
                                     f"got {getattr(self, name).shape[0]}")
        for name in ("expected_input_tokens", "expected_input_positions"):
            t = getattr(self, name)
            if t is not None:
                _check_index_tensor(name, t, device)
                if t.shape[0] != self.num_tokens:
                    raise ValueError(f"kv-canary: {name} length must equal input_ids length {self.num_tokens}, "
                                     f"got {t.shape[0]}")
        if self.expected_tokens is not None:
            self.expected_tokens.validate(self.batch_size)
