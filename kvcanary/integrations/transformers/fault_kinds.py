"""The fault classes injected into transformers' engine, by name (light: the CLI lists them in --help)."""

from __future__ import annotations

from enum import Enum


class TfFault(str, Enum):
    """The bug classes injected into transformers' engine."""

    KV_FLIP_USED = "kv_flip_used"
    BLOCK_HANDED_TWICE = "block_handed_twice"
    BLOCK_TABLE_REDIRECT = "block_table_redirect"
    POSITION_OFF_BY_ONE = "position_off_by_one"
    STALE_SWA_BLOCK = "stale_swa_block"


DESCRIPTIONS: dict[TfFault, str] = {
    TfFault.KV_FLIP_USED: "one bit of layer 0's K flips in a block a running request still reads",
    TfFault.BLOCK_HANDED_TWICE: "the allocator hands a block still referenced by a running request to the next "
    "request that needs a fresh block (a block freed too early)",
    TfFault.BLOCK_TABLE_REDIRECT: "one entry of a request's block table is pointed at another request's block",
    TfFault.POSITION_OFF_BY_ONE: "a decoding request's position id is one ahead in the step's model inputs",
    TfFault.STALE_SWA_BLOCK: "a request's sliding-window ring block is swapped for a ring block of another "
    "request, so its window attention reads stale KV (on a model with sliding-window layers)",
}

NEEDS_SLIDING_WINDOW = frozenset({TfFault.STALE_SWA_BLOCK})
"""Faults that need a model with a sliding-window group (the demo and tests use a hybrid one for them)."""
