"""A deterministic serving workload with shared prefixes, and the loop that drives an engine through it.

The same script serves the clean run and every fault run, so the clean run proves that everything the
faults rely on (prefix sharing, chunked prefill, aborts, retract/resume, eviction, SWA eviction, graph
padding, PD transfers) is silent when the engine is correct.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from kvcanary.demo.engine.engine import Engine
from kvcanary.demo.engine.step_report import StepReport


class ControlKind(str, Enum):
    ABORT = "abort"
    RETRACT = "retract"
    RESUME = "resume"


@dataclass(frozen=True)
class Arrival:
    step: int
    rid: int
    prompt: tuple[int, ...]
    max_new_tokens: int
    remote_prefill: bool = False


@dataclass(frozen=True)
class Control:
    step: int
    kind: ControlKind
    rid: int


@dataclass(frozen=True)
class Workload:
    arrivals: tuple[Arrival, ...]
    controls: tuple[Control, ...]

    @property
    def uses_remote_prefill(self) -> bool:
        return any(a.remote_prefill for a in self.arrivals)


def shared_prefix_workload(*, seed: int = 0, vocab_size: int = 256, steps: int = 40,
                           remote_prefill: bool = True) -> Workload:
    """Requests on two system prompts; a long chunked request aborted mid-prefill and then re-used by a
    request extending its prefix; a retract/resume; PD requests; arrivals spread over ``steps``."""
    rng = random.Random(seed)

    def toks(n: int) -> list[int]:
        return [rng.randrange(vocab_size) for _ in range(n)]

    sys_a, sys_b = toks(24), toks(16)
    long_tail = toks(60)
    arr: list[Arrival] = []
    ctl: list[Control] = []

    def add(step: int, prompt: list[int], new: int, remote: bool = False) -> int:
        rid = len(arr)
        arr.append(Arrival(step, rid, tuple(prompt), new, remote and remote_prefill))
        return rid

    add(0, sys_a + toks(8), 14)
    long_rid = add(0, sys_b + long_tail, 6)
    retract_rid = add(1, sys_a + toks(6), 16)
    add(2, sys_a + toks(10), 12)
    ctl.append(Control(3, ControlKind.ABORT, long_rid))
    add(3, sys_b + long_tail[:40] + toks(5), 10)
    add(5, sys_a + toks(13), 10, remote=True)
    add(6, sys_b + toks(7), 18)
    ctl.append(Control(8, ControlKind.RETRACT, retract_rid))
    add(9, sys_a + toks(9), 12)
    ctl.append(Control(11, ControlKind.RESUME, retract_rid))
    add(12, sys_b + toks(21), 8, remote=True)
    step = 14
    while step < max(steps - 6, 15):
        prefix = sys_a if rng.random() < 0.5 else sys_b
        add(step, prefix + toks(rng.randrange(4, 30)), rng.randrange(6, 16))
        step += rng.randrange(2, 4)
    return Workload(tuple(arr), tuple(ctl))


@dataclass
class RunLog:
    """Per step reports of a driven run."""

    reports: list[StepReport] = field(default_factory=list)


def drive(engine: Engine, workload: Workload, steps: int, *, log: RunLog | None = None,
          on_step: Callable[[int], None] | None = None) -> RunLog:
    """Feed ``workload`` to ``engine`` for ``steps`` steps (arrivals and controls at their steps)."""
    log = log if log is not None else RunLog()
    by_step: dict[int, list[Arrival]] = {}
    for a in workload.arrivals:
        by_step.setdefault(a.step, []).append(a)
    ctl_by_step: dict[int, list[Control]] = {}
    for c in workload.controls:
        ctl_by_step.setdefault(c.step, []).append(c)
    for s in range(steps):
        for a in by_step.get(s, []):
            engine.submit(list(a.prompt), a.max_new_tokens, rid=a.rid, remote_prefill=a.remote_prefill)
        for c in ctl_by_step.get(s, []):
            getattr(engine, c.kind.value)(c.rid)
        log.reports.append(engine.step())
        if on_step is not None:
            on_step(s)
    return log
