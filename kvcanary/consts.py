"""The canary format's constants and enums, with SGLang kv-canary's names and values.

Everything here is part of the wire format: the record layout in the canary buffer, the violation-ring row
layout, the FailReason bits and the launch tags. Changing a value breaks compatibility with SGLang's reports
and with the golden vectors, so tests pin every one of them.
"""

from __future__ import annotations

from enum import Enum, IntEnum, IntFlag

# --- chain and padding --------------------------------------------------------------------------------------
CANARY_CHAIN_ANCHOR: int = 0xC0FFEE1234567890
"""uint64 seed of every chain: a chain head's stored prev_hash is splitmix64(CANARY_CHAIN_ANCHOR)."""

REQ_POOL_IDX_PADDING: int = 0
"""req_to_token row 0 is the CUDA-graph padding row: plan rows naming it are inactive."""

TOKEN_TO_KV_SLOT_PADDING: int = 0
"""KV slot 0 is the dummy write slot: verify never checks it, and a predecessor of 0 skips the chain check."""

# --- canary record ------------------------------------------------------------------------------------------
CANARY_FIELDS_PER_SLOT: int = 4
CANARY_FIELD_TOKEN: int = 0
CANARY_FIELD_POSITION: int = 1
CANARY_FIELD_PREV_HASH: int = 2
CANARY_FIELD_REAL_KV_HASH: int = 3
CANARY_SLOT_BYTES: int = CANARY_FIELDS_PER_SLOT * 8  # 32

# --- violation ring -----------------------------------------------------------------------------------------
VIOLATION_FIELDS: int = 8
VIOLATION_FIELD_KERNEL_KIND: int = 0
VIOLATION_FIELD_SLOT_IDX: int = 1
VIOLATION_FIELD_POSITION: int = 2
VIOLATION_FIELD_STORED_TOKEN: int = 3
VIOLATION_FIELD_EXPECTED_TOKEN: int = 4
VIOLATION_FIELD_STORED_CHAIN_HASH: int = 5
VIOLATION_FIELD_EXPECTED_AUX: int = 6
VIOLATION_FIELD_FAIL_REASON_BITS: int = 7
DEFAULT_RING_CAPACITY: int = 1024

# --- real-KV sources ----------------------------------------------------------------------------------------
MAX_REAL_KV_SOURCES: int = 4
REAL_KV_SOURCE_FIELDS_PER_ENTRY: int = 3
REAL_KV_SOURCE_FIELD_PAGE_SIZE: int = 0
REAL_KV_SOURCE_FIELD_NUM_BYTES_PER_TOKEN: int = 1
REAL_KV_SOURCE_FIELD_READ_BYTES: int = 2
REAL_KV_CHUNK_BYTES: int = 16
"""Real-KV bytes are folded 16 bytes at a time (two little-endian uint64 words); PARTIAL folds one chunk."""

# --- launch shapes (SGLang's; kvcanary's kernels may differ, these are recorded for comparison) --------------
PLAN_BS_BLOCK_SIZE: int = 4096
"""At most this many batch rows per plan launch (SGLang's ``_PLAN_BS_BLOCK_SIZE``)."""
_PLAN_BS_BLOCK_SIZE: int = PLAN_BS_BLOCK_SIZE
PLAN_OFFSETS_SCRATCH_LEN: int = PLAN_BS_BLOCK_SIZE + 1
SCATTER_COL_BLOCK: int = 1024
_SCATTER_COL_BLOCK: int = SCATTER_COL_BLOCK
VERIFY_BLOCK_SIZE: int = 512
PERSISTENT_BLOCKS: int = 64
WRITE_BLOCK_SIZE: int = 1
PLAN_ENTRIES_BLOCK_SIZE: int = 128
PLAN_ENTRIES_BLOCKS_PER_SM: int = 8

# --- kvcanary's own -----------------------------------------------------------------------------------------
INVALID_SLOT: int = -(2**63)
"""Slot index the plan writes where it cannot name a real slot (a ``req_to_token`` read outside the tensor,
or a full→SWA translation outside the LUT), instead of a clamped, valid-looking slot. As a verify entry's
slot or predecessor, or as a write seed, it is reported as INDEX_OUT_OF_RANGE (every other negative
predecessor or seed still means "chain head"). As an ``out_cache_loc`` it is negative like any skipped
token: write skips it without a row and without advancing the chain, on every backend."""

ZERO_SLOT_MARK: int = INVALID_SLOT + 1
"""Slot index the plan writes, with the ZERO_SLOT_IN_LIVE_RANGE extension on, for an entry whose
``req_to_token`` value is 0 (the padding slot) inside a live request's verified range. Verify with the same
extension reports it as ZERO_SLOT_IN_LIVE_RANGE (slot 0, the entry's position); it never appears otherwise."""

SLOT_OWNER_FREE: int = -1
"""Value of a free slot in the owner map of the WRITE_SLOT_OWNER_MISMATCH extension. Every other negative value
marks a slot held read-only (the prefix cache, or a block shared by several requests); a value >= 0 is the
``req_to_token`` row of the request that holds the slot."""

NUM_LAUNCH_TAGS: int = 12


class FailReason(IntFlag):
    """Why a record failed; the bits are SGLang's (0-5) plus kvcanary's INDEX_OUT_OF_RANGE (8).

    Bits 6, 7 and 9 are kvcanary's opt-in extension checks (:class:`kvcanary.Extensions`): they never appear
    with the extensions off.
    """

    VERIFY_CHAIN_HASH_MISMATCH = 1 << 0
    VERIFY_POSITION_MISMATCH = 1 << 1
    VERIFY_REAL_KV_HASH_MISMATCH = 1 << 2
    WRITE_TOKEN_MISMATCH = 1 << 3
    WRITE_POSITION_MISMATCH = 1 << 4
    VERIFY_TOKEN_MISMATCH = 1 << 5
    ZERO_SLOT_IN_LIVE_RANGE = 1 << 6
    WRITE_SLOT_MISMATCH = 1 << 7
    INDEX_OUT_OF_RANGE = 1 << 8
    WRITE_SLOT_OWNER_MISMATCH = 1 << 9

    @property
    def label(self) -> str:
        """SGLang's log label of a single bit: ``verify_chain_hash``, ``write_position``, ..."""
        name = self.name or f"bits_{int(self)}"
        return name.lower().removesuffix("_mismatch")

    def labels(self) -> list[str]:
        """Labels of every bit set, lowest bit first."""
        return [bit.label for bit in FailReason if bit & self]


class RealKvHashMode(IntEnum):
    """How much of each slot's real K/V bytes the fingerprint covers."""

    NONE = 0
    PARTIAL = 1
    ALL = 2


class CanaryLaunchTag(IntEnum):
    """Unique tag per (head | tail | sweep) x (K | V) x (FULL | SWA) launch."""

    HEAD_K_FULL = 0
    HEAD_V_FULL = 1
    TAIL_K_FULL = 2
    TAIL_V_FULL = 3
    SWEEP_K_FULL = 4
    SWEEP_V_FULL = 5
    HEAD_K_SWA = 6
    HEAD_V_SWA = 7
    TAIL_K_SWA = 8
    TAIL_V_SWA = 9
    SWEEP_K_SWA = 10
    SWEEP_V_SWA = 11

    @property
    def is_sweep(self) -> bool:
        return self.name.startswith("SWEEP")


class PoolKind(IntEnum):
    FULL = 0
    SWA = 1


class CanaryMode(str, Enum):
    """What the host does with violations: nothing, log them, or raise."""

    NONE = "none"
    LOG = "log"
    RAISE = "raise"
