"""A mirror of the engine's block tables as kvcanary's ``req_to_token`` rows, kept in sync every step.

Each request the engine schedules gets a row (row 0 stays padding); its row holds the physical index of
each of its tokens, computed from the engine's own ``block_table[request id]``. A row is rewritten (one
host-to-device copy) only when that request's block list changed: a new block, a prefix-shared block,
a de-duplicated block, or a corrupted entry. Rows of requests the engine dropped are recycled.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvcanary.integrations.transformers.layout import CacheLayout
from kvcanary.manager import SweepEntries


@dataclass(frozen=True)
class BlockInfo:
    """Where a complete block sits in its chain: the position of its first token and the slot before it."""

    first_position: int
    prev_slot: int


class RequestRows:
    """``request id -> row`` and the device ``req_to_token`` table the canary plans from."""

    def __init__(self, layout: CacheLayout, *, num_rows: int, max_len: int, device: torch.device) -> None:
        self.layout = layout
        self.num_rows = num_rows
        self.max_len = max_len
        self.device_table = torch.zeros(num_rows, max_len, dtype=torch.int32, device=device)
        self._host = torch.zeros(num_rows, max_len, dtype=torch.int32)
        self._free = list(range(num_rows - 1, 0, -1))
        self.row_of: dict[str, int] = {}
        self._blocks: dict[str, tuple[int, ...]] = {}
        self._complete: dict[str, int] = {}
        self.blocks_info: dict[int, BlockInfo] = {}
        page = layout.page
        self._offsets = torch.arange(page, dtype=torch.int32)

    def release_finished(self) -> None:
        """Recycle the rows of requests the engine no longer holds blocks for."""
        live = self.layout.block_table
        for rid in [r for r in self.row_of if r not in live]:
            self._free.append(self.row_of.pop(rid))
            self._blocks.pop(rid, None)
            self._complete.pop(rid, None)

    def sync(self, rid: str, written: int) -> int:
        """Bring ``rid``'s row up to date with the engine's block table; ``written`` is the number of its
        tokens in the cache once this forward is done. Returns the row."""
        row = self.row_of.get(rid)
        if row is None:
            if not self._free:
                raise RuntimeError(f"kv-canary: more than {self.num_rows - 1} requests hold KV blocks at once; "
                                   "raise attach_canaries(max_requests=...)")
            row = self._free.pop()
            self.row_of[rid] = row
        blocks = tuple(self.layout.block_table.get(rid, ()))
        page = self.layout.page
        if written > self.max_len:
            raise RuntimeError(f"kv-canary: request {rid} reached {written} tokens, more than max_context_len="
                               f"{self.max_len}; raise attach_canaries(max_context_len=...)")
        start = self._complete.get(rid, 0)
        if blocks != self._blocks.get(rid):
            self._blocks[rid] = blocks
            start = 0
            n = min(len(blocks) * page, self.max_len)
            if blocks:
                b = torch.tensor(blocks, dtype=torch.int32) * self.layout.stride
                full = (b[:, None] + self._offsets[None, :]).reshape(-1)
                self._host[row, :n] = full[:n]
            self.device_table[row, :n].copy_(self._host[row, :n], non_blocking=True)
        complete = min(written // page, len(blocks))
        stride = self.layout.stride
        for k in range(start, complete):  # the latest holder's view wins (blocks get reused)
            self.blocks_info[blocks[k]] = BlockInfo(k * page, blocks[k - 1] * stride + page - 1 if k else -1)
        self._complete[rid] = complete
        return row

    def row_tensor(self, rid: str) -> torch.Tensor:
        """``rid``'s synced row on the host (int32, physical indices by position)."""
        return self._host[self.row_of[rid]]

    def slots(self, rid: str, start: int, end: int) -> list[int]:
        """Physical indices of ``rid``'s tokens ``[start, end)`` (from its synced block list)."""
        blocks, page, stride = self._blocks[rid], self.layout.page, self.layout.stride
        if end - start == 1:  # decode: one token
            return [blocks[start // page] * stride + start % page]
        return self._host[self.row_of[rid], start:end].tolist()

    def shared_blocks(self) -> set[int]:
        """Blocks held by two or more live requests (prefix sharing)."""
        seen: set[int] = set()
        shared: set[int] = set()
        for blocks in self._blocks.values():
            for b in blocks:
                (shared if b in seen else seen).add(b)
        return shared

    def owners(self, block: int) -> list[str]:
        """Live requests whose block list holds ``block``."""
        return [rid for rid, blocks in self._blocks.items() if block in blocks]

    def sweep_entries(self, blocks: set[int]) -> SweepEntries:
        """One entry per token of each complete, known block of ``blocks``, each block's tokens in order
        (built with tensor ops: a sweep covers every cached block, tens of thousands of tokens)."""
        known = [(b, info) for b in sorted(blocks) if (info := self.blocks_info.get(b)) is not None]
        page = self.layout.page
        offsets = torch.arange(page, dtype=torch.int64)
        ids = torch.tensor([b for b, _ in known], dtype=torch.int64)
        firsts = torch.tensor([i.first_position for _, i in known], dtype=torch.int64)
        heads = torch.tensor([i.prev_slot for _, i in known], dtype=torch.int64)
        slots = (ids * self.layout.stride)[:, None] + offsets  # CacheLayout.slot(block, offset)
        prevs = slots - 1
        prevs[:, 0] = heads
        return SweepEntries(slots.reshape(-1), (firsts[:, None] + offsets).reshape(-1), prevs.reshape(-1))
