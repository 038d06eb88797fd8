"""The monitoring sinks' constructors: a value of the wrong kind is refused where it is given, naming the argument,
not when the first violation or the first scrape reaches it (rD)."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry

from kvcanary.monitor import EventSink, HealthSink, MetricsSink, Monitor


def test_metrics_health_must_be_a_health_sink() -> None:
    with pytest.raises(TypeError, match=r"\bhealth\b"):
        MetricsSink(registry=CollectorRegistry(), health=True)  # type: ignore[arg-type]


def test_metrics_health_is_typed_as_a_health_sink() -> None:
    annotation = MetricsSink.__init__.__annotations__["health"]
    assert "HealthSink" in str(annotation), annotation


@pytest.mark.parametrize("make", [lambda: MetricsSink(registry="default"),  # type: ignore[arg-type]
                                  lambda: Monitor(registry="default")],  # type: ignore[arg-type]
                         ids=["MetricsSink", "Monitor"])
def test_a_registry_that_is_no_registry_is_refused_naming_it(make: object) -> None:
    with pytest.raises(TypeError, match=r"\bregistry\b"):
        make()  # type: ignore[operator]


def test_events_logger_must_be_a_logger() -> None:
    with pytest.raises(TypeError, match=r"\blogger\b"):
        EventSink(logger="kvcanary.events")  # type: ignore[arg-type]


@pytest.mark.parametrize("make", [lambda: EventSink(owners="canary.owners"),  # type: ignore[arg-type]
                                  lambda: Monitor(metrics=False, owners=["r1"])],  # type: ignore[arg-type]
                         ids=["EventSink", "Monitor"])
def test_an_owners_resolver_that_is_not_callable_is_refused(make: object) -> None:
    with pytest.raises(TypeError, match=r"\bowners\b"):
        make()  # type: ignore[operator]


def test_the_sinks_defaults_still_build() -> None:
    """What the refusals above must keep working: every default, and a real logger and resolver."""
    reg = CollectorRegistry()
    health = HealthSink()
    MetricsSink(registry=reg, health=health).unregister()
    EventSink(owners=lambda e: ("r",), logger=logging.getLogger("x"))
    Monitor(registry=reg).close()


@pytest.mark.parametrize("kwargs", [{"metrics": "yes"}, {"events": 1}], ids=["metrics", "events"])
def test_monitor_flags_must_be_bools(kwargs: dict[str, object]) -> None:
    with pytest.raises(TypeError, match=rf"\b{next(iter(kwargs))} must be a bool\b"):
        Monitor(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("make", [
    lambda reg: MetricsSink(registry=reg, health=True),  # type: ignore[arg-type]
    lambda reg: Monitor(registry=reg, owners="canary.owners"),  # type: ignore[arg-type]
    lambda reg: Monitor(registry=reg, events=None),  # type: ignore[arg-type]
], ids=["MetricsSink health", "Monitor owners", "Monitor events"])
def test_a_refused_sink_registers_nothing(make: object) -> None:
    """The arguments are checked before the metrics go on the registry: the same registry takes a sink after."""
    reg = CollectorRegistry()
    with pytest.raises(TypeError):
        make(reg)  # type: ignore[operator]
    MetricsSink(registry=reg).unregister()  # no "Duplicated timeseries": nothing was left registered
