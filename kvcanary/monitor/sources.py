"""The latest stats of each manager a monitoring sink hears, so one sink can follow several at once.

One sink may hear several live managers (a target and a draft pool; an engine with a full and a sliding-window
pool in separate managers) and managers that replace one another (a new cache, a new run). Each manager stamps
its stats with its own number (``StepStats.source``); a :class:`SourceTable` keeps the latest stats per number,
so a sink sums each counter over the sources (every source's counters are cumulative, so the sum never goes
back) and takes a gauge from the sources still stepping. The table is bounded: past :data:`MAX_SOURCES`, the
least recently heard source is retired (its figures folded into the sink's base), so a server that makes a
manager per run does not grow it without end. A retired source may still be alive (an idle main manager beside
many short runs): the table remembers what it folded (at most :data:`MAX_RETIRED` sources), and when one steps
again the sink takes those figures back out of the base before it counts the new ones, so none counts twice.

Each source's entry is one immutable tuple, ``(stats, heard, extra)``: the stats, the table's step count when
they came, and what the sink derived from them (the metrics' sweep counters). A step of a known source replaces
its entry with one dict assignment, without a lock: a reader (an HTTP thread) sees the step's stats with what
the sink derived from them, or the step before's, never a mix.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from kvcanary.manager.stats import StepStats

MAX_SOURCES = 16
"""Sources a table keeps; one more retires the least recently heard."""

MAX_RETIRED = 1024
"""Retired sources whose folded figures a table remembers, so one that steps again is not counted twice; one
more forgets the earliest retired (its figures stay in the base: were it to step again, its figures up to its
retirement would count twice). A few hundred bytes each."""

LIVE_STEPS = 64
"""A source is live while it was heard within the sink's last ``LIVE_STEPS`` steps (from any source): enough for
a few managers stepping together, each several times a step; a replaced manager drops out of the gauges after."""

WATCHDOG_SEVERITY = {"ok": 0, "warmup": 1, "failed": 2}
"""The watchdog's states, worst last: over several sources the worst wins (one not yet checked is not ``ok``)."""

Heard = tuple[StepStats, int, tuple[int, ...]]
"""One source's entry: its latest stats, the table's step count when they came, and what the sink derived."""


class SourceTable:
    """The latest stats per ``StepStats.source``, at most :data:`MAX_SOURCES` of them.

    One writer (the engine's step): :meth:`put` (or :meth:`known`, then :meth:`set`) for a step of a source
    already kept, without a lock; :meth:`admit`, under the sink's lock, for a new one. Readers take
    :meth:`entries` under the same lock, with the base the sink folds retired sources into: ``retire(stats)``
    gets the last stats of a source that leaves the table (the least recently heard when a new source would
    make one too many, or a source whose step count went back: figures made outside a manager, all of source
    0, that began again); ``restore(stats)`` gets them back when a source retired as the least recently heard
    steps again (its step count did not go back), for the sink to take them out of its base.
    """

    __slots__ = ("_by_source", "_restore", "_retire", "_retired", "heard")

    def __init__(self, retire: Callable[[StepStats], None], restore: Callable[[StepStats], None]) -> None:
        self._by_source: dict[int, Heard] = {}
        self._retired: dict[int, Heard] = {}
        """The entries of sources retired as the least recently heard, earliest first (the writer's alone)."""
        self._retire = retire
        self._restore = restore
        self.heard = 0
        """Steps heard, from every source (the writer's count)."""

    def known(self, stats: StepStats) -> Heard | None:
        """The entry ``stats`` goes on from: its source's, unless the source is new or its step went back."""
        last = self._by_source.get(stats.source)
        return last if last is not None and stats.step >= last[0].step else None

    def retired(self, stats: StepStats) -> Heard | None:
        """The entry ``stats`` goes on from when its source was retired as the least recently heard (None if
        it was not, or its step went back): what :meth:`admit` will restore. The writer's call."""
        last = self._retired.get(stats.source)
        return last if last is not None and stats.step >= last[0].step else None

    def set(self, stats: StepStats, extra: tuple[int, ...]) -> None:
        """Replace the entry of ``stats``' source, which :meth:`known` found (one assignment: a reader sees the
        old entry or the new)."""
        self.heard = heard = self.heard + 1
        self._by_source[stats.source] = (stats, heard, extra)

    def put(self, stats: StepStats, extra: tuple[int, ...]) -> bool:
        """:meth:`set` if the source is known (per step: one lookup, one assignment); False, changing nothing,
        where it needs :meth:`admit`."""
        last = self._by_source.get(stats.source)
        if last is None or stats.step < last[0].step:
            return False
        self.heard = heard = self.heard + 1
        self._by_source[stats.source] = (stats, heard, extra)
        return True

    def admit(self, stats: StepStats, extra: tuple[int, ...]) -> None:
        """Keep a new source's entry (or a source's that began again, or one retired that steps again),
        retiring what it replaces; the caller holds its lock, so a reader sees the retired figures in the base
        or in the table, never both, and a restored source's figures once."""
        source = stats.source
        old = self._by_source.pop(source, None)
        if old is not None:  # its step went back: the old run's figures stay in the base for good
            self._retire(old[0])
        else:
            back = self._retired.pop(source, None)
            if back is not None and stats.step >= back[0].step:  # the same manager, stepping again
                self._restore(back[0])
            if len(self._by_source) >= MAX_SOURCES:
                oldest = min(self._by_source.values(), key=lambda e: e[1])
                gone = oldest[0].source
                del self._by_source[gone]
                self._retire(oldest[0])
                if len(self._retired) >= MAX_RETIRED:  # forget the earliest: its figures stay in the base
                    del self._retired[next(iter(self._retired))]
                self._retired[gone] = oldest
        self.heard += 1
        self._by_source[source] = (stats, self.heard, extra)

    def entries(self) -> list[Heard]:
        """Every source kept, live or not (their counters count)."""
        return list(self._by_source.values())

    def live(self, entry: Heard) -> bool:
        """Whether ``entry`` was heard within the last :data:`LIVE_STEPS` steps (its gauges count)."""
        return self.heard - entry[1] < LIVE_STEPS


def latest(entries: Iterable[Heard]) -> StepStats | None:
    """The stats heard last among ``entries`` (None for none)."""
    last = max(entries, key=lambda e: e[1], default=None)
    return None if last is None else last[0]


def worst_watchdog(states: Iterable[str]) -> str:
    """The worst of the watchdog ``states`` (``warmup`` when there are none)."""
    return max(states, key=WATCHDOG_SEVERITY.__getitem__, default="warmup")
