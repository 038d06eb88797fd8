"""Receiver-side check of a transferred range, before its first use.

After :func:`~kvcanary.distributed.records.unpack_records` and the KV copy, :class:`TransferVerifier`
verifies every transferred slot on the manager's own HEAD and TAIL endpoints of the FULL group: chain link
(from the receiver's predecessor slot), position, token (when the receiver knows the request's tokens) and,
on the TAIL buffers, the real-KV fingerprint of the bytes that actually arrived. With layer rotation it also
verifies the range on every rotation set of the FULL group (each set fingerprints its own layers' bytes), so a
byte flipped in transit in any listed layer is reported before first use, not when that set's turn comes.
Violations land in the manager's ring like any other (tagged HEAD_*/TAIL_*_FULL; a rotation set's rows carry
the group's TAIL_K tag) and are reported by its pump; nothing here reads a device value on the host. Eager only
(a transfer is a host event, never inside a captured graph).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from kvcanary.constructors.transfer import validate_transfer_start
from kvcanary.consts import PoolKind
from kvcanary.context import VerifyOrWriteContext
from kvcanary.distributed.records import rotation_contexts
from kvcanary.distributed.slots import Entries, entries
from kvcanary.launch.verify import launch_canary_verify_kernel
from kvcanary.manager import CanaryManager, Phase
from kvcanary.plans import VerifyPlan


@dataclass(frozen=True)
class TransferStart:
    """Where a transferred run starts in its request's chain: its first position, and the receiver's slot of
    the position before it (-1: the run starts at position 0, a chain head). Checked when built (the rules:
    kvcanary/constructors/transfer.py)."""

    first_position: int = 0
    prev_slot: int = -1

    def __post_init__(self) -> None:
        validate_transfer_start(self)


def transfer_entries(slots: Sequence[int], first_position: int,
                     prev_slot: int = -1) -> tuple[list[int], list[int], list[int]]:
    """(slots, positions, predecessor slots) of a contiguous run of positions from ``first_position``:
    the predecessor of the first is ``prev_slot`` (-1: ``first_position`` is a chain head)."""
    TransferStart(first_position=first_position, prev_slot=prev_slot)
    s = [int(x) for x in slots]
    return s, list(range(first_position, first_position + len(s))), [prev_slot, *s[:-1]]


class TransferVerifier:
    """Owns one verify plan of ``capacity`` entries (allocated once); longer transfers verify in chunks."""

    def __init__(self, manager: CanaryManager, capacity: int) -> None:
        # capacity is the plan's verify_capacity: VerifyPlan.allocate's contract refuses one below 1 (KVC-A)
        self.plan = VerifyPlan.allocate(verify_capacity=capacity, device=manager.device)
        self.manager = manager
        self.capacity = capacity
        self.endpoints = [e for e in manager.endpoints
                          if e.kind is PoolKind.FULL and e.phase in (Phase.HEAD, Phase.TAIL)]
        self.rotation_sets: list[VerifyOrWriteContext] = rotation_contexts(manager)
        """The FULL group's layer-rotation sets (none without rotation): each verifies the whole range, real-KV
        fingerprints of its own layers included (the rotation's per-forward turn does not apply here)."""
        self.verified = 0

    def verify(self, slots: Entries, *, first_position: int = 0, prev_slot: int = -1,
               tokens: Entries | None = None) -> None:
        """Launch the verifies of the transferred run ``slots`` (receiver's slots, positions from
        ``first_position``); ``tokens`` (same length) turns the token check on. Slots and tokens already
        on the device are used there: positions and predecessors are built on the device, never read back."""
        TransferStart(first_position=first_position, prev_slot=prev_slot)
        dev = self.manager.device
        idx = entries(slots, "slots", dev)
        tok = None if tokens is None else entries(tokens, "tokens", dev)
        n = int(idx.shape[0])
        if tok is not None and int(tok.shape[0]) != n:
            raise ValueError(f"kv-canary: tokens has {int(tok.shape[0])} entries, slots has {n}")
        for a in range(0, n, self.capacity):
            self._launch(idx, tok, a, min(n, a + self.capacity), first_position, prev_slot)
        self.verified += n

    def _launch(self, idx: torch.Tensor, tok: torch.Tensor | None, a: int, b: int, first_position: int,
                prev_slot: int) -> None:
        """Fill the plan with entries ``a:b`` of the run (device copies only) and verify on every endpoint."""
        p, m = self.plan, b - a
        p.verify_slot_indices[:m].copy_(idx[a:b])
        p.verify_expected_positions[:m].copy_(
            torch.arange(first_position + a, first_position + b, dtype=torch.int64, device=idx.device))
        if a == 0:
            p.verify_prev_slot_indices[:1].fill_(prev_slot)
        else:
            p.verify_prev_slot_indices[:1].copy_(idx[a - 1 : a])
        p.verify_prev_slot_indices[1:m].copy_(idx[a : b - 1])
        if tok is None:
            p.verify_expected_tokens[:m].fill_(-1)
        else:
            p.verify_expected_tokens[:m].copy_(tok[a:b])
        p.verify_num_valid.fill_(m)
        p.enable.fill_(1)
        # the ring and counters change after any TAIL's read-back copy; said before the launches, so that one
        # raising after another ran still leaves the step's end copying
        self.manager.state_launched()
        for ep in self.endpoints:
            launch_canary_verify_kernel(context=ep.context, plan=p, check_verify_expected_token=tok is not None,
                                        backend=self.manager.config.backend)
        for ctx in self.rotation_sets:  # as the rotation's own TAIL verify: no token check (HEAD/TAIL's do it)
            launch_canary_verify_kernel(context=ctx, plan=p, check_verify_expected_token=False,
                                        backend=self.manager.config.backend)
