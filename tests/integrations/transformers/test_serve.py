"""``transformers serve`` with canaries, driven over HTTP by a real client on the loopback.

A tiny random-weight Llama is saved to a temporary folder; the server (transformers' own, continuous batching)
serves it on 127.0.0.1 with a port the OS picks, and is always stopped. Concurrent chat completions run clean,
then again with a fault injected into the engine's state; ``/metrics`` is scraped and parsed with
prometheus-client, the health route read, the JSON events captured from ``logging``. On a GPU machine,
``KVCANARY_BACKEND=cuda`` (or ``triton``) runs the same test on CUDA (``KVCANARY_TEST_DEVICE`` overrides).
"""

from __future__ import annotations

import inspect
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

pytest.importorskip("fastapi", reason="the 'serve' extra (transformers[serving]) is not installed")
pytest.importorskip("prometheus_client", reason="the 'metrics' extra is not installed")

from kvcanary.integrations.transformers.fault_kinds import TfFault
from kvcanary.integrations.transformers.faults import FaultHook
from kvcanary.integrations.transformers.session import attach_canaries
from kvcanary.serve.client import ClientResult, chat, health, run_workload, scrape, total
from kvcanary.serve.demo import EventLog as Events
from kvcanary.serve.server import CanaryServer
from kvcanary.serve.tiny import build_tiny_model, prompts
from tests.integrations.transformers.harness import SEED


def _device() -> str:
    forced = os.environ.get("KVCANARY_TEST_DEVICE")
    if forced:
        return forced
    gpu_backend = os.environ.get("KVCANARY_BACKEND") in ("cuda", "triton")
    return "cuda" if gpu_backend and torch.cuda.is_available() else "cpu"


DEVICE = _device()
ISOLATE = "on_violation" in inspect.signature(attach_canaries).parameters
"""Whether the transformers integration has the isolate policy (issue 33) in this tree."""

PROMPTS = prompts(6, seed=SEED)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"), seed=SEED)


@pytest.fixture()
def events() -> Iterator[Events]:
    handler = Events()
    logger = logging.getLogger("kvcanary.events")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def serving(model_dir: Path, on_violation: str) -> CanaryServer:
    return CanaryServer(model_dir, device=DEVICE, on_violation=on_violation)


def clean_then_fault(server: CanaryServer) -> tuple[dict[int, ClientResult], dict[int, ClientResult], FaultHook]:
    """The workload clean (it must be silent), then again with a K bit flipped in a block a request reads."""
    clean = run_workload(server.url, PROMPTS, tag="clean")
    assert all(r.ok for r in clean.values()), f"seed {SEED}: {clean}"
    assert total(scrape(server.url), "kvcanary_violations_total") == 0, f"seed {SEED}: the clean run reported"
    status, body = health(server.url)
    assert (status, body["state"]) == (200, "ok"), body
    assert server.canary is not None
    hook = FaultHook(TfFault.KV_FLIP_USED, start_step=server.canary.steps + 2)
    server.canary.hooks.append(hook)
    faulted = run_workload(server.url, PROMPTS, tag="fault")
    assert hook.fired_step is not None, f"seed {SEED}: the fault found no place to fire"
    return clean, faulted, hook


def index_of(request_id: str) -> int:
    tag, _, i = request_id.partition("-")
    assert tag == "fault", request_id
    return int(i)


def test_served_requests_metrics_events_and_health_in_log_mode(model_dir: Path, events: Events) -> None:
    server = serving(model_dir, "log")
    try:
        server.start()
        clean, faulted, hook = clean_then_fault(server)
        hit = str(hook.detail["request"])
        assert all(r.ok for r in faulted.values()), f"seed {SEED}: log mode fails no request: {faulted}"
        for i, r in faulted.items():  # every request but the one whose KV was flipped: the clean run's tokens
            if i != index_of(hit):
                assert r.text == clean[i].text, f"seed {SEED}: request {i} changed"
        samples = scrape(server.url)
        found = total(samples, "kvcanary_violations_total")
        assert found >= 1, f"seed {SEED}: the flip went unseen"
        assert total(samples, "kvcanary_violations_total", launch_tag="TAIL_K_FULL",
                     check="per_forward_tail_k_full", fail_reason="verify_real_kv_hash") >= 1
        assert total(samples, "kvcanary_launches_total", launch_tag="HEAD_K_FULL") > 0
        assert total(samples, "kvcanary_slots_checked_total", launch_tag="TAIL_K_FULL") > 0
        assert total(samples, "kvcanary_requests_failed_total") == 0
        assert total(samples, "kvcanary_health_state", state="degraded") == 1
        assert samples[("kvcanary_readback_delay_steps", ())] in (0, 1)
        status, body = health(server.url)
        assert status == 200 and body["state"] == "degraded" and body["violations"] == found
        violations = [e for e in events.events if e["event"] == "violation"]
        assert len(violations) == found
        assert any(hit in e["request_ids"] for e in violations), f"seed {SEED}: {violations}"
        assert all(e["schema"] == "kvcanary.event/1" and e["fail_reasons"] for e in violations)
        later = chat(server.url, prompts(1, seed=SEED + 1)[0], request_id="later", stream=False)
        assert later.ok, later  # the server is still up and serving
    finally:
        server.stop()
    assert server.monitor is None and server.canary is not None and not server.canary._attached


@pytest.mark.skipif(not ISOLATE, reason="needs the transformers integration's isolate policy (issue 33)")
def test_isolate_fails_exactly_the_affected_request_and_the_server_stays_up(model_dir: Path, events: Events) -> None:
    server = serving(model_dir, "isolate")
    try:
        server.start()
        clean, faulted, hook = clean_then_fault(server)
        hit = index_of(str(hook.detail["request"]))
        failed = {i for i, r in faulted.items() if not r.ok}
        assert hit in failed, f"seed {SEED}: the affected request completed: {faulted[hit]}"
        decisions = [e for e in events.events if e["event"] == "isolation"]
        isolated = {index_of(rid) for e in decisions for rid in e["request_ids"] if rid.startswith("fault-")}
        assert failed == isolated, f"seed {SEED}: failed {failed}, isolated {isolated}"
        for i, r in faulted.items():
            if i not in failed:
                assert r.text == clean[i].text, f"seed {SEED}: healthy request {i} changed"
        assert "kv-canary" in (faulted[hit].error or ""), faulted[hit]
        # the client sees the failure's catalog code (and the command that explains it)
        assert re.search(r"\[KVC-G00\d[^]]*; run `kvcanary explain KVC-G00\d`\]", faulted[hit].error or ""), faulted[hit]
        samples = scrape(server.url)
        assert total(samples, "kvcanary_violations_total") >= 1
        assert total(samples, "kvcanary_requests_failed_total") == len(failed)
        assert total(samples, "kvcanary_blocks_quarantined_total") >= 1
        status, body = health(server.url)
        assert status == 200 and body["state"] == "degraded" and body["requests_failed"] == len(failed)
        again = chat(server.url, PROMPTS[hit], request_id="again", stream=hit % 2 == 0)
        assert again.ok and again.text == clean[hit].text, f"seed {SEED}: {again}"  # recomputed from clean KV
    finally:
        server.stop()
