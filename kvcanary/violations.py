"""Decoded violations and their text reports (SGLang's frozen format), plus the device-side ring.

A ring row is 8 int64: ``[kernel_kind, slot_idx, position, stored_token, expected_token,
stored_chain_hash, expected_aux, fail_reason_bits]``. :class:`Violation` is its typed form;
:func:`format_violation` renders the log block whose first line SGLang's tests parse with a regex.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from kvcanary.constructors.allocation import check_violation_log_allocate
from kvcanary.consts import VIOLATION_FIELDS, CanaryLaunchTag, FailReason
from kvcanary.hashing import to_uint64

_WRITE_BITS = FailReason.WRITE_TOKEN_MISMATCH | FailReason.WRITE_POSITION_MISMATCH
_TOKEN_BITS = FailReason.VERIFY_TOKEN_MISMATCH | FailReason.WRITE_TOKEN_MISMATCH
_OWNER_BIT = int(FailReason.WRITE_SLOT_OWNER_MISMATCH)


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= (1 << 63) else value


def tag_name(kind: int) -> str:
    """The launch tag's name, or ``unknown(n)``."""
    try:
        return CanaryLaunchTag(kind).name
    except ValueError:
        return f"unknown({kind})"


def canary_kind(kind: int) -> str:
    """``sweep_k_full`` for sweep tags, ``per_forward_head_k_full`` for HEAD/TAIL tags."""
    name = tag_name(kind)
    if name.startswith("unknown"):
        return name
    low = name.lower()
    return low if low.startswith("sweep") else f"per_forward_{low}"


@dataclass(frozen=True, slots=True)
class Violation:
    """One ring row, decoded. Hash fields are kept as uint64."""

    kernel_kind: int
    slot_idx: int
    position: int
    stored_token: int
    expected_token: int
    stored_chain_hash: int
    expected_aux: int
    fail_reason_bits: int

    @classmethod
    def from_row(cls, row: Sequence[int]) -> Violation:
        if len(row) != VIOLATION_FIELDS:
            raise ValueError(f"kv-canary: a violation row has {VIOLATION_FIELDS} fields, got {len(row)}")
        k, slot, pos, tok, exp_tok, chain, aux, bits = (int(v) for v in row)
        return cls(k, slot, pos, tok, exp_tok, to_uint64(chain), to_uint64(aux), bits)

    @property
    def tag(self) -> CanaryLaunchTag | None:
        try:
            return CanaryLaunchTag(self.kernel_kind)
        except ValueError:
            return None

    @property
    def tag_name(self) -> str:
        return tag_name(self.kernel_kind)

    @property
    def reasons(self) -> FailReason:
        return FailReason(self.fail_reason_bits & sum(int(b) for b in FailReason))

    @property
    def reason_labels(self) -> list[str]:
        return self.reasons.labels()

    @property
    def is_write_row(self) -> bool:
        return bool(self.fail_reason_bits & int(_WRITE_BITS))

    @property
    def owners(self) -> tuple[int, int] | None:
        """``(writer, holder)`` of a WRITE_SLOT_OWNER_MISMATCH row, else None: the writing request's
        ``req_to_token`` row (``expected_token``) and the slot's holder in the owner map (``expected_aux``:
        another row, -1 free, below -1 read-only)."""
        if not self.fail_reason_bits & _OWNER_BIT:
            return None
        return self.expected_token, _signed(self.expected_aux)


def format_violation(v: Violation, *, total_violations: int, ring_capacity: int, step_when_pumped: int) -> str:
    """SGLang's report block for one violation; the first line is the parseable one.

    The format is described in docs/compatibility.md, Violation rows.
    """
    labels = v.reason_labels
    plus = "+".join(labels) if labels else "none"
    spaced = " ".join(labels) if labels else "none"
    lines = [
        f"kv_canary violation: launch_tag={v.tag_name} fail_reason={plus} slot_idx={v.slot_idx} "
        f"position={v.position} stored_token={v.stored_token} expected_token={v.expected_token} "
        f"stored_chain_hash={v.stored_chain_hash:#018x} expected_aux={v.expected_aux:#018x}",
        f"KV cache canary violation detected (kernel_kind={v.tag_name}, slot_idx={v.slot_idx}, "
        f"position={v.position})",
        f"canary_kind:       {canary_kind(v.kernel_kind)}",
        f"  fail_reasons: {spaced}",
    ]
    chain = f"{v.stored_chain_hash:#018x}"
    owners = v.owners
    if owners is not None:
        writer, holder = owners
        held = f"req_pool_idx={holder}" if holder >= 0 else "free" if holder == -1 else f"read-only ({holder})"
        lines.append(f"  written:  token_id={v.stored_token}   position={v.position} prev_hash={chain} "
                     f"by req_pool_idx={writer}")
        lines.append(f"  held by:  {held}")
    elif v.is_write_row:
        aux = _signed(v.expected_aux)
        lines.append(f"  actual:   token_id={v.stored_token}   position={v.position} prev_hash={chain}")
        lines.append(f"  expected: token_id={v.expected_token}   position={aux}")
    else:
        lines.append(f"  stored:   token_id={v.stored_token}   position={v.position} prev_hash={chain}")
        if v.fail_reason_bits & int(_TOKEN_BITS):
            lines.append(f"  expected: token_id={v.expected_token} prev_hash={v.expected_aux:#018x}")
        else:
            lines.append(f"  expected: prev_hash={v.expected_aux:#018x}")
    lines.append(
        f"  total_violations={total_violations} ring_overflow={total_violations > ring_capacity} "
        f"step_when_pumped={step_when_pumped}"
    )
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class ViolationSnapshot:
    """What the ring held when it was read: every kept row, and how many were ever recorded."""

    violations: tuple[Violation, ...]
    total: int
    ring_capacity: int

    @property
    def overflowed(self) -> bool:
        return self.total > self.ring_capacity

    @property
    def dropped(self) -> int:
        return max(0, self.total - self.ring_capacity)


@dataclass(frozen=True, kw_only=True)
class ViolationLog:
    """The device-side violation ring (fill-once) and its monotonic write index."""

    violation_ring: torch.Tensor
    violation_write_index: torch.Tensor

    @classmethod
    def allocate(cls, *, ring_capacity: int, device: torch.device | str) -> ViolationLog:
        check_violation_log_allocate(ring_capacity=ring_capacity)
        return cls(
            violation_ring=torch.zeros(ring_capacity, VIOLATION_FIELDS, dtype=torch.int64, device=device),
            violation_write_index=torch.zeros(1, dtype=torch.int32, device=device),
        )

    @property
    def ring_capacity(self) -> int:
        return int(self.violation_ring.shape[0])

    def read(self) -> ViolationSnapshot:
        """Copy the ring to the host (a device sync: call it off the hot path)."""
        total = int(self.violation_write_index.cpu()[0])
        rows = self.violation_ring[: min(total, self.ring_capacity)].cpu().tolist()
        return ViolationSnapshot(tuple(Violation.from_row(r) for r in rows), total, self.ring_capacity)

    def reset_(self) -> None:
        self.violation_ring.zero_()
        self.violation_write_index.zero_()
