"""The manager's own CUDA graphs: each forward's HEAD and TAIL replayed per batch bucket.

An engine that runs its forward eagerly still pays for every canary launch on the host (a plan, then a
verify and a write per endpoint, each through its launcher). With ``CanaryConfig(graphs=...)`` on, the
manager pads each forward to a *bucket* (rows and tokens, each rounded up to a power of two, at most the
capacities), stages it into static buffers with one device copy, and replays the HEAD and TAIL launches from
graphs captured for that bucket, so the host's share per phase is one copy and one replay.
The very batch object handed again (values refilled in place) replays, from its :data:`STAGED_AFTER`-th reuse,
a *staged* HEAD graph with its staging copy inside: one replay per phase and no copy (the copy reads the batch's
tensors where they were at the capture, which is checked at every forward).

Padding is neutral, which keeps the results byte-identical to the unpadded eager launches: a padding row has
``req_pool_indices == 0`` (the plan gives it no verify entry, no write token and no seed) and a padding token
has ``out_cache_loc == -1`` (the write neither stores nor chains it, and no row points at it anyway). With a
verification budget the stride of the forward's real batch size is part of the bucket's key, since it is a
host value the captured filter keeps.

First use of a bucket runs the padded launches eagerly (the forward's real launches, which also compile and
load the kernels), then captures them into a graph without running them (on a side stream, without waiting
for the device or emptying the allocator's cache); later forwards of the bucket replay it. A forward larger
than the largest bucket, an empty one, or one issued while the engine itself captures a graph (the launches
then go into the engine's graph) runs eagerly as before. With ``graphs=None`` a capture that fails (a backend
that cannot run under capture, for instance) turns the graphs off with one warning; with ``graphs=True`` it
raises.

The watchdog's host count stays right: the manager counts a phase's launches once per forward, after it ran
(eagerly or replayed), and not while the engine captures them; a capture of the manager's own runs nothing
and counts nothing.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import torch

if TYPE_CHECKING:
    from torch.cuda import _POOL_HANDLE

logger = logging.getLogger("kvcanary.manager")

MAX_GRAPHS_PER_PHASE = 64
"""Graphs captured per forward slot and phase; forwards of further buckets run eagerly. A phase's variants
(``tail/0`` and ``tail/1``, ``head_staged/<buffer>/<n>``: the name before the first ``/``) share its cap."""

STAGED_AFTER = 2
"""Reuses of one batch object (the engine hands the very batch again) before its forwards run the *staged* HEAD
graph: the bucket's HEAD launches captured together with the staging copy of that batch's tensors, so a replay
is the forward's one host call (the copy reads the batch's tensors where they were at the capture)."""


def bucket_ladder(capacity: int) -> tuple[int, ...]:
    """The bucket sizes up to ``capacity``: the powers of two below it, then ``capacity`` itself."""
    if capacity < 1:
        raise ValueError(f"kv-canary: a bucket ladder needs a capacity >= 1, got {capacity}")
    out: list[int] = []
    b = 1
    while b < capacity:
        out.append(b)
        b *= 2
    out.append(capacity)
    return tuple(out)


def bucket_for(n: int, ladder: tuple[int, ...]) -> int | None:
    """The smallest bucket that holds ``n`` (None when ``n`` is 0 or past the largest one)."""
    if n <= 0:
        return None
    for b in ladder:
        if b >= n:
            return b
    return None


def _rung(n: int, capacity: int) -> int | None:
    """``bucket_for(n, bucket_ladder(capacity))`` without walking the ladder: the power of two at or above
    ``n``, or the capacity where that is not below it."""
    if n <= 0 or n > capacity:
        return None
    b = 1 << (n - 1).bit_length()
    return b if b < capacity else capacity


class Bucket(NamedTuple):
    """What one graph is captured for: padded rows and tokens, and the budget's stride (0: no budget). A named
    tuple: it keys the graphs' tables at every forward, and a tuple hashes and compares without Python calls."""

    rows: int
    tokens: int
    stride: int = 0


def graphs_wanted(setting: bool | None, *, device: torch.device, compile: bool) -> bool:
    """Whether a manager on ``device`` replays its own graphs: ``CanaryConfig.graphs``, None meaning a CUDA
    pool without ``compile``. (True on a device that is not CUDA is refused by the manager's contract,
    ``graphs_need_cuda_pool``, before this is asked.)"""
    if setting is None:
        return device.type == "cuda" and not compile
    return setting


