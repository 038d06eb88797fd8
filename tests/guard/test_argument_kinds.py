"""Argument kinds in the guard's new checks (rE; History's limit: test_history.py): a value of the wrong type is a TypeError (COMMON rule: TypeError
for a wrong type, ValueError for a wrong value), and a bool is no int (as ``CanaryConfig``'s contracts and
``set_adapter``'s block sizes hold)."""

from __future__ import annotations

import pytest

from kvcanary.guard import SlotJournal
from kvcanary.guard.history import HistoryMap


def test_finish_refuses_a_bool_step_and_keeps_nothing() -> None:
    j = SlotJournal(block_size=1)
    with pytest.raises(TypeError, match=r"\bstep must be an int \(the step the request finished at\), got bool True$"):
        j.finish("a", True)
    assert j.finished_step("a") is None


def test_an_on_drop_that_cannot_be_called_is_refused_when_built() -> None:
    with pytest.raises(TypeError, match=r"^kv-canary: on_drop must be a callable \(key, value\) -> None or None, "
                                        r"got int 5$"):
        HistoryMap(1, on_drop=5)  # type: ignore[arg-type]
