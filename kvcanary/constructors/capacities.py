"""Contracts of ``CanaryCapacities(...)`` and ``CanaryCapacities.from_engine(...)``: every size is positive.

The messages are SGLang's (``<name> must be positive, got <value>``), without the owner's name.
"""

from functools import partial

from kvcanary.constructors._settings import count, settings_contract, validator

_POSITIVE = "{label} must be positive, got {{{name}}}"
_WHY = "Buffers are allocated once, at attach, with this many rows; with none every forward would overflow."
_FIX = "Size it from the engine (see `CanaryCapacities.from_engine`); it must hold at least one entry."
_size = partial(count, why=_WHY, fix=_FIX, message=_POSITIVE)
"""A capacity: a positive count, SGLang's message. A ``partial`` (no frame of its own), so each entry's
catalog origin stays the line it is declared on."""


CanaryCapacitiesContract = settings_contract(
    "CanaryCapacities", "C", "The sizes every manager buffer is allocated with, once, at attach.", {
        "verify_capacity": _size("Verify entries per forward (the sum of prefix lengths)."),
        "write_req_capacity": _size("Request rows per forward, CUDA-graph padding included."),
        "write_token_capacity": _size("Tokens written per forward."),
        "sweep_capacity": _size("Cached slots one sweep verifies."),
        "expected_token_capacity": _size("Tokens of the expected-token snapshot per forward."),
    }, qualified=False)

_ENGINE_WHY = "The capacities are derived from it; an engine setting of 0 would size a buffer of no rows."
_ENGINE_FIX = "Pass the engine's own setting (SGLang's server arguments), which is at least 1."
_engine_setting = partial(count, why=_ENGINE_WHY, fix=_ENGINE_FIX, message=_POSITIVE)
"""A positive engine setting the capacities are derived from (a ``partial``, as :data:`_size`)."""

CanaryCapacitiesFromEngine = settings_contract(
    "CanaryCapacities.from_engine", "C", "Size the manager's buffers from the engine's settings.", {
        "pool_slot_count": _engine_setting("KV slots of the pool (padding slot included)."),
        "max_batch_size": _engine_setting("Requests one forward may hold."),
        "req_rows": _engine_setting("Rows of req_to_token."),
        "max_tokens_per_forward": _engine_setting("Tokens one forward may write (a prefill chunk)."),
        "max_context_len": _engine_setting("Tokens one request may hold."),
        "spec_num_draft_tokens": count(
            "Draft tokens per request of speculative decoding (0: none).", minimum=0,
            why="Each request writes this many draft tokens plus one per forward; a negative count means nothing.",
            fix="Pass 0 without speculative decoding.", message="{label} must be non-negative, got {{{name}}}"),
    }, qualified=False)

validate_capacities = validator(CanaryCapacitiesContract)
check_from_engine = CanaryCapacitiesFromEngine.checker()
