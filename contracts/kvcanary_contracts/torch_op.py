"""A contract as a ``torch.library`` operator: its schema derived from the fields, written nowhere else.

An operator schema holds tensors, scalars and lists of them, not objects, so :class:`OpSignature` flattens
the contract's fields: a struct's attributes become arguments of their own (``context__canary_buf``), a
collection of structs becomes one list per attribute (``context__real_kv_sources__tensor: Tensor[]``), an
optional struct gains a ``<name>__present`` flag. Tensors the launch writes (``ContractInfo.writes``,
``TensorArg(writes=True)``) carry a write alias (``Tensor(a!)``), which is what tells ``torch.compile``
which buffers the operator mutates. The same signature generates the expressions that flatten a call
(traced by ``torch.compile``) and the function that rebuilds the structs on the other side.
"""

from __future__ import annotations

import dataclasses
import string
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from kvcanary_contracts.compiler import register_source
from kvcanary_contracts.contract import Contract
from kvcanary_contracts.errors import ContractDefinitionError
from kvcanary_contracts.specs import ItemsArg, ScalarArg, Spec, StructArg, TensorArg

_SCALARS: Mapping[type, str] = {bool: "bool", int: "int", float: "float"}


@dataclass(frozen=True)
class FlatArg:
    """One argument of the operator schema and where it comes from in the launch's keyword arguments."""

    name: str  # schema name: the attribute path joined by "__"
    path: tuple[str, ...]  # field, then attributes; "[]" marks the items of a collection
    kind: str  # "Tensor", "int", "bool" or "float"
    optional: bool  # may be None (an optional field, or any attribute of an optional struct)
    listed: bool  # one entry per item of a collection
    written: bool  # the launch writes it (a write alias in the schema)
    presence: bool = False  # the "<struct>__present" flag of an optional struct

    def schema_type(self, alias: str | None) -> str:
        base = self.kind + (f"({alias}!)" if alias else "")
        if self.listed:
            base += "[]"
        return base + ("?" if self.optional else "")


