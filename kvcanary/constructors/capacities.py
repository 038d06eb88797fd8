"""Contracts of ``CanaryCapacities(...)`` and ``CanaryCapacities.from_engine(...)``: every size is positive.

The messages are SGLang's (``<name> must be positive, got <value>``), without the owner's name.
"""

from kvcanary.constructors._settings import count, settings_contract, validator

_POSITIVE = "{label} must be positive, got {{{name}}}"
_WHY = "Buffers are allocated once, at attach, with this many rows; with none every forward would overflow."
_FIX = "Size it from the engine (see `CanaryCapacities.from_engine`); it must hold at least one entry."


CanaryCapacitiesContract = settings_contract(
    "CanaryCapacities", "C", "The sizes every manager buffer is allocated with, once, at attach.", {
        "verify_capacity": count("Verify entries per forward (the sum of prefix lengths).", why=_WHY, fix=_FIX,
                                 message=_POSITIVE),
        "write_req_capacity": count("Request rows per forward, CUDA-graph padding included.", why=_WHY, fix=_FIX,
                                    message=_POSITIVE),
        "write_token_capacity": count("Tokens written per forward.", why=_WHY, fix=_FIX, message=_POSITIVE),
        "sweep_capacity": count("Cached slots one sweep verifies.", why=_WHY, fix=_FIX, message=_POSITIVE),
        "expected_token_capacity": count("Tokens of the expected-token snapshot per forward.", why=_WHY, fix=_FIX,
                                         message=_POSITIVE),
    }, qualified=False)

_ENGINE_WHY = "The capacities are derived from it; an engine setting of 0 would size a buffer of no rows."
_ENGINE_FIX = "Pass the engine's own setting (SGLang's server arguments), which is at least 1."

CanaryCapacitiesFromEngine = settings_contract(
    "CanaryCapacities.from_engine", "C", "Size the manager's buffers from the engine's settings.", {
        "pool_slot_count": count("KV slots of the pool (padding slot included).", why=_ENGINE_WHY, fix=_ENGINE_FIX,
                                 message=_POSITIVE),
        "max_batch_size": count("Requests one forward may hold.", why=_ENGINE_WHY, fix=_ENGINE_FIX,
                                message=_POSITIVE),
        "req_rows": count("Rows of req_to_token.", why=_ENGINE_WHY, fix=_ENGINE_FIX, message=_POSITIVE),
        "max_tokens_per_forward": count("Tokens one forward may write (a prefill chunk).", why=_ENGINE_WHY,
                                        fix=_ENGINE_FIX, message=_POSITIVE),
        "max_context_len": count("Tokens one request may hold.", why=_ENGINE_WHY, fix=_ENGINE_FIX,
                                 message=_POSITIVE),
        "spec_num_draft_tokens": count(
            "Draft tokens per request of speculative decoding (0: none).", minimum=0,
            why="Each request writes this many draft tokens plus one per forward; a negative count means nothing.",
            fix="Pass 0 without speculative decoding.", message="{label} must be non-negative, got {{{name}}}"),
    }, qualified=False)

validate_capacities = validator(CanaryCapacitiesContract)
check_from_engine = CanaryCapacitiesFromEngine.checker()
