"""splitmix64 and the chain link, on Python ints: the hash functions of the format, for hosts and tests.

All arithmetic is uint64 modulo 2**64. Inputs may be negative (int64 fields of the record): they are
reinterpreted as their two's-complement uint64, as SGLang does. Results are uint64; store them into int64
fields with :func:`to_int64`.
"""

from __future__ import annotations

from collections.abc import Iterable

from kvcanary.consts import CANARY_CHAIN_ANCHOR, REAL_KV_CHUNK_BYTES, RealKvHashMode

MASK64: int = (1 << 64) - 1


def to_uint64(value: int) -> int:
    """The uint64 with the same 64-bit pattern as ``value``."""
    return value & MASK64


def to_int64(value: int) -> int:
    """The int64 with the same 64-bit pattern as ``value`` (how hashes are stored in records)."""
    value &= MASK64
    return value - (1 << 64) if value >= (1 << 63) else value


def splitmix64(x: int) -> int:
    """The bare splitmix64 finalizer (no golden-ratio increment)."""
    x &= MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def splitmix64_mix3(a: int, b: int, c: int) -> int:
    """``splitmix64(splitmix64(splitmix64(a) ^ b) ^ c)``: the chain link of (prev_hash, token, position)."""
    h = splitmix64(a)
    h = splitmix64(h ^ (b & MASK64))
    return splitmix64(h ^ (c & MASK64))


ANCHOR_HASH: int = splitmix64(CANARY_CHAIN_ANCHOR)
"""The prev_hash a chain head stores: 0xDE7FAE23A9A1B716."""


def record_hash(prev_hash: int, token: int, position: int) -> int:
    """The hash a record hands to its successor: ``mix3(prev_hash, token, position)``."""
    return splitmix64_mix3(prev_hash, token, position)


def chain_prev_hashes(tokens: Iterable[int], positions: Iterable[int], seed: int = ANCHOR_HASH) -> list[int]:
    """The prev_hash each record of a chain stores, starting from ``seed`` (the anchor hash by default)."""
    out: list[int] = []
    running = seed & MASK64
    for token, position in zip(tokens, positions, strict=True):
        out.append(running)
        running = record_hash(running, token, position)
    return out


def fold_real_kv_bytes(data: bytes) -> int:
    """Fold one source's slot strip (a multiple of 16 bytes) into its per-source hash."""
    if len(data) % REAL_KV_CHUNK_BYTES:
        raise ValueError(f"real-KV strips are folded in 16-byte chunks, got {len(data)} bytes")
    h = 0
    for off in range(0, len(data), 8):
        h = splitmix64(h ^ int.from_bytes(data[off : off + 8], "little"))
    return h


def real_kv_hash(strips: Iterable[bytes], mode: RealKvHashMode) -> int:
    """The slot's real_kv_hash from each source's hashed bytes, in fold order (0 when mode is NONE).

    ``strips`` are the bytes each source contributes: the first 16 bytes of the slot's strip in PARTIAL
    mode, the first ``read_bytes`` in ALL mode.
    """
    if mode == RealKvHashMode.NONE:
        return 0
    acc = 0
    for strip in strips:
        acc = splitmix64(acc ^ fold_real_kv_bytes(strip))
    return acc
