"""``kvcanary demo --engine transformers``: every row as the table promises, and its option checks."""

from __future__ import annotations

import io
from typing import Any

import pytest
import transformers

from kvcanary.cli import UsageError, parser
from kvcanary.cli.demo import main
from kvcanary.integrations.transformers.demo import run_demo
from kvcanary.integrations.transformers.fault_kinds import NEEDS_SLIDING_WINDOW, TfFault
from kvcanary.integrations.transformers.version import sliding_supported
from tests.integrations.transformers.harness import SEED


def test_demo_table_clean_silent_every_fault_detected() -> None:
    out = io.StringIO()
    outcomes = run_demo(list(TfFault), device="cpu", backend=None, seed=SEED, max_new_tokens=10, out=out)
    text = out.getvalue()
    if sliding_supported(transformers.__version__):  # CI's transformers: both models, every fault
        assert [o.fault for o in outcomes] == [None, None, *TfFault]
    else:
        assert [o.fault for o in outcomes] == [None, *(f for f in TfFault if f not in NEEDS_SLIDING_WINDOW)]
    assert all(o.ok for o in outcomes), f"seed {SEED}:\n{text}"
    assert "clean " in text and text.count("detected") >= len(TfFault)


def test_demo_rejects_a_fault_of_the_other_engine() -> None:
    argv = ["demo", "--engine", "transformers", "--fault", "radix_uaf", "--steps", "40"]
    args: Any = parser(argv).parse_args(argv)
    with pytest.raises(UsageError, match="is a fault class of the kvcanary engine only"):
        main(args)
