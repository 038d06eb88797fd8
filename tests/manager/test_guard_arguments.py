"""The guard's settings on the manager: ``set_adapter``'s block sizes, and ``CanaryConfig``'s policy beside ``mode``.
A bad value is refused naming it, and the manager is left as it was (rD)."""

from __future__ import annotations

import pytest

from kvcanary.consts import CanaryMode
from kvcanary.guard import GuardDecision, ViolationPolicy
from kvcanary.manager import CanaryConfig
from tests.manager.world import make_world


class _Adapter:
    def apply(self, decision: GuardDecision) -> None:
        pass


@pytest.mark.xfail(strict=True, reason="rD: set_adapter divides by block_size before SlotJournal checks it "
                                       "(ZeroDivisionError / TypeError from `slots // block_size`)")
@pytest.mark.parametrize(("kwargs", "name"), [({"block_size": 0}, "block_size"), ({"block_size": "4"}, "block_size"),
                                              ({"block_size": 4, "swa_block_size": 0}, "swa_block_size")])
def test_set_adapter_refuses_a_block_size_below_one_naming_it(kwargs: dict[str, object], name: str) -> None:
    m = make_world().manager
    with pytest.raises((TypeError, ValueError), match=rf"\b{name}\b"):
        m.set_adapter(_Adapter(), **kwargs)  # type: ignore[arg-type]


@pytest.mark.xfail(strict=True, reason="rD: set_adapter(block_size=4, swa_block_size=0) replaces manager.journal, "
                                       "then fails on the SWA journal: the isolation still reads the old journal "
                                       "while the adapter records into the new one")
def test_a_refused_set_adapter_leaves_the_journals_and_the_isolation_as_they_were() -> None:
    m = make_world().manager
    journal, swa, isolation = m.journal, m.swa_journal, m._isolation
    with pytest.raises((ArithmeticError, TypeError, ValueError)):
        m.set_adapter(_Adapter(), block_size=4, swa_block_size=0)
    assert (m.journal, m.swa_journal, m._isolation, m.adapter) == (journal, swa, isolation, None)


@pytest.mark.xfail(strict=True, reason="rD: CanaryConfig takes on_violation=ISOLATE with mode=NONE (no canary) and "
                                       "reports policy ISOLATE; only mode=RAISE is checked for a conflict")
def test_an_isolate_policy_with_the_canary_off_is_refused_as_a_conflict() -> None:
    with pytest.raises(ValueError, match="on_violation"):
        CanaryConfig(mode=CanaryMode.NONE, on_violation=ViolationPolicy.ISOLATE)
