"""Contract of ``launch_canary_write_kernel``."""


from typing import Annotated, ClassVar

import torch
from pydantic import Field

from kvcanary.context import VerifyOrWriteContext
from kvcanary.contract._shared import CONTEXT, WRITE_WRITES, write_plan_struct
from kvcanary.contracts import Contract, ContractInfo, ForbiddenUnless, RequiredIf, ScalarArg, TensorArg
from kvcanary.errors import FAMILY
from kvcanary.plans import WritePlan

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


check_write = WriteLaunch.checker()
