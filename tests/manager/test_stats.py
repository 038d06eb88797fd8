"""The stats line's figures from the pump's header (the per-step path) are the ones the snapshot gives."""

from __future__ import annotations

import dataclasses
import random

from kvcanary.consts import NUM_LAUNCH_TAGS, CanaryLaunchTag
from kvcanary.manager.pump import HostSnapshot
from kvcanary.manager.stats import StepStats


def test_from_header_is_from_snapshot_field_for_field() -> None:
    rng = random.Random(11)
    tags = tuple(sorted(CanaryLaunchTag)[:6])
    for _ in range(50):
        kernel = tuple(rng.choice([0, 0, rng.randrange(1, 10**9)]) for _ in range(NUM_LAUNCH_TAGS))
        slot = tuple(rng.randrange(0, 10**12) for _ in range(NUM_LAUNCH_TAGS))
        wi, skipped = rng.randrange(0, 100), rng.randrange(0, 5)
        header = [wi, *kernel, *slot, skipped]
        step, snap_step = rng.randrange(1, 1000), rng.randrange(0, 1000)
        watchdog, err = rng.choice([("warmup", None), ("ok", None), ("failed", "kv-canary: stalled")])
        source = rng.randrange(0, 50)
        fast = StepStats.from_header(header, snapshot_step=snap_step, step=step, sweep_passes=3, tags=tags,
                                     ring_capacity=16, watchdog=watchdog, watchdog_error=err, source=source)
        ref = StepStats.from_snapshot(HostSnapshot(snap_step, wi, (), kernel, slot, skipped), step=step,
                                      sweep_passes=3, tags=tags, ring_capacity=16, watchdog=watchdog,
                                      watchdog_error=err, source=source)
        assert fast == ref and hash(fast) == hash(ref) and repr(fast) == repr(ref)
        assert dataclasses.asdict(fast) == dataclasses.asdict(ref) and type(fast) is StepStats
        assert fast.source == source
        assert fast.launch_tags_active == sum(kernel[t] > 0 for t in tags) and fast.line() == ref.line()
        assert dataclasses.replace(fast, step=step + 1).step == step + 1
        assert isinstance(fast.kernel_run_counters, tuple) and isinstance(fast.slot_run_counters, tuple)


def test_each_manager_stamps_its_stats_with_a_source_of_its_own() -> None:
    """Sinks tell one manager from the next by ``StepStats.source``, not by the step count (which may match)."""
    from tests.manager.world import make_world

    w1, w2 = make_world(), make_world()
    assert w1.manager.source_id > 0 and w2.manager.source_id > 0 and w1.manager.source_id != w2.manager.source_id
    s1, s2 = w1.manager.end_step(stats=True), w2.manager.end_step(stats=True)
    assert s1 is not None and s2 is not None and s1.step == s2.step == 0
    assert (s1.source, s2.source) == (w1.manager.source_id, w2.manager.source_id)
    assert s1 == s2 and hash(s1) == hash(s2)  # the same figures: the source is not compared
