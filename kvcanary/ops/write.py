"""The write operation: the contract of ``launch_canary_write_kernel`` and its operation object."""


import dataclasses
from typing import Annotated, ClassVar

import torch
from pydantic import Field

from kvcanary.context import VerifyOrWriteContext
from kvcanary.errors import FAMILY
from kvcanary.extensions import Extensions
from kvcanary.operation import Operation
from kvcanary.ops import _calls as c
from kvcanary.ops import _plan_inputs as p
from kvcanary.ops._shared import CONTEXT, EXTENSIONS, EXTENSIONS_DOC, WRITE_WRITES, write_plan_struct
from kvcanary.plans import WritePlan
from kvcanary_contracts import (
    Contract,
    ContractInfo,
    ForbiddenUnless,
    RequiredIf,
    RequiredWhen,
    ScalarArg,
    TensorArg,
)
from kvcanary_contracts.examples import ExampleSet, Variant

_TOKENS = ("num_tokens",)
_EXPECTED = ("expected_input_tokens", "expected_input_positions")


class WriteLaunch(Contract):
    """Stamp the records of the tokens this step writes, chaining each from its predecessor."""

    contract: ClassVar[ContractInfo] = FAMILY.contract(
        "launch_canary_write_kernel", "W",
        "Write canary records for the step's tokens (chain, position, token, real-KV fingerprint).",
        device_key="canary_buf",
        writes=WRITE_WRITES,
        rules=(
            RequiredIf(
                flag="enable_write_input_assert",
                fields=_EXPECTED,
                message="expected input tensors are required when enable_write_input_assert=True",
                why="With the input assert on, every written token is compared with an oracle's token and "
                "position; without both expected tensors there is nothing to compare with.",
                fix="Pass expected_input_tokens and expected_input_positions (int64, one per token), or set "
                "enable_write_input_assert=False.",
            ),
            ForbiddenUnless(
                flag="enable_write_input_assert",
                fields=_EXPECTED,
                message="expected input tensors must be None when enable_write_input_assert=False",
                why="Expected tensors given with the assert off would be silently ignored, which hides a "
                "wiring mistake (the caller believes the oracle check is running).",
                fix="Drop the expected tensors, or set enable_write_input_assert=True.",
            ),
            RequiredWhen(
                when="extensions is not None and extensions.write_slot_mismatch",
                fields=("req_pool_indices", "req_to_token"),
                message="launch_canary_write_kernel requires req_pool_indices and req_to_token when "
                "extensions.write_slot_mismatch is on",
                why="The write-slot check compares each token's out_cache_loc with req_to_token[req, position] of "
                "its request; without the table and each request row's pool index there is nothing to compare.",
                fix="Pass the batch's req_pool_indices and the engine's req_to_token (and the full-to-SWA LUT for an "
                "SWA group), or turn extensions.write_slot_mismatch off.",
            ),
            dataclasses.replace(p.REQ_TO_TOKEN_NOT_EMPTY, when="req_to_token is not None"),
            RequiredWhen(
                when="extensions is not None and extensions.write_slot_owner_mismatch",
                fields=("req_pool_indices", "slot_owner"),
                message="launch_canary_write_kernel requires req_pool_indices and slot_owner when "
                "extensions.write_slot_owner_mismatch is on",
                why="The owner check compares the holder of each written slot (slot_owner[out_cache_loc]) with the "
                "writing request's req_to_token row (req_pool_indices[r]); without both there is no writer or no "
                "holder to compare.",
                fix="Pass the batch's req_pool_indices and the engine's owner map (int64, one entry per canary slot: "
                "the req_to_token row holding it, -1 free, below -1 read-only), or turn "
                "extensions.write_slot_owner_mismatch off.",
            ),
        ),
    )

    context: Annotated[VerifyOrWriteContext, CONTEXT] = Field(description="The endpoint's buffers.")
    plan: Annotated[WritePlan, write_plan_struct("plan.")] = Field(description="Per-request write ranges.")
    input_ids: Annotated[torch.Tensor, TensorArg(dtype=torch.int64, shape=_TOKENS)] = Field(
        description="Token id per flat token (padded tail ignored).")
    positions: Annotated[torch.Tensor, TensorArg(dtype=torch.int64, shape=_TOKENS)] = Field(
        description="Position per flat token.")
    out_cache_loc: Annotated[torch.Tensor, TensorArg(dtype=torch.int64, shape=_TOKENS)] = Field(
        description="Canary slot per flat token; -1 skips the token.")
    enable_write_input_assert: Annotated[bool, ScalarArg(bool)] = Field(
        description="Compare each token and position with the oracle's expected ones.")
    expected_input_tokens: Annotated[torch.Tensor | None, TensorArg(dtype=torch.int64, shape=_TOKENS)] = Field(
        description="Oracle token per flat token (only with the input assert).")
    expected_input_positions: Annotated[torch.Tensor | None, TensorArg(dtype=torch.int64, shape=_TOKENS)] = Field(
        description="Oracle position per flat token (only with the input assert).")
    req_pool_indices: Annotated[torch.Tensor | None, TensorArg(dtype=torch.int64, shape=("bs",))] = Field(
        default=None, description="req_to_token row of each write-plan request row, the writer (write-slot and owner "
        "checks only; a request row past its end is not checked).")
    req_to_token: Annotated[torch.Tensor | None, p.REQ_TO_TOKEN] = Field(
        default=None, description="The engine's request-to-slot table (write-slot check only).")
    full_to_swa_index_mapping: Annotated[torch.Tensor | None, p.lut()] = Field(
        default=None, description="full→SWA translation of req_to_token for an SWA group's write (write-slot check "
        "only; None for a FULL group).")
    slot_owner: Annotated[torch.Tensor | None, TensorArg(
        dtype=torch.int64, shape=("num_slots",),
        messages={"size": "{name} must hold one entry per canary slot ({expected}), got {actual}"})] = Field(
        default=None, description="Owner map, one entry per canary slot: the req_to_token row that holds the slot, "
        "-1 free, below -1 held read-only (write-time owner check only).")
    extensions: Annotated[Extensions | None, EXTENSIONS] = Field(default=None, description=EXTENSIONS_DOC)


