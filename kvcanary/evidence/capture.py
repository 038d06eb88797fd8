"""BundleSink: on the first violation of each slot, capture the evidence and write one bundle, off the step.

``on_violations`` runs on the host when a step's read-back holds new rows. For each slot it has not
bundled yet (at most ``limits.max_bundles``) it copies, with device operations only (no value is read
back to the host there): the slot's record in every buffer a row names, the record its chain link came
from (found by hashing the buffer, see :mod:`kvcanary.evidence.hashes`), the real-KV words its
fingerprint covers and, for a sliding-window row, the first full slots the group's translation table maps
to it. It copies the host facts that change later too: the owners' descriptions, and at the step's end
(:meth:`BundleSink.on_step`, still the step's thread) the slot's journal history, with the sliding-window
row's full slots (the journal's key) read from the capture's copy there, one small read. A background
thread turns the copies into a bundle (attribution, replay plan, JSON and safetensors) and writes it;
:meth:`BundleSink.flush` waits for it, and at interpreter exit the bundles still queued get
:data:`EXIT_FLUSH_SECONDS` to be written. It never reads the live journal, which the engine's thread goes on
recording into, and never writes over a bundle already in ``out_dir`` (another sink's, say).
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import os
import queue
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from kvcanary.constructors.evidence import validate_bundle_limits
from kvcanary.consts import CanaryLaunchTag, FailReason, PoolKind, RealKvHashMode
from kvcanary.evidence.assemble import Captured, RowCapture, SourceCapture, assemble
from kvcanary.evidence.describe import RequestDescriber, RequestView
from kvcanary.evidence.format import write_bundle
from kvcanary.evidence.hashes import find_link
from kvcanary.evidence.install import FolderTaken
from kvcanary.guard.decision import GuardDecision
from kvcanary.guard.journal import JournalEvent, OwnerKind, SlotJournal
from kvcanary.manager.reporter import ViolationEvent
from kvcanary.manager.stats import StepStats

if TYPE_CHECKING:
    from kvcanary.manager.endpoints import Endpoint
    from kvcanary.manager.manager import CanaryManager

EXIT_FLUSH_SECONDS = 10.0
"""How long interpreter exit waits for a sink's queued bundles (the writer is a daemon thread)."""
MAX_NAME_SUFFIX = 64
"""Collisions a bundle's folder name may meet (``-2``, ``-3``, ...) before the bundle lands in ``errors``."""
_WRITE_BITS = int(FailReason.WRITE_POSITION_MISMATCH | FailReason.WRITE_TOKEN_MISMATCH
                  | FailReason.WRITE_SLOT_MISMATCH | FailReason.WRITE_SLOT_OWNER_MISMATCH)


@dataclass(frozen=True)
class BundleLimits:
    """At most ``max_bundles`` bundles per sink, ``max_rows`` rows and ``max_bytes`` of real-KV bytes each."""

    max_bundles: int = 16
    max_rows: int = 64
    max_bytes: int = 1 << 20

    def __post_init__(self) -> None:
        validate_bundle_limits(self)  # the rules: kvcanary/constructors/evidence.py (KVC-X codes)


def _check_name(name: object) -> None:
    """``name`` starts each bundle's folder name (``out_dir/<name>-full-slot<N>-step<M>``): one plain path
    component, so no bundle lands outside ``out_dir``. ValueError naming the argument otherwise (TypeError
    for a name that is not a str)."""
    if not isinstance(name, str):
        raise TypeError(f"kv-canary: BundleSink name must be a str (the start of each bundle's folder name), got "
                        f"{type(name).__name__}")
    seps = {"/", "\\", os.sep, os.altsep or "/"}
    if name in ("", ".", "..") or any(s in name for s in seps) or not name.isprintable():
        raise ValueError(f"kv-canary: BundleSink name must be one plain folder-name part (printable, no '/' or "
                         f"'\\', not '.' or '..'): bundles are written as out_dir/<name>-..., got {name!r}")


_KINDS: tuple[tuple[str, type | tuple[type, ...], str], ...] = (
    ("journal", SlotJournal, "a SlotJournal or None (None: the manager's journal)"),
    ("describer", RequestDescriber, "a RequestDescriber (describe_request, requests_holding, engine_version) or None"),
    ("limits", BundleLimits, "a BundleLimits or None (None: the defaults)"),
)


