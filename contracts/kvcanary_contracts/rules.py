"""Model-level rules: how arguments relate to each other.

Every rule carries a message template, an explanation (``why``) and a fix: a rule without both cannot be
declared. Rules name arguments by their labels (``context.real_kv_sources``, ``expected_input_tokens``) and
conditions are expressions over arguments, bound symbols and the contract's constants.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kvcanary_contracts.errors import ContractDefinitionError, ContractError
from kvcanary_contracts.expr import Expr
from kvcanary_contracts.origin import caller_origin


@dataclass(frozen=True)
class Rule:
    """Base of all model rules."""

    message: str = ""
    why: str = ""
    fix: str = ""
    name: str = ""
    error: type[ContractError] = ContractError
    values: Mapping[str, str] = field(default_factory=dict)
    origin: str = field(default="", compare=False)
    # How to break the rule, for the error catalog's counterexample (tools/counterexamples.py): argument,
    # attribute or symbol name -> an int/bool/None, an expression over the valid call (a str), or a tensor
    # mutation (kvcanary_contracts.mutations: Misalign, PadStride, Resize). Only needed where none can be derived.
    breaks: Mapping[str, object] = field(default_factory=dict, compare=False)

    kind = "rule"

    def __post_init__(self) -> None:
        if not self.origin:
            object.__setattr__(self, "origin", caller_origin())
        if not self.why.strip() or not self.fix.strip():
            raise ContractDefinitionError(
                f"{type(self).__name__} declared at {self.origin} needs both `why` and `fix`: "
                "every rule is documented in the error catalog"
            )

    @property
    def arguments(self) -> tuple[str, ...]:  # pragma: no cover - overridden
        raise NotImplementedError

    @property
    def slug(self) -> str:
        return self.name or f"{self.kind}:{'+'.join(self.arguments)}"


def _names(fields: tuple[str, ...] | str) -> tuple[str, ...]:
    return (fields,) if isinstance(fields, str) else tuple(fields)


@dataclass(frozen=True)
class AllOrNone(Rule):
    """Optional arguments that must be given together or not at all."""

    fields: tuple[str, ...] = ()
    kind = "all_or_none"

    @property
    def arguments(self) -> tuple[str, ...]:
        return self.fields


@dataclass(frozen=True)
class RequiredIf(Rule):
    """Optional arguments that a boolean flag makes required: ``flag=True`` needs every one of them."""

    flag: str = ""
    fields: tuple[str, ...] = ()
    kind = "required_if"

    @property
    def arguments(self) -> tuple[str, ...]:
        return (self.flag, *self.fields)


@dataclass(frozen=True)
class ForbiddenUnless(Rule):
    """Optional arguments that must be ``None`` unless a boolean flag is set."""

    flag: str = ""
    fields: tuple[str, ...] = ()
    kind = "forbidden_unless"

    @property
    def arguments(self) -> tuple[str, ...]:
        return (self.flag, *self.fields)


@dataclass(frozen=True)
class RequiredWhen(Rule):
    """Optional arguments that a condition on other arguments makes required (``swa_window_size > 0``)."""

    when: str = ""
    fields: tuple[str, ...] = ()
    kind = "required_when"

    @property
    def condition(self) -> Expr:
        return Expr.parse(self.when)

    @property
    def arguments(self) -> tuple[str, ...]:
        seen = [n for n in sorted(self.condition.names)]
        return (*self.fields, *[n for n in seen if n not in self.fields])


@dataclass(frozen=True)
class Relation(Rule):
    """A condition that must hold: a range, an alignment, an equality between a scalar and a size, ...

    ``require`` is an expression that is true for valid calls. ``when`` optionally limits the rule to
    calls where it is true. ``name`` is required: it is the rule's stable identity in the code book.
    """

    require: str = ""
    when: str | None = None
    over: tuple[str, ...] = ()
    kind = "relation"

    def __post_init__(self) -> None:
        if not self.origin:
            object.__setattr__(self, "origin", caller_origin())
        super().__post_init__()
        if not self.name:
            raise ContractDefinitionError(f"Relation {self.require!r} at {self.origin} needs a stable `name`")
        if not self.message:
            raise ContractDefinitionError(f"Relation {self.name!r} at {self.origin} needs a `message`")

    @property
    def condition(self) -> Expr:
        return Expr.parse(self.require)

    @property
    def guard(self) -> Expr | None:
        return Expr.parse(self.when) if self.when else None

    @property
    def arguments(self) -> tuple[str, ...]:
        if self.over:
            return self.over
        names = set(self.condition.names)
        if self.guard is not None:
            names |= self.guard.names
        return tuple(sorted(names))

    @property
    def slug(self) -> str:
        return self.name


AnyRule = AllOrNone | RequiredIf | ForbiddenUnless | RequiredWhen | Relation