class OpSignature:
    """The flat operator signature of a contract (see the module docstring)."""

    def __init__(self, contract: type[Contract]) -> None:
        self.contract = contract
        info = contract.contract
        names = set(info.writes)
        self.written_paths = {
            n.path for n in contract.compiled().nodes
            if n.path in names or n.label in names or getattr(n.spec, "writes", False)
        }
        self.args: list[FlatArg] = []
        for fname, _annotation, spec, _doc in contract.fields_for_compiler():
            optional = bool(spec.optional) or _annotation_optional(_annotation)
            self._walk((fname,), spec, optional, listed=False)
        flat = [a.name for a in self.args]
        if len(set(flat)) != len(flat):
            raise ContractDefinitionError(f"{info.name}: flattened operator arguments collide: {flat}")

    # -- flattening ---------------------------------------------------------------------------------
    def _walk(self, path: tuple[str, ...], spec: Spec, optional: bool, *, listed: bool) -> None:
        name = "__".join(p for p in path if p != "[]")
        dotted = ".".join(path).replace(".[]", "[]")  # the compiler's node path
        if isinstance(spec, TensorArg):
            written = dotted in self.written_paths
            if written and listed:
                raise ContractDefinitionError(f"{dotted}: a written tensor cannot sit in a collection")
            self.args.append(FlatArg(name, path, "Tensor", optional, listed, written))
        elif isinstance(spec, ScalarArg):
            kind = _SCALARS.get(spec.type)
            if kind is None:
                raise ContractDefinitionError(f"{dotted}: a {spec.type.__name__} cannot be an operator argument")
            self.args.append(FlatArg(name, path, kind, optional or bool(spec.optional), listed, False))
        elif isinstance(spec, StructArg):
            _check_rebuildable(spec, dotted)
            struct_optional = optional or bool(spec.optional)
            if struct_optional and any(isinstance(c, (StructArg, ItemsArg)) for c in spec.fields.values()):
                raise ContractDefinitionError(f"{dotted}: an optional struct holding a struct or a collection "
                                              "cannot cross an operator")
            if struct_optional and not listed:
                self.args.append(FlatArg(f"{name}__present", path, "bool", False, False, False, presence=True))
            for attr, child in spec.fields.items():
                self._walk((*path, attr), child, struct_optional or bool(child.optional), listed=listed)
        elif isinstance(spec, ItemsArg):
            if listed:
                raise ContractDefinitionError(f"{dotted}: collections inside collections are not supported")
            if optional or spec.optional:
                raise ContractDefinitionError(f"{dotted}: an optional collection cannot cross an operator "
                                              "(pass an empty one)")
            item = spec.item
            _check_rebuildable(item, dotted)
            for attr, child in item.fields.items():
                if isinstance(child, (StructArg, ItemsArg)):
                    raise ContractDefinitionError(f"{dotted}.{attr}: an item's attribute must be a tensor or scalar")
                self._walk((*path, "[]", attr), child, optional, listed=True)
        else:  # pragma: no cover - Spec is closed
            raise ContractDefinitionError(f"{dotted}: unsupported spec {spec!r}")

    @property
    def mutated(self) -> tuple[str, ...]:
        """The schema names of the tensors the operator writes (``mutates_args``)."""
        return tuple(a.name for a in self.args if a.written)

    def schema(self, extras: Mapping[str, str] = {}) -> str:
        """The schema after the operator name: ``(Tensor(a!) context__canary_buf, ..., str? backend) -> ()``.

        ``extras`` maps trailing argument names to their schema types. They take no default: a default in a
        schema given to ``torch.library.custom_op`` does not survive as written (``None`` becomes ``"None"``),
        and every caller passes them anyway.
        """
        aliases = _alias_names()
        parts = [a.schema_type(next(aliases) if a.written else None) + " " + a.name for a in self.args]
        parts.extend(f"{t} {n}" for n, t in extras.items())
        return "(" + ", ".join(parts) + ") -> ()"

    def flat_exprs(self) -> list[str]:
        """Expressions over the launch's keyword arguments, one per schema argument, in schema order."""
        out: list[str] = []
        for a in self.args:
            out.append(self._expr(a))
        return out

    def _expr(self, arg: FlatArg) -> str:
        path = arg.path
        if arg.presence:
            return f"({'.'.join(path)} is not None)"
        if "[]" in path:
            k = path.index("[]")
            owner = ".".join(path[:k])
            attr = ".".join(path[k + 1:])
            inner = f"[_it.{attr} for _it in {owner}]"
            return self._guarded(path[:k], inner)
        return self._guarded(path[:-1], ".".join(path))

    def _guarded(self, owners: tuple[str, ...], expr: str) -> str:
        """``expr``, or None where one of its enclosing structs may be None."""
        guards = [".".join(owners[:i]) for i in range(1, len(owners) + 1) if self._optional_struct(owners[:i])]
        if not guards:
            return expr
        return f"({expr} if {' and '.join(g + ' is not None' for g in guards)} else None)"

    def _optional_struct(self, path: tuple[str, ...]) -> bool:
        return any(a.presence and a.path == path for a in self.args)

    # -- rebuilding ---------------------------------------------------------------------------------
    def rebuild_source(self, fn_name: str) -> tuple[str, dict[str, object]]:
        """Source of ``fn_name(*flat) -> dict`` that returns the launch's keyword arguments, structs rebuilt.

        Structs are made with ``object.__new__``, their attributes set directly, then their own validation
        (``__post_init__``, where the class has one) runs as a constructor call would run it: an operator
        called directly gets the same errors as the launcher's caller building the struct. Flat arguments
        that describe no struct (collection columns of different lengths, fields of an absent optional
        struct) raise ValueError naming them.
        """
        env: dict[str, object] = {"_new": object.__new__, "_set": object.__setattr__, "_tuple": tuple, "_zip": zip,
                                  "_columns": _columns, "_absent": _absent}
        params = [a.name for a in self.args]
        lines = [f"def {fn_name}({', '.join(params)}):"]
        fields = list(self.contract.model_fields)
        specs = {f: s for f, _a, s, _d in self.contract.fields_for_compiler()}
        counter = iter(range(10**6))
        out_items: list[str] = []
        for f in fields:
            out_items.append(f"{f!r}: {self._build((f,), specs[f], lines, env, counter)}")
        lines.append("    return {" + ", ".join(out_items) + "}")
        return "\n".join(lines) + "\n", env

    def _build(self, path: tuple[str, ...], spec: Spec, lines: list[str], env: dict[str, object],
               counter: Iterator[int]) -> str:
        name = "__".join(path)
        if isinstance(spec, (TensorArg, ScalarArg)):
            return name
        if isinstance(spec, StructArg):
            k = next(counter)
            env[f"_T{k}"] = spec.type
            var = f"_o{k}"
            exprs = {attr: self._build((*path, attr), child, lines, env, counter)
                     for attr, child in spec.fields.items()}
            sets = [f"_set({var}, {attr!r}, {expr})" for attr, expr in exprs.items()]
            post = getattr(spec.type, "__post_init__", None)
            if post is not None:
                env[f"_P{k}"] = post
                sets.append(f"_P{k}({var})")
            if self._optional_struct(path):
                given = ", ".join(f"{expr!r}: {expr}" for expr in exprs.values())
                lines.append(f"    {var} = None")
                lines.append(f"    if {name}__present:")
                lines.append(f"        {var} = _new(_T{k})")
                lines.extend(f"        {s}" for s in sets)
                lines.append("    else:")
                lines.append(f"        _absent({name + '__present'!r}, {{{given}}})")
            else:
                lines.append(f"    {var} = _new(_T{k})")
                lines.extend(f"    {s}" for s in sets)
            return var
        assert isinstance(spec, ItemsArg)
        k = next(counter)
        env[f"_T{k}"] = spec.item.type
        attrs = list(spec.item.fields)
        cols = [f"{name}__{a}" for a in attrs]
        maker = f"_mk{k}"
        lines.append(f"    def {maker}({', '.join(attrs)}):")
        lines.append(f"        _x = _new(_T{k})")
        lines.extend(f"        _set(_x, {a!r}, {a})" for a in attrs)
        post = getattr(spec.item.type, "__post_init__", None)
        if post is not None:
            env[f"_P{k}"] = post
            lines.append(f"        _P{k}(_x)")
        lines.append("        return _x")
        lines.append(f"    _columns({{{', '.join(f'{c!r}: {c}' for c in cols)}}})")
        built = f"_tuple({maker}(*_r) for _r in _zip({', '.join(cols)}))"
        return f"(None if {cols[0]} is None else {built})"


