"""Contracts of the evidence settings: ``BundleLimits(...)`` and ``RequestView(...)``.

``BundleLimits`` bounds what a bundle sink captures; ``RequestView`` is what an engine's describer says about
one request (its tokens, their positions and slots, its block size).
"""

from kvcanary.constructors._settings import count, setting, settings_contract, validator
from kvcanary_contracts import Relation

_LIMIT_WHY = "A sink with no room for a bundle, a row or a byte would capture nothing on the first violation."
_LIMIT_FIX = "Pass a positive count, or leave the default."

BundleLimitsContract = settings_contract(
    "BundleLimits", "X", "How much evidence one bundle sink captures.", {
        "max_bundles": count("Bundles one sink writes at most (one per corrupted slot).", why=_LIMIT_WHY,
                             fix=_LIMIT_FIX),
        "max_rows": count("Violation rows one bundle keeps at most.", why=_LIMIT_WHY, fix=_LIMIT_FIX),
        "max_bytes": count("Real-KV bytes one bundle copies at most.", why=_LIMIT_WHY, fix=_LIMIT_FIX),
    })

RequestViewContract = settings_contract(
    "RequestView", "X", "One request as the engine sees it now, for a bundle's owners.", {
        "request_id": setting(str, "The engine's id of the request."),
        "tokens": setting(tuple, "The request's token ids, one per position it holds."),
        "positions": setting(tuple, "Each token's position in the request."),
        "slots": setting(tuple, "Each position's KV slot (-1: none mapped)."),
        "block_size": count("The engine's block (page) size: slot // block_size is the block.",
                            why="Blocks are slots divided by the block size; a size below 1 names no block.",
                            fix="Pass the engine's page size (1 for a token-major pool)."),
        "live": setting(bool, "Whether the request is still running."),
    },
    rules=(
        Relation(
            name="one_length", require="len(tokens) == len(positions) and len(positions) == len(slots)",
            over=("tokens", "positions", "slots"),
            values={"request": "request_id", "n_tokens": "len(tokens)", "n_positions": "len(positions)",
                    "n_slots": "len(slots)"},
            message="RequestView({request!r}): tokens, positions and slots must have one length, got "
                    "{n_tokens}, {n_positions}, {n_slots}",
            why="Entry i of each describes one token: its id, its position and the slot holding its KV.",
            fix="Build the three from the same positions (the block table expanded to slots).",
            breaks={"slots": "slots[:-1]"}),
    ),
)

validate_bundle_limits = validator(BundleLimitsContract)
validate_request_view = validator(RequestViewContract)