class ForwardGraphs:
    """The HEAD and TAIL graphs of one forward slot, per :class:`Bucket`.

    ``capture`` False runs the padded launches eagerly every time (what the graphs replay, without the
    graphs: how a machine without a GPU tests the padding); ``strict`` (``graphs=True``) makes a failed
    capture an error instead of a warning that turns the graphs off.
    """

    def __init__(self, *, rows_capacity: int, tokens_capacity: int, capture: bool, strict: bool,
                 pool: _POOL_HANDLE | None = None) -> None:
        self.rows = bucket_ladder(rows_capacity)
        self.tokens = bucket_ladder(tokens_capacity)
        self.capture = capture
        self.strict = strict
        self.enabled = True
        """False once a capture failed (``graphs=None``): every later forward runs unpadded and eagerly."""
        self._pool = pool
        self._stream: torch.cuda.Stream | None = None
        self._graphs: dict[tuple[str, Bucket], torch.cuda.CUDAGraph] = {}
        self.captures = 0
        """Graphs captured so far."""
        self.replays = 0
        """Phases replayed from a graph so far."""
        self.padded_eager = 0
        """Phases run eagerly on a bucket's padded inputs (a bucket's first use, or ``capture`` False)."""
        self.retired: list[torch.cuda.CUDAGraph] = []
        """Dropped graphs kept until no capture is in progress on the current stream: destroying a graph while
        the engine captures its own (its forward dropping the manager's TAIL graphs) would invalidate that
        capture. Empty in the usual step, which then calls no :meth:`release_retired`."""

    def usable(self) -> bool:
        """Whether a forward may run on a bucket now (graphs on, and no graph capture in progress on the current
        stream): what :meth:`bucket` asks before it sizes the forward."""
        return self.enabled and not (self.capture and torch._C._cuda_isCurrentStreamCapturing())

    def bucket(self, batch_size: int, num_tokens: int, stride: int = 0) -> Bucket | None:
        """The forward's bucket, or None when it runs unpadded and eagerly (graphs off, an empty forward, one
        past the largest bucket, or a graph capture in progress on the current stream)."""
        if not self.enabled:
            return None
        if self.capture and torch._C._cuda_isCurrentStreamCapturing():  # torch.cuda's check, one frame less
            return None  # the engine captures this forward: the launches belong in its graph
        rows, tokens = _rung(batch_size, self.rows[-1]), _rung(num_tokens, self.tokens[-1])
        if rows is None or tokens is None:
            return None
        if num_tokens <= self.rows[-1] < tokens:  # a decode step stays decode-shaped: no more tokens than plan
            tokens = self.rows[-1]  # rows, whatever the rung (the cuda write picks its kernel by that shape)
        return Bucket(rows, tokens, stride)

    def run(self, phase: str, bucket: Bucket, launches: Callable[[], None]) -> None:
        """Replay ``phase``'s graph for ``bucket``; on the bucket's first use run ``launches`` (the real launches
        of this forward), then capture them (not run) for the next forwards of the bucket."""
        if self.retired:
            self.release_retired()
        graph = self._graphs.get((phase, bucket))
        if graph is not None:
            graph.replay()
            self.replays += 1
            return
        launches()
        self.padded_eager += 1
        if self.capture and self.enabled and self.count(phase) < MAX_GRAPHS_PER_PHASE:
            self._capture(phase, bucket, launches)

    def count(self, phase: str) -> int:
        """Graphs held of ``phase``'s base phase (its name before the first ``/``), every variant together."""
        base = phase.partition("/")[0]
        return sum(p.partition("/")[0] == base for p, _ in self._graphs)

    def _capture(self, phase: str, bucket: Bucket, launches: Callable[[], None]) -> None:
        graph = torch.cuda.CUDAGraph()
        try:
            self._record(graph, launches)
        except Exception as err:
            if self.strict:
                raise RuntimeError(f"kv-canary: CanaryConfig.graphs=True, but capturing the {phase} launches of "
                                   f"bucket {bucket} failed: {type(err).__name__}: {err}") from err
            logger.warning("kv-canary: capturing the %s launches failed (%s: %s); the manager's graphs are off, "
                           "every forward runs eagerly", phase, type(err).__name__, err)
            self.disable()
            return
        self._graphs[(phase, bucket)] = graph
        self.captures += 1

    def _record(self, graph: torch.cuda.CUDAGraph, launches: Callable[[], None]) -> None:
        """Capture ``launches`` on a side stream that first waits for the current one (what the launches read
        is ready when the graph's first replay comes, on the current stream). Unlike ``torch.cuda.graph``
        this neither waits for the whole device nor empties the allocator's cache, which the engine's own
        allocations would pay for again."""
        current = torch.cuda.current_stream()
        if self._stream is None:
            self._stream = torch.cuda.Stream(current.device)  # type: ignore[no-untyped-call]
        side = self._stream
        side.wait_stream(current)
        with torch.cuda.stream(side):
            graph.capture_begin(pool=self._pool, capture_error_mode="thread_local")
            try:
                launches()
            except BaseException:
                with contextlib.suppress(Exception):  # the launch's error is the one to report
                    graph.capture_end()
                raise
            graph.capture_end()
        current.wait_stream(side)

    def drop(self, phase: str) -> None:
        """Drop ``phase``'s graphs (the staged HEAD graph of a batch the engine no longer hands)."""
        for key in [k for k in self._graphs if k[0] == phase]:
            self.retired.append(self._graphs.pop(key))
        self.release_retired()

    def disable(self) -> None:
        """Drop every graph; every later forward runs unpadded and eagerly."""
        self.enabled = False
        self.retired.extend(self._graphs.values())
        self._graphs.clear()
        self.release_retired()

    def release_retired(self) -> None:
        """Destroy the dropped graphs, unless a graph is being captured on the current stream (then at the next
        drop, replay or step end outside a capture). The check sees the calling thread's stream only: the
        manager's forwards must run on the thread that captures them (as an engine's forward does)."""
        if self.retired and not (self.capture and torch._C._cuda_isCurrentStreamCapturing()):
            self.retired.clear()
