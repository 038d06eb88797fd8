"""``kvcanary demo --engine transformers --serve``: the served canary, seen from outside.

A tiny random-weight Llama is saved to a temporary folder and served by transformers' own server with
canaries (:class:`~kvcanary.serve.server.CanaryServer`, on 127.0.0.1, a free port). An HTTP client sends
concurrent chat completions (streamed and not): first clean, then once per fault class injected into the
engine's state, each on a fresh server. For each run it prints what every client received, the metrics that
moved on ``/metrics`` and the health route's answer, then sends one more request to show the server still
serves. The run fails when a fault goes unseen, a clean run reports anything, or a request fails that the
guard did not fail (a healthy one): the guard fails the requests a violation names (the policy's decision) and
those that held a block it quarantined (``KVC-G004``: their KV there cannot be trusted either).
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from kvcanary.guard.codes import QUARANTINED
from kvcanary.integrations.transformers.fault_kinds import DESCRIPTIONS, NEEDS_SLIDING_WINDOW, TfFault
from kvcanary.quiet_logs import TRANSFORMERS_LOGGERS, quiet_logs
from kvcanary.serve.client import ClientResult, Samples, chat, health, run_workload, scrape

MOVED = ("kvcanary_violations_total", "kvcanary_violation_rows_dropped_total", "kvcanary_requests_failed_total",
         "kvcanary_blocks_quarantined_total", "kvcanary_finished_requests_affected_total",
         "kvcanary_isolation_decisions_total")
"""The metrics whose movement the demo prints (the counters that fire; launches and slots always move)."""


class EventLog(logging.Handler):
    """Keeps the JSON events kvcanary logs on ``kvcanary.events``."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.events: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        event = getattr(record, "kvcanary_event", None)
        if isinstance(event, dict):
            self.events.append(event)


@dataclass
class ServeOutcome:
    """One run on a fresh server: what the clients received, what moved, what the health route said."""

    fault: TfFault | None
    results: dict[int, ClientResult]
    fired_step: int | None = None
    detail: str = ""
    moved: dict[str, float] = field(default_factory=dict)
    health: str = ""
    owners: set[str] = field(default_factory=set)
    isolated: set[str] = field(default_factory=set)
    held_quarantined: set[str] = field(default_factory=set)
    """Requests the guard failed because they held a block it quarantined (KVC-G004), from the guard's own
    record (the follow-up isolation event that reports them names them too)."""
    changed: list[int] = field(default_factory=list)
    later_ok: bool = True
    seconds: float = 0.0

    @property
    def seen(self) -> bool:
        return self.moved.get("kvcanary_violations_total", 0) > 0

    @property
    def healthy_failed(self) -> list[str]:
        """Requests that failed although the guard failed no such request (neither for a violation nor for a
        quarantined block they held)."""
        failed_by_guard = self.isolated | self.held_quarantined
        return [r.request_id for r in self.results.values() if not r.ok and r.request_id not in failed_by_guard]

    @property
    def ok(self) -> bool:
        if not self.later_ok or self.healthy_failed:
            return False
        return self.seen if self.fault is not None else not self.seen and not self.changed


def _moved(before: Samples, after: Samples) -> dict[str, float]:
    out: dict[str, float] = {}
    for (name, labels), v in after.items():
        if name in MOVED:
            d = v - before.get((name, labels), 0.0)
            if d:
                key = name + ("{" + ",".join(f'{k}="{x}"' for k, x in labels) + "}" if labels else "")
                out[key] = d
                out[name] = out.get(name, 0.0) + d
    return out


def run_one(model_dir: Any, prompts: Sequence[str], fault: TfFault | None, *, device: str, backend: str | None,
            on_violation: str, clean: dict[int, ClientResult] | None, max_tokens: int) -> ServeOutcome:
    """A fresh server, the workload (with ``fault`` armed), the later request, the server stopped."""
    from kvcanary.integrations.transformers.faults import FaultHook
    from kvcanary.serve.server import CanaryServer

    log = EventLog()
    events = logging.getLogger("kvcanary.events")
    events.addHandler(log)
    level = events.level
    events.setLevel(logging.INFO)
    start = time.perf_counter()
    server = CanaryServer(model_dir, device=device, backend=backend, on_violation=on_violation)
    try:
        server.start()
        assert server.canary is not None
        hook = FaultHook(fault, start_step=2) if fault is not None else None
        if hook is not None:
            server.canary.hooks.append(hook)
        before = scrape(server.url)
        results = run_workload(server.url, prompts, tag=fault.value if fault else "clean", max_tokens=max_tokens)
        outcome = ServeOutcome(fault, results)
        outcome.moved = _moved(before, scrape(server.url))
        code, body = health(server.url)
        outcome.health = f"{code} {body['state']}"
        if hook is not None:
            outcome.fired_step = hook.fired_step
            outcome.detail = ", ".join(f"{k}={v}" for k, v in hook.detail.items())
        outcome.owners = {rid for e in log.events if e["event"] == "violation" for rid in e["request_ids"]}
        outcome.isolated = {rid for e in log.events if e["event"] == "isolation" for rid in e["request_ids"]}
        outcome.held_quarantined = {rid for rid, msg in server.canary.failed.items() if QUARANTINED.code in msg}
        if clean is not None:
            outcome.changed = [i for i, r in results.items()
                               if r.ok and r.request_id not in outcome.owners and r.text != clean[i].text]
        later = chat(server.url, "w1 w2 w3 w4", request_id="later", stream=False, max_tokens=4)
        outcome.later_ok = later.ok
    finally:
        server.stop()
        events.removeHandler(log)
        events.setLevel(level)
    outcome.seconds = time.perf_counter() - start
    return outcome


