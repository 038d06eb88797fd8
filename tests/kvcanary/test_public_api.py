"""``kvcanary.__all__`` is the public surface: every name imports, none is private, the engine's names are there.

An engine writes ``import kvcanary as kc`` and drives everything from there, so a name that moves or
disappears breaks integrations; this pins the list.
"""

from __future__ import annotations

import importlib

import pytest

import kvcanary as kc
from kvcanary import consts

LAUNCHERS = {
    "launch_canary_plan_kernels", "launch_plan_offsets_kernel", "launch_plan_entries_kernel",
    "launch_canary_verify_kernel", "launch_canary_write_kernel", "launch_scatter_req_token_ids_kernel",
}
FORMAT = {
    "CANARY_CHAIN_ANCHOR", "CANARY_SLOT_BYTES", "CANARY_FIELDS_PER_SLOT", "VIOLATION_FIELDS", "FailReason",
    "RealKvHashMode", "CanaryLaunchTag", "PoolKind", "CanaryMode", "splitmix64", "splitmix64_mix3", "ANCHOR_HASH",
}
DATA = {"VerifyOrWriteContext", "RealKvSource", "VerifyPlan", "WritePlan", "ViolationLog", "Violation",
        "format_violation", "ContractError", "ContractTypeError"}
MANAGER = {
    "CanaryManager", "CanaryConfig", "CanaryCapacities", "KvPoolSpec", "PoolGroupSpec", "CanaryBatch",
    "ExpectedTokens", "SweepEntries", "StepStats", "ViolationEvent", "HostSnapshot", "VerifyBudget",
}


def test_every_exported_name_imports() -> None:
    assert len(set(kc.__all__)) == len(kc.__all__), "duplicates in __all__"
    for name in kc.__all__:
        assert hasattr(kc, name), name
    ns: dict[str, object] = {}
    exec("from kvcanary import *", ns)
    assert set(kc.__all__) <= set(ns)


def test_no_private_name_is_exported() -> None:
    assert [n for n in kc.__all__ if n.startswith("_")] == []
    assert not hasattr(kc, "_PLAN_BS_BLOCK_SIZE") and not hasattr(kc, "_SCATTER_COL_BLOCK")
    # SGLang's private spellings stay where SGLang has them, beside the public names
    assert consts._PLAN_BS_BLOCK_SIZE == kc.PLAN_BS_BLOCK_SIZE and consts._SCATTER_COL_BLOCK == kc.SCATTER_COL_BLOCK


@pytest.mark.parametrize("group", [LAUNCHERS, FORMAT, DATA, MANAGER], ids=["launchers", "format", "data", "manager"])
def test_expected_names_are_exported(group: set[str]) -> None:
    assert group <= set(kc.__all__), sorted(group - set(kc.__all__))


def test_manager_names_are_the_manager_modules_objects() -> None:
    manager = importlib.import_module("kvcanary.manager")
    for name in MANAGER:
        assert getattr(kc, name) is getattr(manager, name), name
