"""The wire format: constants, enums, hashes (pinned vectors) and the real-KV fold."""

from __future__ import annotations

import json
import random
from pathlib import Path

import torch

import kvcanary as kc
from kvcanary import consts
from kvcanary.hashing import chain_prev_hashes, fold_real_kv_bytes, real_kv_hash, to_int64, to_uint64
from kvcanary_backends.torch_ref import _hash

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def test_constants_have_reference_values() -> None:
    assert consts.CANARY_CHAIN_ANCHOR == 0xC0FFEE1234567890
    assert (consts.REQ_POOL_IDX_PADDING, consts.TOKEN_TO_KV_SLOT_PADDING) == (0, 0)
    assert consts.CANARY_FIELDS_PER_SLOT == 4 and consts.CANARY_SLOT_BYTES == 32
    assert (consts.CANARY_FIELD_TOKEN, consts.CANARY_FIELD_POSITION, consts.CANARY_FIELD_PREV_HASH,
            consts.CANARY_FIELD_REAL_KV_HASH) == (0, 1, 2, 3)
    assert consts.VIOLATION_FIELDS == 8
    assert list(range(8)) == [consts.VIOLATION_FIELD_KERNEL_KIND, consts.VIOLATION_FIELD_SLOT_IDX, consts.VIOLATION_FIELD_POSITION,
            consts.VIOLATION_FIELD_STORED_TOKEN, consts.VIOLATION_FIELD_EXPECTED_TOKEN,
            consts.VIOLATION_FIELD_STORED_CHAIN_HASH, consts.VIOLATION_FIELD_EXPECTED_AUX,
            consts.VIOLATION_FIELD_FAIL_REASON_BITS]
    assert consts.MAX_REAL_KV_SOURCES == 4 and consts.REAL_KV_SOURCE_FIELDS_PER_ENTRY == 3
    assert consts._PLAN_BS_BLOCK_SIZE == 4096 and consts._SCATTER_COL_BLOCK == 1024
    assert (consts.VERIFY_BLOCK_SIZE, consts.PERSISTENT_BLOCKS, consts.WRITE_BLOCK_SIZE) == (512, 64, 1)
    assert consts.INVALID_SLOT == -(2**63)


def test_enums() -> None:
    assert [int(b) for b in kc.FailReason] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    assert kc.FailReason.ZERO_SLOT_IN_LIVE_RANGE.label == "zero_slot_in_live_range"
    assert kc.FailReason.WRITE_SLOT_MISMATCH.label == "write_slot"
    assert consts.ZERO_SLOT_MARK == consts.INVALID_SLOT + 1
    assert kc.FailReason.VERIFY_CHAIN_HASH_MISMATCH.label == "verify_chain_hash"
    assert (kc.FailReason.WRITE_POSITION_MISMATCH | kc.FailReason.VERIFY_TOKEN_MISMATCH).labels() == [
        "write_position", "verify_token"]
    assert kc.FailReason.INDEX_OUT_OF_RANGE.label == "index_out_of_range"
    assert kc.FailReason.WRITE_SLOT_OWNER_MISMATCH.label == "write_slot_owner"
    assert consts.SLOT_OWNER_FREE == -1
    assert [t.name for t in kc.CanaryLaunchTag] == [
        "HEAD_K_FULL", "HEAD_V_FULL", "TAIL_K_FULL", "TAIL_V_FULL", "SWEEP_K_FULL", "SWEEP_V_FULL",
        "HEAD_K_SWA", "HEAD_V_SWA", "TAIL_K_SWA", "TAIL_V_SWA", "SWEEP_K_SWA", "SWEEP_V_SWA"]
    assert [int(t) for t in kc.CanaryLaunchTag] == list(range(12))
    assert [(m.name, int(m)) for m in kc.RealKvHashMode] == [("NONE", 0), ("PARTIAL", 1), ("ALL", 2)]
    assert [m.value for m in kc.CanaryMode] == ["none", "log", "raise"]
    assert [int(k) for k in kc.PoolKind] == [0, 1]


PINS = {
    0x9E3779B97F4A7C15: 0xE220A8397B1DCDAF,
    0x0000000000000001: 0x5692161D100B05E5,
    0xDEADBEEFCAFEBABE: 0x7AD6664F09FFE52C,
    0xFFFFFFFFFFFFFFFF: 0xB4D055FCF2CBBD7B,
    0x8000000000000000: 0x25C26EA579CEA98A,
    0xC0FFEE1234567890: 0xDE7FAE23A9A1B716,
}