def _columns(cols: Mapping[str, Any]) -> None:
    """The list arguments of one collection must all be given, with one entry per item each."""
    given = {k: v for k, v in cols.items() if v is not None}
    if given and len(given) != len(cols):
        missing = sorted(set(cols) - set(given))
        raise ValueError(f"kv-canary: operator arguments {missing} are None while {sorted(given)} are given: "
                         "every attribute of a collection's items must be given")
    lengths = {k: len(v) for k, v in given.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"kv-canary: the list arguments of one collection must have one entry per item, got "
                         f"lengths {lengths}")


def _absent(flag: str, fields: Mapping[str, Any]) -> None:
    """An absent optional struct (``flag`` False) carries no field values."""
    given = sorted(k for k, v in fields.items() if v is not None)
    if given:
        raise ValueError(f"kv-canary: operator argument {flag} is False but {given} are given: pass the struct's "
                         f"fields only with {flag}=True")


_LIBRARIES: dict[str, torch.library.Library] = {}


def _library(namespace: str) -> torch.library.Library:
    """The one ``torch.library.Library`` fragment of ``namespace`` (kept alive: dropping it unregisters)."""
    lib = _LIBRARIES.get(namespace)
    if lib is None:
        lib = _LIBRARIES[namespace] = torch.library.Library(namespace, "FRAGMENT")  # type: ignore[no-untyped-call]
    return lib


