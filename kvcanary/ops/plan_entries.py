"""The plan_entries operation: the contract of ``launch_plan_entries_kernel`` and its operation object.

Plan stage 2: one verify entry per prefix token.
"""


from typing import Annotated, ClassVar

import torch
from pydantic import Field

from kvcanary.consts import PLAN_OFFSETS_SCRATCH_LEN
from kvcanary.errors import FAMILY
from kvcanary.extensions import Extensions
from kvcanary.operation import Operation
from kvcanary.ops import _calls as c
from kvcanary.ops import _plan_inputs as p
from kvcanary.ops._shared import EXTENSIONS, EXTENSIONS_DOC
from kvcanary_contracts import Contract, ContractInfo, ScalarArg, TensorArg
from kvcanary_contracts.examples import ExampleSet, Variant

NAME = "launch_plan_entries_kernel"
_CAP = ("verify_capacity",)


class PlanEntriesLaunch(Contract):
    """Scatter the verify entries (slot, predecessor, position, expected token) using stage 1's offsets."""

    contract: ClassVar[ContractInfo] = FAMILY.contract(
        NAME, "E", "Plan stage 2: write one verify entry per prefix token.",
        device_key="verify_offsets_scratch",
        writes=("out_verify_slot_indices", "out_verify_expected_tokens", "out_verify_expected_positions",
                "out_verify_prev_slot_indices"),
        constants=p.CONSTANTS,
        rules=(
            p.pool_requires_valid_lens(
                "launch_plan_entries_kernel requires req_to_verify_expected_tokens_valid_lens when "
                "req_to_verify_expected_tokens is set"
            ),
            p.swa_requires_lut(NAME),
            p.window_non_negative(NAME),
            p.REQ_TO_TOKEN_NOT_EMPTY,
            p.POOL_NOT_EMPTY,
            p.bs_limit(NAME),
        ),
    )

    req_pool_indices: Annotated[torch.Tensor, p.REQ_POOL_INDICES] = Field(description=p.DOC["req_pool_indices"])
    prefix_lens: Annotated[torch.Tensor, p.PREFIX_LENS] = Field(description=p.DOC["prefix_lens"])
    req_to_token: Annotated[torch.Tensor, p.REQ_TO_TOKEN] = Field(description=p.DOC["req_to_token"])
    full_to_swa_index_mapping: Annotated[torch.Tensor | None, p.lut()] = Field(description=p.DOC["lut"])
    verify_offsets_scratch: Annotated[torch.Tensor, TensorArg(dtype=torch.int64, shape=(">= bs + 1",))] = Field(
        description="Stage 1's exclusive verify offsets, total at [bs].")
    verify_enable: Annotated[torch.Tensor, TensorArg(dtype=torch.int32, shape=(1,))] = Field(
        description="Stage 1's overflow flag: 0 writes nothing.")
    req_to_verify_expected_tokens: Annotated[torch.Tensor | None, p.EXPECTED_TOKEN_POOL] = Field(
        description=p.DOC["pool"])
    req_to_verify_expected_tokens_valid_lens: Annotated[torch.Tensor | None, p.VALID_LENS] = Field(
        description=p.DOC["valid_lens"])
    out_verify_slot_indices: Annotated[torch.Tensor, TensorArg(dtype=torch.int64, shape=_CAP)] = Field(
        description="Receives the slot of each entry.")
    out_verify_expected_tokens: Annotated[torch.Tensor, TensorArg(dtype=torch.int64, shape=_CAP)] = Field(
        description="Receives the expected token of each entry (-1: none).")
    out_verify_expected_positions: Annotated[torch.Tensor, TensorArg(dtype=torch.int64, shape=_CAP)] = Field(
        description="Receives the position of each entry.")
    out_verify_prev_slot_indices: Annotated[torch.Tensor, TensorArg(dtype=torch.int64, shape=_CAP)] = Field(
        description="Receives the predecessor slot of each entry (-1: chain head).")
    kv_token_id_vs_position_offset: Annotated[int, ScalarArg(int)] = Field(description=p.DOC["offset"])
    swa_window_size: Annotated[int, ScalarArg(int)] = Field(description=p.DOC["swa_window_size"])
    extensions: Annotated[Extensions | None, EXTENSIONS] = Field(default=None, description=EXTENSIONS_DOC)


check_plan_entries = PlanEntriesLaunch.checker()


def _example(swa: bool = False, pool: bool = False, ext: bool = False) -> c.Call:
    """The catalog's stage 2: 3 requests' entries into a verify plan of 32."""
    cap = c.VERIFY_CAPACITY
    return {
        "req_pool_indices": c.i64(c.BS),
        "prefix_lens": c.i64(c.BS),
        "req_to_token": c.i32(c.MAX_REQS, c.MAX_CONTEXT),
        "full_to_swa_index_mapping": c.i64(c.NUM_SLOTS + 1) if swa else None,
        "verify_offsets_scratch": c.i64(PLAN_OFFSETS_SCRATCH_LEN),
        "verify_enable": c.i32(1),
        "req_to_verify_expected_tokens": c.i32(c.MAX_REQS, c.MAX_CONTEXT) if pool else None,
        "req_to_verify_expected_tokens_valid_lens": c.i64(c.BS) if pool else None,
        "out_verify_slot_indices": c.i64(cap),
        "out_verify_expected_tokens": c.i64(cap),
        "out_verify_expected_positions": c.i64(cap),
        "out_verify_prev_slot_indices": c.i64(cap),
        "kv_token_id_vs_position_offset": 0,
        "swa_window_size": c.SWA_WINDOW if swa else 0,
        **({"extensions": c.every_extension()} if ext else {}),
    }


EXAMPLES = ExampleSet(NAME, (
    Variant("FULL group", _example),
    Variant("SWA group", lambda: _example(swa=True)),
    Variant("token-id pool", lambda: _example(pool=True)),
    Variant("extensions", lambda: _example(ext=True)),
))


def valid_call(device: c.Device = "cpu", *, bs: int = 3, cap: int = 8, pool: bool = False) -> c.Call:
    """A small valid stage 2 of ``bs`` requests into ``cap`` entries (the token pool if ``pool``)."""
    return {
        "req_pool_indices": c.i64(bs, device=device), "prefix_lens": c.i64(bs, device=device),
        "req_to_token": c.i32(4, 8, device=device), "full_to_swa_index_mapping": None,
        "verify_offsets_scratch": c.i64(PLAN_OFFSETS_SCRATCH_LEN, device=device),
        "verify_enable": c.i32(1, device=device),
        "req_to_verify_expected_tokens": c.i32(4, 8, device=device) if pool else None,
        "req_to_verify_expected_tokens_valid_lens": c.i64(bs, device=device) if pool else None,
        "out_verify_slot_indices": c.i64(cap, device=device), "out_verify_expected_tokens": c.i64(cap, device=device),
        "out_verify_expected_positions": c.i64(cap, device=device),
        "out_verify_prev_slot_indices": c.i64(cap, device=device),
        "kv_token_id_vs_position_offset": 0, "swa_window_size": 0,
    }

PLAN_ENTRIES = OPERATION = Operation(
    "plan_entries", PlanEntriesLaunch, constant="PLAN_ENTRIES", module="kvcanary.launch.plan_entries",
    doc="""Write entries ``[0, min(total, capacity))`` where ``total = verify_offsets_scratch[bs]``, unless
    ``verify_enable == 0``. Entries past the total are untouched.""",
    examples=EXAMPLES, call=valid_call,
)
launch_plan_entries_kernel = OPERATION.launcher
