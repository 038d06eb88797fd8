"""Field specifications: what one launch argument (or one attribute of it) must be.

They are used as ``typing.Annotated`` metadata on the fields of a :class:`contracts.Contract`::

    input_ids: Annotated[torch.Tensor, TensorArg(dtype=torch.int64, shape=("num_tokens",))]

A shape entry is an ``int`` (a fixed size), ``None`` or ``"*"`` (any size), a symbol or a symbol plus or
minus a constant (``"bs"``, ``"bs + 1"``: the first tensor to use a symbol binds it, later ones must agree),
``">= expr"`` (a minimum), or any other expression over bound symbols and scalar arguments.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Union, get_args, get_origin

import torch
from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic_core import core_schema

from kvcanary_contracts.errors import ContractDefinitionError, ContractError
from kvcanary_contracts.expr import Expr
from kvcanary_contracts.origin import caller_origin

DimSpec = int | str | None


@dataclass(frozen=True)
class Dim:
    """One parsed shape entry."""

    kind: str  # "any" | "const" | "symbol" | "min" | "expr"
    text: str
    value: int = 0
    expr: Expr | None = None

    @classmethod
    def parse(cls, spec: DimSpec) -> Dim:
        if spec is None or spec == "*":
            return cls("any", "*")
        if isinstance(spec, bool):
            raise ContractDefinitionError(f"bad shape entry {spec!r}")
        if isinstance(spec, int):
            return cls("const", str(spec), value=spec)
        text = spec.strip()
        if text.startswith(">="):
            return cls("min", text, expr=Expr.parse(text[2:]))
        expr = Expr.parse(text)
        if expr.simple_symbol is not None:
            return cls("symbol", text, expr=expr)
        return cls("expr", text, expr=expr)

    def describe(self) -> str:
        return {"any": "any size", "min": f"at least {self.text[2:].strip()}"}.get(self.kind, self.text)


def _base_and_optional(source: Any) -> tuple[tuple[type, ...], bool]:
    args = get_args(source)
    origin = get_origin(source)
    if origin is Union or (args and type(None) in args):
        bases = tuple(a for a in args if a is not type(None))
        return bases, type(None) in args
    return ((source,) if isinstance(source, type) else (object,)), False


class _Spec:
    """Shared pydantic hooks: validation is an isinstance check; the real checks are the compiled contract."""

    doc: str
    optional: bool | None
    label: str | None
    messages: Mapping[str, str]
    origin: str

    def __post_init__(self) -> None:
        if not self.origin:
            object.__setattr__(self, "origin", caller_origin())

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        bases, optional = _base_and_optional(source)
        inner: core_schema.CoreSchema
        if bases and all(isinstance(b, type) for b in bases) and bases != (object,):
            cls = bases[0] if len(bases) == 1 else bases
            inner = core_schema.is_instance_schema(cls)
        else:
            inner = core_schema.any_schema()
        return core_schema.nullable_schema(inner) if optional else inner

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> dict[str, Any]:
        out = self.json_schema()
        if schema.get("type") == "nullable":
            return {"anyOf": [out, {"type": "null"}]}
        return out

    def json_schema(self) -> dict[str, Any]:  # pragma: no cover - overridden
        raise NotImplementedError


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype)


@dataclass(frozen=True)
class TensorArg(_Spec):
    """A tensor argument: dtype (or a set), shape with symbolic sizes, rank, contiguity, device.

    ``writes=True`` declares that the launch writes the tensor: the contract then rejects any other argument
    whose memory overlaps it (a contract can also name written arguments in ``ContractInfo.writes``).
    """

    dtype: torch.dtype | tuple[torch.dtype, ...] | None = None
    shape: tuple[DimSpec, ...] | None = None
    min_rank: int | None = None
    contiguous: bool = True
    same_device: bool = True
    optional: bool | None = None
    label: str | None = None
    doc: str = ""
    messages: Mapping[str, str] = field(default_factory=dict)
    errors: Mapping[str, type[ContractError]] = field(default_factory=dict)
    writes: bool = False
    origin: str = field(default="", compare=False)

    @property
    def dtypes(self) -> tuple[torch.dtype, ...]:
        if self.dtype is None:
            return ()
        return self.dtype if isinstance(self.dtype, tuple) else (self.dtype,)

    @property
    def dims(self) -> tuple[Dim, ...] | None:
        return None if self.shape is None else tuple(Dim.parse(d) for d in self.shape)

    def json_schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "object", "x-kind": "tensor"}
        if self.dtypes:
            out["x-dtype"] = [_dtype_name(d) for d in self.dtypes]
        if self.shape is not None:
            out["x-shape"] = [d.text for d in self.dims or ()]
        if self.min_rank is not None:
            out["x-min-rank"] = self.min_rank
        out["x-contiguous"] = self.contiguous
        out["x-same-device"] = self.same_device
        if self.writes:
            out["x-writes"] = True
        if self.doc:
            out["description"] = self.doc
        return out


@dataclass(frozen=True)
class ScalarArg(_Spec):
    """A Python value argument (``int``, ``bool``, an enum, a settings object), checked by type; ranges are
    :class:`~contracts.Relation`s.

    An ``int`` argument must also be no ``bool`` and fit in int64 (the kernels take it as one): both are
    checks of their own, generated for every ``ScalarArg(int)``. ``errors`` maps a check kind to the
    ContractError subclass it raises (``{"type": ContractTypeError}``).
    """

    type: type = int
    optional: bool | None = None
    label: str | None = None
    doc: str = ""
    messages: Mapping[str, str] = field(default_factory=dict)
    errors: Mapping[str, builtins.type[ContractError]] = field(default_factory=dict)
    origin: str = field(default="", compare=False)

    def json_schema(self) -> dict[str, Any]:
        name = {bool: "boolean", int: "integer", float: "number", str: "string"}.get(self.type, "object")
        out: dict[str, Any] = {"type": name}
        if self.doc:
            out["description"] = self.doc
        return out


@dataclass(frozen=True)
class StructArg(_Spec):
    """An object argument whose attributes have their own specs (a plan, a context, a source)."""

    type: type
    fields: Mapping[str, TensorArg | ScalarArg | StructArg | ItemsArg]
    prefix: str | None = None
    symbols: Mapping[str, str] = field(default_factory=dict)
    optional: bool | None = None
    label: str | None = None
    doc: str = ""
    messages: Mapping[str, str] = field(default_factory=dict)
    rules: tuple[Any, ...] = ()
    origin: str = field(default="", compare=False)

    def json_schema(self) -> dict[str, Any]:
        return {
            "type": "object",
            "x-kind": "struct",
            "title": self.type.__name__,
            "properties": {name: spec.json_schema() for name, spec in self.fields.items()},
            **({"description": self.doc} if self.doc else {}),
        }


@dataclass(frozen=True)
class ItemsArg(_Spec):
    """A tuple (or list) of structs, with a maximum length; item labels are ``name[i].attr``."""

    item: StructArg
    max_len: int | None = None
    optional: bool | None = None
    label: str | None = None
    doc: str = ""
    messages: Mapping[str, str] = field(default_factory=dict)
    origin: str = field(default="", compare=False)

    def json_schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "array", "items": self.item.json_schema()}
        if self.max_len is not None:
            out["maxItems"] = self.max_len
        if self.doc:
            out["description"] = self.doc
        return out


Spec = TensorArg | ScalarArg | StructArg | ItemsArg
