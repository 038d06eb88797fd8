"""Specs and rules the three plan launchers share (batch rows, req_to_token, the SWA LUT, the token pool)."""


import torch

from kvcanary.consts import PLAN_BS_BLOCK_SIZE
from kvcanary_contracts import Relation, RequiredWhen, TensorArg

i64, i32 = torch.int64, torch.int32
BS = ("bs",)
CONSTANTS = {"PLAN_BS_BLOCK_SIZE": PLAN_BS_BLOCK_SIZE}

REQ_POOL_INDICES = TensorArg(dtype=i64, shape=BS)
PREFIX_LENS = TensorArg(dtype=i64, shape=BS)
EXTEND_SEQ_LENS = TensorArg(dtype=i64, shape=BS)
REQ_TO_TOKEN = TensorArg(dtype=i32, shape=("max_reqs", "max_seq_len"))
EXPECTED_TOKEN_POOL = TensorArg(dtype=i32, shape=("pool_reqs", "pool_cols"))
VALID_LENS = TensorArg(dtype=i64, shape=BS)

DOC = {
    "req_pool_indices": "req_to_token row per batch row; 0 is the CUDA-graph padding row.",
    "prefix_lens": "Tokens each request already has in the KV cache (verified this step).",
    "extend_seq_lens": "Tokens each request writes this step.",
    "req_to_token": "The engine's request-to-slot table (ReqToTokenPool.req_to_token), int32.",
    "lut": "full→SWA slot translation; required when swa_window_size > 0. Whenever given it translates every "
    "slot read (with swa_window_size=0: the whole prefix, translated); None for a FULL group.",
    "swa_window_size": "Sliding window: verify only the last swa_window_size prefix tokens (0: all).",
    "pool": "Per-request expected token ids (token-id validator), int32 [max_reqs, max_context_len].",
    "valid_lens": "Valid length of each batch row's pool row; required with the pool (ignored, never read, "
    "without one).",
    "offset": "Slot p holds the KV of token p + offset (0 for target pools, 1 for EAGLE draft pools).",
}


def lut(label: str | None = None) -> TensorArg:
    return TensorArg(dtype=i64, shape=(">= 1",), label=label)


def swa_requires_lut(launcher: str) -> RequiredWhen:
    return RequiredWhen(
        when="swa_window_size > 0",
        fields=("full_to_swa_index_mapping",),
        message=f"{launcher} requires full_to_swa_index_mapping when swa_window_size > 0",
        why="An SWA group's canary buffers are indexed by SWA-pool slot; without the full→SWA table the plan "
        "would name full-pool slots in the SWA buffer.",
        fix="Pass the pool's full_to_swa_index_mapping for the SWA group, or swa_window_size=0 for FULL.",
    )


def window_non_negative(launcher: str) -> Relation:
    return Relation(
        name="swa_window_size_non_negative",
        require="swa_window_size >= 0",
        message=f"{launcher} swa_window_size must be >= 0, got {{swa_window_size}}",
        why="The window is a token count; 0 means the FULL group (verify the whole prefix).",
        fix="Pass the model's sliding window for the SWA group and 0 for the FULL group.",
    )


REQ_TO_TOKEN_NOT_EMPTY = Relation(
    name="req_to_token_not_empty",
    require="max_reqs >= 1 and max_seq_len >= 1",
    message="req_to_token must have at least one row and one column (row 0 is the padding row), got shape {shape}",
    values={"shape": "tuple(req_to_token.shape)"},
    why="Every active batch row reads req_to_token[req_pool_indices[r], pos]; a table without rows or "
    "columns holds no slot at all (row 0, the padding row, always exists), so every backend rejects it.",
    fix="Pass the engine's ReqToTokenPool.req_to_token, [max_reqs, max_context_len] with both at least 1.",
    breaks={"max_seq_len": 0},
)

POOL_NOT_EMPTY = Relation(
    name="pool_not_empty",
    require="pool_reqs >= 1 and pool_cols >= 1",
    when="req_to_verify_expected_tokens is not None",
    message="req_to_verify_expected_tokens must have at least one row and one column, got shape {shape}",
    values={"shape": "tuple(req_to_verify_expected_tokens.shape)"},
    why="The pool is indexed by each request's req_to_token row and position; an empty pool holds no token "
    "for any of them, so every backend rejects it rather than read past it.",
    fix="Pass the engine's expected-token pool ([max_reqs, max_context_len], both at least 1), or None.",
    breaks={"pool_cols": 0},
)

# A batch one row too large for the plan block, with plans (where the launch has them) big enough for it.
TOO_MANY_ROWS = "PLAN_BS_BLOCK_SIZE + 1"


def bs_limit(launcher: str, *, with_write_plan: bool = False) -> Relation:
    breaks = {"bs": TOO_MANY_ROWS, **({"write_req_capacity": TOO_MANY_ROWS} if with_write_plan else {})}
    return Relation(
        name="bs_at_most_plan_block",
        require="bs <= PLAN_BS_BLOCK_SIZE",
        message=f"{launcher} supports at most bs={{PLAN_BS_BLOCK_SIZE}} reqs per launch, got bs={{bs}}. "
        "Bump _PLAN_BS_BLOCK_SIZE if real workloads need this.",
        why="The plan kernels scan every batch row inside one block of PLAN_BS_BLOCK_SIZE rows.",
        fix="Split the batch into launches of at most PLAN_BS_BLOCK_SIZE rows.",
        breaks=breaks,
    )


def bs_within_write_capacity(message: str) -> Relation:
    return Relation(
        name="bs_within_write_req_capacity",
        require="bs <= write_req_capacity",
        message=message,
        why="The plan writes one seed and one offset per batch row; the write plan must have room for all.",
        fix="Allocate the WritePlan with write_req_capacity >= the largest batch (cuda-graph max bs).",
    )


def pool_requires_valid_lens(message: str) -> RequiredWhen:
    return RequiredWhen(
        when="req_to_verify_expected_tokens is not None",
        fields=("req_to_verify_expected_tokens_valid_lens",),
        message=message,
        why="Pool rows are refilled only up to each request's current length; past it they hold a previous "
        "request's tokens, so the plan needs each row's valid length to know which entries to trust.",
        fix="Pass req_to_verify_expected_tokens_valid_lens (int64 [bs]) with the pool, or neither.",
    )
