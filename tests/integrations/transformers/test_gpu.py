"""The integration on a GPU: the demo table (identity, silence, every fault) on CUDA with the backend
``KVCANARY_BACKEND`` selects (tools/gpu/i19.sh runs it with triton and with cuda)."""

from __future__ import annotations

import io

import pytest
import torch

from kvcanary.integrations.transformers.demo import run_demo
from kvcanary.integrations.transformers.fault_kinds import NEEDS_SLIDING_WINDOW, TfFault
from tests.integrations.transformers.harness import SEED

pytestmark = pytest.mark.gpu


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_demo_table_on_cuda() -> None:
    out = io.StringIO()
    outcomes = run_demo(list(TfFault), device="cuda", backend=None, seed=SEED, max_new_tokens=16, out=out)
    assert all(o.ok for o in outcomes), f"seed {SEED}:\n{out.getvalue()}"
    assert outcomes[0].steps > 10
    assert {o.fault for o in outcomes} >= {f for f in TfFault if f not in NEEDS_SLIDING_WINDOW}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_isolate_policy_on_cuda() -> None:
    from kvcanary.integrations.transformers.isolate import run_isolation_demo

    out = io.StringIO()
    outcomes = run_isolation_demo(list(TfFault), device="cuda", backend=None, seed=SEED, max_new_tokens=16, out=out)
    assert all(o.ok for o in outcomes), f"seed {SEED}:\n{out.getvalue()}"
    assert any(o.failed for o in outcomes) and any(o.quarantined for o in outcomes)
