"""Extensions: the opt-in checks beyond the SGLang-compatible format (every flag off by default).

``extensions=None`` (the default of every launcher that takes it) and ``Extensions()`` (every flag off)
both run exactly today's kernels: the flags select kernel specializations, so a flag that is off costs
nothing. Plain bool fields only: a launcher's schema can flatten the object into scalars.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class Extensions:
    """Which extension checks run.

    ``zero_slot_in_live_range``: the plan marks a ``req_to_token`` entry of 0 (the padding slot) inside a
    live request's verified range, and verify reports it as ZERO_SLOT_IN_LIVE_RANGE instead of skipping it.
    Plan and verify of one forward must share the setting (the manager does).

    ``write_slot_mismatch``: write compares each token's ``out_cache_loc`` with
    ``req_to_token[req, position]`` of its request and reports a difference as WRITE_SLOT_MISMATCH (the
    record is still written). Needs ``req_pool_indices`` and ``req_to_token`` at the write launch.

    ``write_slot_owner_mismatch``: write looks up each stored token's slot in ``slot_owner`` (the engine's
    owner map: per canary slot, the ``req_to_token`` row that holds it, -1 free, below -1 held read-only) and
    reports a slot held by anyone but the writing request's row as WRITE_SLOT_OWNER_MISMATCH, naming the
    writer and the holder (the record is still written). Needs ``req_pool_indices`` and ``slot_owner`` at
    the write launch.

    The launchers' contracts check the field types (a non-bool flag is a ContractError with its code).
    """

    zero_slot_in_live_range: bool = False
    write_slot_mismatch: bool = False
    write_slot_owner_mismatch: bool = False

    @property
    def any(self) -> bool:
        """Whether any flag is on."""
        return self.zero_slot_in_live_range or self.write_slot_mismatch or self.write_slot_owner_mismatch


def zero_slot_on(ext: Extensions | None) -> bool:
    """Whether ``ext`` turns the zero-slot check on (None: off)."""
    return ext is not None and ext.zero_slot_in_live_range


def write_slot_on(ext: Extensions | None) -> bool:
    """Whether ``ext`` turns the write-slot check on (None: off)."""
    return ext is not None and ext.write_slot_mismatch


def write_owner_on(ext: Extensions | None) -> bool:
    """Whether ``ext`` turns the write-time owner check on (None: off)."""
    return ext is not None and ext.write_slot_owner_mismatch
