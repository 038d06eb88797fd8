"""Contract of ``VerifyBudget.period(batch_size=..., max_verify_len=..., slide=...)``: a budget's coverage at
a batch size, which must be positive, for windows that slide no faster than the budget's stride.

``period`` is a planning helper (coverage, the docs' tables), checked on every call. ``stride(batch_size)``
runs once per forward: it compares ``batch_size`` plainly and hands only a refused value to this contract's
``batch_size_positive`` rule, so a good call costs no checker.
"""

from typing import Annotated, ClassVar

from pydantic import Field

from kvcanary.constructors.pool import _Helper
from kvcanary.errors import FAMILY
from kvcanary.manager.budget import VerifyBudget
from kvcanary_contracts import Contract, ContractInfo, ContractTypeError, Relation, ScalarArg

_TYPE = {"type": ContractTypeError}
_BATCH_WHY = "The stride divides the budget among the batch's requests; a batch of no request has none."
_BATCH_FIX = "Pass the number of requests of the forward (at least 1); an empty forward verifies nothing."


def _stride(budget: VerifyBudget, batch_size: int) -> int:
    return budget.stride(batch_size)


class VerifyBudgetPeriod(Contract):
    """``VerifyBudget.period(self=budget, batch_size=..., max_verify_len=..., slide=...)``."""

    contract: ClassVar[ContractInfo] = FAMILY.contract(
        "VerifyBudget.period", "C", "Steps within which a budget verifies every live entry at least once",
        constants={"stride": _Helper(_stride, "the budget's stride at batch_size")},
        rules=(
            Relation(name="batch_size_positive", require="batch_size >= 1",
                     message="batch_size must be positive, got {batch_size}", why=_BATCH_WHY, fix=_BATCH_FIX),
            Relation(
                name="max_verify_len_non_negative", require="max_verify_len >= 0",
                message="max_verify_len must be non-negative, got {max_verify_len}",
                why="It counts a request's verify entries; a negative count means nothing.",
                fix="Pass the longest request's verify entries (its prefix length)."),
            Relation(
                name="slide_non_negative", require="slide >= 0", message="slide must be non-negative, got {slide}",
                why="It counts the entries a sliding window drops per step; a negative count means nothing.",
                fix="Pass 0 for full attention, or the tokens each request adds per step for a sliding window."),
            Relation(
                name="stride_keeps_up", require="stride(self, batch_size) > slide",
                over=("self", "batch_size", "slide"),
                values={"got": "stride(self, batch_size)"},
                message="a stride of {got} cannot keep up with windows sliding {slide} entries per step; "
                        "raise max_entries",
                why="Each step verifies `stride` older entries per request while a sliding window drops `slide`: "
                    "with no more verified than dropped, some entries leave the window unverified.",
                fix="Raise max_entries (the stride grows with it), or run fewer requests per forward.",
                breaks={"slide": 100}),
        ),
    )

    self: Annotated[VerifyBudget, ScalarArg(VerifyBudget, label="budget", errors=_TYPE)] = Field(
        description="The budget.")
    batch_size: Annotated[int, ScalarArg(int, label="batch_size", errors=_TYPE)] = Field(
        description="Requests per forward.")
    max_verify_len: Annotated[int, ScalarArg(int, label="max_verify_len", errors=_TYPE)] = Field(
        description="Verify entries of the longest request.")
    slide: Annotated[int, ScalarArg(int, label="slide", errors=_TYPE)] = Field(
        description="Entries a sliding window drops per step (0: full attention).")


check_period = VerifyBudgetPeriod.checker()
