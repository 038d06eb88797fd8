"""Prefill→decode transfer of KV and its canary records over ``torch.distributed`` point-to-point.

One message per transfer: a header (magic, slot count, KV bytes per slot, record buffers, rotation sets), the
sender's layer-rotation layout (one int64 per rotation set, when it has any), the KV payload (every layer's bytes
of each slot, ``uint8 [n, kv_bytes]``) and the records payload (from
:func:`~kvcanary.distributed.records.pack_records`). With NCCL the tensors go device to device; with gloo and CUDA
tensors (two processes on one GPU) they are staged through host memory. On arrival :func:`accept_transfer` writes
KV and records at the receiver's slots and verifies the whole expected range before first use
(:class:`~kvcanary.distributed.verify.TransferVerifier`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from kvcanary.constructors.transfer import check_wire
from kvcanary.consts import CANARY_SLOT_BYTES
from kvcanary.distributed.records import pack_records, packed_shape, rotation_layout, write_records
from kvcanary.distributed.slots import Entries, checked_run, entries, slot_index
from kvcanary.distributed.verify import TransferStart, TransferVerifier
from kvcanary.manager import CanaryManager

MAGIC = 0x4B5643414E415259  # "KVCANARY"
HEADER_FIELDS = 5


def _check_layers(layers: Sequence[torch.Tensor]) -> None:
    """``layers`` is a list of KV buffers: tensors of ``[num_slots, ...]`` rows, contiguous, on one device
    (types first, then shapes: nothing is read from an entry that is not such a tensor)."""
    if isinstance(layers, torch.Tensor) or not isinstance(layers, Sequence):
        raise TypeError(f"kv-canary: layers must be a list of KV buffer tensors (one per layer, K and V), got "
                        f"{type(layers).__name__}")
    if not layers:
        raise ValueError("kv-canary: layers must name at least one KV buffer")
    for i, t in enumerate(layers):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"kv-canary: layers[{i}] must be a tensor, got {type(t).__name__}")
        if t.ndim < 1:
            raise ValueError(f"kv-canary: layers[{i}] must be a [num_slots, ...] tensor (at least 1-D), got a "
                             f"{t.ndim}-D tensor")
    n = int(layers[0].shape[0])
    for i, t in enumerate(layers):
        if int(t.shape[0]) != n or not t.is_contiguous() or t.device != layers[0].device:
            raise ValueError(f"kv-canary: layers[{i}] must be a contiguous [num_slots={n}, ...] tensor on "
                             f"{layers[0].device}, got shape {tuple(t.shape)} on {t.device}")


def _row_elements(t: torch.Tensor) -> int:
    """Elements in one slot's row of a layer buffer, from its shape (a run or a pool of no slots has no row 0
    to count, and ``reshape(0, -1)`` cannot infer the width)."""
    return math.prod(int(d) for d in t.shape[1:])


def _kv_slots(layers: Sequence[torch.Tensor], slots: Entries) -> torch.Tensor:
    """The layers checked, and ``slots`` as an index into their rows (in ``[1, num_slots)``)."""
    _check_layers(layers)
    return slot_index(slots, "slots", int(layers[0].shape[0]), layers[0].device)


def _kv_widths(layers: Sequence[torch.Tensor], n: int, payload: torch.Tensor) -> list[int]:
    """Bytes per slot of each layer, once ``payload`` is known to be the ``uint8 [n, Σ widths]`` they need."""
    if not isinstance(payload, torch.Tensor) or payload.dtype != torch.uint8:
        raise ValueError("kv-canary: payload must be the uint8 tensor pack_kv returned")
    widths = [_row_elements(t) * t.element_size() for t in layers]
    if tuple(payload.shape) != (n, sum(widths)):
        raise ValueError(f"kv-canary: KV payload has shape {tuple(payload.shape)}, expected {(n, sum(widths))}")
    return widths


def pack_kv(layers: Sequence[torch.Tensor], slots: Entries) -> torch.Tensor:
    """``uint8 [n, Σ bytes per slot]``: each layer buffer's (``[num_slots, ...]``) rows of ``slots``."""
    idx = _kv_slots(layers, slots)
    n = int(idx.shape[0])
    return torch.cat([t.index_select(0, idx).reshape(n, _row_elements(t)).view(torch.uint8) for t in layers], dim=1)


def unpack_kv(layers: Sequence[torch.Tensor], slots: Entries, payload: torch.Tensor) -> None:
    """Write ``payload`` (from :func:`pack_kv`) into ``layers`` at ``slots`` (receiver's slot numbers); bad
    slots or a payload of another shape or dtype raise before anything is written."""
    idx = _kv_slots(layers, slots)
    _write_kv(layers, idx, payload, _kv_widths(layers, int(idx.shape[0]), payload))