def describe(o: ServeOutcome, out: TextIO) -> None:
    """What each client saw, the metrics that moved, the health route, the verdict."""
    name = o.fault.value if o.fault is not None else "clean"
    out.write(f"\n=== {name} [{'OK' if o.ok else 'FAILED'}] ({o.seconds:.1f}s)\n")
    if o.fault is not None:
        out.write(f"  bug: {DESCRIPTIONS[o.fault]}\n")
        out.write(f"  injected at step {o.fired_step}: {o.detail}\n" if o.fired_step is not None
                  else "  the fault found no place to fire in this workload\n")
    for i, r in sorted(o.results.items()):
        kind = "stream" if r.stream else "json  "
        if r.ok:
            what = "changed vs clean" if i in o.changed else "completed"
            if r.request_id in o.owners:
                what += " (its KV was corrupt: reported)"
        else:
            what = f"ERROR {r.status}: {(r.error or '').splitlines()[0][:100] if r.error else ''}"
            if r.request_id in o.held_quarantined:
                what += f" (it held a quarantined block: {QUARANTINED.code})"
        out.write(f"  {r.request_id:<28} {kind} {what}\n")
    for name in MOVED:
        if o.moved.get(name):
            per: dict[str, float] = {}
            for key, d in o.moved.items():
                if key.startswith(name + "{"):
                    label = key[len(name) + 1 : -1].split(",")[-1]  # the last label: launch_tag, or code
                    per[label] = per.get(label, 0.0) + d
            detail = f" ({', '.join(f'{k} +{v:g}' for k, v in sorted(per.items()))})" if per else ""
            out.write(f"  /metrics: {name} +{o.moved[name]:g}{detail}\n")
    if not o.moved:
        out.write("  /metrics: no counter of violations or isolation moved\n")
    out.write(f"  health: {o.health}; a later request: {'served' if o.later_ok else 'FAILED'}\n")
    if o.healthy_failed:
        out.write(f"  HEALTHY REQUEST(S) FAILED: {', '.join(o.healthy_failed)}\n")
    if o.fault is not None and not o.seen:
        out.write("  NOT DETECTED\n")


def run_serve_demo(faults: Sequence[TfFault], *, device: str, backend: str | None, seed: int, max_tokens: int,
                   on_violation: str, out: TextIO) -> list[ServeOutcome]:
    """The clean run, then one run per fault (the sliding-window fault needs a model this demo does not serve)."""
    import transformers

    from kvcanary.serve.tiny import build_tiny_model, prompts

    skipped = [f for f in faults if f in NEEDS_SLIDING_WINDOW]
    faults = [f for f in faults if f not in NEEDS_SLIDING_WINDOW]
    work = prompts(6, seed=seed)
    out.write(f"kvcanary demo: transformers {transformers.__version__} serve (continuous batching, {device}) with "
              f"canaries, policy '{on_violation}'; {len(work)} concurrent chat completions per run over HTTP "
              f"(even ones streamed), {max_tokens} tokens each, a fresh server per run\n")
    if skipped:
        out.write(f"left out (they need a sliding-window model): {', '.join(f.value for f in skipped)}\n")
    # the demo prints what the clients and /metrics show instead
    with (quiet_logs(TRANSFORMERS_LOGGERS, logging.CRITICAL),
          tempfile.TemporaryDirectory(prefix="kvcanary-serve-") as tmp):
        model_dir = build_tiny_model(tmp, seed=seed)
        kw: dict[str, Any] = {"device": device, "backend": backend, "on_violation": on_violation,
                              "max_tokens": max_tokens}
        clean = run_one(model_dir, work, None, clean=None, **kw)
        describe(clean, out)
        outcomes = [clean]
        for f in faults:
            o = run_one(model_dir, work, f, clean=clean.results, **kw)
            describe(o, out)
            outcomes.append(o)
    return outcomes
