"""A device-side digest of canary records: a splitmix64 mix per record, folded over a set of slots.

Tensor-parallel ranks stamp the same (token, position, prev_hash) at the same slots; only real_kv_hash (a
fingerprint of each rank's own heads) differs. The digest covers slot, token, position and prev_hash of
every record a forward wrote, as a wrapping sum (order-free) plus a count: two int64, computed on the
device with no host read, so it can run inside a captured CUDA graph.

Two implementations of one function: :func:`fold_records_torch`, torch int64 ops (the reference, any
device), and the Triton backend's fused fold (one launch, accumulating in place), which runs on CUDA devices
where kvcanary runs Triton kernels (:func:`fused_fold` decides, by the Triton backend's own rules).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from kvcanary.consts import CANARY_FIELD_POSITION, CANARY_FIELD_PREV_HASH, CANARY_FIELD_TOKEN, CANARY_SLOT_BYTES
from kvcanary.hashing import to_int64
from kvcanary.registry import REGISTRY, BackendError, Op, Reason, ReasonKind

_C1 = to_int64(0xBF58476D1CE4E5B9)
_C2 = to_int64(0x94D049BB133111EB)
_SLOT_SALT = to_int64(0x9E3779B97F4A7C15)

FoldInto = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], None]
"""``fold(acc, canary_buf, slots)``: adds the fold of the records at ``slots`` to ``acc`` (``int64 [2]``)."""


def _shr(x: torch.Tensor, n: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's ``>>`` is arithmetic)."""
    return (x >> n) & ((1 << (64 - n)) - 1)


def splitmix64_t(x: torch.Tensor) -> torch.Tensor:
    """splitmix64 of each int64 element (two's complement, wrapping multiplies): equals
    :func:`kvcanary.hashing.splitmix64` bit for bit."""
    x = (x ^ _shr(x, 30)) * _C1
    x = (x ^ _shr(x, 27)) * _C2
    return x ^ _shr(x, 31)


def check_fold_args(canary_buf: torch.Tensor, slots: torch.Tensor | None = None) -> None:
    """Refuse what neither fold can read: ``canary_buf`` must hold one 32-byte record per row (2-D, the
    row's bytes contiguous, 8-byte aligned rows a whole number of int64 words apart); ``slots`` a 1-D
    integer tensor on the buffer's device. Shapes and dtypes only: no device value is read."""
    row_bytes = canary_buf.shape[1] * canary_buf.element_size() if canary_buf.dim() == 2 else -1
    if (row_bytes != CANARY_SLOT_BYTES or canary_buf.dtype.is_floating_point or canary_buf.dtype.is_complex
            or canary_buf.dtype == torch.bool
            or (canary_buf.stride(1) != 1 and canary_buf.shape[1] > 1)
            or canary_buf.stride(0) * canary_buf.element_size() % 8 or canary_buf.data_ptr() % 8):
        raise ValueError(f"canary_buf must be a [num_slots, {CANARY_SLOT_BYTES} bytes] integer tensor with each "
                         f"row contiguous and rows 8-byte aligned, got {canary_buf.dtype} "
                         f"{list(canary_buf.shape)} strides {list(canary_buf.stride())}")
    if slots is not None:
        check_slots(slots, canary_buf.device)


def check_slots(slots: torch.Tensor, device: torch.device) -> None:
    """``slots`` must be a 1-D integer tensor on ``device`` (metadata only)."""
    if slots.dim() != 1 or slots.dtype.is_floating_point or slots.dtype.is_complex or slots.dtype == torch.bool:
        raise ValueError(f"slots must be a 1-D integer tensor, got {slots.dtype} {list(slots.shape)}")
    if slots.device != device:
        raise ValueError(f"slots must be on canary_buf's device ({device}), got {slots.device}")


