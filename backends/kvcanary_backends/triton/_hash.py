"""splitmix64 and mix3 on ``tl.uint64`` (device functions), and the format's constants as constexprs.

Records hold int64 fields; hashing reinterprets them as uint64 (``bitcast``), exactly as the format does, and
results are bitcast back before they are stored or compared.
"""

from __future__ import annotations

import triton.language as tl

from kvcanary.consts import INVALID_SLOT, ZERO_SLOT_MARK, FailReason
from kvcanary.hashing import ANCHOR_HASH, to_int64
from kvcanary_backends.triton._jit import device_fn

ANCHOR_HASH_I64 = tl.constexpr(to_int64(ANCHOR_HASH))
"""splitmix64(CANARY_CHAIN_ANCHOR) as the int64 a chain head stores."""
INVALID = tl.constexpr(INVALID_SLOT)
"""kvcanary's INVALID_SLOT sentinel (-2**63): a slot the plan could not name."""

CHAIN_BIT = tl.constexpr(int(FailReason.VERIFY_CHAIN_HASH_MISMATCH))
POS_BIT = tl.constexpr(int(FailReason.VERIFY_POSITION_MISMATCH))
RKV_BIT = tl.constexpr(int(FailReason.VERIFY_REAL_KV_HASH_MISMATCH))
WTOK_BIT = tl.constexpr(int(FailReason.WRITE_TOKEN_MISMATCH))
WPOS_BIT = tl.constexpr(int(FailReason.WRITE_POSITION_MISMATCH))
VTOK_BIT = tl.constexpr(int(FailReason.VERIFY_TOKEN_MISMATCH))
OOB_BIT = tl.constexpr(int(FailReason.INDEX_OUT_OF_RANGE))
ZERO_BIT = tl.constexpr(int(FailReason.ZERO_SLOT_IN_LIVE_RANGE))
WSLOT_BIT = tl.constexpr(int(FailReason.WRITE_SLOT_MISMATCH))
WOWN_BIT = tl.constexpr(int(FailReason.WRITE_SLOT_OWNER_MISMATCH))
ZERO_MARK = tl.constexpr(ZERO_SLOT_MARK)
"""kvcanary's ZERO_SLOT_MARK: the plan's mark of a padding slot inside a live range (extension only)."""


@device_fn
def as_u64(x: tl.tensor) -> tl.tensor:
    """The uint64 with the bit pattern of an int64."""
    return x.to(tl.uint64, bitcast=True)


@device_fn
def as_i64(x: tl.tensor) -> tl.tensor:
    """The int64 with the bit pattern of a uint64."""
    return x.to(tl.int64, bitcast=True)


@device_fn
def splitmix64(x: tl.tensor) -> tl.tensor:
    """The bare splitmix64 finalizer on uint64 (no golden-ratio increment)."""
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB
    return x ^ (x >> 31)


@device_fn
def mix3(a: tl.tensor, b: tl.tensor, c: tl.tensor) -> tl.tensor:
    """``splitmix64(splitmix64(splitmix64(a) ^ b) ^ c)`` on uint64: the chain link."""
    return splitmix64(splitmix64(splitmix64(a) ^ b) ^ c)


@device_fn
def record_link(prev_hash: tl.tensor, token: tl.tensor, position: tl.tensor) -> tl.tensor:
    """The hash a record hands to its successor, from its int64 fields, as int64."""
    return as_i64(mix3(as_u64(prev_hash), as_u64(token), as_u64(position)))
