"""``CanaryServer.mount`` on a FastAPI app of its own: the two routes, and kvcanary's errors in the open."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="the 'serve' extra is not installed")

from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from kvcanary.monitor import Monitor
from kvcanary.serve.server import CanaryServer


def app_with_routes() -> FastAPI:
    app = FastAPI()

    @app.get("/fail")
    def fail() -> None:
        raise RuntimeError("CB generation failed for r1: kv-canary: request r1 read corrupt KV")

    @app.get("/other")
    def other() -> None:
        raise RuntimeError("something else broke")

    registry = CollectorRegistry()
    CanaryServer.mount(app, Monitor(registry=registry), registry)
    return app


def test_metrics_and_health_routes() -> None:
    client = TestClient(app_with_routes())
    r = client.get("/metrics", follow_redirects=False)
    assert r.status_code == 200
    names = {f.name for f in text_string_to_metric_families(r.text)}
    assert {"kvcanary_violations", "kvcanary_health_state", "kvcanary_watchdog_state"} <= names
    h = client.get("/kvcanary/health")
    assert h.status_code == 200 and h.json()["state"] == "ok" and h.json()["schema"] == "kvcanary.health/1"


def test_a_request_kvcanary_failed_gets_its_text_and_others_stay_opaque() -> None:
    client = TestClient(app_with_routes(), raise_server_exceptions=False)
    r = client.get("/fail")
    assert r.status_code == 500
    assert r.json()["error"]["type"] == "kv_canary_error" and "read corrupt KV" in r.json()["error"]["message"]
    other = client.get("/other")
    assert other.status_code == 500 and "something else" not in other.text
