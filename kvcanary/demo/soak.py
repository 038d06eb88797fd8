"""The soak: the demo engine under a long randomized legal workload (no report allowed), then fault episodes.

A clean soak drives one engine (or engine pair) for ``steps`` steps of :func:`random_workload`: arrivals on a
few shared system prompts (prefix sharing), long prompts (chunked prefill), aborts, retracts and resumes,
PD requests (transfer), a pool small enough to evict; the ``hybrid`` layout adds sliding-window attention
(SWA eviction and the full→SWA table) and graph-padded decode batches, the ``spec`` layout speculative
decoding (draft pool with the +1 token offset, rollbacks). Any violation is a failure.

A fault episode drives a fresh engine pair through a fresh random workload and arms one fault class of
:mod:`kvcanary.demo.engine.faults` at a random step; the class's buggy code path fires the next time the
workload reaches it, and the canary must report it within the class's :data:`DETECTION_BOUND` steps and
never before it fired. A fault whose damage nothing ever read (a final sweep of the cached slots finds
nothing either) is *harmless*: it is retried with another workload, so that every class is seen caught.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kvcanary.consts import RealKvHashMode
from kvcanary.demo.engine.config import EngineConfig, demo_engine_config
from kvcanary.demo.engine.engine import Engine
from kvcanary.demo.engine.faults import CORE_FAULTS, DETECTION_BOUND, Fault, FaultInjector
from kvcanary.demo.engine.workload import Arrival, Control, ControlKind, Workload, drive
from kvcanary.guard.violation_policy import ViolationPolicy
from kvcanary.manager import CanaryConfig

LAYOUTS = ("hybrid", "spec")


@dataclass(frozen=True)
class SoakSettings:
    """``steps`` clean steps per layout; ``episodes`` fault episodes (cycling through the classes)."""

    steps: int = 2000
    episodes: int = 10
    seed: int = 0
    device: str = "cpu"
    backend: str | None = None
    wait: int = 150  # steps an armed fault may take to reach its code path before the episode gives up
    policy: ViolationPolicy | None = None  # the canary's on_violation (None: log)


def canary_config(settings: SoakSettings) -> CanaryConfig:
    """The K half of every endpoint, PARTIAL real-KV fingerprints, token checks and a sweep every 2 steps (the
    demo's settings, V half off: a corruption of K and V bytes alike shows in K); the isolate policy's records
    keep every entry (an episode's outcome counts them)."""
    return CanaryConfig(real_kv_mode=RealKvHashMode.PARTIAL, enable_verify_token=True, sweep_interval=2,
                        health_warmup_steps=10, health_every=50, stats_every=10**9, backend=settings.backend,
                        on_violation=settings.policy, guard_history=None)


def engine_config(layout: str, device: str) -> EngineConfig:
    """``hybrid``: the demo's engine (SWA window 8, 192 slots, graph buckets, chunked prefill); ``spec``:
    speculative decoding with 2 draft tokens (full attention only)."""
    if layout == "hybrid":
        return demo_engine_config(device)
    if layout == "spec":
        return EngineConfig(num_slots=192, req_rows=9, max_running=8, chunk_size=32, num_draft_tokens=2,
                            graph_buckets=(1, 2, 4, 8), device=device)
    raise ValueError(f"unknown soak layout {layout!r}; expected one of {LAYOUTS}")


def random_workload(rng: random.Random, steps: int, *, vocab: int, max_context: int, remote: bool,
                    rate: float = 0.3) -> Workload:
    """Arrivals for ``steps`` steps (about ``rate`` per step): most on one of four system prompts, a fifth of
    some long enough for several prefill chunks; some aborted a few steps after they arrive (mid-prefill or
    mid-decode), some retracted and resumed, some prefilled remotely (``remote``)."""
    def toks(n: int) -> list[int]:
        return [rng.randrange(vocab) for _ in range(n)]

    systems = [toks(rng.randint(8, 32)) for _ in range(4)]
    arrivals: list[Arrival] = []
    controls: list[Control] = []
    for step in range(steps):
        n = 1 if rng.random() < rate else 0
        n += 1 if rng.random() < rate / 4 else 0
        for _ in range(n):
            prompt = (rng.choice(systems) if rng.random() < 0.8 else []) + toks(
                rng.randint(33, 64) if rng.random() < 0.12 else rng.randint(2, 16))
            new = rng.randint(2, 16)
            prompt = prompt[: max_context - new - 8]
            is_remote = remote and rng.random() < 0.12
            rid = len(arrivals)
            arrivals.append(Arrival(step, rid, tuple(prompt), new, is_remote))
            if is_remote:
                continue
            x = rng.random()
            if x < 0.1:
                at = step + rng.randint(1, 4)
                controls.append(Control(at, ControlKind.ABORT, rid))
                if rng.random() < 0.7:  # arriving as another is aborted: takes its row, fills it from the cache
                    tail = toks(rng.randint(2, 12))
                    arrivals.append(Arrival(at, len(arrivals), tuple(rng.choice(systems) + tail), rng.randint(2, 8)))
            elif x < 0.14:
                at = step + rng.randint(2, 10)
                controls.append(Control(at, ControlKind.RETRACT, rid))
                controls.append(Control(at + rng.randint(1, 8), ControlKind.RESUME, rid))
    return Workload(tuple(arrivals), tuple(controls))


def build(layout: str, settings: SoakSettings, faults: FaultInjector | None = None) -> tuple[Engine, Engine | None]:
    """A warmed-up engine of ``layout`` and, for the hybrid layout, its PD prefill peer (attached)."""
    cfg = engine_config(layout, settings.device)
    canary = canary_config(settings)
    engine = Engine(cfg, canary=canary, faults=faults, name="decode")
    peer = None
    if layout == "hybrid":
        peer = Engine(cfg, canary=canary, model=engine.model, name="prefill")
        engine.attach_prefill_peer(peer)
        peer.warmup()
    engine.warmup()
    return engine, peer


def _workload(layout: str, engine: Engine, seed: int, steps: int) -> Workload:
    cfg = engine.cfg
    return random_workload(random.Random(seed), steps, vocab=cfg.model.vocab_size,
                           max_context=cfg.max_context_len - cfg.num_draft_tokens, remote=layout == "hybrid")


@dataclass(frozen=True)
class CleanResult:
    """One clean soak: what the workload exercised, and what the canary reported (must be nothing)."""

    layout: str
    steps: int
    seconds: float
    requests: int
    finished: int
    reports: int
    protected_slots: int
    prefix_hits: int
    evicted_slots: int
    aborts: int
    retracts: int
    transfers: int
    swa_evictions: int
    rollbacks: int
    failed: int = 0  # requests the isolate policy failed (must be 0: nothing is corrupt)

    @property
    def ok(self) -> bool:
        return self.reports == 0 and self.failed == 0


def clean_run(layout: str, settings: SoakSettings, on_step: Callable[[int], None] | None = None) -> CleanResult:
    """``settings.steps`` steps of a random legal workload on a fresh engine of ``layout``."""
    from kvcanary.demo.engine.requests import ReqState

    engine, peer = build(layout, settings)
    workload = _workload(layout, engine, settings.seed, settings.steps)
    start = time.perf_counter()
    with _quiet():
        drive(engine, workload, settings.steps, on_step=on_step)
        engine.flush_canaries()
        if peer is not None:
            peer.flush_canaries()
    seconds = time.perf_counter() - start
    reqs = list(engine.requests.values())
    tree = engine.memory.tree
    snap = engine.canary.last_snapshot if engine.canary is not None else None
    return CleanResult(
        layout=layout, steps=settings.steps, seconds=seconds, requests=len(reqs),
        finished=sum(r.state is ReqState.FINISHED for r in reqs),
        reports=len(engine.events()) + (len(peer.events()) if peer is not None else 0),
        protected_slots=sum(snap.slot_run_counters) if snap is not None else 0,
        prefix_hits=sum(r.match_len > 0 for r in reqs), evicted_slots=tree.evicted_slots if tree is not None else 0,
        aborts=sum(r.state is ReqState.ABORTED for r in reqs), retracts=sum(c.kind is ControlKind.RETRACT
                                                                            for c in workload.controls),
        transfers=sum(r.remote_prefill and r.num_outputs > 0 for r in reqs),
        swa_evictions=sum(r.swa_evicted_upto > 0 for r in reqs),
        rollbacks=engine.draft.rollbacks if engine.draft is not None else 0,
        failed=sum(r.state is ReqState.FAILED for r in reqs))


@dataclass(frozen=True)
class FaultResult:
    """One fault episode: when the fault was armed and fired, and when (and whether) it was reported."""

    fault: Fault
    seed: int
    armed_step: int
    fired_step: int | None
    detected_step: int | None
    early_reports: int  # reports before the fault fired (false positives)
    bound: int
    seconds: float
    error: str | None = None  # the engine itself broke (a fault can corrupt its own bookkeeping)
    isolated: bool | None = None  # isolate policy: the report led to a decision and no quarantined slot was
    # reported after its quarantine (None: another policy)
    failed_requests: int = 0
    quarantined_slots: int = 0

    @property
    def lag(self) -> int | None:
        if self.fired_step is None or self.detected_step is None:
            return None
        return self.detected_step - self.fired_step

    @property
    def harmless(self) -> bool:
        """It fired, the engine kept running, and nothing (not even a final sweep) ever saw a trace of it."""
        return self.fired_step is not None and self.detected_step is None and self.error is None

    @property
    def crashed(self) -> bool:
        """The fault broke the engine's own bookkeeping (an allocator invariant) before anything was reported."""
        return self.error is not None and self.detected_step is None

    @property
    def conclusive(self) -> bool:
        """It fired and was either reported or provably harmless (not cut short by an engine crash)."""
        return self.fired_step is not None and not self.crashed

    @property
    def ok(self) -> bool:
        if self.early_reports or self.fired_step is None or self.isolated is False:
            return False
        return self.harmless or self.crashed or (self.lag is not None and 0 <= self.lag <= self.bound)


def fault_episode(fault: Fault, seed: int, settings: SoakSettings) -> FaultResult:
    """Arm ``fault`` at a random step of a fresh hybrid engine pair's random workload; run until the fault has
    fired and its bound has passed (or ``settings.wait`` steps without it firing)."""
    rng = random.Random(seed)
    armed = rng.randint(8, 60)
    faults = FaultInjector(fault, start_step=armed)
    engine, _peer = build("hybrid", settings, faults)
    bound = DETECTION_BOUND[fault]
    limit = armed + settings.wait
    workload = _workload("hybrid", engine, seed, limit + bound + 1)
    start = time.perf_counter()
    stop = limit

    def on_step(step: int) -> None:
        nonlocal stop
        fired = faults.first_fired_step
        if fired is not None:
            stop = min(stop, fired + bound + 1)
        if step + 1 >= stop:
            raise _Stop

    error = None
    with _quiet():
        try:
            drive(engine, workload, limit + bound + 1, on_step=on_step)
        except _Stop:
            pass
        except Exception as exc:  # the fault broke the engine (reported; detection before it still counts)
            error = f"{type(exc).__name__}: {exc}"
        if error is None and engine.canary is not None:  # a trace left in the cache would show here
            engine.canary.run_sweep()
            engine.canary.end_step()
        engine.flush_canaries()
    events = sorted(engine.events(), key=lambda e: e.step_recorded)
    fired = faults.first_fired_step
    early = sum(1 for e in events if fired is None or e.step_recorded < fired)
    later = [e.step_recorded for e in events if fired is not None and e.step_recorded >= fired]
    isolated: bool | None = None
    failed = quarantined = 0
    guard = engine.guard
    if guard is not None:
        quarantined = len(guard.quarantined)
        failed = len(guard.failed)
        q_at = {s: q.step for q in guard.quarantines for s in q.slots}
        repeated = any(e.step_recorded > q_at[e.violation.slot_idx] for e in events
                       if not e.violation.tag_name.endswith("_SWA") and e.violation.slot_idx in q_at)
        isolated = (not events or bool(guard.decisions)) and not repeated
    return FaultResult(fault, seed, armed, fired, later[0] if later else None, early, bound,
                       time.perf_counter() - start, error, isolated, failed, quarantined)


def fault_runs(settings: SoakSettings, faults: Sequence[Fault] | None = None,
               on_episode: Callable[[FaultResult], None] | None = None) -> list[FaultResult]:
    """``settings.episodes`` episodes, cycling through ``faults`` (default: every class the default checks
    catch) in a shuffled order; an episode whose fault never fired, fired harmlessly, or crashed the engine
    before a report, is retried with the next seed (up to four times; the last one is kept)."""
    order = list(faults if faults is not None else CORE_FAULTS)
    random.Random(settings.seed).shuffle(order)
    out: list[FaultResult] = []
    seed = settings.seed * 1_000_003
    for i in range(settings.episodes):
        fault = order[i % len(order)]
        for _ in range(4):
            seed += 1
            res = fault_episode(fault, seed, settings)
            if res.conclusive and not res.harmless:
                break
        out.append(res)
        if on_episode is not None:
            on_episode(res)
    return out


class _Stop(Exception):
    """Ends an episode's drive early."""


class _quiet:
    """Silence the managers' report logging for the duration (a fault episode logs hundreds of rows)."""

    def __enter__(self) -> None:
        self.log = logging.getLogger("kvcanary.manager")
        self.level = self.log.level
        self.log.setLevel(logging.CRITICAL)

    def __exit__(self, *exc: object) -> None:
        self.log.setLevel(self.level)
