"""Engine set-ups shared by the engine tests."""

from __future__ import annotations

import dataclasses
from functools import cache

from kvcanary.consts import CanaryMode, RealKvHashMode
from kvcanary.demo import DemoSettings, RunOutcome, run_one
from kvcanary.demo.engine import (
    Engine,
    EngineConfig,
    Fault,
    FaultInjector,
    demo_engine_config,
    drive,
    shared_prefix_workload,
)
from kvcanary.manager import CanaryConfig

STEPS = 40


def canary_config(mode: CanaryMode = CanaryMode.LOG) -> CanaryConfig:
    return CanaryConfig(mode=mode, real_kv_mode=RealKvHashMode.PARTIAL, enable_v=True, enable_verify_token=True,
                        sweep_interval=2, health_warmup_steps=10, health_every=10)


@cache
def demo_run(fault: Fault | None) -> RunOutcome:
    """The demo's run for ``fault`` (cached: several tests inspect the same run)."""
    return run_one(fault, DemoSettings(steps=STEPS))


def engine_pair(cfg: EngineConfig | None = None, *, canary: CanaryConfig | None = None,
                fault: Fault | None = None) -> tuple[Engine, Engine]:
    """A decode engine with a PD prefill peer, warmed up."""
    cfg = cfg or demo_engine_config()
    canary = canary if canary is not None else canary_config()
    engine = Engine(cfg, canary=canary, faults=FaultInjector(fault))
    peer = Engine(cfg, canary=canary, model=engine.model, name="prefill")
    engine.attach_prefill_peer(peer)
    peer.warmup()
    engine.warmup()
    return engine, peer


@cache
def clean_run() -> tuple[Engine, Engine]:
    engine, peer = engine_pair()
    drive(engine, shared_prefix_workload(steps=STEPS), STEPS)
    engine.flush_canaries()
    peer.flush_canaries()
    return engine, peer


def spec_config(**kw: object) -> EngineConfig:
    base = EngineConfig(num_slots=192, req_rows=9, max_running=8, chunk_size=32, num_draft_tokens=2,
                        graph_buckets=(1, 2, 4, 8))
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]
