"""A mirror of the engine's block tables as kvcanary's ``req_to_token`` rows, kept in sync every step.

Each request the engine schedules gets a row (row 0 stays padding); its row holds the physical index of
each of its tokens, computed from the engine's own ``block_table[request id]``. A row is rewritten (one
host-to-device copy) only when that request's block list changed: a new block (then only the new blocks'
part), a prefix-shared block, a de-duplicated block, or a corrupted entry. Rows of requests the engine
dropped are recycled.

The sweep's view is kept up to date from the same changes, so a due sweep costs no walk over the block
tables: how many live requests hold each block (a block held twice is shared), and, per complete block,
its first position and the slot before it in dense per-block tables that only the blocks completed since
the previous sweep touch.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from kvcanary.integrations.transformers.layout import CacheLayout
from kvcanary.manager import SweepEntries

_I64 = np.ndarray[Any, np.dtype[np.int64]]


@dataclass(frozen=True)
class BlockInfo:
    """Where a complete block sits in its chain: the position of its first token and the slot before it."""

    first_position: int
    prev_slot: int


@dataclass(frozen=True)
class _Quiet:
    """What the previous :meth:`RequestRows.sync_many` left: its requests, their rows and block lists, and per
    request the range ``[lo, hi)`` of written tokens within which its sync would change nothing."""

    epoch: int
    rids: list[str]
    rows: list[int]
    blocks: list[list[int]]
    lo: list[int]
    hi: list[int]


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
        self._blocks: dict[str, list[int]] = {}
        self._complete: dict[str, int] = {}
        self.blocks_info: dict[int, BlockInfo] = {}
        page = layout.page
        self._host_np = self._host.numpy()  # the same memory: the rows are written with numpy
        self._host_flat = self._host.view(-1)  # one slice per copied part of a row, not two
        self._device_flat = self.device_table.view(-1)
        self._offsets_np = np.arange(page, dtype=np.int32)
        self._offsets64: _I64 = np.arange(page, dtype=np.int64)
        self._holders: dict[int, int] = {}  # block -> how many live block lists hold it (duplicates counted)
        self._shared: set[int] = set()  # blocks with two or more holders
        self._info_dirty: dict[int, BlockInfo] = {}  # blocks_info written since the dense tables were
        self._first: _I64 = np.zeros(0, dtype=np.int64)  # block -> first position (dense, grown on demand)
        self._prev: _I64 = np.zeros(0, dtype=np.int64)  # block -> the slot before it
        self._known: np.ndarray[Any, np.dtype[np.bool_]] = np.zeros(0, dtype=np.bool_)  # block -> in blocks_info
        self._version = 0  # bumped when the shared set or a block's entry changes
        self._entries_key: tuple[int, list[int]] | None = None
        self._entries: SweepEntries | None = None
        self._epoch = 0  # bumped by every sync and release: a recorded quiet step holds while it is unchanged
        self._quiet: _Quiet | None = None
        self.changes: list[tuple[str, list[int] | None]] | None = None
        """Set to a list to hear of block-list changes: ``(request id, its new block list)`` for each sync
        that found one (a new block, a shared or de-duplicated one), ``(request id, None)`` for each request
        released; the journal feed drains it each step (None: not kept)."""

    # -- holders (the shared set) ------------------------------------------------------------------------
    def _hold(self, blocks: list[int], delta: int) -> None:
        holders, shared = self._holders, self._shared
        for b in blocks:
            n = holders.get(b, 0) + delta
            if n:
                holders[b] = n
            else:
                del holders[b]
            if n >= 2:
                if b not in shared:
                    shared.add(b)
                    self._version += 1
            elif b in shared:
                shared.discard(b)
                self._version += 1

    def release_finished(self) -> None:
        """Recycle the rows of requests the engine no longer holds blocks for."""
        live = self.layout.block_table
        if self.row_of.keys() <= live.keys():  # the usual step: nobody left (one set test, no Python loop)
            return
        self._epoch += 1
        for rid in [r for r in self.row_of if r not in live]:
            if self.changes is not None:
                self.changes.append((rid, None))
            self._free.append(self.row_of.pop(rid))
            self._hold(self._blocks.pop(rid, []), -1)
            self._complete.pop(rid, None)

    def sync(self, rid: str, written: int, *, pending: list[tuple[int, int, int]] | None = None) -> int:
        """Bring ``rid``'s row up to date with the engine's block table; ``written`` is the number of its
        tokens in the cache once this forward is done. Returns the row. ``pending``: where the rewritten part of
        the host row goes, ``(row, start, end)``, for the caller to copy to the device (:meth:`_copy_out`); None:
        copied now."""
        self._epoch += 1
        row = self.row_of.get(rid)
        if row is None:
            if not self._free:
                raise RuntimeError(f"kv-canary: more than {self.num_rows - 1} requests hold KV blocks at once; "
                                   "raise attach_canaries(max_requests=...)")
            row = self._free.pop()
            self.row_of[rid] = row
        if written > self.max_len:
            raise RuntimeError(f"kv-canary: request {rid} reached {written} tokens, more than max_context_len="
                               f"{self.max_len}; raise attach_canaries(max_context_len=...)")
        blocks = self.layout.block_table.get(rid) or []
        page = self.layout.page
        start = self._complete.get(rid, 0)
        old = self._blocks.get(rid)
        if old is None or blocks != old:
            blocks = list(blocks)  # a copy: the engine appends to its own list in place
            self._blocks[rid] = blocks
            if self.changes is not None:
                self.changes.append((rid, blocks))
            kept = len(old) if old is not None and len(blocks) > len(old) and blocks[: len(old)] == old else 0
            if old is not None:
                self._hold(old[kept:], -1)  # appended blocks: the old ones stay held
            self._hold(blocks[kept:], 1)
            start = 0
            lo, n = min(kept * page, self.max_len), min(len(blocks) * page, self.max_len)
            if n > lo:  # the row's part past the blocks it kept (all of it when the list changed otherwise)
                b = np.asarray(blocks[kept:], dtype=np.int32) * np.int32(self.layout.stride)
                self._host_np[row, lo:n] = (b[:, None] + self._offsets_np[None, :]).reshape(-1)[: n - lo]
                if pending is None:
                    self._copy_out([(row, lo, n)])
                else:
                    pending.append((row, lo, n))
        else:
            blocks = old
        complete = min(written // page, len(blocks))
        if complete > start:
            stride = self.layout.stride
            for k in range(start, complete):  # the latest holder's view wins (blocks get reused)
                info = BlockInfo(k * page, blocks[k - 1] * stride + page - 1 if k else -1)
                self.blocks_info[blocks[k]] = info
                self._info_dirty[blocks[k]] = info
            self._version += 1
        self._complete[rid] = complete
        return row

    def sync_many(self, rids: list[str], written: list[int]) -> list[int]:
        """:meth:`sync` of each request, in order; returns the rows (a new list). A request whose block list and
        complete blocks did not change since its last sync (most of a decode step's) costs a few lookups; a step
        of the previous call's requests in which none did (a quiet decode step) costs no loop in Python: the
        ids, the engine's block lists and each request's range of written tokens are compared as wholes."""
        table = self.layout.block_table
        q = self._quiet
        if (q is not None and q.epoch == self._epoch and rids == q.rids and all(map(operator.le, q.lo, written))
                and all(map(operator.lt, written, q.hi)) and list(map(table.get, rids)) == q.blocks):
            return list(q.rows)
        page, max_len = self.layout.page, self.max_len
        row_of, held, complete = self.row_of, self._blocks, self._complete
        out = []
        pending: list[tuple[int, int, int]] = []
        try:
            for rid, w in zip(rids, written, strict=True):
                row = row_of.get(rid)
                old = held.get(rid)
                if (row is None or old is None or w > max_len or (table.get(rid) or []) != old
                        or min(w // page, len(old)) != complete.get(rid, 0)):
                    row = self.sync(rid, w, pending=pending)
                out.append(row)
        finally:  # the rows rewritten so far reach the device, whatever a later request raised
            if pending:
                self._copy_out(pending)
        self._quiet = self._quiet_after(list(rids), list(out))  # copies: the caller may extend its lists
        return out

    @property
    def synced(self) -> object:
        """The record of the latest :meth:`sync_many`: the same object while the rows it returns stay the same
        (a later call that finds the same requests quiet keeps it), a new one otherwise (None before any)."""
        return self._quiet

    def _copy_out(self, parts: list[tuple[int, int, int]]) -> None:
        """Copy the rewritten parts ``(row, start, end)`` of the host table to the device table. One or two
        parts: one copy each. More (a step in which many requests crossed into a new block, or joined): one
        copy of the rectangle of rows and columns that holds them all, when it is at most four times their
        size (its other cells are equal on the host and the device already: every host write is copied), else
        one copy each."""
        if len(parts) > 2:
            r0 = min(p[0] for p in parts)
            r1 = max(p[0] for p in parts) + 1
            c0 = min(p[1] for p in parts)
            c1 = max(p[2] for p in parts)
            if (r1 - r0) * (c1 - c0) <= 4 * sum(e - s for _, s, e in parts):
                self.device_table[r0:r1, c0:c1].copy_(self._host[r0:r1, c0:c1], non_blocking=True)
                return
        width = self.max_len
        for row, lo, n in parts:
            at = row * width
            self._device_flat[at + lo : at + n].copy_(self._host_flat[at + lo : at + n], non_blocking=True)

    def _quiet_after(self, rids: list[str], rows: list[int]) -> _Quiet:
        """The record a later quiet step is checked against: per request, the written tokens ``[lo, hi)`` for
        which :meth:`sync_many`'s per-request test finds nothing to do (its complete blocks stay as they are,
        within ``max_len``)."""
        page, top = self.layout.page, self.max_len + 1
        blocks = [self._blocks[r] for r in rids]
        lo, hi = [], []
        for rid, bl in zip(rids, blocks, strict=True):
            c = self._complete.get(rid, 0)
            lo.append(c * page)
            hi.append(min((c + 1) * page, top) if c < len(bl) else top)
        return _Quiet(self._epoch, rids, rows, blocks, lo, hi)

    def locs(self, rows: list[int], past: list[int], query: list[int]) -> torch.Tensor:
        """Physical indices of each request's new tokens ``[past, past + query)``, flat in request order
        (int32, gathered from the synced rows with tensor ops)."""
        q = torch.tensor(query, dtype=torch.int64)
        row_of_token = torch.tensor(rows, dtype=torch.int64).repeat_interleave(q)
        shift = torch.tensor(past, dtype=torch.int64) - (torch.cumsum(q, 0) - q)
        pos = torch.arange(int(row_of_token.shape[0]), dtype=torch.int64) + shift.repeat_interleave(q)
        return self._host[row_of_token, pos]

    def host_array(self) -> np.ndarray[Any, np.dtype[np.int32]]:
        """The synced rows on the host as numpy, ``[row, position]`` (the same memory as the host table)."""
        table: np.ndarray[Any, np.dtype[np.int32]] = self._host_np
        return table

    def slots(self, rid: str, start: int, end: int) -> list[int]:
        """Physical indices of ``rid``'s tokens ``[start, end)`` (from its synced block list)."""
        blocks, page, stride = self._blocks[rid], self.layout.page, self.layout.stride
        if end - start == 1:  # decode: one token
            return [blocks[start // page] * stride + start % page]
        return self._host[self.row_of[rid], start:end].tolist()

    def shared_blocks(self) -> set[int]:
        """Blocks held by two or more live requests (prefix sharing)."""
        return set(self._shared)

    def owners(self, block: int) -> list[str]:
        """Live requests whose block list holds ``block``."""
        return [rid for rid, blocks in self._blocks.items() if block in blocks]

    def sweep_entries(self, blocks: set[int]) -> SweepEntries:
        """One entry per token of each complete, known block of ``blocks``, each block's tokens in order
        (built with array ops: a sweep covers every cached block, tens of thousands of tokens)."""
        known = [(b, info) for b in sorted(blocks) if (info := self.blocks_info.get(b)) is not None]
        ids = np.array([b for b, _ in known], dtype=np.int64)
        firsts = np.array([i.first_position for _, i in known], dtype=np.int64)
        heads = np.array([i.prev_slot for _, i in known], dtype=np.int64)
        return self._entries_of(ids, firsts, heads)

    def _entries_of(self, ids: _I64, firsts: _I64, heads: _I64) -> SweepEntries:
        """The entries of blocks ``ids`` (with numpy on the host: no torch op until the sweep's one copy)."""
        offsets = self._offsets64
        slots = (ids * self.layout.stride)[:, None] + offsets  # CacheLayout.slot(block, offset)
        prevs = slots - 1
        prevs[:, 0] = heads
        positions = (firsts[:, None] + offsets).reshape(-1)
        return SweepEntries(torch.from_numpy(slots.reshape(-1)), torch.from_numpy(positions),
                            torch.from_numpy(prevs.reshape(-1)))

    def due_entries(self, cached: list[int]) -> SweepEntries:
        """What :meth:`sweep_entries` returns for ``set(cached) | shared_blocks()``, from the state kept up to
        date by :meth:`sync`: the same entries in the same order, rebuilt only when the cached blocks, the
        shared set or a block's entry changed since the previous call (else the previous entries, the same
        object)."""
        key = (self._version, cached)
        if self._entries is not None and self._entries_key == key:
            return self._entries
        self._apply_dirty()
        size = int(self._known.shape[0])
        mask = np.zeros(size, dtype=np.bool_)
        for part in (cached, self._shared):
            mask[np.array([b for b in part if b < size] if size else [], dtype=np.int64)] = True
        ids = np.flatnonzero(mask & self._known)  # ascending: sorted(blocks)
        self._entries = self._entries_of(ids, self._first[ids], self._prev[ids])
        self._entries_key = key
        return self._entries

    def _apply_dirty(self) -> None:
        """Write the block entries recorded since the previous sweep into the dense tables."""
        dirty = self._info_dirty
        if not dirty:
            return
        top = max(dirty) + 1
        if top > self._known.shape[0]:
            grow = max(top, 2 * int(self._known.shape[0]))
            pad = grow - int(self._known.shape[0])
            self._first = np.concatenate([self._first, np.zeros(pad, dtype=np.int64)])
            self._prev = np.concatenate([self._prev, np.zeros(pad, dtype=np.int64)])
            self._known = np.concatenate([self._known, np.zeros(pad, dtype=np.bool_)])
        ids = np.array(list(dirty), dtype=np.int64)
        self._first[ids] = [i.first_position for i in dirty.values()]
        self._prev[ids] = [i.prev_slot for i in dirty.values()]
        self._known[ids] = True
        dirty.clear()
