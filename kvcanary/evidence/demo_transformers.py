"""``kvcanary demo --engine transformers --bundles DIR``: one bundle per transformers fault class.

:class:`TfEvidenceHook` is a step hook of the transformers integration (run after the fault hook, before
each forward). From the engine's block tables it feeds the manager's own journal (:attr:`CanaryManager.journal`,
sized to the cache's blocks: a block appended to a request's table is ALLOCATED to it, or SHARED when it lies
in the request's cached prefix; an entry rewritten in place is SHARED by the new holder; the blocks of a
request that left are RELEASED; a step's writes are WRITTEN, one entry per request and block it writes with
the positions it wrote there, the step's in one call), and reads the previous step's violations
synchronously (``manager.flush()``), which hands them to the manager's sinks: a :class:`BundleSink`
limited to one bundle, attached with ``manager.add_sink``. The describer reports each
request's positions and slots from its block table (transformers keeps no token list the hook can read: tokens are -1).
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kvcanary.evidence.attribution import BugClass
from kvcanary.evidence.capture import BundleLimits, BundleSink
from kvcanary.evidence.describe import RequestView
from kvcanary.evidence.pick import CANDIDATES, keep_replayable
from kvcanary.guard.journal import JournalKind, Owner, OwnerKind, SlotJournal
from kvcanary.integrations.transformers.fault_kinds import TfFault
from kvcanary.quiet_logs import TRANSFORMERS_LOGGERS, quiet_logs

EXPECTED_TF_CLASS: dict[TfFault, BugClass] = {
    TfFault.KV_FLIP_USED: BugClass.BYTE_CORRUPTION,
    TfFault.BLOCK_HANDED_TWICE: BugClass.DOUBLE_ALLOCATION,
    TfFault.BLOCK_TABLE_REDIRECT: BugClass.STALE_TRANSLATION,
    TfFault.POSITION_OFF_BY_ONE: BugClass.POSITION_ERROR,
    TfFault.STALE_SWA_BLOCK: BugClass.STALE_TRANSLATION,
}
"""The bug class a report should name for each transformers fault (a block table entry pointed at another
request's block is a wrong translation of that position: the ownership of both blocks is clean)."""

class TfEvidenceHook:
    """Journal feed, describer and sink feed for one transformers run (see the module docstring)."""

    def __init__(self, canary: Any, out_dir: Path, *, name: str) -> None:
        self.canary = canary
        self.out_dir = out_dir
        self.name = name
        self.sink: BundleSink | None = None
        self._tables: dict[str, list[int]] = {}
        self._layout: Any = None
        self._step = 0

    @property
    def journal(self) -> SlotJournal | None:
        """The manager's journal this hook feeds (None before the first step)."""
        managers = self.canary.managers
        return managers[0].journal if managers and self._layout is not None else None

    # -- the hook -------------------------------------------------------------------------------------------
    def __call__(self, view: Any) -> None:
        layout = view.layout
        self._layout = layout
        self._step = view.step
        manager = self.canary.managers[0]
        if manager.journal.block_size != int(layout.stride):  # the manager's journal, in the cache's blocks
            sw = layout.sliding
            manager.set_adapter(manager.adapter, block_size=int(layout.stride),
                                swa_block_size=int(sw.stride) if sw is not None else None)
        self.pump()
        j = manager.journal
        table: dict[str, list[int]] = layout.block_table
        live = {r.request_id for r in view.requests}
        for rid in [r for r in self._tables if r not in table]:
            j.record(view.step, JournalKind.RELEASED, self._tables.pop(rid), Owner(OwnerKind.REQUEST, rid))
        w_blocks: list[int] = []
        w_owners: list[Owner | None] = []
        w_first: list[int | None] = []
        w_last: list[int | None] = []
        for r in view.requests:
            owner = Owner(OwnerKind.REQUEST, r.request_id)
            blocks = list(table.get(r.request_id, []))
            old = self._tables.get(r.request_id, [])
            prefix_blocks = -(-r.past_length // int(layout.page)) if not old else 0
            for i, b in enumerate(blocks):
                if i < len(old) and old[i] == b:
                    continue
                kind = (JournalKind.SHARED if i < len(old) or i < prefix_blocks else JournalKind.ALLOCATED)
                j.record(view.step, kind, [b], owner)
            self._tables[r.request_id] = blocks
            page = int(layout.page)
            lo, hi = r.past_length, r.past_length + r.query_length
            for k in range(lo // page, min(-(-hi // page), len(blocks))):  # one run per block written
                w_blocks.append(blocks[k])
                w_owners.append(owner)
                w_first.append(max(lo, k * page))
                w_last.append(min(hi, (k + 1) * page) - 1)
        j.record_each(view.step, JournalKind.WRITTEN, w_blocks, w_owners, w_first, w_last)
        del live

    def pump(self) -> None:
        """Read the ring now and give the sink what is new (before the next forward, and at the end)."""
        managers = self.canary.managers
        if not managers:
            return
        manager = managers[0]
        if self.sink is None:
            self.sink = BundleSink(manager, self.out_dir, describer=self,
                                   limits=BundleLimits(max_bundles=CANDIDATES), name=self.name)
            manager.add_sink(self.sink)
        # hands the new rows to the sink, then the step's end: the journal holds every step up to the one
        # whose rows were just read, so the captures complete
        manager.flush()

    # -- RequestDescriber -------------------------------------------------------------------------------
    def describe_request(self, request_id: str) -> RequestView | None:
        layout = self._layout
        blocks = layout.block_table.get(request_id) if layout is not None else None
        if blocks is None:
            blocks = self._tables.get(request_id)
        if blocks is None:
            return None
        page = int(layout.page)
        slots = [int(layout.slot(b, o)) for b in blocks for o in range(page)]
        return RequestView(request_id, tuple([-1] * len(slots)), tuple(range(len(slots))), tuple(slots),
                           int(layout.stride), request_id in layout.block_table)

    def requests_holding(self, slot: int) -> list[str]:
        layout = self._layout
        if layout is None:
            return []
        block = slot // int(layout.stride)
        return [rid for rid, blocks in layout.block_table.items() if block in blocks]

    def engine_version(self) -> str:
        import transformers

        return f"transformers {transformers.__version__} continuous batching"


def run_tf_fault_bundle(fault: TfFault, out_dir: Path, *, seed: int = 0, max_new_tokens: int = 12,
                        device: str = "cpu", backend: str | None = None) -> Path | None:
    """Run the transformers demo's workload with ``fault`` armed; write its first bundle as
    ``out_dir/transformers-<fault>`` (None when nothing fired)."""
    from kvcanary.integrations.transformers.fault_kinds import NEEDS_SLIDING_WINDOW
    from kvcanary.integrations.transformers.faults import FaultHook
    from kvcanary.integrations.transformers.session import attach_canaries
    from kvcanary.integrations.transformers.workload import generate, shared_prefix_prompts, tiny_hybrid, tiny_llama

    model = (tiny_hybrid(seed=seed, device=device) if fault in NEEDS_SLIDING_WINDOW
             else tiny_llama(seed=seed, device=device))
    prompts = shared_prefix_prompts(seed=seed)
    with tempfile.TemporaryDirectory(prefix="kvcanary-bundle-") as tmp:
        evidence: TfEvidenceHook | None = None
        try:
            with attach_canaries(model, backend=backend) as canary:
                evidence = TfEvidenceHook(canary, Path(tmp), name=f"transformers-{fault.value}")
                canary.hooks.append(FaultHook(fault))
                canary.hooks.append(evidence)
                generate(model, prompts, max_new_tokens=max_new_tokens)
                evidence.pump()
        except RuntimeError:  # a fault may fail the batch: keep what was captured
            pass
        if evidence is None or evidence.sink is None:
            return None
        return keep_replayable(evidence.sink, out_dir / f"transformers-{fault.value}")


def write_tf_bundles(out_dir: Path, faults: Sequence[TfFault], **kwargs: Any) -> list[Path]:
    """One bundle per fault in ``faults``; the loggers the transformers demo quiets are quiet meanwhile."""
    out: list[Path] = []
    with quiet_logs(TRANSFORMERS_LOGGERS, logging.CRITICAL):  # a fault may fail requests: transformers logs those too
        for f in faults:
            p = run_tf_fault_bundle(f, out_dir, **kwargs)
            if p is not None:
                out.append(p)
    return out
