"""The scatter_req_token_ids operation: the contract of ``launch_scatter_req_token_ids_kernel`` and its
operation object.

SGLang's messages; dtype errors are TypeErrors.
"""


from typing import Annotated, ClassVar

import torch
from pydantic import Field

from kvcanary.errors import FAMILY
from kvcanary.operation import Operation
from kvcanary.ops import _calls as c
from kvcanary_contracts import Contract, ContractInfo, ContractTypeError, Relation, TensorArg
from kvcanary_contracts.examples import ExampleSet, Variant

_TYPE_ERR = {"dtype": ContractTypeError}
_R1 = {"rank": "scatter_req_token_ids {name} must be 1-D, got shape {shape}",
       "dtype": "scatter_req_token_ids {name} must be int64, got {actual}"}
_R2 = {"rank": "scatter_req_token_ids {name} must be 2-D, got shape {shape}",
       "dtype": "scatter_req_token_ids {name} must be int32, got {actual}"}


class ScatterLaunch(Contract):
    """Copy each request's token ids into its row of the expected-token pool."""

    contract: ClassVar[ContractInfo] = FAMILY.contract(
        "launch_scatter_req_token_ids_kernel", "S",
        "Scatter per-request token ids into the expected-token pool for VERIFY_TOKEN checks.",
        device_key="pool_out",
        writes=("pool_out",),
        rules=(
            Relation(
                name="offsets_len_is_bs_plus_one",
                require="offsets_len == bs + 1",
                message="scatter_req_token_ids offsets length {offsets_len} != bs+1 ({bs_plus_1})",
                values={"bs_plus_1": "bs + 1"},
                why="offsets holds each request's start in flat_in plus the end of the last one.",
                fix="Pass the exclusive cumsum of the per-request lengths with the total appended (bs + 1 entries).",
            ),
            Relation(
                name="pool_out_not_empty",
                require="pool_reqs >= 1 and pool_cols >= 1",
                message="scatter_req_token_ids pool_out must have at least one row and one column, got shape {shape}",
                values={"shape": "tuple(pool_out.shape)"},
                why="Requests are scattered into pool_out[req_pool_indices[r], :]; a pool without rows or columns "
                "holds no request, which every backend (and every other launcher that takes the pool) rejects.",
                fix="Pass the engine's expected-token pool, [max_reqs, max_context_len] with both at least 1.",
                breaks={"pool_cols": 0},
            ),
        ),
    )

    flat_in: Annotated[torch.Tensor, TensorArg(dtype=torch.int64, shape=("num_tokens",), messages=_R1,
                                               errors=_TYPE_ERR)] = Field(
        description="origin_input_ids + output_ids of every request, concatenated.")
    offsets: Annotated[torch.Tensor, TensorArg(dtype=torch.int64, shape=("offsets_len",), messages=_R1,
                                               errors=_TYPE_ERR)] = Field(
        description="Start of each request in flat_in, and the total (bs + 1 entries).")
    req_pool_indices: Annotated[torch.Tensor, TensorArg(dtype=torch.int64, shape=("bs",), messages=_R1,
                                                        errors=_TYPE_ERR)] = Field(
        description="Pool row of each request.")
    pool_out: Annotated[torch.Tensor, TensorArg(dtype=torch.int32, shape=("pool_reqs", "pool_cols"), messages=_R2,
                                                errors=_TYPE_ERR)] = Field(
        description="The expected-token pool, updated in place (rows and columns not written stay as they were).")


check_scatter = ScatterLaunch.checker()

EXAMPLES = ExampleSet("launch_scatter_req_token_ids_kernel", (Variant("3 requests", lambda: {
    "flat_in": c.i64(10), "offsets": c.i64(c.BS + 1), "req_pool_indices": c.i64(c.BS),
    "pool_out": c.i32(c.MAX_REQS, c.MAX_CONTEXT)}),))


def valid_call(device: c.Device = "cpu", *, bs: int = 2) -> c.Call:
    """A small valid scatter of ``bs`` requests' tokens into a 3 x 8 pool."""
    return {"flat_in": c.i64(5, device=device), "offsets": c.i64(bs + 1, device=device),
            "req_pool_indices": c.i64(bs, device=device), "pool_out": c.i32(3, 8, device=device)}

SCATTER = OPERATION = Operation(
    "scatter_req_token_ids", ScatterLaunch, constant="SCATTER", module="kvcanary.launch.scatter",
    doc="""``pool_out[rp, :min(len, cols)] = int32(flat_in[start:start+len])`` per request; the last request
    naming a row wins; everything else in the pool is left as it was.""",
    examples=EXAMPLES, call=valid_call,
)
launch_scatter_req_token_ids_kernel = OPERATION.launcher
