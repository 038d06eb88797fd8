"""The verify_budget operation: a verification budget's filter of a verify plan, ``launch_verify_budget_kernel``.

From a full verify plan (built by the plan kernels, with its per-request offsets scratch) it writes the smaller
plan a :class:`~kvcanary.manager.budget.VerifyBudget` verifies this step, and moves the budget's per-row
cursors, in one launch: its work is proportional to the batch and to the entries it keeps, never to the full
plan's. Request ``b`` of ``count`` entries ``[scratch[b], scratch[b + 1])``, ``M = max(count - newest, 0)``
older ones, keeps its ``newest`` last entries and the older ``j`` with ``(j - first) mod max(M, 1) < stride``,
in plan order. The cursor is a token position: ``first = (cursor - base) mod max(M, 1)``, where ``base`` is
the position of the request's first entry (``verify_expected_positions[scratch[b]]``, read on the device; 0
when that entry lies past the plan's count), so a sliding window that drops entries from its front leaves the
cursor on the same token (full attention's ``base`` is 0: the cursor is an index). The cursor of its row then
becomes ``base + (first + advance * verify_enable * stride) mod max(M, 1)`` (an overflowed plan moves no
window), unless the request has no entries (a padding row, a first chunk): then its row's cursor stays as it
is. Given a
``skipped_verifies`` counter, the launch also adds ``1 - verify_enable`` to it (one thread): the full plan's
overflow count, taken where the filter reads the enable anyway rather than by two more launches.
"""

from typing import Annotated, ClassVar

import torch
from pydantic import Field

from kvcanary.consts import PLAN_BS_BLOCK_SIZE
from kvcanary.errors import FAMILY
from kvcanary.operation import Operation
from kvcanary.ops import _calls as c
from kvcanary_contracts import Contract, ContractInfo, Relation, ScalarArg, TensorArg
from kvcanary_contracts.examples import ExampleSet, Variant

NAME = "launch_verify_budget_kernel"
_I64 = torch.int64
_I32 = torch.int32


