"""The Contract base class: a pydantic model whose fields are a launcher's arguments.

Declare the fields with ``typing.Annotated`` specs and the cross-argument rules in ``contract``; the class
compiles itself, once, into a plain-``if`` checker (:meth:`Contract.checker`). Instantiating the model runs
the same checks (pydantic wraps the ContractError into its ValidationError), and ``model_json_schema()``
exports the field specs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, model_validator

from kvcanary_contracts.checks import Check
from kvcanary_contracts.compiler import Checker, Compiled, ContractCompiler, MemoChecker
from kvcanary_contracts.errors import ContractDefinitionError
from kvcanary_contracts.family import Family
from kvcanary_contracts.origin import caller_origin
from kvcanary_contracts.rules import Rule
from kvcanary_contracts.specs import ItemsArg, ScalarArg, Spec, StructArg, TensorArg

_REGISTRY: dict[str, type[Contract]] = {}


@dataclass(frozen=True)
class ContractInfo:
    """What a contract is for, and the rules that relate its fields."""

    name: str
    family: Family
    letter: str
    summary: str
    device_key: str | None = None
    rules: tuple[Rule, ...] = ()
    constants: Mapping[str, object] = field(default_factory=dict)
    # Tensors the launch writes, by label or path (``context.violation_ring``), besides those declared with
    # ``TensorArg(writes=True)``: no other argument may overlap their memory.
    writes: tuple[str, ...] = ()
    origin: str = field(default="", compare=False)  # module:line of the declaration (catalog, aliasing check)

    def __post_init__(self) -> None:
        if not self.origin:
            object.__setattr__(self, "origin", caller_origin())


class Contract(BaseModel):
    """Base class of every launcher contract."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    contract: ClassVar[ContractInfo]
    _compiled_: ClassVar[Compiled | None] = None
    _traceable_: ClassVar[Compiled | None] = None

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        info = cls.__dict__.get("contract")
        if info is None:
            return
        if info.name in _REGISTRY and _REGISTRY[info.name].__qualname__ != cls.__qualname__:
            raise ContractDefinitionError(f"two contracts are named {info.name!r}")
        _REGISTRY[info.name] = cls
        cls._compiled_ = None
        cls._traceable_ = None

    @classmethod
    def fields_for_compiler(cls) -> list[tuple[str, Any, Spec, str]]:
        out: list[tuple[str, Any, Spec, str]] = []
        for name, finfo in cls.model_fields.items():
            specs = [m for m in finfo.metadata if isinstance(m, (TensorArg, ScalarArg, StructArg, ItemsArg))]
            if len(specs) != 1:
                raise ContractDefinitionError(f"{cls.__name__}.{name} needs exactly one spec in Annotated[...]")
            out.append((name, finfo.annotation, specs[0], finfo.description or ""))
        return out

    @classmethod
    def none_defaults(cls) -> frozenset[str]:
        """Fields declared with ``default=None``: the checker and the launcher may omit them."""
        return frozenset(n for n, f in cls.model_fields.items() if not f.is_required() and f.default is None)

    @classmethod
    def compiled(cls) -> Compiled:
        """Compile (once) and return the checker with its checks."""
        return cls._cached("_compiled_", traceable=False)

    @classmethod
    def traceable(cls) -> Compiled:
        """Compile (once) the checker without the checks that read memory addresses (see the compiler)."""
        return cls._cached("_traceable_", traceable=True)

    @classmethod
    def _cached(cls, attr: str, *, traceable: bool) -> Compiled:
        done = cls.__dict__.get(attr)
        if not isinstance(done, Compiled):
            done = cls._compile(traceable=traceable)
            setattr(cls, attr, done)
        return done

    @classmethod
    def _compile(cls, *, traceable: bool) -> Compiled:
        info = cls.contract
        result = ContractCompiler(
            name=info.name,
            family=info.family,
            fields=cls.fields_for_compiler(),
            rules=info.rules,
            constants=info.constants,
            device_key=info.device_key,
            writes=info.writes,
            origin=info.origin,
            traceable=traceable,
            none_defaults=cls.none_defaults(),
        ).compile()
        book = info.family.codebook
        for check in result.checks:
            check.code = book.lookup(info.name, check.slug) or book.placeholder(info.letter)
        return result

    @classmethod
    def rule_checker(cls, slug: str) -> Checker:
        """One rule of the contract alone, over the top-level arguments it names: ``checker(**those)``.

        For a caller that must refuse a call before making it (it stages the inputs first, say): the error is
        the launch's own, with the rule's message and code, and no second copy of the rule exists anywhere.
        """
        info = cls.contract
        rules = [r for r in info.rules if r.slug == slug]
        if len(rules) != 1:
            raise ContractDefinitionError(f"{info.name} has no rule {slug!r}")
        fields = [f for f in cls.fields_for_compiler() if f[0] in rules[0].arguments]
        result = ContractCompiler(name=info.name, family=info.family, fields=fields, rules=rules,
                                  constants=info.constants, device_key=None, origin=info.origin,
                                  field_checks=False).compile()
        book = info.family.codebook
        for check in result.checks:
            check.code = book.lookup(info.name, check.slug) or book.placeholder(info.letter)
        return result.checker

    @classmethod
    def checker(cls) -> Checker:
        """The generated function: ``checker(**launch_kwargs) -> device``; raises ContractError. It runs every
        check on every call: a rule may read a host tensor's values (a configuration's lengths, say), which the
        repeat-call path does not look at."""
        return cls.compiled().whole

    @classmethod
    def repeat_checker(cls) -> Checker:
        """The launchers' checker: :meth:`checker`, but a call whose types, scalars and tensor metadata match
        one that passed reruns only the address checks. Only for contracts whose rules read no tensor values
        (every launcher's: they never read a device value on the host)."""
        return cls.compiled().checker

    @classmethod
    def memo_checker(cls) -> MemoChecker | None:
        """:meth:`repeat_checker` returning ``(device, memo)``: the memo is a dict kept with the remembered call
        this one repeats exactly (types, scalars, tensor metadata and addresses), None for a call not
        remembered; None for a contract without the repeat-call path (see :attr:`Compiled.memo`)."""
        return cls.compiled().memo

    @classmethod
    def traceable_checker(cls) -> Checker:
        """The checker ``torch.compile`` traces: every check but those that need a tensor's address."""
        return cls.traceable().checker

    @classmethod
    def checks(cls) -> list[Check]:
        return cls.compiled().checks

    @model_validator(mode="after")
    def _run_contract(self) -> Contract:
        type(self).checker()(**{name: getattr(self, name) for name in type(self).model_fields})
        return self


def remember_contract(contract: type[Contract]) -> None:
    """Declare ``contract`` again after :func:`forget_contract` (an operation declared anew)."""
    _REGISTRY[contract.contract.name] = contract


def forget_contract(name: str) -> None:
    """Remove the contract named ``name`` from the declared ones (a test's or a discarded operation's)."""
    _REGISTRY.pop(name, None)


def all_contracts(family: Family | None = None) -> list[type[Contract]]:
    """Every contract class declared so far (of one family, if given), in declaration order."""
    return [c for c in _REGISTRY.values() if family is None or c.contract.family is family]
