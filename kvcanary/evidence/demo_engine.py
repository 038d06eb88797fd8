"""kvcanary's demo engine as an evidence source: its requests described for bundles.

Who held a slot when comes from the engine managers' own journals, which the engine feeds
(``Engine(..., journal=True)``, :class:`kvcanary.demo.engine.journal_feed.JournalFeed`); the bundles come
from a :class:`~kvcanary.evidence.capture.BundleSink` attached with ``manager.add_sink``.
"""

from __future__ import annotations

import kvcanary
from kvcanary.demo.engine import Engine
from kvcanary.demo.engine.requests import ReqState, Request
from kvcanary.evidence.describe import RequestView


class DemoDescriber:
    """The demo engine's requests, as bundles describe them (implements ``RequestDescriber``)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def _slots(self, r: Request) -> list[int]:
        if r.row_released or not r.row or r.state not in (ReqState.PREFILL, ReqState.DECODE, ReqState.TRANSFER):
            return []
        return self.engine.memory.r2t.read(r.row, 0, r.alloc_len)

    def describe_request(self, request_id: str) -> RequestView | None:
        try:
            r = self.engine.requests[int(request_id)]
        except (KeyError, ValueError):
            return None
        slots = self._slots(r)
        n = len(slots)
        tokens = [int(t) for t in r.tokens[:n]] + [-1] * max(0, n - len(r.tokens))
        live = r.state in (ReqState.PREFILL, ReqState.DECODE)
        return RequestView(request_id, tuple(tokens), tuple(range(n)), tuple(slots), 1, live)

    def requests_holding(self, slot: int) -> list[str]:
        return [str(r.rid) for r in self.engine.requests.running if slot in self._slots(r)]

    def engine_version(self) -> str:
        return f"kvcanary demo engine {kvcanary.__version__}"
