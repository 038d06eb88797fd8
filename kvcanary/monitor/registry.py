"""The check of a metrics registry argument, shared by :class:`~kvcanary.monitor.MetricsSink` and
:class:`~kvcanary.monitor.Monitor` (a module of its own: it needs no prometheus-client, so ``Monitor`` checks
its arguments before it imports the metrics)."""

from __future__ import annotations

REGISTRY_METHODS = ("register", "unregister")
"""What a sink calls on its registry: a prometheus-client ``CollectorRegistry`` has both."""


def check_registry(registry: object, where: str) -> None:
    """Refuse a ``registry`` that is neither None nor a registry (a name, a flag), naming the argument; ``where``
    names the constructor. Duck-typed, as prometheus-client's own collectors take it."""
    if registry is not None and not all(callable(getattr(registry, m, None)) for m in REGISTRY_METHODS):
        raise TypeError(f"kv-canary: {where}: registry must be a prometheus-client CollectorRegistry (with register "
                        f"and unregister) or None for the default one, got {type(registry).__name__} {registry!r}")