class VerifyBudgetLaunch(Contract):
    """Filter a verify plan down to a budget's entries and move the budget's cursors."""

    contract: ClassVar[ContractInfo] = FAMILY.contract(
        NAME, "U", "Filter a verify plan down to a verification budget's entries and advance its cursors.",
        device_key="verify_slot_indices",
        writes=("cursor", "out_verify_slot_indices", "out_verify_expected_tokens", "out_verify_expected_positions",
                "out_verify_prev_slot_indices", "out_verify_num_valid", "out_verify_enable", "skipped_verifies"),
        constants={"PLAN_BS_BLOCK_SIZE": PLAN_BS_BLOCK_SIZE},
        rules=(
            Relation(
                name="bs_in_block",
                require="bs <= PLAN_BS_BLOCK_SIZE",
                message="verify_budget bs must be in [0, {PLAN_BS_BLOCK_SIZE}], got {bs}",
                why="Each program sums the kept entries of the requests before its own in one block of "
                "PLAN_BS_BLOCK_SIZE rows, as the plan kernels scan them.",
                fix="Split the batch into launches of at most PLAN_BS_BLOCK_SIZE rows.",
            ),
            Relation(
                name="stride_positive",
                require="stride >= 1",
                message="verify_budget stride must be at least 1, got {stride}",
                why="A window of no older entries would never verify them: the budget's period would be infinite.",
                fix="Pass VerifyBudget.stride(batch_size), which is at least 1.",
            ),
            Relation(
                name="newest_non_negative",
                require="newest_per_request >= 0",
                message="verify_budget newest_per_request must be non-negative, got {newest_per_request}",
                why="It counts each request's newest entries, verified every step.",
                fix="Pass VerifyBudget.newest_per_request.",
            ),
            Relation(
                name="verify_capacity_positive",
                require="verify_capacity >= 1",
                message="verify_budget verify_capacity must be positive, got {verify_capacity}",
                why="The filter reads the full plan's entries; a plan of no capacity has none to read.",
                fix="Pass the full plan's arrays, allocated with VerifyPlan.allocate (a positive capacity).",
            ),
            Relation(
                name="cursor_not_empty",
                require="num_rows >= 1",
                message="verify_budget cursor must hold at least one request row, got {num_rows}",
                why="Each request's window starts at its row's cursor; rows past the end read the last one.",
                fix="Allocate the cursor with one entry per request row of req_to_token.",
            ),
        ),
    )

    req_pool_indices: Annotated[torch.Tensor, TensorArg(dtype=_I64, shape=("bs",))] = Field(
        description="Each request's row (its cursor's index; clamped into the cursor).")
    verify_offsets_scratch: Annotated[torch.Tensor, TensorArg(dtype=_I64, shape=(">= bs + 1",))] = Field(
        description="The full plan's per-request exclusive offsets, the total at [bs] (plan stage 1's scratch).")
    verify_slot_indices: Annotated[torch.Tensor, TensorArg(dtype=_I64, shape=("verify_capacity",))] = Field(
        description="The full plan's slots.")
    verify_expected_tokens: Annotated[torch.Tensor, TensorArg(dtype=_I64, shape=("verify_capacity",))] = Field(
        description="The full plan's expected tokens.")
    verify_expected_positions: Annotated[torch.Tensor, TensorArg(dtype=_I64, shape=("verify_capacity",))] = Field(
        description="The full plan's expected positions.")
    verify_prev_slot_indices: Annotated[torch.Tensor, TensorArg(dtype=_I64, shape=("verify_capacity",))] = Field(
        description="The full plan's predecessor slots.")
    verify_num_valid: Annotated[torch.Tensor, TensorArg(dtype=_I32, shape=(1,))] = Field(
        description="The full plan's entry count (min(total, verify_capacity)); a count past the capacity keeps "
        "nothing beyond it.")
    verify_enable: Annotated[torch.Tensor, TensorArg(dtype=_I32, shape=(1,))] = Field(
        description="The full plan's enable (0: it overflowed).")
    cursor: Annotated[torch.Tensor, TensorArg(dtype=_I64, shape=("num_rows",))] = Field(
        description="Per request row: the token position where its window of older entries starts (taken modulo "
        "the older entries, from the request's first entry's position); advanced in place by requests with entries "
        "(padding rows, of none, never move it). A row named by two requests with entries (an engine "
        "bug): its cursor and the older entries each of them keeps are undefined (one reads the other's write).")
    advance: Annotated[torch.Tensor, TensorArg(dtype=_I64, shape=(1,))] = Field(
        description="1: the cursors move by stride this step (if verify_enable is 1: an overflowed plan moves "
        "none); 0: they stay this step.")
    out_verify_slot_indices: Annotated[torch.Tensor, TensorArg(dtype=_I64, shape=("budget_capacity",))] = Field(
        description="Receives the kept entries' slots (entries past the count are left undefined).")
    out_verify_expected_tokens: Annotated[torch.Tensor, TensorArg(dtype=_I64, shape=("budget_capacity",))] = Field(
        description="Receives the kept entries' expected tokens.")
    out_verify_expected_positions: Annotated[torch.Tensor, TensorArg(dtype=_I64, shape=("budget_capacity",))] = (
        Field(description="Receives the kept entries' expected positions."))
    out_verify_prev_slot_indices: Annotated[torch.Tensor, TensorArg(dtype=_I64, shape=("budget_capacity",))] = Field(
        description="Receives the kept entries' predecessor slots.")
    out_verify_num_valid: Annotated[torch.Tensor, TensorArg(dtype=_I32, shape=(1,))] = Field(
        description="Receives the kept entries the full plan holds, at most budget_capacity.")
    out_verify_enable: Annotated[torch.Tensor, TensorArg(dtype=_I32, shape=(1,))] = Field(
        description="Receives verify_enable.")
    newest_per_request: Annotated[int, ScalarArg(int)] = Field(
        description="Each request's newest entries, kept every step.")
    stride: Annotated[int, ScalarArg(int)] = Field(
        description="Each request's older entries kept per step (its window's length).")
    skipped_verifies: Annotated[torch.Tensor | None, TensorArg(dtype=_I64, shape=(1,))] = Field(
        default=None, description="The overflow counter: 1 - verify_enable is added to it (one thread), so a full "
        "plan that overflowed (enable 0) counts once per launch, even of an empty batch; None: no count.")