def drop_namespace(namespace: str) -> None:
    """Unregister every operator of ``namespace`` (its library fragment is destroyed): a test's cleanup."""
    lib = _LIBRARIES.pop(namespace, None)
    if lib is not None:
        lib._destroy()  # type: ignore[no-untyped-call]


def _alias_names() -> Iterator[str]:
    letters = string.ascii_lowercase
    for a in letters:
        yield a
    for a in letters:
        for b in letters:
            yield a + b


def _annotation_optional(annotation: Any) -> bool:
    args = getattr(annotation, "__args__", ())
    return type(None) in args


def _check_rebuildable(spec: StructArg, where: str) -> None:
    """A struct the operator rebuilds must be a dataclass whose every field its spec describes."""
    if not dataclasses.is_dataclass(spec.type):
        raise ContractDefinitionError(f"{where}: {spec.type.__name__} must be a dataclass to cross an operator")
    missing = [f.name for f in dataclasses.fields(spec.type) if f.name not in spec.fields]
    if missing:
        raise ContractDefinitionError(
            f"{where}: {spec.type.__name__} fields {missing} have no spec, so an operator cannot carry them")


@dataclass(frozen=True)
class ContractOp:
    """A registered operator and what a launcher needs to call it while ``torch.compile`` traces."""

    qualname: str
    signature: OpSignature
    op: Any  # torch._ops.OpOverload
    rebuild: Callable[..., dict[str, Any]]
    """``rebuild(*flat)``: the launch's keyword arguments from the operator's arguments."""
    flatten: Callable[..., list[Any]]
    """``flatten(**launch_kwargs)``: the operator's arguments (without the extras), in schema order."""


def register_contract_op(
    contract: type[Contract],
    qualname: str,
    run: Callable[..., None],
    extras: Mapping[str, str] = {},
) -> ContractOp:
    """Register ``qualname`` (``"namespace::name"``) as a custom operator for ``contract``.

    ``run(**launch_kwargs, **extras)`` is the real implementation (any device); the fake implementation
    rebuilds the call over fake tensors and runs the contract's traceable checker, so a bad call fails at
    trace time with the launcher's error. ``extras`` maps trailing argument names to their schema types,
    e.g. ``{"backend": "str?"}``.
    """
    sig = OpSignature(contract)
    schema = sig.schema(extras)
    fn_name = "_rebuild_" + qualname.replace("::", "_")
    source, env = sig.rebuild_source(fn_name)
    optional = contract.none_defaults()
    fields = ", ".join(f"{f}=None" if f in optional else f for f in contract.model_fields)
    source += f"def _flatten(*, {fields}):\n    return [{', '.join(sig.flat_exprs())}]\n"
    filename = f"<operator {qualname}>"
    register_source(filename, source)
    exec(compile(source, filename, "exec"), env)
    rebuild = typing.cast(Callable[..., dict[str, Any]], env[fn_name])
    flatten = typing.cast(Callable[..., list[Any]], env["_flatten"])
    n = len(sig.args)
    extra_names = list(extras)
    traced_check = contract.traceable_checker()

    def impl(*args: Any, **kwargs: Any) -> None:
        run(**rebuild(*args[:n]), **dict(zip(extra_names, args[n:], strict=False)), **kwargs)

    def fake(*args: Any, **kwargs: Any) -> None:
        traced_check(**rebuild(*args[:n]))

    namespace, name = qualname.split("::")
    lib = _library(namespace)
    lib.define(name + schema)  # type: ignore[no-untyped-call]
    lib.impl(name, impl, "CompositeExplicitAutograd")  # type: ignore[no-untyped-call]
    torch.library.register_fake(qualname, fake, lib=lib)
    overload = getattr(getattr(torch.ops, namespace), name).default
    return ContractOp(qualname, sig, overload, rebuild, flatten)
