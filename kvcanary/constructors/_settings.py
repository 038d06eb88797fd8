"""Contracts of configuration objects, declared as tables: one entry per field, its rules beside it.

A settings object (``CanaryConfig``, ``CanaryCapacities``, ...) is a frozen dataclass whose ``__post_init__``
runs the checker of a contract built here from ``{field: Setting}``: adding a field with a range is one entry
(``count(...)``; ``setting(...)`` for any other type); a rule between fields is one ``Relation`` in the
contract's ``rules``. A wrong type raises :class:`ContractTypeError`, both a ``TypeError`` and a ``ValueError``
(the hand-written checks these replace raised one or the other). Every check names the line it is declared on
(the catalog's "where it is declared"), not this module.
"""

import sys
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Annotated, Any, ClassVar

from pydantic import Field

from kvcanary.errors import FAMILY
from kvcanary_contracts import Contract, ContractInfo, ContractTypeError, Relation, Rule, ScalarArg

_SKIP = ("kvcanary.constructors._settings", "kvcanary_contracts", "contracts")


def declared_here() -> str:
    """``module:line`` of the nearest caller outside this module and the contracts framework."""
    frame = sys._getframe(1)
    while frame.f_back is not None and str(frame.f_globals.get("__name__", "")).startswith(_SKIP):
        frame = frame.f_back
    return f"{frame.f_globals['__name__']}:{frame.f_lineno}"


@dataclass(frozen=True)
class Setting:
    """One field: its type, what it means, and the rules that read only it.

    ``rules`` are built once the field's name and label are known: each is called with ``(name, label)``.
    """

    type: type
    doc: str
    optional: bool = False
    rules: tuple[Callable[[str, str], Rule], ...] = ()
    messages: Mapping[str, str] = field(default_factory=dict)
    origin: str = field(default_factory=declared_here)


def setting(type_: type, doc: str, *, optional: bool = False,
            messages: Mapping[str, str] | None = None) -> Setting:
    """A field checked by type only (``optional``: None is allowed too)."""
    return Setting(type_, doc, optional, messages=dict(messages or {}), origin=declared_here())


def count(doc: str, *, minimum: int = 1, why: str, fix: str, message: str | None = None,
          breaks: object = None, optional: bool = False) -> Setting:
    """An int field of at least ``minimum`` (1: "a positive int", 0: "a non-negative int"); ``optional``:
    None is allowed too (the range is checked only for an int).

    ``message`` (``str.format`` names ``label`` and ``name``, the latter for the value) replaces the default
    "<label> must be a positive int, got <value>"; a bool gets the same message (True is not a count).
    ``breaks``: the catalog's counterexample value, where the derived one (``minimum - 1``) breaks another rule.
    """
    origin = declared_here()
    what = {1: "a positive int", 0: "a non-negative int"}.get(minimum, f"an int >= {minimum}")
    text = message or "{label} must be " + what + (" or None" if optional else "") + ", got {{{name}}}"
    slug = {1: "positive", 0: "non_negative"}.get(minimum, f"at_least_{minimum}")

    def rule(name: str, label: str) -> Rule:
        return Relation(name=f"{name}_{slug}", require=f"{name} >= {minimum}",
                        when=f"{name} is not None" if optional else None,
                        message=text.format(label=label, name=name), why=why, fix=fix, origin=origin,
                        breaks={} if breaks is None else {name: breaks})

    bool_text = text.format(label="{name}", name="value")  # the generated check's names: label and value
    return Setting(int, doc, optional, rules=(rule,), messages={"bool_as_int": bool_text}, origin=origin)


def settings_contract(owner: str, letter: str, summary: str, settings: Mapping[str, Setting], *,
                      rules: tuple[Rule, ...] = (), constants: Mapping[str, object] | None = None,
                      qualified: bool = True) -> type[Contract]:
    """The contract of ``owner(**settings)``: one field per setting, labelled ``owner.field`` (``qualified``)
    or ``field``, with each setting's rules, then ``rules`` (those that relate several fields)."""
    origin = declared_here()
    annotations: dict[str, Any] = {"contract": ClassVar[ContractInfo]}
    namespace: dict[str, Any] = {}
    field_rules: list[Rule] = []
    for name, s in settings.items():
        label = f"{owner}.{name}" if qualified else name
        messages = {"type": "{name} must be {expected_type}" + (" or None" if s.optional else "") + ", got {type}",
                    **s.messages}
        spec = ScalarArg(s.type, optional=s.optional or None, label=label, messages=messages,
                         errors={"type": ContractTypeError}, origin=s.origin)
        annotations[name] = Annotated[s.type | None if s.optional else s.type, spec]
        namespace[name] = Field(description=s.doc)
        field_rules.extend(make(name, label) for make in s.rules)
    namespace.update({
        "__module__": origin.rpartition(":")[0],
        "__doc__": f"``{owner}(...)``: {summary}",
        "__annotations__": annotations,
        "contract": FAMILY.contract(owner, letter, summary, rules=(*field_rules, *rules),
                                    constants=dict(constants or {}), origin=origin),
    })
    return types.new_class(f"{owner.replace('.', '')}Contract", (Contract,), exec_body=lambda ns: ns.update(namespace))


def validator(contract: type[Contract]) -> Callable[[object], None]:
    """``validate(obj)``: the contract's checks over the dataclass ``obj``'s fields, every one of them (a
    field the contract does not declare is a TypeError at once, so a new field cannot go unchecked)."""
    checker = contract.checker()

    def validate(obj: object) -> None:
        checker(**{f.name: getattr(obj, f.name) for f in fields(obj)})  # type: ignore[arg-type]

    return validate