def _check_arguments(manager: object, out_dir: object, engine: object, background: object,
                     optional: dict[str, object]) -> None:
    """What ``BundleSink`` keeps, checked before it keeps anything: each a TypeError naming the argument (a
    wrong kind would otherwise fail at the first violation's capture, in the step, with no bundle written);
    an ``out_dir`` that exists and is not a folder is a ValueError (every bundle's write would fail)."""
    from kvcanary.manager.manager import CanaryManager  # at call time: the manager package imports no evidence

    if not isinstance(manager, CanaryManager):
        raise TypeError(f"kv-canary: BundleSink manager must be a CanaryManager (the one whose violations it "
                        f"bundles), got {type(manager).__name__}")
    if not isinstance(out_dir, (str, os.PathLike)):
        raise TypeError(f"kv-canary: BundleSink out_dir must be a path (str or Path), got {type(out_dir).__name__}")
    if Path(out_dir).exists() and not Path(out_dir).is_dir():
        raise ValueError(f"kv-canary: BundleSink out_dir must be a folder (bundles are folders written inside it) "
                         f"or a path not yet there, got the file {str(out_dir)!r}")
    for name, kind, what in _KINDS:
        value = optional[name]
        if value is not None and not isinstance(value, kind):
            raise TypeError(f"kv-canary: BundleSink {name} must be {what}, got {type(value).__name__}")
    if not isinstance(engine, str):
        raise TypeError(f"kv-canary: BundleSink engine must be a str (the engine's name and version a bundle "
                        f"records), got {type(engine).__name__}")
    if not isinstance(background, bool):
        raise TypeError(f"kv-canary: BundleSink background must be a bool, got {type(background).__name__}")


def _kind_of(tag: CanaryLaunchTag) -> PoolKind:
    return PoolKind.SWA if tag.name.endswith("_SWA") else PoolKind.FULL


@dataclass
class _Job:
    captured: Captured
    path: Path
    swa_full_slots: tuple[torch.Tensor, torch.Tensor] | None = None
    """A sliding-window slot's first full slots and whether each maps to it (device copies of the translation
    table's match, taken at the capture), resolved on the step's thread by :meth:`BundleSink._release`."""


