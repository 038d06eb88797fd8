"""The exceptions a contract raises.

``ContractError`` is a ``ValueError``: code that catches the reference's ``ValueError`` keeps working. Its
first line is the rule's message; the second names the stable code and where to read about it. The
structured fields (``code``, ``rule``, ``arguments``, ``details``) are for programs and tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvcanary_contracts.checks import Check


class ContractError(ValueError):
    """A launch argument broke one rule of its contract; nothing was launched or modified."""

    code: str
    contract: str
    check: Check
    arguments: tuple[str, ...]
    message: str
    details: Mapping[str, object]

    def __init__(
        self,
        message: str,
        *,
        code: str,
        contract: str,
        check: Check,
        pointer: str,
        details: Mapping[str, object],
        notes: tuple[str, ...] = (),
    ) -> None:
        text = "\n".join((message, pointer, *notes))
        super().__init__(text)
        self.message = message
        self.code = code
        self.contract = contract
        self.check = check
        self.arguments = check.arguments
        self.details = dict(details)

    @property
    def rule(self) -> str:
        """The kind of rule that failed (``contiguous``, ``dtype``, ``required_if``, ...)."""
        return self.check.kind

    def to_dict(self) -> dict[str, object]:
        """A JSON-friendly description (pydantic's ``ErrorDetails`` in spirit)."""
        return {
            "code": self.code,
            "contract": self.contract,
            "rule": self.rule,
            "slug": self.check.slug,
            "arguments": list(self.arguments),
            "message": self.message,
            "details": {k: str(v) for k, v in self.details.items()},
        }


class ContractTypeError(ContractError, TypeError):
    """A ContractError that is also a ``TypeError``, for rules whose reference raises ``TypeError``."""


class ContractRuntimeError(ContractError, RuntimeError):
    """A ContractError that is also a ``RuntimeError``, for rules whose reference raises ``RuntimeError`` (an
    engine's state that diverged from what it described, rather than a wrong argument)."""


class ContractDefinitionError(TypeError):
    """A contract was declared wrongly (unknown name in an expression, a rule without explanation, ...)."""
