"""The guard's settings on the manager: ``set_adapter``'s block sizes, and ``CanaryConfig``'s policy beside ``mode``.
A bad value is refused naming it, and the manager is left as it was (rD)."""

from __future__ import annotations

import pytest

from kvcanary.consts import CanaryMode
from kvcanary.guard import GuardDecision, ViolationPolicy
from kvcanary.manager import CanaryConfig
from kvcanary_contracts import ContractError
from tests.manager.world import make_world


class _Adapter:
    def apply(self, decision: GuardDecision) -> None:
        pass


_BAD_SIZES = [({"block_size": 0}, "block_size", ValueError), ({"block_size": -2}, "block_size", ValueError),
              ({"block_size": "4"}, "block_size", TypeError), ({"block_size": True}, "block_size", TypeError),
              ({"block_size": 4.0}, "block_size", TypeError),
              ({"block_size": 4, "swa_block_size": 0}, "swa_block_size", ValueError),
              ({"block_size": 4, "swa_block_size": "2"}, "swa_block_size", TypeError)]


@pytest.mark.parametrize(("kwargs", "name", "error"), _BAD_SIZES)
def test_set_adapter_refuses_a_block_size_below_one_naming_it(kwargs: dict[str, object], name: str,
                                                              error: type[Exception]) -> None:
    m = make_world().manager
    with pytest.raises(error, match=rf"^kv-canary: set_adapter: {name} must be (a positive int|an int) ") as info:
        m.set_adapter(_Adapter(), **kwargs)  # type: ignore[arg-type]
    assert type(info.value) is error


@pytest.mark.parametrize(("kwargs", "name", "error"), _BAD_SIZES)
def test_a_refused_set_adapter_leaves_the_journals_and_the_isolation_as_they_were(
        kwargs: dict[str, object], name: str, error: type[Exception]) -> None:
    m = make_world().manager
    journal, swa, isolation = m.journal, m.swa_journal, m._isolation
    with pytest.raises(error, match=rf"\b{name}\b"):
        m.set_adapter(_Adapter(), **kwargs)  # type: ignore[arg-type]
    assert (m.journal, m.swa_journal, m._isolation, m.adapter) == (journal, swa, isolation, None)


def test_set_adapter_with_new_sizes_replaces_the_journals_and_the_isolation_together() -> None:
    m = make_world().manager
    adapter = _Adapter()
    m.set_adapter(adapter, block_size=4, swa_block_size=2)
    assert (m.journal.block_size, m.swa_journal.block_size, m.adapter) == (4, 2, adapter)
    assert m._isolation.journal is m.journal and m._isolation.swa_journal is m.swa_journal
    journal = m.journal
    m.set_adapter(None, block_size=4, swa_block_size=2)  # the same sizes: the journals are kept
    assert m.journal is journal and m.adapter is None


@pytest.mark.parametrize("policy", [ViolationPolicy.ISOLATE, ViolationPolicy.RAISE])
def test_an_isolate_policy_with_the_canary_off_is_refused_as_a_conflict(policy: ViolationPolicy) -> None:
    with pytest.raises(ValueError, match="on_violation") as info:
        CanaryConfig(mode=CanaryMode.NONE, on_violation=policy)
    err = info.value
    assert isinstance(err, ContractError) and err.check.slug == "on_violation_needs_the_canary"
    assert str(err).splitlines()[0] == (
        f"kv-canary: CanaryConfig.on_violation={policy.value} conflicts with mode=NONE (the canary is off); leave "
        "mode at LOG (the default) when on_violation is set")


@pytest.mark.parametrize("policy", [None, ViolationPolicy.LOG])
def test_the_canary_off_takes_no_policy_or_its_own(policy: ViolationPolicy | None) -> None:
    """mode NONE's policy is LOG (``CanaryConfig.policy``): saying so again is no conflict."""
    assert CanaryConfig(mode=CanaryMode.NONE, on_violation=policy).policy is ViolationPolicy.LOG
