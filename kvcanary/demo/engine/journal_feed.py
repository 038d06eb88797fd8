"""The demo engine's ownership changes, fed to its canary managers' slot journals.

:class:`JournalFeed` wraps the engine's request table, KV memory, radix cache and forward builder on the
instance (the engine's code is unchanged): a slot handed to a request (``reserve``, a PD transfer) is
ALLOCATED, a prefix hit SHARED, a radix insert CACHED, a radix eviction RELEASED by the cache, every return
to the free list FREED, a request leaving RELEASED, and each forward's writes WRITTEN: one event per request
row and run of consecutive positions in one block (:func:`write_runs`), the whole forward's in one
:meth:`~kvcanary.guard.SlotJournal.record_each` call per journal; an SWA slot's return to the SWA free list
is FREED in the SWA journal. The demo pool has one slot per block, so a prefill's run is one token per slot
(each also an ALLOCATED block); a decode row writes one run per step.

The journals are the managers' own (:attr:`CanaryManager.journal`, read at each event, so a journal the
manager replaces is followed): the evidence bundles read them, and the write-time owner check's map frees
and locks slots from their events.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from time import perf_counter
from typing import TYPE_CHECKING, Any

from kvcanary.demo.engine.requests import Request
from kvcanary.guard.journal import JournalKind, Owner, OwnerKind

if TYPE_CHECKING:
    from kvcanary.demo.engine.engine import Engine

CACHE_OWNER = Owner(OwnerKind.CACHE, "radix")


_OWNERS: dict[int, Owner] = {}
"""Request id -> its journal owner, made once (a frozen dataclass is slow to build on every step); bounded:
cleared when it grows past ``_MAX_OWNERS`` (it is only a cache)."""
_MAX_OWNERS = 1 << 16


def _req(r: Request) -> Owner:
    owner = _OWNERS.get(r.rid)
    if owner is None:
        if len(_OWNERS) >= _MAX_OWNERS:
            _OWNERS.clear()
        owner = _OWNERS[r.rid] = Owner(OwnerKind.REQUEST, str(r.rid))
    return owner


def write_runs(rows: Sequence[Any], block_size: int) -> tuple[list[int], list[Owner | None], list[int | None],
                                                             list[int | None]]:
    """One forward's writes as journal entries (blocks, owners, first and last positions): one entry per
    request row and run of consecutive positions written into one block (a decode row's token is one run; a
    prefill's tokens one run per block they fill). Padding rows and slot 0 are left out."""
    blocks: list[int] = []
    owners: list[Owner | None] = []
    firsts: list[int | None] = []
    lasts: list[int | None] = []
    for row in rows:
        if row.req is None:
            continue
        owner = _req(row.req)
        locs = row.locs
        if len(locs) == 1:  # a decode row: one token, one run
            if locs[0] > 0:
                blocks.append(locs[0] // block_size)
                owners.append(owner)
                firsts.append(row.positions[0])
                lasts.append(row.positions[0])
            continue
        run, last = -1, -2
        for pos, loc in zip(row.positions, locs, strict=True):
            if loc <= 0:
                run = -1
                continue
            b = loc // block_size
            if b == run and pos == last + 1:
                lasts[-1] = last = pos
                continue
            blocks.append(b)
            owners.append(owner)
            firsts.append(pos)
            lasts.append(pos)
            run, last = b, pos
    return blocks, owners, firsts, lasts


class JournalFeed:
    """Feeds ``engine``'s managers' journals from its ownership changes (installed once, by the engine)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.seconds = 0.0
        """Host time spent recording into the journals so far (what the feed adds to the engine's step)."""
        table, mem = engine.requests, engine.memory
        rec = self._record

        orig_reserve = table.reserve

        def reserve(req: Request, slots: list[int]) -> None:
            orig_reserve(req, slots)
            rec(JournalKind.ALLOCATED, slots, _req(req))

        orig_admit = table.admit

        def admit(req: Request, slots: list[int], node: Any) -> None:
            orig_admit(req, slots, node)
            rec(JournalKind.SHARED, slots, _req(req))

        orig_receive = table.receive_transfer

        def receive_transfer(req: Request, tokens: Sequence[int], slots: list[int]) -> None:
            orig_receive(req, tokens, slots)
            rec(JournalKind.ALLOCATED, slots, _req(req))

        def leaving(orig: Callable[..., None]) -> Callable[..., None]:
            def wrapped(req: Request, *args: Any, **kwargs: Any) -> None:
                held = mem.r2t.read(req.row, 0, req.alloc_len) if not req.row_released else []
                orig(req, *args, **kwargs)
                rec(JournalKind.RELEASED, held, _req(req))
            return wrapped

        orig_free = mem.free_slots

        def free_slots(slots: list[int]) -> None:
            orig_free(slots)
            rec(JournalKind.FREED, slots, None)

        table.reserve = reserve  # type: ignore[method-assign]
        table.admit = admit  # type: ignore[method-assign]
        table.receive_transfer = receive_transfer  # type: ignore[method-assign]
        table._retire = leaving(table._retire)  # type: ignore[method-assign]
        table._release = leaving(table._release)  # type: ignore[method-assign]
        mem.free_slots = free_slots  # type: ignore[method-assign]
        tree = mem.tree
        if tree is not None:
            orig_insert = tree.insert

            def insert(keys: list[Any], slots: list[int]) -> int:
                present = orig_insert(keys, slots)
                rec(JournalKind.CACHED, slots[present:], CACHE_OWNER)
                return present

            def evicted(slots: list[int]) -> None:
                rec(JournalKind.RELEASED, slots, CACHE_OWNER)
                orig_free(slots)
                rec(JournalKind.FREED, slots, None)

            tree.insert = insert  # type: ignore[method-assign]
            tree._on_free = evicted
        swa = mem.swa
        if swa is not None:
            swa_alloc = swa.allocator
            orig_swa_free = swa_alloc.free

            def swa_free(indices: Iterable[int]) -> None:
                freed = list(indices)
                orig_swa_free(freed)
                rec(JournalKind.FREED, freed, None, swa=True)

            swa_alloc.free = swa_free  # type: ignore[method-assign]
        runner = engine.runner
        orig_build = runner.build

        def build(rows: list[Any], **kwargs: Any) -> Any:
            managers = engine.managers
            if managers:
                t0 = perf_counter()
                sizes: dict[int, tuple[list[int], list[Owner | None], list[int | None], list[int | None]]] = {}
                for m in managers:
                    j = m.journal
                    runs = sizes.get(j.block_size)
                    if runs is None:
                        runs = sizes[j.block_size] = write_runs(rows, j.block_size)
                    if runs[0]:
                        j.record_each(engine.step_index, JournalKind.WRITTEN, *runs)
                self.seconds += perf_counter() - t0
            return orig_build(rows, **kwargs)

        runner.build = build  # type: ignore[method-assign]

    def _record(self, kind: JournalKind, slots: Sequence[int], owner: Owner | None, *, swa: bool = False) -> None:
        t0 = perf_counter()
        blocks = [s for s in slots if s > 0]
        if blocks:
            for m in self.engine.managers:
                (m.swa_journal if swa else m.journal).record(self.engine.step_index, kind, blocks, owner)
        self.seconds += perf_counter() - t0