check_write = WriteLaunch.checker()


def _example(assert_inputs: bool) -> c.Call:
    """The catalog's write: the step's 6 tokens into the engine-shaped context."""
    n = c.NUM_TOKENS
    return {
        "context": c.engine_context(), "plan": c.engine_write_plan(), "input_ids": c.i64(n), "positions": c.i64(n),
        "out_cache_loc": c.i64(n), "enable_write_input_assert": assert_inputs,
        "expected_input_tokens": c.i64(n) if assert_inputs else None,
        "expected_input_positions": c.i64(n) if assert_inputs else None,
    }


def _example_slot_check() -> c.Call:
    return {**_example(False), "req_pool_indices": c.i64(c.BS), "req_to_token": c.i32(c.MAX_REQS, c.MAX_CONTEXT),
            "full_to_swa_index_mapping": c.i64(c.NUM_SLOTS + 1),
            "extensions": Extensions(zero_slot_in_live_range=True, write_slot_mismatch=True)}


def _example_owner_check() -> c.Call:
    return {**_example(False), "req_pool_indices": c.i64(c.BS), "slot_owner": c.i64(c.NUM_SLOTS),
            "extensions": Extensions(write_slot_owner_mismatch=True)}


EXAMPLES = ExampleSet("launch_canary_write_kernel", (
    Variant("input assert off", lambda: _example(False)),
    Variant("input assert on", lambda: _example(True), "with the oracle's expected tokens and positions"),
    Variant("extensions", _example_slot_check, "the write-slot check on, with req_to_token and the SWA table"),
    Variant("owner check", _example_owner_check, "the write-time owner check alone, with the batch's rows and the "
            "owner map"),
))


def valid_call(device: c.Device = "cpu", *, assert_inputs: bool = False, tokens: int = 6) -> c.Call:
    """A small valid write of ``tokens`` tokens (with the oracle's tensors when ``assert_inputs``)."""
    return {
        "context": c.context(device), "plan": c.write_plan(device), "input_ids": c.i64(tokens, device=device),
        "positions": c.i64(tokens, device=device), "out_cache_loc": c.i64(tokens, device=device),
        "enable_write_input_assert": assert_inputs,
        "expected_input_tokens": c.i64(tokens, device=device) if assert_inputs else None,
        "expected_input_positions": c.i64(tokens, device=device) if assert_inputs else None,
    }


WRITE = OPERATION = Operation(
    "write", WriteLaunch, constant="WRITE", module="kvcanary.launch.write",
    doc="""Write one record per token with ``out_cache_loc >= 0``, chained per request from its seed slot.""",
    examples=EXAMPLES, call=valid_call,
)
launch_canary_write_kernel = OPERATION.launcher
