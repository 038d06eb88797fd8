"""What the serve demo counts as a healthy request that failed: neither failed by the policy (an isolation
event names it) nor failed for a block the guard quarantined (KVC-G004)."""

from __future__ import annotations

import io

from kvcanary.guard.codes import QUARANTINED, get
from kvcanary.integrations.transformers.fault_kinds import TfFault
from kvcanary.serve.client import ClientResult
from kvcanary.serve.demo import ServeOutcome, describe


def _failed(rid: str, error: str) -> ClientResult:
    return ClientResult(rid, False, 500, "", error)


def _outcome() -> ServeOutcome:
    results = {
        0: ClientResult("f-0", True, 200, "w1 w2", None),
        1: _failed("f-1", f"kv-canary: request f-1 failed: ... {get('verify').tag}"),
        2: _failed("f-2", f"kv-canary: request f-2 failed: it holds quarantined block(s) [7] {QUARANTINED.tag}"),
        3: _failed("f-3", "Internal Server Error"),
    }
    return ServeOutcome(TfFault.KV_FLIP_USED, results, moved={"kvcanary_violations_total": 1.0},
                        isolated={"f-1"}, held_quarantined={"f-2"})


def test_a_request_failed_for_a_quarantined_block_is_not_a_healthy_one() -> None:
    o = _outcome()
    assert o.healthy_failed == ["f-3"] and not o.ok
    o.results.pop(3)
    assert o.healthy_failed == [] and o.ok


def test_describe_says_a_failed_request_held_a_quarantined_block() -> None:
    out = io.StringIO()
    describe(_outcome(), out)
    text = out.getvalue()
    line = next(x for x in text.splitlines() if x.strip().startswith("f-2"))
    assert f"(it held a quarantined block: {QUARANTINED.code})" in line, text
    assert "HEALTHY REQUEST(S) FAILED: f-3" in text and "f-2" not in text.split("HEALTHY")[1]
