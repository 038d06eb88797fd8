"""bench_transformers' step clock: each step's host phases land with the steady steps or with the steps that ran a
graph bucket's first use, never both, and the two add up to the session's totals.

Only what the script decides is checked: its figures are measured on the GPU machine, never here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from benchmarks.bench_transformers import StepClock


@dataclass
class FakeGraphs:
    captures: int = 0
    replays: int = 0
    padded_eager: int = 0


@dataclass
class FakeSession:
    """The parts of a TransformersCanary the clock reads: the phase totals and the managers' graphs."""

    graphs: FakeGraphs = field(default_factory=FakeGraphs)
    sweep: FakeGraphs = field(default_factory=FakeGraphs)
    host_seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(("map", "head", "tail"), 0.0))

    @property
    def _pools(self) -> dict[int, SimpleNamespace]:
        return {0: SimpleNamespace(manager=SimpleNamespace(graphs=[self.graphs, None], sweep_graphs=self.sweep))}

    def step(self, head: float, *, first_uses: int = 0, sweep_first: bool = False) -> None:
        self.host_seconds["map"] += 1.0
        self.host_seconds["head"] += head
        self.host_seconds["tail"] += head / 2
        self.graphs.padded_eager += first_uses
        self.graphs.replays += 2 - first_uses
        self.sweep.padded_eager += sweep_first


def test_steps_with_a_first_use_are_counted_apart_from_the_steady_ones() -> None:
    s = FakeSession()
    clock = StepClock(s)
    for head, first, sweep in ((50.0, 2, False), (1.0, 0, False), (1.0, 0, False), (30.0, 1, False),
                               (1.0, 0, False), (1.0, 0, True)):  # the last: the sweep's first run, eager
        clock(None)  # the hook, before the step
        s.step(head, first_uses=first, sweep_first=sweep)
    clock.finish()
    assert (clock.steady_steps, clock.first_use_steps) == (3, 3)
    assert clock.steady == pytest.approx({"map": 3.0, "head": 3.0, "tail": 1.5})
    assert clock.first_use == pytest.approx({"map": 3.0, "head": 81.0, "tail": 40.5})
    for phase, total in s.host_seconds.items():
        assert clock.steady[phase] + clock.first_use[phase] == pytest.approx(total)


def test_a_run_without_graphs_is_all_steady() -> None:
    s = FakeSession()
    clock = StepClock(s)
    for _ in range(4):
        clock(None)
        s.step(2.0)
    clock.finish()
    assert (clock.steady_steps, clock.first_use_steps) == (4, 0) and clock.first_use == {}
