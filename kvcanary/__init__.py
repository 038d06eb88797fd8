"""kvcanary: catch KV-cache corruption in LLM inference engines while they serve.

A 32-byte canary record sits beside every KV slot (token, position, a hash chained from the previous
token's record, a fingerprint of the real K/V bytes). Before and after each forward the slots attention is
about to read are re-verified; mismatches land in a device-side ring the host reads without stalling.

Every public name is importable from here: the format's constants and enums, the launchers and their
data types (with SGLang kv-canary's names, so an engine switches with one import line), the backend
registry, and the engine-side :class:`CanaryManager` with the types an engine drives it with. Private
launch-shape constants (``_PLAN_BS_BLOCK_SIZE``, ...) stay in :mod:`kvcanary.consts`.

The names are resolved on first use (PEP 562): ``import kvcanary`` costs no torch import until a name is
touched, so ``kvcanary --help`` answers at once. The imports under ``TYPE_CHECKING`` below are the one list
of where each name lives: type checkers read them, and :mod:`kvcanary._lazy` reads the same statements.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvcanary.consts import (
        CANARY_CHAIN_ANCHOR,
        CANARY_FIELD_POSITION,
        CANARY_FIELD_PREV_HASH,
        CANARY_FIELD_REAL_KV_HASH,
        CANARY_FIELD_TOKEN,
        CANARY_FIELDS_PER_SLOT,
        CANARY_SLOT_BYTES,
        DEFAULT_RING_CAPACITY,
        INVALID_SLOT,
        MAX_REAL_KV_SOURCES,
        NUM_LAUNCH_TAGS,
        PLAN_BS_BLOCK_SIZE,
        PLAN_OFFSETS_SCRATCH_LEN,
        REAL_KV_SOURCE_FIELD_NUM_BYTES_PER_TOKEN,
        REAL_KV_SOURCE_FIELD_PAGE_SIZE,
        REAL_KV_SOURCE_FIELD_READ_BYTES,
        REAL_KV_SOURCE_FIELDS_PER_ENTRY,
        REQ_POOL_IDX_PADDING,
        SCATTER_COL_BLOCK,
        TOKEN_TO_KV_SLOT_PADDING,
        VIOLATION_FIELD_EXPECTED_AUX,
        VIOLATION_FIELD_EXPECTED_TOKEN,
        VIOLATION_FIELD_FAIL_REASON_BITS,
        VIOLATION_FIELD_KERNEL_KIND,
        VIOLATION_FIELD_POSITION,
        VIOLATION_FIELD_SLOT_IDX,
        VIOLATION_FIELD_STORED_CHAIN_HASH,
        VIOLATION_FIELD_STORED_TOKEN,
        VIOLATION_FIELDS,
        CanaryLaunchTag,
        CanaryMode,
        FailReason,
        PoolKind,
        RealKvHashMode,
    )
    from kvcanary.context import VerifyOrWriteContext
    from kvcanary.extensions import Extensions
    from kvcanary.guard.violation_policy import ViolationPolicy
    from kvcanary.hashing import ANCHOR_HASH, chain_prev_hashes, record_hash, splitmix64, splitmix64_mix3
    from kvcanary.launch.plan import launch_canary_plan_kernels
    from kvcanary.launch.plan_entries import launch_plan_entries_kernel
    from kvcanary.launch.plan_offsets import launch_plan_offsets_kernel
    from kvcanary.launch.scatter import launch_scatter_req_token_ids_kernel
    from kvcanary.launch.verify import launch_canary_verify_kernel
    from kvcanary.launch.write import launch_canary_write_kernel
    from kvcanary.manager import (
        CanaryBatch,
        CanaryCapacities,
        CanaryConfig,
        CanaryManager,
        ExpectedTokens,
        HostSnapshot,
        KvPoolSpec,
        PoolGroupSpec,
        StepStats,
        SweepEntries,
        VerifyBudget,
        ViolationEvent,
    )
    from kvcanary.operation import operators
    from kvcanary.plans import VerifyPlan, WritePlan
    from kvcanary.registry import (
        Backend,
        BackendError,
        Op,
        OpSupport,
        Reason,
        ReasonKind,
        register_backend,
        registered_backends,
        use_backend,
    )
    from kvcanary.sources import RealKvSource
    from kvcanary.violations import Violation, ViolationLog, ViolationSnapshot, format_violation
    from kvcanary_contracts import ContractError, ContractTypeError

__version__ = "0.1.0"

__all__ = [
    "ANCHOR_HASH",
    "CANARY_CHAIN_ANCHOR",
    "CANARY_FIELDS_PER_SLOT",
    "CANARY_FIELD_POSITION",
    "CANARY_FIELD_PREV_HASH",
    "CANARY_FIELD_REAL_KV_HASH",
    "CANARY_FIELD_TOKEN",
    "CANARY_SLOT_BYTES",
    "DEFAULT_RING_CAPACITY",
    "INVALID_SLOT",
    "MAX_REAL_KV_SOURCES",
    "NUM_LAUNCH_TAGS",
    "PLAN_BS_BLOCK_SIZE",
    "PLAN_OFFSETS_SCRATCH_LEN",
    "REAL_KV_SOURCE_FIELDS_PER_ENTRY",
    "REAL_KV_SOURCE_FIELD_NUM_BYTES_PER_TOKEN",
    "REAL_KV_SOURCE_FIELD_PAGE_SIZE",
    "REAL_KV_SOURCE_FIELD_READ_BYTES",
    "REQ_POOL_IDX_PADDING",
    "SCATTER_COL_BLOCK",
    "TOKEN_TO_KV_SLOT_PADDING",
    "VIOLATION_FIELDS",
    "VIOLATION_FIELD_EXPECTED_AUX",
    "VIOLATION_FIELD_EXPECTED_TOKEN",
    "VIOLATION_FIELD_FAIL_REASON_BITS",
    "VIOLATION_FIELD_KERNEL_KIND",
    "VIOLATION_FIELD_POSITION",
    "VIOLATION_FIELD_SLOT_IDX",
    "VIOLATION_FIELD_STORED_CHAIN_HASH",
    "VIOLATION_FIELD_STORED_TOKEN",
    "Backend",
    "BackendError",
    "CanaryBatch",
    "CanaryCapacities",
    "CanaryConfig",
    "CanaryLaunchTag",
    "CanaryManager",
    "CanaryMode",
    "ContractError",
    "ContractTypeError",
    "ExpectedTokens",
    "Extensions",
    "FailReason",
    "HostSnapshot",
    "KvPoolSpec",
    "Op",
    "OpSupport",
    "PoolGroupSpec",
    "PoolKind",
    "RealKvHashMode",
    "RealKvSource",
    "Reason",
    "ReasonKind",
    "StepStats",
    "SweepEntries",
    "VerifyBudget",
    "VerifyOrWriteContext",
    "VerifyPlan",
    "Violation",
    "ViolationEvent",
    "ViolationLog",
    "ViolationPolicy",
    "ViolationSnapshot",
    "WritePlan",
    "chain_prev_hashes",
    "format_violation",
    "launch_canary_plan_kernels",
    "launch_canary_verify_kernel",
    "launch_canary_write_kernel",
    "launch_plan_entries_kernel",
    "launch_plan_offsets_kernel",
    "launch_scatter_req_token_ids_kernel",
    "operators",
    "record_hash",
    "register_backend",
    "registered_backends",
    "splitmix64",
    "splitmix64_mix3",
    "use_backend",
]


if not TYPE_CHECKING:  # hidden from type checkers, which would otherwise accept any attribute of kvcanary
    from kvcanary._lazy import attach

    __getattr__, __dir__ = attach(__name__, globals(), __all__)
    del attach