class BundleSink:
    """A :class:`~kvcanary.guard.GuardSink` that writes one evidence bundle per violated slot into ``out_dir``.

    ``journal`` is the manager's (:attr:`CanaryManager.journal`, which the engine adapter feeds) unless one is
    given; ``describer`` is optional. Without a fed journal and a describer a bundle still holds the rows,
    records and KV bytes (and replays), but names no owners. Attach it with :meth:`CanaryManager.add_sink`.
    ``background=False`` writes at the step's end, in ``on_step`` itself. An argument of the wrong kind is a
    TypeError naming it, here rather than at the first violation."""

    def __init__(self, manager: CanaryManager, out_dir: Path | str, *, journal: SlotJournal | None = None,
                 describer: RequestDescriber | None = None, limits: BundleLimits | None = None,
                 engine: str = "unknown", background: bool = True, name: str = "bundle") -> None:
        _check_arguments(manager, out_dir, engine, background,
                         {"journal": journal, "describer": describer, "limits": limits})
        _check_name(name)
        self.manager = manager
        self.out_dir = Path(out_dir)
        self._journal = journal
        self.describer = describer
        self.limits = limits if limits is not None else BundleLimits()
        self.engine = engine
        self.name = name
        self.written: list[Path] = []
        self.errors: list[str] = []
        self._seen: set[tuple[PoolKind, int]] = set()
        self._endpoints: dict[CanaryLaunchTag, Endpoint] = {e.tag: e for e in manager.endpoints}
        self._luts = {g.kind: g.swa_index_lut for g in manager.groups}
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._background = background
        self._pending: list[_Job] = []
        self.steps_seen = 0
        self._exit_hook: Callable[[], None] | None = None

    @property
    def journal(self) -> SlotJournal:
        """The journal the bundles read: the one given, else the manager's current one."""
        return self._journal if self._journal is not None else self.manager.journal

    # -- GuardSink ---------------------------------------------------------------------------------------
    def on_step(self, stats: StepStats) -> None:
        """End of a step: complete the bundles captured during it (their journal now holds the whole step)
        and hand them to the writer. O(1) when nothing was captured."""
        self.steps_seen += 1
        if self._pending:
            self._release()

    def _release(self) -> None:
        """On the step's thread: take each captured slot's journal history now (the writer thread never
        reads the live journal), then hand the job to the writer. A job whose history cannot be taken is not
        written and lands in :attr:`errors`, as a failed write does; the step's other jobs go on."""
        jobs, self._pending = self._pending, []
        for job in jobs:
            try:
                job.captured = self._with_history(job)
            except Exception as exc:  # a bundle must never take the engine down, nor the step's other bundles
                self.errors.append(f"{job.path.name}: {type(exc).__name__}: {exc}")
                continue
            if self._background:
                self._ensure_thread()
                self._queue.put(job)
            else:
                self._write(job)

    def _with_history(self, job: _Job) -> Captured:
        """The capture with its full slots and the journal history of the first of them that has one (a
        full-pool slot is its own full slot; a sliding-window slot's are resolved from the capture's copy)."""
        cap = job.captured
        full_slots: tuple[int, ...] = (cap.slot,)
        if job.swa_full_slots is not None:
            idx, hit = job.swa_full_slots
            full_slots = tuple(int(i) for i, h in zip(idx.tolist(), hit.tolist(), strict=True) if h)
        journal = self.journal
        history: list[JournalEvent] = []
        for fs in full_slots:
            history = journal.history(fs)
            if history:
                break
        return dataclasses.replace(cap, full_slots=full_slots, history=tuple(history))

    def on_decision(self, decision: GuardDecision) -> None:
        return None

    def on_violations(self, events: Sequence[ViolationEvent]) -> None:
        """Capture a bundle for every slot seen here for the first time (within the limits)."""
        by_slot: dict[tuple[PoolKind, int], list[ViolationEvent]] = {}
        for e in events:
            tag = e.violation.tag
            if tag is None:
                continue
            key = (_kind_of(tag), e.violation.slot_idx)
            if key in self._seen:
                continue
            by_slot.setdefault(key, []).append(e)
        for key, evs in by_slot.items():
            if len(self._seen) >= self.limits.max_bundles:
                return
            self._seen.add(key)
            self._pending.append(self._capture(key[0], key[1], evs[: self.limits.max_rows], events))

    # -- capture (host side of the step: device copies and host facts only) ---------------------------------
    def _capture(self, kind: PoolKind, slot: int, events: list[ViolationEvent],
                 batch: Sequence[ViolationEvent]) -> _Job:
        rows: list[RowCapture] = []
        budget = self.limits.max_bytes
        for e in events:
            v = e.violation
            tag = v.tag
            assert tag is not None
            ep = self._endpoints.get(tag)
            if ep is None:
                rows.append(RowCapture(e, None, None, None, None, (), "no endpoint with this tag"))
                continue
            rec = ep.context.canary_buf.view(torch.int64)
            n = int(rec.shape[0])
            record = rec[slot, :4].clone() if 0 <= slot < n else None
            is_write = bool(v.fail_reason_bits & _WRITE_BITS)
            target = v.stored_chain_hash if is_write else v.expected_aux
            idx, found = find_link(rec[:, :4], target)
            link = rec[idx, :4].clone()
            sources: list[SourceCapture] = []
            mode = ep.context.real_kv_hash_mode
            # the fingerprint a verify row's replay folds (a write's replay and a HEAD buffer's read no KV)
            reads_kv = 0 <= slot < n and mode is not RealKvHashMode.NONE and not is_write and tag.name[:4] != "HEAD"
            srcs = ep.context.real_kv_sources if reads_kv else ()
            sizes = [16 if mode is RealKvHashMode.PARTIAL else src.read_bytes for src in srcs]
            if sum(sizes) > budget:  # without the bytes its fingerprint folds, the row cannot be replayed
                rows.append(RowCapture(e, record, link, idx, found, (), f"its {sum(sizes)} real-KV bytes are over "
                                       f"the bundle's byte limit (BundleLimits.max_bytes={self.limits.max_bytes})"))
                continue
            budget -= sum(sizes)
            for src, eff in zip(srcs, sizes, strict=True):
                words = src.tensor.view(torch.uint8).view(torch.int64)
                row = slot // src.page_size
                if row >= int(words.shape[0]):
                    sources.append(SourceCapture(eff, None))
                    continue
                base = row * int(words.shape[1]) + (slot % src.page_size) * (src.num_bytes_per_token // 8)
                sources.append(SourceCapture(eff, words.reshape(-1)[base : base + eff // 8].clone()))
            owner = None
            owner_map = self.manager.owners
            if (owner_map is not None and kind in self._luts
                    and v.fail_reason_bits & FailReason.WRITE_SLOT_OWNER_MISMATCH):
                table = owner_map.slot_owner(kind)
                if 0 <= slot < int(table.shape[0]):
                    owner = table[slot].clone()
            rows.append(RowCapture(e, record, link, idx, found, tuple(sources), None, owner))
        history: list[JournalEvent] = []
        swa_full_slots: tuple[torch.Tensor, torch.Tensor] | None = None
        lut = self._luts.get(kind)
        if kind is PoolKind.SWA and lut is not None:  # the first 4 matches, without nonzero's read-back
            match = (lut == slot).flatten()
            lead = torch.argsort(match.to(torch.int8), descending=True, stable=True)[:4]
            swa_full_slots = (lead.clone(), match[lead].clone())
        describer = self.describer
        views: dict[str, RequestView] = {}
        readers: list[str] = []
        if describer is not None and kind is PoolKind.FULL:
            readers = describer.requests_holding(slot)
        if kind is PoolKind.FULL:
            history = self.journal.history(slot)
        if describer is not None:
            owners = set(readers)
            for ev in history:
                if ev.owner is not None and ev.owner.kind is OwnerKind.REQUEST:
                    owners.add(ev.owner.id)
            for rid in sorted(owners):
                view = describer.describe_request(rid)
                if view is not None:
                    views[rid] = view
        engine = describer.engine_version() if describer is not None else self.engine
        cap = Captured(kind=kind, slot=slot, rows=tuple(rows), history=tuple(history), views=views,
                       readers=tuple(readers), full_slots=(slot,) if kind is PoolKind.FULL else (), engine=engine,
                       block_size=self.journal.block_size,
                       real_kv_mode=self.manager.config.real_kv_mode,
                       peers=tuple((e.violation.kernel_kind, e.violation.slot_idx, e.violation.stored_token,
                                    e.violation.position, e.violation.stored_chain_hash)
                                   for e in batch)[:4096],
                       created=datetime.now(timezone.utc).isoformat(timespec="seconds"))
        first = events[0]
        name = f"{self.name}-{kind.name.lower()}-slot{slot}-step{first.step_recorded}"
        return _Job(cap, self.out_dir / name, swa_full_slots)

    # -- writing (background thread) ------------------------------------------------------------------------
    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="kvcanary-bundles", daemon=True)
            self._thread.start()
            if self._exit_hook is None:  # a daemon thread dies at exit: give the queued bundles a bounded wait
                self._exit_hook = functools.partial(_flush_at_exit, weakref.ref(self))
                atexit.register(self._exit_hook)

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            try:
                if job is None:
                    return
                self._write(job)
            finally:
                self._queue.task_done()

    def _write(self, job: _Job) -> None:
        """Assemble and write ``job``'s bundle under its name, or ``<name>-2``, ``-3``, ... when another
        writer's bundle holds it (two ranks' sinks sharing ``out_dir`` with one ``name``): never over it."""
        try:
            bundle = assemble(job.captured)
            for k in range(1, MAX_NAME_SUFFIX + 1):
                path = job.path if k == 1 else job.path.with_name(f"{job.path.name}-{k}")
                try:
                    write_bundle(bundle, path, replace=False)
                except FolderTaken:
                    continue
                self.written.append(path)
                return
            self.errors.append(f"{job.path.name}: {MAX_NAME_SUFFIX} folders of that name are taken in "
                               f"{self.out_dir} (give each sink its own name or out_dir)")
        except Exception as exc:  # a bundle must never take the engine down: keep the reason
            self.errors.append(f"{job.path.name}: {type(exc).__name__}: {exc}")

    def flush(self) -> list[Path]:
        """Complete what was captured, wait until every bundle is written; the paths written so far."""
        if self._pending:
            self._release()
        if self._thread is not None and self._thread.is_alive():
            self._queue.join()
        return list(self.written)

    def close(self) -> list[Path]:
        """Flush and stop the writer thread."""
        out = self.flush()
        if self._thread is not None and self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        self._thread = None
        if self._exit_hook is not None:
            atexit.unregister(self._exit_hook)
            self._exit_hook = None
        return out

    def _drain(self, timeout: float) -> None:
        """Hand what was captured to the writer and wait at most ``timeout`` seconds for it to write."""
        if self._pending:
            self._release()
        thread = self._thread
        if thread is not None and thread.is_alive():
            self._queue.put(None)
            thread.join(timeout)


def _flush_at_exit(ref: weakref.ReferenceType[BundleSink]) -> None:
    """At interpreter exit: a live sink's queued bundles get :data:`EXIT_FLUSH_SECONDS` to be written."""
    sink = ref()
    if sink is not None:
        try:
            sink._drain(EXIT_FLUSH_SECONDS)
        except Exception:  # exit goes on whatever a bundle does
            return


def bundle_summary(meta: dict[str, Any]) -> str:
    """``slot 70 (FULL): use after free`` for listings."""
    return f"slot {meta['slot']} ({meta['group']}): {meta['attribution']['bug_class'].replace('_', ' ')}"
