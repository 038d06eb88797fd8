"""Receiver-side check of a transferred range, before its first use.

After :func:`~kvcanary.distributed.records.unpack_records` and the KV copy, :class:`TransferVerifier`
verifies every transferred slot on the manager's own HEAD and TAIL endpoints of the FULL group: chain link
(from the receiver's predecessor slot), position, token (when the receiver knows the request's tokens) and,
on the TAIL buffers, the real-KV fingerprint of the bytes that actually arrived. Violations land in the
manager's ring like any other (tagged HEAD_*/TAIL_*_FULL) and are reported by its pump; nothing here reads
a device value on the host. Eager only (a transfer is a host event, never inside a captured graph).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kvcanary.consts import PoolKind
from kvcanary.launch.verify import launch_canary_verify_kernel
from kvcanary.manager import CanaryManager, Phase
from kvcanary.plans import VerifyPlan


def transfer_entries(slots: Sequence[int], first_position: int,
                     prev_slot: int = -1) -> tuple[list[int], list[int], list[int]]:
    """(slots, positions, predecessor slots) of a contiguous run of positions from ``first_position``:
    the predecessor of the first is ``prev_slot`` (-1: ``first_position`` is a chain head)."""
    if first_position < 0:
        raise ValueError(f"kv-canary: first_position must be >= 0, got {first_position}")
    if first_position == 0 and prev_slot != -1:
        raise ValueError("kv-canary: prev_slot must be -1 when first_position is 0 (a chain head)")
    if first_position > 0 and prev_slot <= 0:
        raise ValueError(f"kv-canary: prev_slot must name the slot of position {first_position - 1}, "
                         f"got {prev_slot}")
    s = [int(x) for x in slots]
    return s, list(range(first_position, first_position + len(s))), [prev_slot, *s[:-1]]


class TransferVerifier:
    """Owns one verify plan of ``capacity`` entries (allocated once); longer transfers verify in chunks."""

    def __init__(self, manager: CanaryManager, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError(f"kv-canary: capacity must be positive, got {capacity}")
        self.manager = manager
        self.capacity = capacity
        self.plan = VerifyPlan.allocate(verify_capacity=capacity, device=manager.device)
        self.endpoints = [e for e in manager.endpoints
                          if e.kind is PoolKind.FULL and e.phase in (Phase.HEAD, Phase.TAIL)]
        self.verified = 0

    def verify(self, slots: Sequence[int], *, first_position: int = 0, prev_slot: int = -1,
               tokens: Sequence[int] | None = None) -> None:
        """Launch the verifies of the transferred run ``slots`` (receiver's slots, positions from
        ``first_position``); ``tokens`` (same length) turns the token check on."""
        s, pos, prev = transfer_entries(slots, first_position, prev_slot)
        if tokens is not None and len(tokens) != len(s):
            raise ValueError(f"kv-canary: tokens has {len(tokens)} entries, slots has {len(s)}")
        toks = [int(t) for t in tokens] if tokens is not None else [-1] * len(s)
        for a in range(0, len(s), self.capacity):
            b = min(len(s), a + self.capacity)
            self._launch(s[a:b], pos[a:b], prev[a:b], toks[a:b], check_token=tokens is not None)
        self.verified += len(s)

    def _launch(self, s: list[int], pos: list[int], prev: list[int], toks: list[int], *, check_token: bool) -> None:
        p, n = self.plan, len(s)
        host = torch.tensor([s, pos, prev, toks], dtype=torch.int64)
        p.verify_slot_indices[:n].copy_(host[0])
        p.verify_expected_positions[:n].copy_(host[1])
        p.verify_prev_slot_indices[:n].copy_(host[2])
        p.verify_expected_tokens[:n].copy_(host[3])
        p.verify_num_valid.fill_(n)
        p.enable.fill_(1)
        for ep in self.endpoints:
            launch_canary_verify_kernel(context=ep.context, plan=p, check_verify_expected_token=check_token,
                                        backend=self.manager.config.backend)