def _write_kv(layers: Sequence[torch.Tensor], idx: torch.Tensor, payload: torch.Tensor, widths: list[int]) -> None:
    n, off = int(idx.shape[0]), 0
    for t, w in zip(layers, widths, strict=True):
        rows = payload[:, off : off + w].contiguous().view(t.dtype).reshape((n, *t.shape[1:]))
        t.index_copy_(0, idx, rows.to(t.device))
        off += w


@dataclass(frozen=True)
class TransferMessage:
    """What crosses the wire for one transfer: KV rows and the records of the same slots, same order, and the
    sender's layer-rotation layout (:func:`~kvcanary.distributed.records.rotation_layout`; empty: no rotation,
    or a message built by hand), which the receiver's must equal."""

    kv: torch.Tensor
    records: torch.Tensor
    rotation: tuple[int, ...] = ()

    @property
    def num_slots(self) -> int:
        return int(self.kv.shape[0])

    @property
    def nbytes(self) -> int:
        return int(self.kv.numel() + self.records.numel())


def make_message(manager: CanaryManager | None, layers: Sequence[torch.Tensor], slots: Entries) -> TransferMessage:
    """Sender side: the KV of ``slots`` and (with a manager) their records."""
    kv = pack_kv(layers, slots)
    if manager is None:
        return TransferMessage(kv, torch.zeros(0, len(kv), 32, dtype=torch.uint8, device=kv.device))
    return TransferMessage(kv, pack_records(manager, slots), rotation_layout(manager))


def check_message(msg: TransferMessage, name: str = "msg") -> None:
    """``msg`` is a :class:`TransferMessage` whose parts agree: ``kv`` a ``uint8 [n, bytes]`` tensor,
    ``records`` a ``uint8 [buffers, n, 32]`` tensor of the same ``n`` slots (TypeError for a wrong type,
    ValueError for a wrong dtype or shape)."""
    if not isinstance(msg, TransferMessage):
        raise TypeError(f"kv-canary: {name} must be a TransferMessage (from make_message or Wire.recv), got "
                        f"{type(msg).__name__}")
    for part in ("kv", "records"):
        if not isinstance(getattr(msg, part), torch.Tensor):
            raise TypeError(f"kv-canary: {name}.{part} must be a uint8 tensor, got {type(getattr(msg, part)).__name__}")
    kv, rec = msg.kv, msg.records
    if kv.dtype != torch.uint8 or kv.ndim != 2:
        raise ValueError(f"kv-canary: {name}.kv must be a 2-D uint8 tensor [slots, KV bytes per slot] (the KV "
                         f"payload pack_kv returns), got {kv.dtype} of shape {tuple(kv.shape)}")
    n = int(kv.shape[0])
    if rec.dtype != torch.uint8 or rec.ndim != 3 or int(rec.shape[1]) != n or int(rec.shape[2]) != CANARY_SLOT_BYTES:
        raise ValueError(f"kv-canary: {name}.records must be a uint8 tensor [buffers, {n}, {CANARY_SLOT_BYTES}] (the "
                         f"records of the KV's {n} slots), got {rec.dtype} of shape {tuple(rec.shape)}")
    rot = msg.rotation
    if not isinstance(rot, tuple) or not all(type(x) is int and x > 0 for x in rot) or len(rot) > int(rec.shape[0]):
        raise ValueError(f"kv-canary: {name}.rotation must be a tuple of positive ints, one per rotation set among "
                         f"the records' {int(rec.shape[0])} buffers (rotation_layout), got {rot!r}")


