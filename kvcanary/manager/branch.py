"""V's endpoints on a second branch of a captured graph: a phase's K and V launches side by side, not in turn.

A phase of one group launches K's verify and write, then V's. Neither reads what the other writes: K's
launches write K's records, V's write V's, and both append to the violation ring and its write index with
atomics and count on their own tag's counters (the cuda and Triton backends, :data:`FORK_BACKENDS`). Replayed
from a graph, running V's launches on a second stream beside K's makes the phase's chain of dependent nodes two
shorter. So while a CUDA graph is being captured on the current stream (the manager's own bucket graphs, or an
engine's capture of its forward holding the manager's HEAD and TAIL), a phase's V endpoints are *forked*: after
the work they depend on (staging, the plan, the budget's filter or the overflow count) the side stream waits
for the capturing one, V's launches go on the side stream and K's on the capturing one, and the capturing
stream waits for the side one before anything else (the layer rotation's TAIL, the next group, the read-back
copy, the end of the capture). Eager forwards stay in turn (no stream switch, no host cost).

Not forked: a backend outside :data:`FORK_BACKENDS` (torch_ref appends its rows by rewriting the ring from
the write index it read: K's and V's appends would race, and it allocates), a compiled manager, and the TAIL of
a group with a layer rotation (its rows carry the TAIL_K tag and come right after V's: the read-back could not
tell them from K's). The ring then gets K's and V's rows of a forked phase in no fixed order; the read-back puts
K's first again (:mod:`kvcanary.manager.launch_order`), for the phases named in :attr:`VBranch.pairs`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch

from kvcanary.manager.endpoints import Endpoint
from kvcanary.registry import REGISTRY, Op

ON_BY_DEFAULT = False
"""Whether a new manager forks V's launches under capture. Off until the fork's GPU tests pass on a GPU (its
figures: docs/graphs.md); ``manager.branch.enabled = True`` turns it on for one manager (its GPU tests and
``benchmarks/budget_nodes.py`` do)."""

FORK_BACKENDS = frozenset({"cuda", "triton"})
"""Backends whose verify and write append ring rows and count with atomics and allocate nothing at launch: the
only ones whose V launches may run beside K's."""


def split_halves(endpoints: tuple[Endpoint, ...]) -> tuple[tuple[Endpoint, ...], tuple[Endpoint, ...]]:
    """A phase's endpoints of one group as (what stays on the capturing stream, what goes on the branch): the
    first endpoint (K: :func:`~kvcanary.manager.endpoints.build_endpoints` puts it first), then the rest (V)."""
    return endpoints[:1], endpoints[1:]


def forkable_backend(device: torch.device, backend: str | None) -> bool:
    """Whether the backends that would run this device's verify and write now (``backend`` forced, or the
    registry's pick) are both in :data:`FORK_BACKENDS`. Asked only while a capture is in progress; a backend
    the registry cannot answer for without a call (per-call limits) is not forked."""
    try:
        return all(REGISTRY.select(op, device, backend).backend.name in FORK_BACKENDS for op in (Op.VERIFY, Op.WRITE))
    except Exception:  # any failure to answer means: launch in turn, as before
        return False


class VBranch:
    """The manager's second stream for V's launches under capture (one per manager, made with it) and the
    phases forked so far. ``pairs`` is the set the read-back pump sorts by (shared, not copied): each forked
    phase adds its launch-tag pair (``K tag // 2``) once, and it is never removed (an engine may replay a graph
    that holds the fork for as long as it likes)."""

    def __init__(self, device: torch.device, pairs: set[int]) -> None:
        self.device = device
        self.pairs = pairs
        self.stream: torch.cuda.Stream | None = (
            torch.cuda.Stream(device) if device.type == "cuda" else None)  # type: ignore[no-untyped-call]
        """The side stream: torch's, so the caching allocator knows it; made once (outside any capture)."""
        self.forks = 0
        """Phases forked so far (captures only: a replay runs no host code)."""
        self.enabled = ON_BY_DEFAULT
        """Whether phases fork at all (:data:`ON_BY_DEFAULT`); set it before the manager captures its graphs."""

    def capturing(self) -> bool:
        """Whether a CUDA graph is being captured on the current stream (the fork's only occasion)."""
        return torch._C._cuda_isCurrentStreamCapturing()

    def usable(self, backend: str | None) -> bool:
        """Whether this phase may fork: the fork is on, a capture is in progress and its backends append with
        atomics."""
        return self.enabled and self.capturing() and forkable_backend(self.device, backend)

    def run(self, main: Callable[[], None], side: Callable[[], None], pair: int) -> None:
        """``side`` on the side stream beside ``main`` (:meth:`launch`), and the phase's launch-tag ``pair`` (its
        K tag // 2) into :attr:`pairs`, so the read-back puts its rows in launch order."""
        self.launch(main, side)
        self.pairs.add(pair)
        self.forks += 1

    def launch(self, main: Callable[[], None], side: Callable[[], None]) -> None:
        """``side`` on the side stream, ``main`` on the current one: the side stream first waits for the current
        one (everything issued so far: what V reads is ready), and the current one waits for the side one after
        ``main`` (the join: what comes next sees V's launches done). A launch that raises still joins, as
        launching in turn left the capture (an unjoined side stream would fail the capture's end with a CUDA
        error in place of the launch's own)."""
        stream = self.stream
        assert stream is not None, "a fork needs a CUDA device"
        current = torch.cuda.current_stream(self.device)
        stream.wait_stream(current)
        try:
            with torch.cuda.stream(stream):
                side()
            main()
        except BaseException:
            with contextlib.suppress(Exception):  # the launch's error is the one to report
                current.wait_stream(stream)
            raise
        current.wait_stream(stream)
