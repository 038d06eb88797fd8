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
        fast = StepStats.from_header(header, snapshot_step=snap_step, step=step, sweep_passes=3, tags=tags,
                                     ring_capacity=16, watchdog=watchdog, watchdog_error=err)
        ref = StepStats.from_snapshot(HostSnapshot(snap_step, wi, (), kernel, slot, skipped), step=step,
                                      sweep_passes=3, tags=tags, ring_capacity=16, watchdog=watchdog,
                                      watchdog_error=err)
        assert fast == ref and hash(fast) == hash(ref) and repr(fast) == repr(ref)
        assert dataclasses.asdict(fast) == dataclasses.asdict(ref) and type(fast) is StepStats
        assert fast.launch_tags_active == sum(kernel[t] > 0 for t in tags) and fast.line() == ref.line()
        assert dataclasses.replace(fast, step=step + 1).step == step + 1
        assert isinstance(fast.kernel_run_counters, tuple) and isinstance(fast.slot_run_counters, tuple)
