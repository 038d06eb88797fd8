"""The monitoring sinks' constructors: a value of the wrong kind is refused where it is given, naming the argument,
not when the first violation or the first scrape reaches it (rD)."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry

from kvcanary.monitor import EventSink, HealthSink, MetricsSink, Monitor


@pytest.mark.xfail(strict=True, reason="rD: MetricsSink(health=...) is typed Any; a flag (True, as Monitor's metrics= "
                                       "and events= are) fails in registry.register with AttributeError 'status'")
def test_metrics_health_must_be_a_health_sink() -> None:
    with pytest.raises(TypeError, match=r"\bhealth\b"):
        MetricsSink(registry=CollectorRegistry(), health=True)


@pytest.mark.xfail(strict=True, reason="rD: the public signature says `health: Any`: mypy --strict takes any value")
def test_metrics_health_is_typed_as_a_health_sink() -> None:
    annotation = MetricsSink.__init__.__annotations__["health"]
    assert "HealthSink" in str(annotation), annotation


@pytest.mark.xfail(strict=True, reason="rD: a registry that is no CollectorRegistry fails with AttributeError "
                                       "'register'")
@pytest.mark.parametrize("make", [lambda: MetricsSink(registry="default"),  # type: ignore[arg-type]
                                  lambda: Monitor(registry="default")],  # type: ignore[arg-type]
                         ids=["MetricsSink", "Monitor"])
def test_a_registry_that_is_no_registry_is_refused_naming_it(make: object) -> None:
    with pytest.raises(TypeError, match=r"\bregistry\b"):
        make()  # type: ignore[operator]


@pytest.mark.xfail(strict=True, reason="rD: EventSink keeps a logger name given as a str; the first violation's "
                                       "emit raises AttributeError (logged by the manager as a failed sink) and "
                                       "the event is lost")
def test_events_logger_must_be_a_logger() -> None:
    with pytest.raises(TypeError, match=r"\blogger\b"):
        EventSink(logger="kvcanary.events")  # type: ignore[arg-type]


@pytest.mark.xfail(strict=True, reason="rD: EventSink / Monitor keep an owners resolver that is not callable; each "
                                       "violation then logs a TypeError traceback instead of the request ids")
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