def fold_records_torch(canary_buf: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """The fold in torch ops (the reference; any device): ``int64 [2]``, see :func:`fold_records`. A slot
    past the buffer (a corrupted index) is counted with its fields read as 0 and nothing is read for it,
    as in the fused fold: no index ever leaves the buffer."""
    loc = slots.to(torch.int64)
    valid = loc > 0
    num_slots = int(canary_buf.shape[0])
    inside = valid & (loc < num_slots)
    idx = torch.where(inside, loc, torch.zeros_like(loc))
    if num_slots:
        rec = canary_buf.index_select(0, idx).view(torch.int64) * inside.to(torch.int64).unsqueeze(1)
    else:
        rec = torch.zeros(loc.shape[0], CANARY_SLOT_BYTES // 8, dtype=torch.int64, device=loc.device)
    h = splitmix64_t(loc ^ _SLOT_SALT)
    for f in (CANARY_FIELD_TOKEN, CANARY_FIELD_POSITION, CANARY_FIELD_PREV_HASH):
        h = splitmix64_t(h ^ rec[:, f])
    v = valid.to(torch.int64)
    return torch.stack([(h * v).sum(), v.sum()])


def _torch_fold_into(acc: torch.Tensor, canary_buf: torch.Tensor, slots: torch.Tensor) -> None:
    acc.add_(fold_records_torch(canary_buf, slots))


def _triton_reasons(device: torch.device) -> list[Reason]:
    # The Triton backend's rules (package installed; compiled kernels on CUDA, the interpreter on the CPU)
    # are the same for every operation it serves: write's answer stands for the digest's.
    try:
        return REGISTRY.get("triton").static_reasons(Op.WRITE, device)
    except BackendError as exc:
        return [r for rs in exc.reasons.values() for r in rs]


def fused_fold(device: torch.device, fused: bool | None = None) -> FoldInto | None:
    """The Triton backend's fused fold for tensors on ``device``, or None for the torch ops.

    ``fused=None`` (automatic): fused on a CUDA device where the Triton backend can run (as the registry
    prefers Triton to torch ops there; on the CPU Triton only interprets, so torch ops). ``True`` requires it
    (on the CPU: through ``TRITON_INTERPRET=1``) and raises ``RuntimeError`` with the reasons where it cannot
    run; ``False`` always answers None.
    """
    if fused is False or (fused is None and device.type != "cuda"):
        return None
    reasons = _triton_reasons(device)
    if not reasons:
        try:
            from kvcanary_backends.triton.digest import fold_into
        except ImportError as exc:  # a triton that finds its spec but does not import
            reasons = [Reason(ReasonKind.BROKEN, f"importing the fused fold failed: {type(exc).__name__}: {exc}")]
        else:
            return fold_into
    if fused:
        raise RuntimeError(f"kv-canary: the fused digest fold cannot run on {device}: "
                           + "; ".join(str(r) for r in reasons))
    return None


def fold_records(canary_buf: torch.Tensor, slots: torch.Tensor, *, fused: bool | None = None) -> torch.Tensor:
    """``int64 [2]``: (wrapping sum of each record's mix of slot, token, position, prev_hash; record count)
    over ``slots`` (entries <= 0, the padding slot and skipped tokens, are left out). One fused launch on a
    CUDA device with Triton, torch ops elsewhere (``fused``: see :func:`fused_fold`); the same bits either way."""
    check_fold_args(canary_buf, slots)
    fold = fused_fold(canary_buf.device, fused)
    if fold is None:
        return fold_records_torch(canary_buf, slots)
    out = torch.zeros(2, dtype=torch.int64, device=canary_buf.device)
    fold(out, canary_buf, slots)
    return out


class DigestAccumulator:
    """Per-step digest of the records the forwards wrote: :meth:`add` after each HEAD (capturable: no host
    read, no allocation on the fused path), :meth:`take` once per step, outside any graph (copies the sum out
    and zeroes it, on the device). The implementation is picked once, here (``fused``: see :func:`fused_fold`);
    :attr:`fused` says which."""

    def __init__(self, canary_buf: torch.Tensor, *, fused: bool | None = None) -> None:
        check_fold_args(canary_buf)
        self._buf = canary_buf
        self.acc = torch.zeros(2, dtype=torch.int64, device=canary_buf.device)
        fold = fused_fold(canary_buf.device, fused)
        self.fused = fold is not None
        self._fold: FoldInto = fold if fold is not None else _torch_fold_into

    def add(self, out_cache_loc: torch.Tensor) -> None:
        check_slots(out_cache_loc, self._buf.device)
        if torch.compiler.is_compiling():  # traced by torch.compile: the torch ops (same bits) trace, a launch does not
            _torch_fold_into(self.acc, self._buf, out_cache_loc)
            return
        self._fold(self.acc, self._buf, out_cache_loc)

    def take(self, out: torch.Tensor) -> None:
        """Copy the step's digest into ``out[:2]`` and start the next step from zero."""
        out[:2].copy_(self.acc)
        self.acc.zero_()
