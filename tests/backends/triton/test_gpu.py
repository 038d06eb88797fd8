"""GPU-only checks: CUDA-graph replay equals eager launches, launches never sync, sizes never recompile.

- A small engine-like step (plan → HEAD verify/write → TAIL verify/write, ``_engine.Engine``) is captured
  once and replayed for 100 steps with its inputs refilled in place; a twin engine runs the same steps
  eagerly, and a third runs them with torch_ref. After every step all three states must agree (rings as
  multisets).
- Eager launches run under ``torch.cuda.set_sync_debug_mode("error")``: any host sync raises.
- The two checks above run with each fast path of compiled variants: launched through cuda.core (``direct``: the
  capture records those launches; the run must have launched that way, no variant refused) and through
  Triton's own compiled launcher.
- Batch sizes and token counts change between calls of one endpoint (same buffers' layouts); the number of
  compiled variants of each kernel must not grow.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
import torch

from tests.backends.triton._engine import Engine, compare_states
from tests.backends.triton._support import LAUNCH_PATHS, assert_path_taken, use_launch_path

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

SEED = int(os.environ.get("KVCANARY_TEST_SEED", time.time_ns() % 2**32))


def _kernels() -> list[Any]:
    from kvcanary_backends.triton import plan, plan_entries, plan_offsets, scatter, verify, write

    return [verify._verify_kernel, write._write_kernel, plan._plan_kernel, plan_offsets._offsets_kernel,
            plan_entries._entries_kernel, scatter._scatter_kernel]


def compiled_variants(fn: Any) -> int:
    """Compiled specialisations of a jitted kernel, across Triton versions (``device_caches`` or ``cache``)."""
    caches = getattr(fn, "device_caches", None)
    if caches is not None:
        return sum(len(entry[0]) for entry in caches.values())
    cache = getattr(fn, "cache", None)
    if cache is not None:
        return sum(len(v) for v in cache.values())
    pytest.skip("this Triton version exposes no kernel cache")


@pytest.mark.parametrize("path", LAUNCH_PATHS)
def test_graph_replay_matches_eager_and_torch_ref(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    direct = use_launch_path(path, monkeypatch)
    kwargs: dict[str, Any] = {"bs": 8, "num_tokens": 48, "max_seq": 160, "num_slots": 2048}
    warm = Engine("cuda", seed=SEED + 1, **kwargs)
    for _ in range(3):  # compile every variant the step uses, on other buffers
        warm.prepare()
        warm.step("triton")
    graph_engine = Engine("cuda", seed=SEED, **kwargs)
    eager = Engine("cuda", seed=SEED, **kwargs)
    ref = Engine("cuda", seed=SEED, **kwargs)
    before = graph_engine.state()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        graph_engine.step("triton")
    torch.cuda.synchronize()
    assert not compare_states(graph_engine.state(), before), "capturing must not run the step"
    variants = [compiled_variants(k) for k in _kernels()]
    for step in range(100):
        for e in (graph_engine, eager, ref):
            e.prepare()
        graph.replay()
        eager.step("triton")
        ref.step("torch_ref")
        torch.cuda.synchronize()
        got, want = graph_engine.state(), eager.state()
        problems = compare_states(got, want)
        assert not problems, f"step {step}, graph vs eager (KVCANARY_TEST_SEED={SEED}): {problems}"
        problems = compare_states(want, ref.state())
        assert not problems, f"step {step}, triton vs torch_ref (KVCANARY_TEST_SEED={SEED}): {problems}"
    assert int(eager.write_index[0]) > 0, "the faults should have produced violations"
    assert [compiled_variants(k) for k in _kernels()] == variants, "replay steps must not compile"
    assert_path_taken(path, direct)


@pytest.mark.parametrize("path", LAUNCH_PATHS)
def test_eager_launches_never_sync(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    direct = use_launch_path(path, monkeypatch)
    e = Engine("cuda", seed=SEED)
    e.prepare()  # host-side refills copy from host memory (outside the checked region)
    e.step("triton")  # the first call compiles
    e.prepare()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        e.step("triton")
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    assert_path_taken(path, direct)


def test_batch_sizes_within_capacity_share_one_compilation() -> None:
    """The same endpoint with different bs / num_tokens / counts: exactly one compiled variant per kernel."""
    from kvcanary_backends.triton import plan, verify, write

    kernels = [plan._plan_kernel, verify._verify_kernel, write._write_kernel]
    seen: list[int] | None = None
    for bs, tokens in [(1, 1), (3, 17), (8, 48), (8, 1), (5, 33)]:
        e = Engine("cuda", seed=SEED + bs, bs=bs, num_tokens=tokens, max_seq=96, num_slots=1024)
        for _ in range(3):
            e.prepare()
            e.step("triton")
        counts = [compiled_variants(k) for k in kernels]
        if seen is not None:
            assert counts == seen, f"bs={bs}, num_tokens={tokens} compiled again: {seen} -> {counts}"
        seen = counts
