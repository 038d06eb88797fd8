"""``kvcanary demo --bundles DIR``: one bundle per fault class, each the first violated slot of that fault's run.

Each run is the demo's (the same engine pair, workload and canary settings as ``kvcanary demo``) with the
engine feeding its managers' journals, a describer, and a :class:`BundleSink` limited to one bundle attached
to the manager as a sink; the manager's ring is read synchronously after every step and right after each
HEAD (so a bundle captures the very step that recorded its rows, and replays). The bundle is written as
``DIR/<engine>-<fault>``. :data:`EXPECTED_CLASS` is the bug class each injected fault should be
attributed to, which the tests assert bundle by bundle.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path

from kvcanary.demo.engine.faults import Fault
from kvcanary.evidence.attribution import BugClass
from kvcanary.evidence.pick import CANDIDATES, keep_replayable
from kvcanary.quiet_logs import quiet_logs

EXPECTED_CLASS: dict[Fault, BugClass] = {
    Fault.RADIX_UAF: BugClass.USE_AFTER_FREE,
    Fault.DOUBLE_ALLOC: BugClass.DOUBLE_ALLOCATION,
    Fault.WRONG_CACHE_LOC: BugClass.WRONG_CACHE_LOCATION,
    Fault.ROW_RECYCLED: BugClass.STALE_TRANSLATION,
    Fault.POSITION_OFF_BY_ONE: BugClass.POSITION_ERROR,
    Fault.PADDING_ROW_WRITE: BugClass.BYTE_CORRUPTION,
    Fault.STALE_SWA_TRANSLATION: BugClass.STALE_TRANSLATION,
    Fault.KV_FLIP_USED: BugClass.BYTE_CORRUPTION,
    Fault.KV_FLIP_CACHED: BugClass.BYTE_CORRUPTION,
    Fault.CORRUPTED_TRANSFER: BugClass.BYTE_CORRUPTION,
    Fault.PREFIX_MISS_ZERO_ROW: BugClass.STALE_TRANSLATION,
    Fault.DRAFT_PAST_ALLOCATION: BugClass.WRONG_CACHE_LOCATION,
    Fault.NULL_BLOCK_IN_WINDOW: BugClass.STALE_TRANSLATION,
}
"""The bug class a report should name for each demo-engine fault: the ownership faults by their journal
pattern, a padding row's stray write and the flips by what the record shows (intact record, changed KV
bytes), a recycled row and the zero-slot faults as a wrong slot mapping with clean ownership."""


def run_fault_bundle(fault: Fault, out_dir: Path, *, steps: int = 40, seed: int = 0, device: str = "cpu",
                     backend: str | None = None, owner_check: bool = False) -> Path | None:
    """Run the demo workload with ``fault`` armed and write its first bundle as ``out_dir/demo-<fault>``;
    the path, or None when nothing fired. ``owner_check`` turns the write-time owner check on too (the
    engine feeds the owner map from its journal), so an ownership fault's first rows are the owner rows."""
    from kvcanary.consts import RealKvHashMode
    from kvcanary.demo.engine import Engine, FaultInjector, demo_engine_config, drive, shared_prefix_workload
    from kvcanary.demo.engine.faults import EXTENSION_FAULTS
    from kvcanary.demo.run import DRAFT_TOKENS
    from kvcanary.evidence.capture import BundleLimits, BundleSink
    from kvcanary.evidence.demo_engine import DemoDescriber
    from kvcanary.extensions import Extensions
    from kvcanary.manager import CanaryConfig

    on = fault in EXTENSION_FAULTS
    ext = (Extensions(zero_slot_in_live_range=on, write_slot_mismatch=on, write_slot_owner_mismatch=owner_check)
           if on or owner_check else None)
    canary = CanaryConfig(real_kv_mode=RealKvHashMode.PARTIAL, enable_v=True, enable_verify_token=True,
                          sweep_interval=2, health_warmup_steps=10, health_every=10, stats_every=10,
                          backend=backend, extensions=ext)
    cfg = demo_engine_config(device)
    drafts = fault is Fault.DRAFT_PAST_ALLOCATION
    if drafts:
        cfg = dataclasses.replace(cfg, num_draft_tokens=DRAFT_TOKENS, swa_window=0)
    engine = Engine(cfg, canary=canary, faults=FaultInjector(fault), name="decode", journal=True)
    peer = Engine(cfg, canary=canary, model=engine.model, name="prefill")
    if not drafts:
        engine.attach_prefill_peer(peer)
    peer.warmup()
    engine.warmup()
    manager = engine.draft_canary if drafts else engine.canary
    assert manager is not None
    with tempfile.TemporaryDirectory(prefix="kvcanary-bundle-") as tmp:
        sink = BundleSink(manager, tmp, describer=DemoDescriber(engine),
                          limits=BundleLimits(max_bundles=CANDIDATES), name=f"demo-{fault.value}")
        manager.add_sink(sink)

        def read_now(*, during_step: bool) -> None:
            manager.flush(during_step=during_step)  # the manager hands new rows to its sinks

        # read right after each HEAD verify + write too, before later forwards of the step rewrite what it read
        manager.add_head_observer(lambda _batch: read_now(during_step=True))
        workload = shared_prefix_workload(seed=seed, vocab_size=cfg.model.vocab_size, steps=steps,
                                          remote_prefill=not drafts)
        with contextlib.suppress(Exception):  # a fault can break the engine itself: keep what was caught before
            drive(engine, workload, steps, on_step=lambda _step: read_now(during_step=False))
        engine.flush_canaries()
        return keep_replayable(sink, out_dir / f"demo-{fault.value}")


def write_demo_bundles(out_dir: Path, faults: Sequence[Fault] | None = None, **kwargs: object) -> list[Path]:
    """One bundle per fault in ``faults`` (every demo-engine fault by default). The manager's log is at ERROR
    meanwhile, as in the plain demo: the caller prints the table, not every violation row."""
    out: list[Path] = []
    with quiet_logs(("kvcanary.manager",), logging.ERROR):
        for f in faults if faults is not None else list(Fault):
            p = run_fault_bundle(f, out_dir, **kwargs)  # type: ignore[arg-type]
            if p is not None:
                out.append(p)
    return out