def test_splitmix64_pins() -> None:
    for x, y in PINS.items():
        assert kc.splitmix64(x) == y
        assert kc.splitmix64(to_int64(x)) == y  # signed inputs reinterpret their bits
    assert kc.splitmix64(0) == 0 and kc.splitmix64_mix3(0, 0, 0) == 0  # the zero fixed point


def test_golden_hash_pins() -> None:
    data = json.loads((GOLDEN / "hash_pins.json").read_text())["cases"][0]
    for x, y in zip(data["inputs"]["splitmix64"], data["outputs"]["splitmix64"], strict=True):
        assert kc.splitmix64(x) == y
    for (a, b, c), y in zip(data["inputs"]["splitmix64_mix3"], data["outputs"]["splitmix64_mix3"], strict=True):
        assert kc.splitmix64_mix3(a, b, c) == y


def test_tensor_hash_matches_python_ints() -> None:
    rng = random.Random()
    xs = [rng.getrandbits(64) for _ in range(500)] + list(PINS)
    t = torch.tensor([to_int64(x) for x in xs], dtype=torch.int64)
    assert [to_uint64(v) for v in _hash.splitmix64(t).tolist()] == [kc.splitmix64(x) for x in xs]
    a, b, c = (torch.tensor([to_int64(rng.getrandbits(64)) for _ in range(300)]) for _ in range(3))
    got = _hash.mix3(a, b, c).tolist()
    assert [to_uint64(v) for v in got] == [kc.splitmix64_mix3(x, y, z) for x, y, z in
                                          zip(a.tolist(), b.tolist(), c.tolist(), strict=True)]


_M1, _M2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB  # the finalizer's multipliers (Stafford's mix13, as published)


def _unxorshift(y: int, k: int) -> int:
    """The ``x`` with ``x ^ (x >> k) == y`` (64-bit)."""
    x = y
    for _ in range(64 // k + 1):
        x = y ^ (x >> k)
    return x


def _unsplitmix64(y: int) -> int:
    """The inverse of the bare finalizer, step by step from its definition (mod 2**64)."""
    mask = 2**64 - 1
    y = _unxorshift(y, 31)
    y = _unxorshift((y * pow(_M2, -1, 2**64)) & mask, 27)
    return _unxorshift((y * pow(_M1, -1, 2**64)) & mask, 30)


def test_splitmix64_is_the_published_finalizer_and_inverts() -> None:
    """Undoing each published step recovers the input: the constants and shifts are the finalizer's, and it is
    a bijection of 64-bit words (distinct token/position/hash words never collide in one step)."""
    rng = random.Random()
    for x in [rng.getrandbits(64) for _ in range(500)] + list(PINS):
        assert _unsplitmix64(kc.splitmix64(x)) == x
        assert kc.splitmix64(x + 2**64) == kc.splitmix64(x - 2**64) == kc.splitmix64(x)  # words mod 2**64


def test_splitmix64_avalanches() -> None:
    """One flipped input bit flips about half the output bits, and every output bit about half the time: a
    one-bit corruption of a token, position or hash changes the chain hash beyond recognition."""
    rng = random.Random()
    trials = 4000
    per_bit = [0] * 64
    total = 0
    for _ in range(trials):
        x = rng.getrandbits(64)
        diff = kc.splitmix64(x) ^ kc.splitmix64(x ^ (1 << rng.randrange(64)))
        total += diff.bit_count()
        for b in range(64):
            per_bit[b] += diff >> b & 1
    assert 31 < total / trials < 33
    assert all(0.43 < n / trials < 0.57 for n in per_bit), per_bit


def test_chain_vectors() -> None:
    assert [hex(h) for h in chain_prev_hashes([11, 22, 33], [0, 1, 2])] == [
        "0xde7fae23a9a1b716", "0x89cd2abfbebc0649", "0x5782ffc5b5d6409b"]
    h = chain_prev_hashes([11, 22, 33], [0, 1, 2])[-1]
    assert kc.record_hash(h, 33, 2) == 0xF53E51CD772BB95C


def test_real_kv_fold_vectors() -> None:
    assert fold_real_kv_bytes(bytes(range(16))) == 0x447F1B95028CE131
    assert real_kv_hash([bytes(range(16))], kc.RealKvHashMode.PARTIAL) == 0xD6D75024DFD6C30C
    assert fold_real_kv_bytes(bytes(range(32))) == 0xFAB780417B7BE8AD
    assert real_kv_hash([bytes(range(32))], kc.RealKvHashMode.ALL) == 0xB44181DFE9420039
    assert real_kv_hash([bytes(range(32))], kc.RealKvHashMode.NONE) == 0