check_verify_budget = VerifyBudgetLaunch.checker()


def empty_batch(*, out_verify_num_valid: torch.Tensor, out_verify_enable: torch.Tensor, verify_enable: torch.Tensor,
                skipped_verifies: torch.Tensor | None) -> None:
    """The whole effect of a filter of an empty batch, in device ops (no kernel, no host read: capturable): no
    entry kept, the enable copied, the overflow counted (given the counter); no cursor moves. Stated once for
    every backend's launch of no request and the manager's empty forward, which launches nothing."""
    out_verify_num_valid.zero_()
    out_verify_enable.copy_(verify_enable)
    if skipped_verifies is not None:
        skipped_verifies.add_(1).sub_(verify_enable)


def _call(device: c.Device, bs: int, capacity: int, budget: int, rows: int, *, counted: bool = False) -> c.Call:
    return {
        "verify_offsets_scratch": c.i64(bs + 1, device=device),
        **{name: c.i64(capacity, device=device) for name in (
            "verify_slot_indices", "verify_expected_tokens", "verify_expected_positions", "verify_prev_slot_indices")},
        "verify_num_valid": c.i32(1, device=device), "verify_enable": c.i32(1, device=device),
        "req_pool_indices": c.i64(bs, device=device), "cursor": c.i64(rows, device=device),
        "advance": c.i64(1, device=device),
        **{name: c.i64(budget, device=device) for name in (
            "out_verify_slot_indices", "out_verify_expected_tokens", "out_verify_expected_positions",
            "out_verify_prev_slot_indices")},
        "out_verify_num_valid": c.i32(1, device=device), "out_verify_enable": c.i32(1, device=device),
        "newest_per_request": 2, "stride": 4,
        **({"skipped_verifies": c.i64(1, device=device)} if counted else {}),
    }


EXAMPLES = ExampleSet(NAME, (
    Variant("3 requests, a plan of 32 entries, a budget of 8",
            lambda: _call("cpu", c.BS, c.VERIFY_CAPACITY, 8, c.MAX_REQS)),
    Variant("overflow counted", lambda: _call("cpu", c.BS, c.VERIFY_CAPACITY, 8, c.MAX_REQS, counted=True),
            "the same filter, counting the full plan's overflow into skipped_verifies"),
))


def valid_call(device: c.Device = "cpu", *, bs: int = 3) -> c.Call:
    """A small valid filter of ``bs`` requests' plan of 16 entries into a budget of 8."""
    return _call(device, bs, 16, 8, 4)


VERIFY_BUDGET = OPERATION = Operation(
    "verify_budget", VerifyBudgetLaunch, constant="VERIFY_BUDGET", module="kvcanary.launch.budget",
    doc="""Write the budget's plan (each request's ``newest_per_request`` last entries and its window of
    ``stride`` older ones from its row's cursor, in plan order, at most the output's capacity) and its count
    and enable, then advance the cursors (token positions) of the requests with entries by ``advance *
    verify_enable * stride``. Given a
    ``skipped_verifies`` counter (int64, shape (1,), on the plan's device), add ``1 - verify_enable`` to it:
    one overflow counted per launch whose full plan overflowed, empty batch included. No host read:
    capturable.""",
    examples=EXAMPLES, call=valid_call,
)
launch_verify_budget_kernel = OPERATION.launcher
