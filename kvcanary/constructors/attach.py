"""Contracts of ``attach_config(mode=..., real_kv=..., on_violation=...)``: the settings ``attach_canaries`` takes
as strings, narrower than SGLang's server strings (``CanaryConfig.from_strings``); and of its table sizes.

The transformers integration always runs a canary with a fingerprint: ``mode`` is ``log`` or ``raise`` (no
``none``) and ``real_kv`` is ``partial`` or ``all`` (no ``none``). The values are read from the enums they
name, less their NONE; the texts are those ``attach_canaries`` has always given.
"""

from kvcanary.constructors._settings import count, setting, settings_contract, validator
from kvcanary.consts import CanaryMode, RealKvHashMode
from kvcanary.guard.violation_policy import ViolationPolicy
from kvcanary_contracts import Relation

ATTACH_MODES = tuple(m.value for m in CanaryMode if m is not CanaryMode.NONE)
"""The ``mode`` values of ``attach_canaries``: log, raise."""
ATTACH_REAL_KV = tuple(m.name.lower() for m in RealKvHashMode if m is not RealKvHashMode.NONE)
"""The ``real_kv`` values of ``attach_canaries``: partial, all."""

AttachConfigContract = settings_contract(
    "attach_config", "F", "The CanaryConfig attach_canaries builds from its strings (mode, real_kv, on_violation).", {
        "mode": setting(str, "log or raise (any case, surrounding spaces ignored): what a violation does."),
        "real_kv": setting(str, "partial (16 bytes of each K/V row) or all (the whole row), any case."),
        "on_violation": setting(ViolationPolicy, "The violation policy attach_canaries read with "
                                "ViolationPolicy.parse (None: mode's).", optional=True,
                                messages={"type": "{name} must be a ViolationPolicy or None, got {type}"}),
    },
    rules=(
        Relation(
            name="real_kv_fingerprints", require="real_kv.strip().lower() in ATTACH_REAL_KV",
            message="real_kv must be 'partial' or 'all', got {real_kv!r}",
            why="transformers' paged cache is checked through the fingerprint of each slot's K/V bytes: without "
                "one (none) the canary could not tell a block's KV from another's.",
            fix="Pass partial (the default: 16 bytes of each K/V row) or all (the whole row).",
            breaks={"real_kv": "'none'"}),
        Relation(
            name="mode_log_or_raise", require="mode.strip().lower() in ATTACH_MODES",
            message="mode must be 'log' or 'raise', got {mode!r}",
            why="attach_canaries attaches a canary; mode says what it does with a violation, log it or fail the "
                "step. Not attaching is how to run without one (SGLang's none).",
            fix="Pass log (the default) or raise, or do not call attach_canaries.",
            breaks={"mode": "'off'"}),
        Relation(
            name="on_violation_agrees_with_raise_mode",
            require="on_violation is None or on_violation.name == 'RAISE' or mode.strip().lower() != 'raise'",
            over=("on_violation", "mode"), values={"policy": "on_violation.value"},
            message="on_violation={policy!r} conflicts with mode='raise'; pass one of them",
            why="mode='raise' already chooses the raise policy; another on_violation beside it says two different "
                "things, and kvcanary will not guess which one was meant.",
            fix="Leave mode at log (the default) and pass on_violation alone, or drop on_violation.",
            breaks={"mode": "'raise'"}),
    ),
    constants={"ATTACH_MODES": ATTACH_MODES, "ATTACH_REAL_KV": ATTACH_REAL_KV},
    qualified=False,
)

check_attach_config = AttachConfigContract.checker()

RequestTableSizesContract = settings_contract(
    "RequestTableSizes", "F", "The request table's sizes attach_canaries takes (max_requests, max_context_len).", {
        "max_requests": count(
            "Rows of the request table: requests held at once (None: twice the engine's batch).", optional=True,
            why="The table holds one row per request the engine runs at once; below one row it holds none, and "
                "every request of the run would fail at its first step.",
            fix="Pass the most requests the engine holds at once, or None for twice its batch."),
        "max_context_len": count(
            "Tokens one request's row holds (None: the model's max_position_embeddings or the cache's slots, "
            "whichever is less).", optional=True,
            why="Each row maps a request's tokens to their slots; a row of no tokens maps none, and every request "
                "would fail at its first step.",
            fix="Pass the longest context a request reaches, or None for the model's."),
    },
    qualified=False,
)

validate_request_table_sizes = validator(RequestTableSizesContract)
