"""Contract of ``RealKvSource(...)``: the checks its ``__post_init__`` runs, in SGLang's order."""


from typing import Annotated, ClassVar

import torch
from pydantic import Field

from kvcanary.errors import FAMILY
from kvcanary_contracts import Contract, ContractInfo, Relation, ScalarArg, TensorArg
from kvcanary_contracts.mutations import PadStride, Resize

_WHY_VIEW = "The source must be a view of the live KV pool so the hash reads the bytes attention reads."


class RealKvSourceContract(Contract):
    """``RealKvSource(tensor=..., page_size=..., num_bytes_per_token=..., read_bytes=...)``."""

    contract: ClassVar[ContractInfo] = FAMILY.contract(
        "RealKvSource", "R", "One buffer whose bytes are folded into each slot's real-KV fingerprint.",
        rules=(
            Relation(
                name="page_size_positive",
                require="page_size >= 1",
                message="RealKvSource.page_size must be >= 1, got {page_size}",
                why="Slot s lives in row s // page_size; a page size below 1 names no row.",
                fix="Pass the pool's page size (1 for a token-major pool).",
            ),
            Relation(
                name="num_bytes_per_token_multiple_of_16",
                require="num_bytes_per_token > 0 and num_bytes_per_token % 16 == 0",
                message="RealKvSource.num_bytes_per_token must be a positive multiple of 16, got {num_bytes_per_token}",
                why="Each slot's strip is folded in 16-byte chunks with 16-byte loads; strips must start and end "
                "on 16-byte boundaries.",
                fix="Pass the byte width of one token's row (heads x head_dim x element size), which is a "
                "multiple of 16 for every real KV layout; pad the layout otherwise.",
                breaks={"num_bytes_per_token": "num_bytes_per_token + 8"},
            ),
            Relation(
                name="read_bytes_in_range",
                require="read_bytes > 0 and read_bytes <= num_bytes_per_token and read_bytes % 16 == 0",
                message="RealKvSource.read_bytes must be a positive multiple of 16 in "
                "(0, num_bytes_per_token={num_bytes_per_token}], got {read_bytes}",
                why="ALL mode hashes the first read_bytes of each strip; it cannot read past the strip and "
                "folds 16 bytes at a time.",
                fix="Use 16 for a PARTIAL-style prefix or num_bytes_per_token for the whole row; leave the "
                "source out of the tuple instead of passing 0.",
                breaks={"read_bytes": "num_bytes_per_token + 16"},
            ),
            Relation(
                name="has_rows",
                require="tensor.shape[0] >= 1",
                message="RealKvSource.tensor must have at least one row, got shape {shape}",
                values={"shape": "tuple(tensor.shape)"},
                why="Slot s's strip lives in row s // page_size; a tensor without rows has no strip for any slot.",
                fix="Pass a view of the pool buffer with at least one page (row).",
                breaks={"tensor": Resize(0, 0)},
            ),
            Relation(
                name="row_stride_multiple_of_16",
                require="tensor.stride(0) * tensor.element_size() % 16 == 0",
                message="RealKvSource.tensor row stride must be a multiple of 16 bytes, got {row_stride_bytes} "
                "bytes (shape={shape}, strides={strides}, dtype={dtype})",
                values={
                    "row_stride_bytes": "tensor.stride(0) * tensor.element_size()",
                    "shape": "tuple(tensor.shape)",
                    "strides": "tuple(tensor.stride())",
                    "dtype": "tensor.dtype",
                },
                why="Rows are read with 16-byte vector loads, so every row must start 16-byte aligned.",
                fix="View the pool buffer so each row (page) is a multiple of 16 bytes wide.",
                breaks={"tensor": PadStride(dim=0, nbytes=8)},
            ),
        ),
    )

    tensor: Annotated[
        torch.Tensor,
        TensorArg(min_rank=2, contiguous=False, label="RealKvSource.tensor",
                  messages={"min_rank": "RealKvSource.tensor must be at least 2-D, got shape {shape}"}),
    ] = Field(description="A view of the live KV buffer: one row per page, pages of page_size token strips. "
              + _WHY_VIEW)
    page_size: Annotated[int, ScalarArg(int, label="RealKvSource.page_size")] = Field(
        description="Tokens (slots) per row of the tensor.")
    num_bytes_per_token: Annotated[int, ScalarArg(int, label="RealKvSource.num_bytes_per_token")] = Field(
        description="Bytes of one slot's strip inside a row.")
    read_bytes: Annotated[int, ScalarArg(int, label="RealKvSource.read_bytes")] = Field(
        description="Bytes of the strip that ALL mode hashes (PARTIAL always hashes 16).")


check_real_kv_source = RealKvSourceContract.checker()
