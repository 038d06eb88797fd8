"""A device-side digest of canary records: a splitmix64 mix per record, folded over a set of slots.

Tensor-parallel ranks stamp the same (token, position, prev_hash) at the same slots; only real_kv_hash (a
fingerprint of each rank's own heads) differs. The digest covers slot, token, position and prev_hash of
every record a forward wrote, as a wrapping sum (order-free) plus a count: two int64, computed on the
device with no host read, so it can run inside a captured CUDA graph.

The fold is an operation like the others (:mod:`kvcanary.ops.fold`): :func:`launch_digest_fold_kernel`
checks its arguments against the contract (codes ``KVC-D...``), then runs the kernel the registry selects:
torch_ref (torch int64 ops, any device) or Triton's fused fold (one launch, accumulating in place), which
outranks it on CUDA devices. ``fused`` below forces one of the two.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from kvcanary.ops.fold import FOLD, launch_digest_fold_kernel
from kvcanary.registry import REGISTRY

FoldInto = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], None]
"""``fold(acc, canary_buf, slots)``: adds the fold of the records at ``slots`` to ``acc`` (``int64 [2]``)."""
FUSED, UNFUSED = "triton", "torch_ref"
"""The backends ``fused=True`` and ``fused=False`` force."""

__all__ = ["DigestAccumulator", "FoldInto", "fold_records", "fold_records_torch", "fused_fold",
           "launch_digest_fold_kernel"]


def _backend(fused: bool | None) -> str | None:
    return None if fused is None else FUSED if fused else UNFUSED


def fused_fold(device: torch.device, fused: bool | None = None) -> FoldInto | None:
    """The fused (Triton) fold for tensors on ``device`` when the registry picks it, or None for the torch ops.

    ``fused=None`` (automatic): the registry's choice (Triton on a CUDA device where it can run; torch ops on
    the CPU, where Triton only interprets). ``True`` requires it (on the CPU: through ``TRITON_INTERPRET=1``)
    and raises :class:`~kvcanary.registry.BackendError` (a ``RuntimeError``) with the reasons where it cannot
    run; ``False`` always answers None.
    """
    if fused is False:
        return None
    chosen = REGISTRY.select(FOLD, device, _backend(fused)).backend.name
    if chosen != FUSED:
        return None

    def fold(acc: torch.Tensor, canary_buf: torch.Tensor, slots: torch.Tensor) -> None:
        launch_digest_fold_kernel(acc=acc, canary_buf=canary_buf, slots=slots, backend=FUSED)

    return fold


def fold_records(canary_buf: torch.Tensor, slots: torch.Tensor, *, fused: bool | None = None) -> torch.Tensor:
    """``int64 [2]``: (wrapping sum of each record's mix of slot, token, position, prev_hash; record count)
    over ``slots`` (entries <= 0, the padding slot and skipped tokens, are left out). The same bits on every
    backend (``fused``: see :func:`fused_fold`)."""
    out = torch.zeros(2, dtype=torch.int64, device=canary_buf.device)
    launch_digest_fold_kernel(acc=out, canary_buf=canary_buf, slots=slots, backend=_backend(fused))
    return out


def fold_records_torch(canary_buf: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """:func:`fold_records` by the torch ops (the reference backend), on any device."""
    return fold_records(canary_buf, slots, fused=False)


class DigestAccumulator:
    """Per-step digest of the records the forwards wrote: :meth:`add` after each HEAD (capturable: no host
    read, no allocation on the fused path), :meth:`take` once per step, outside any graph (copies the sum out
    and zeroes it, on the device). The backend is picked once, here (``fused``: see :func:`fused_fold`);
    :attr:`fused` says whether it is the fused fold. Bad arguments raise the contract's ``ContractError``."""

    def __init__(self, canary_buf: torch.Tensor, *, fused: bool | None = None) -> None:
        self._buf = canary_buf
        self.acc = torch.zeros(2, dtype=torch.int64, device=canary_buf.device)
        empty = torch.zeros(0, dtype=torch.int64, device=canary_buf.device)
        FOLD.contract.checker()(acc=self.acc, canary_buf=canary_buf, slots=empty)  # the buffer, checked once here
        self.backend = REGISTRY.select(FOLD, canary_buf.device, _backend(fused)).backend.name
        self.fused = self.backend == FUSED

    def add(self, out_cache_loc: torch.Tensor) -> None:
        launch_digest_fold_kernel(acc=self.acc, canary_buf=self._buf, slots=out_cache_loc, backend=self.backend)

    def take(self, out: torch.Tensor) -> None:
        """Copy the step's digest into ``out[:2]`` and start the next step from zero."""
        out[:2].copy_(self.acc)
        self.acc.zero_()