class Wire:
    """Point-to-point transport of :class:`TransferMessage` for ``backend`` ('gloo' or 'nccl') and the
    device the KV lives on; gloo with CUDA tensors stages through the host."""

    def __init__(self, *, backend: str, device: torch.device, group: dist.ProcessGroup | None = None) -> None:
        check_wire(backend=backend, device=device)  # the rules: kvcanary/constructors/transfer.py
        self.backend = backend
        self.device = device
        self.group = group
        self.wire_device = torch.device("cpu") if backend == "gloo" else self.device

    def _peer(self, rank: int) -> int:
        return dist.get_global_rank(self.group, rank) if self.group is not None else rank

    def send(self, msg: TransferMessage, dst: int) -> None:
        """Send ``msg`` to rank ``dst`` (blocking until the transport has it); a message whose parts disagree
        (:func:`check_message`) raises before anything is sent."""
        check_message(msg)
        n, w = (int(x) for x in msg.kv.shape)
        header = torch.tensor([MAGIC, n, w, int(msg.records.shape[0]), len(msg.rotation)], dtype=torch.int64,
                              device=self.wire_device)
        peer = self._peer(dst)
        dist.send(header, peer, group=self.group)
        if msg.rotation:
            dist.send(torch.tensor(msg.rotation, dtype=torch.int64, device=self.wire_device), peer, group=self.group)
        if n:
            dist.send(msg.kv.to(self.wire_device).contiguous(), peer, group=self.group)
            if msg.records.numel():
                dist.send(msg.records.to(self.wire_device).contiguous(), peer, group=self.group)

    def recv(self, src: int) -> TransferMessage:
        """Receive one message from rank ``src``; a bad header raises ValueError."""
        header = torch.zeros(HEADER_FIELDS, dtype=torch.int64, device=self.wire_device)
        peer = self._peer(src)
        dist.recv(header, peer, group=self.group)
        magic, n, w, nbuf, nsets = (int(x) for x in header.tolist())
        if magic != MAGIC or n < 0 or w < 0 or nbuf < 0 or not 0 <= nsets <= nbuf:
            raise ValueError(f"kv-canary: transfer header from rank {src} is not a kvcanary message: "
                             f"{header.tolist()}")
        rotation: tuple[int, ...] = ()
        if nsets:
            sizes = torch.zeros(nsets, dtype=torch.int64, device=self.wire_device)
            dist.recv(sizes, peer, group=self.group)
            rotation = tuple(int(x) for x in sizes.tolist())
        kv = torch.zeros(n, w, dtype=torch.uint8, device=self.wire_device)
        rec = torch.zeros(nbuf, n, 32, dtype=torch.uint8, device=self.wire_device)
        if n:
            dist.recv(kv, peer, group=self.group)
            if nbuf:
                dist.recv(rec, peer, group=self.group)
        return TransferMessage(kv.to(self.device), rec.to(self.device), rotation)


@dataclass(frozen=True)
class ReceivedTransfer:
    """What :func:`accept_transfer` did: slots written (the message's count) of those expected."""

    received: int
    expected: int


def accept_transfer(manager: CanaryManager | None, verifier: TransferVerifier | None,
                    layers: Sequence[torch.Tensor], msg: TransferMessage, slots: Entries, *,
                    first_position: int = 0, prev_slot: int = -1,
                    tokens: Entries | None = None) -> ReceivedTransfer:
    """Receiver side: write ``msg``'s KV and records at ``slots`` (the receiver's; a shorter message fills
    a prefix of them), then verify every expected slot before first use. Everything is checked before the
    first write: slots (integers in ``[1, num_slots)``), a message with more slots than expected, KV or
    records of another layout, the chain start and the tokens raise (TypeError for a wrong type, ValueError
    otherwise) and write nothing, with or without a verifier and for an empty run too. A receiver without
    canaries (``manager=None``, then no verifier) writes the KV alone: it has no buffer to keep the records in."""
    check_message(msg)
    if verifier is not None and verifier.manager is not manager:
        raise ValueError("kv-canary: verifier must be built on manager (TransferVerifier(manager, capacity)): it "
                         "verifies the records of its own manager, which this call "
                         f"{'does not write (manager is None)' if manager is None else 'does not write to'}")
    n = msg.num_slots
    _check_layers(layers)
    num_slots = int(layers[0].shape[0])
    if manager is not None:
        num_slots = min(num_slots, manager.groups[0].num_slots)
    idx, host = checked_run(slots, "slots", layers[0].device, num_slots)
    want = int(idx.shape[0])
    TransferStart(first_position=first_position, prev_slot=prev_slot)
    if host is not None and prev_slot in host:
        raise ValueError(f"kv-canary: prev_slot ({prev_slot}, the slot of position {first_position - 1}) must not "
                         f"be one of slots (slots[{host.index(prev_slot)}]): the run would overwrite its own "
                         "predecessor")
    tok = None if tokens is None else entries(tokens, "tokens", layers[0].device if verifier is None
                                              else verifier.manager.device)
    if tok is not None and int(tok.shape[0]) != want:
        raise ValueError(f"kv-canary: tokens has {int(tok.shape[0])} entries, slots has {want}")
    if n > want:
        raise ValueError(f"kv-canary: transfer message carries {n} slots, the receiver expects at most {want}")
    widths = _kv_widths(layers, n, msg.kv)
    if manager is not None and tuple(msg.records.shape) != packed_shape(manager, n):
        raise ValueError(f"kv-canary: records payload has shape {tuple(msg.records.shape)}, expected "
                         f"{packed_shape(manager, n)}")
    if manager is not None and msg.rotation and msg.rotation != (mine := rotation_layout(manager)):
        raise ValueError(f"kv-canary: msg.rotation {msg.rotation} (the sender's layer-rotation sets, sources per set) "
                         f"differs from this manager's {mine}: both ends must use the same "
                         "layer_rotation over the same layers (each set's records fingerprint its own layers)")
    # every check passed: write
    _write_kv(layers, idx[:n], msg.kv, widths)
    if manager is not None:
        write_records(manager, msg.records, idx[:n])
    if verifier is not None and want:
        verifier.verify(idx, first_position=first_position, prev_slot=prev_slot, tokens=tok)
    return ReceivedTransfer(n, want)
