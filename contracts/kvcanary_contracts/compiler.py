"""Compile a contract's specs and rules into one generated Python checker function.

The checker takes the launcher's keyword arguments, runs every check in phase order with plain ``if``
statements (no per-call allocation beyond what the ``if``s need, no reads of tensor *values*: only dtype,
shape, strides and device), and returns the device the launch runs on. On the first failing check it calls
``_fail``, which renders that check's message from the checker's locals and raises its ContractError.

Besides what the specs and rules declare, these checks are generated: an ``int`` scalar must be no ``bool``
and fit in int64; unless the family allows meta tensors, the launch's device (its ``device_key`` tensor's)
must not be ``meta``; and no tensor the launch writes may overlap another tensor argument in memory
(compared as byte ranges ``[data_ptr, data_ptr + extent)``: views of one buffer that do not overlap are
fine; read-only arguments may share memory with each other; meta tensors, which have no memory, are not
compared).

The checker a contract hands out (:attr:`Compiled.checker`) adds a repeat-call path in front of that function:
a call whose argument types, scalars and tensor metadata equal those of a call that passed (compared by
torch's C tensor guard) runs only the checks that read addresses, so an engine launching with the same buffers
step after step pays for its metadata checks once (see :meth:`ContractCompiler.assemble_fast`).
:attr:`Compiled.whole` is the function that runs every check on every call.

A *traceable* checker (``ContractCompiler(..., traceable=True)``, :meth:`Contract.traceable_checker`) is the
same function without the checks that need a tensor's memory address (alignment rules over ``data_ptr()``,
the aliasing check): what is left reads only dtype, shape, strides, device and Python scalars, so
``torch.compile`` can trace it over fake tensors and turn it into guards.
"""

from __future__ import annotations

import enum
import itertools
import linecache
import operator
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union, get_args, get_origin

import torch

from kvcanary_contracts import checks as ph
from kvcanary_contracts.checks import Check
from kvcanary_contracts.errors import ContractDefinitionError, ContractError
from kvcanary_contracts.expr import Expr
from kvcanary_contracts.family import Family
from kvcanary_contracts.rules import AllOrNone, ForbiddenUnless, RequiredIf, RequiredWhen, Rule
from kvcanary_contracts.rules import Relation as RelationRule
from kvcanary_contracts.specs import Dim, ItemsArg, ScalarArg, Spec, StructArg, TensorArg

Checker = Callable[..., "torch.device | None"]
MemoChecker = Callable[..., "tuple[torch.device | None, dict[Any, Any] | None]"]


@dataclass(eq=False)
class Node:
    """One argument, or one attribute of an argument, in the tree the checker walks."""

    path: str
    label: str
    local: str
    spec: Spec
    optional: bool
    guard: str | None
    pytype: type | tuple[type, ...] | None
    loop: Node | None = None
    loop_var: str = ""
    children: list[Node] = field(default_factory=list)
    order: int = 0
    parent_guard: str | None = None


@dataclass(eq=False)
class Step:
    phase: int
    order: int
    loop: Node | None
    lines: list[str]
    check: bool = False  # one ``if ...: _fail(...)`` line (else loads, symbol bindings, bookkeeping)

    @property
    def memory(self) -> bool:
        """Whether the step reads a tensor's address (left out of a traceable checker)."""
        return self.phase == ph.ALIAS or any("data_ptr()" in line for line in self.lines)


@dataclass
class Compiled:
    """What compiling a contract produced: the checker and the checks it runs (in run order)."""

    checker: Checker
    checks: list[Check]
    source: str
    nodes: list[Node]
    symbols: dict[str, str]  # symbol -> "label.shape[i]" of its binder
    whole: Checker
    """The checker that runs every check on every call (``checker`` may skip the metadata checks of a call
    like one that passed: see :meth:`ContractCompiler.assemble_fast`; without that path it is ``checker``)."""
    memo: MemoChecker | None = None
    """``checker``, returning ``(device, memo)``: ``memo`` is a dict kept for the call's types, scalars, tensor
    metadata and addresses together (a call that repeats all of them gets the same dict; other addresses get
    another); None when the call is not remembered (or the contract has no repeat-call path). A launcher
    caches there what it derives from the call (a backend's packed kernel arguments)."""


def _type_name(t: type | tuple[type, ...] | None) -> str:
    if t is None:
        return "object"
    if isinstance(t, tuple):
        return " or ".join(_type_name(x) for x in t)
    if t is torch.Tensor:
        return "a torch.Tensor"
    if t in (bool, int, float, str):
        return t.__name__
    return f"a {t.__name__}"


def _is_optional(annotation: Any) -> tuple[Any, bool]:
    args = get_args(annotation)
    if get_origin(annotation) is typing.Annotated:
        return _is_optional(args[0])
    if (get_origin(annotation) is Union or type(annotation).__name__ == "UnionType") and type(None) in args:
        rest = tuple(a for a in args if a is not type(None))
        return (rest[0] if len(rest) == 1 else rest), True
    return annotation, False


class ContractCompiler:
    """Compiles one contract (its fields' specs and its rules): ``ContractCompiler(...).compile()``."""

    def __init__(
        self,
        *,
        name: str,
        family: Family,
        fields: Sequence[tuple[str, Any, Spec, str]],
        rules: Sequence[Rule],
        constants: Mapping[str, object],
        device_key: str | None,
        writes: Sequence[str] = (),
        origin: str = "",
        traceable: bool = False,
        none_defaults: frozenset[str] = frozenset(),
        field_checks: bool = True,
    ) -> None:
        self.name = name
        self.field_checks = field_checks  # False: only the rules (see Contract.rule_checker)
        self.none_defaults = none_defaults
        self.family = family
        self.fields = fields
        self.rules = rules
        self.constants = dict(constants)
        self.device_key = device_key
        self.writes = tuple(writes)
        self.origin = origin
        self.traceable = traceable
        self.env: dict[str, object] = {"_Tensor": torch.Tensor, "_lbl": _label, "_extent": extent}
        self.checks: list[Check] = []
        self.steps: list[Step] = []
        self.nodes: list[Node] = []
        self.by_label: dict[str, Node] = {}
        self.by_path: dict[str, Node] = {}
        self.top_names: dict[str, str] = {}
        self.symbols: dict[str, str] = {}  # name -> binder description
        self.maybe_symbols: set[str] = set()
        self.bound: set[str] = set()
        self.order = itertools.count()
        self.uid = itertools.count()

    # -- helpers ------------------------------------------------------------------------------------
    def const(self, obj: object, hint: str = "c") -> str:
        for k, v in self.env.items():
            if v is obj and k.startswith(f"_{hint}"):
                return k
        key = f"_{hint}{next(self.uid)}"
        self.env[key] = obj
        return key

    def add_check(self, check: Check, fail_cond: str, node: Node | None, phase: int, guard: str | None,
                  order: int | None = None) -> None:
        idx = len(self.checks)
        self.checks.append(check)
        cond = fail_cond if not guard else f"({guard}) and {fail_cond}"
        if order is None:
            order = node.order if node else next(self.order)
        self.steps.append(Step(phase, order, node.loop if node else None, [f"if {cond}: _fail({idx}, locals())"],
                               check=True))

    def add_lines(self, phase: int, node: Node | None, lines: list[str], order: int | None = None) -> None:
        o = order if order is not None else (node.order if node else next(self.order))
        self.steps.append(Step(phase, o, node.loop if node else None, lines))

    def label_src(self, node: Node) -> str:
        if node.loop is None:
            return repr(node.label)
        return f"_lbl({node.label!r}, {node.loop.loop_var})"

    def make_check(self, node: Node | None, kind: str, slug: str, phase: int, template: str, summary: str,
                   why: str = "", fix: str = "", error: type[ContractError] | None = None,
                   subject: object = None, info: Mapping[str, object] | None = None,
                   fmt: dict[str, str] | None = None, arguments: tuple[str, ...] | None = None,
                   origin: str | None = None) -> Check:
        kd_why, kd_fix = self.family.kind_doc(kind)
        spec_err: type[ContractError] | None = None
        if node is not None and isinstance(node.spec, (TensorArg, ScalarArg)):
            spec_err = node.spec.errors.get(kind)
        base_fmt = {"name": self.label_src(node)} if node is not None else {}
        base_fmt.update(fmt or {})
        return Check(
            contract=self.name,
            kind=kind,
            slug=slug,
            phase=phase,
            arguments=arguments if arguments is not None else ((node.label,) if node else ()),
            template=template,
            summary=summary.replace("{i}", "i"),
            why=why or kd_why,
            fix=fix or kd_fix,
            error=error or spec_err or ContractError,
            origin=origin or (node.spec.origin if node else ""),
            subject=subject if subject is not None else (node.spec if node else None),
            field_path=node.path if node else None,
            info=dict(info or {}),
            fmt=base_fmt,
        )

    # -- tree ---------------------------------------------------------------------------------------
    def build(self) -> None:
        for fname, annotation, spec, doc in self.fields:
            base, optional = _is_optional(annotation)
            if spec.optional is not None:
                optional = spec.optional
            if not (doc or spec.doc):
                raise ContractDefinitionError(
                    f"{self.name}.{fname} needs a description (Field(description=...) or doc=): "
                    "the error catalog prints it"
                )
            label = spec.label or fname
            pytype = self._pytype(spec, base)
            node = Node(fname, label, fname, spec, optional, f"{fname} is not None" if optional else None, pytype,
                        order=next(self.order))
            self.top_names[fname] = fname
            self._register(node)
            self._children(node)

    def _pytype(self, spec: Spec, base: Any) -> type | tuple[type, ...] | None:
        if isinstance(spec, TensorArg):
            return torch.Tensor
        if isinstance(spec, StructArg):
            return spec.type
        if isinstance(spec, ItemsArg):
            return (tuple, list)
        if isinstance(spec, ScalarArg):
            return spec.type
        return base if isinstance(base, type) else None

    def _register(self, node: Node) -> None:
        self.nodes.append(node)
        self.by_path[node.path] = node
        self.by_label[node.label.replace("{i}", "")] = node
        self.by_label.setdefault(node.path, node)

    def _children(self, node: Node) -> None:
        spec = node.spec
        if isinstance(spec, StructArg):
            prefix = spec.prefix if spec.prefix is not None else f"{node.label}."
            for attr, child_spec in spec.fields.items():
                if not child_spec.doc:
                    raise ContractDefinitionError(f"{self.name}: {node.path}.{attr} needs doc=")
                opt = bool(child_spec.optional)
                local = f"{node.local}__{attr}"
                guard_parts = [g for g in (node.guard, f"{local} is not None" if opt else None) if g]
                child = Node(
                    f"{node.path}.{attr}", child_spec.label or f"{prefix}{attr}", local, child_spec, opt,
                    " and ".join(guard_parts) or None, self._pytype(child_spec, object), loop=node.loop,
                    order=next(self.order), parent_guard=node.guard,
                )
                child.loop_var = node.loop_var
                node.children.append(child)
                self._register(child)
                self._children(child)
        elif isinstance(spec, ItemsArg):
            var = f"_i{next(self.uid)}"
            item = Node(f"{node.path}[]", f"{node.label}[{{i}}]", f"{node.local}__item", spec.item, False, None,
                        spec.item.type, loop=None, order=next(self.order))
            item.loop = node  # the items node owns the loop
            item.loop_var = var
            node.loop_var = var
            node.children.append(item)
            self._register(item)
            # children of the item live inside the loop
            self._item_children(item, node)

    def _item_children(self, item: Node, owner: Node) -> None:
        spec = item.spec
        assert isinstance(spec, StructArg)
        for attr, child_spec in spec.fields.items():
            if not child_spec.doc:
                raise ContractDefinitionError(f"{self.name}: {item.path}.{attr} needs doc=")
            child = Node(f"{item.path}.{attr}", child_spec.label or f"{item.label}.{attr}", f"{item.local}__{attr}",
                         child_spec, False, None, self._pytype(child_spec, object), loop=owner,
                         order=next(self.order))
            child.loop_var = owner.loop_var
            item.children.append(child)
            self._register(child)

    # -- expression scope ---------------------------------------------------------------------------
    def scope(self, struct: Node | None = None) -> dict[str, str]:
        mapping: dict[str, str] = {}
        for name, const in self.constants.items():
            mapping[name] = self.const(const, "k")
        mapping.update({s: f"s_{s}" for s in self.symbols})
        mapping.update(self.top_names)
        if struct is not None:
            for child in struct.children:
                mapping[child.path.rsplit(".", 1)[1]] = child.local
        return mapping

    # -- per-node checks ----------------------------------------------------------------------------
    def emit_node(self, node: Node) -> None:
        spec = node.spec
        guard = node.guard
        # type
        tname = _type_name(node.pytype)
        tconst = self.const(node.pytype, "t")
        fail = f"not isinstance({node.local}, {tconst})"
        if node.optional:
            fail = f"{node.local} is not None and {fail}"
        type_guard = node.parent_guard
        template = self.family.template("type", spec.messages)
        self.add_check(
            self.make_check(node, "type", f"{self._slug(node)}:type", ph.TYPE, template,
                            f"{node.label} must be {tname}" + (" or None" if node.optional else ""),
                            info={"expected_type": tname},
                            fmt={"expected_type": repr(tname), "type": f"type({node.local}).__name__"}),
            fail, node, ph.TYPE, type_guard,
        )
        if isinstance(spec, ScalarArg) and spec.type is int:
            self._int_scalar(node, type_guard)
        # children loads right after the type check (TYPE phase, same order slot)
        if isinstance(spec, StructArg):
            loads = []
            for child in node.children:
                attr = child.path.rsplit(".", 1)[1]
                if node.optional or guard:  # absent, or inside an absent optional struct
                    loads.append(f"{child.local} = {node.local}.{attr} if {node.local} is not None else None")
                else:
                    loads.append(f"{child.local} = {node.local}.{attr}")
            self.add_lines(ph.TYPE, node, loads)
        if isinstance(spec, TensorArg):
            self._tensor(node, guard)
        elif isinstance(spec, ItemsArg):
            self._items(node, guard)

    def _slug(self, node: Node) -> str:
        return node.label.replace("{i}", "")

    def _int_scalar(self, node: Node, guard: str | None) -> None:
        """An int argument is no bool (True would mean 1) and fits in int64 (the kernels' argument type)."""
        v = node.local
        given = f"{v} is not None and " if node.optional else ""
        slug = self._slug(node)
        msgs = node.spec.messages
        self.add_check(
            self.make_check(node, "bool_as_int", f"{slug}:not_bool", ph.TYPE, self.family.template("bool_as_int", msgs),
                            f"{node.label} must be an int, not a bool", fmt={"value": f"repr({v})"}),
            f"{given}type({v}) is bool", node, ph.TYPE, guard,
        )
        self.add_check(
            self.make_check(node, "int64", f"{slug}:int64", ph.TYPE, self.family.template("int64", msgs),
                            f"{node.label} must fit in int64", info={"min": INT64_MIN, "max": INT64_MAX},
                            fmt={"value": f"repr({v})"}),
            # traced: int() first, since some torch.compile versions cannot order an IntEnum against an int
            f"{given}not ({INT64_MIN} <= {f'int({v})' if self.traceable else v} <= {INT64_MAX})", node, ph.TYPE,
            guard,
        )

    def _tensor(self, node: Node, guard: str | None) -> None:
        spec = node.spec
        assert isinstance(spec, TensorArg)
        v = node.local
        slug = self._slug(node)
        msgs = spec.messages
        dims = spec.dims
        single = dims is not None and all(d.kind == "const" and d.value <= 1 for d in dims)
        if spec.contiguous and not single:  # a tensor of at most one element is always contiguous
            self.add_check(
                self.make_check(node, "contiguous", f"{slug}:contiguous", ph.CONTIGUOUS,
                                self.family.template("contiguous", msgs), f"{node.label} must be contiguous",
                                fmt={"shape": f"tuple({v}.shape)", "stride": f"tuple({v}.stride())"}),
                f"not {v}.is_contiguous()", node, ph.CONTIGUOUS, guard,
            )
        if spec.dtypes:
            expected = " or ".join(str(d) for d in spec.dtypes)
            if len(spec.dtypes) == 1:
                fail = f"{v}.dtype is not {self.const(spec.dtypes[0], 'd')}"
            else:
                fail = f"{v}.dtype not in {self.const(frozenset(spec.dtypes), 'd')}"
            self.add_check(
                self.make_check(node, "dtype", f"{slug}:dtype", ph.DTYPE, self.family.template("dtype", msgs),
                                f"{node.label} must have dtype {expected}",
                                info={"dtypes": spec.dtypes},
                                fmt={"expected": repr(expected), "actual": f"str({v}.dtype)"}),
                fail, node, ph.DTYPE, guard,
            )
        shape_fmt = {"shape": f"tuple({v}.shape)", "ndim": f"{v}.dim()"}
        if dims is not None:
            rank = len(dims)
            self.add_check(
                self.make_check(node, "rank", f"{slug}:rank", ph.RANK, self.family.template("rank", msgs),
                                f"{node.label} must be {rank}-D", info={"rank": rank},
                                fmt={**shape_fmt, "rank": repr(rank)}),
                f"{v}.dim() != {rank}", node, ph.RANK, guard,
            )
            for i, dim in enumerate(dims):
                self._dim(node, guard, i, dim, rank)
        elif spec.min_rank is not None:
            self.add_check(
                self.make_check(node, "min_rank", f"{slug}:min_rank", ph.RANK, self.family.template("min_rank", msgs),
                                f"{node.label} must be at least {spec.min_rank}-D", info={"rank": spec.min_rank},
                                fmt={**shape_fmt, "rank": repr(spec.min_rank)}),
                f"{v}.dim() < {spec.min_rank}", node, ph.RANK, guard,
            )

    def _dim(self, node: Node, guard: str | None, i: int, dim: Dim, rank: int) -> None:
        spec = node.spec
        assert isinstance(spec, TensorArg)
        v = node.local
        msgs = spec.messages
        size = f"{v}.shape[{i}]"
        slug = f"{self._slug(node)}:size[{i}]" if rank > 1 else f"{self._slug(node)}:size"
        nd = "" if rank == 1 else "_nd"
        base_fmt = {"actual": size, "dim": repr(i), "shape": f"tuple({v}.shape)"}
        if dim.kind == "any":
            return
        if dim.kind == "const":
            self.add_check(
                self.make_check(node, "size", slug, ph.SIZE, self.family.template("size" + nd, msgs),
                                f"{node.label}.shape[{i}] must be {dim.value}", info={"dim": i, "expr": dim.text},
                                fmt={**base_fmt, "expected": repr(dim.value)}),
                f"{size} != {dim.value}", node, ph.SIZE, guard,
            )
            return
        assert dim.expr is not None
        if dim.kind == "symbol":
            sym, off = dim.expr.simple_symbol  # type: ignore[misc]
            if sym in self.top_names or sym in self.constants:
                self._expr_dim(node, guard, i, dim, nd, slug, base_fmt)
                return
            local = f"s_{sym}"
            binder = f"{node.label}.shape[{i}]"
            value = f"{size} - {off}" if off > 0 else (f"{size} + {-off}" if off < 0 else size)
            expect = f"{local} + {off}" if off > 0 else (f"{local} - {-off}" if off < 0 else local)
            if sym not in self.symbols:
                self.symbols[sym] = binder
                if node.optional or node.guard or node.loop is not None:
                    self.maybe_symbols.add(sym)
                    self.add_lines(ph.SIZE, node, [f"if {guard or 'True'}: {local} = {value}"])
                else:
                    self.add_lines(ph.SIZE, node, [f"{local} = {value}"])
                    self.bound.add(sym)
                return
            fmt = {**base_fmt, "expected": expect, "symbol": repr(sym), "binder": repr(self.symbols[sym])}
            check = self.make_check(node, "size", slug, ph.SIZE, self.family.template("size" + nd, msgs),
                                    f"{node.label}.shape[{i}] must equal {dim.text}",
                                    info={"dim": i, "expr": dim.text, "symbol": sym, "binder": self.symbols[sym]},
                                    fmt=fmt)
            if sym in self.bound:
                self.add_check(check, f"{size} != {expect}", node, ph.SIZE, guard)
            else:
                self.add_check(check, f"{local} is not None and {size} != {expect}", node, ph.SIZE, guard)
                if not (node.optional or node.guard or node.loop is not None):
                    self.add_lines(ph.SIZE, node, [f"if {local} is None: {local} = {value}"])
                    self.bound.add(sym)
                else:
                    self.add_lines(ph.SIZE, node, [f"if ({guard or 'True'}) and {local} is None: {local} = {value}"])
            return
        self._expr_dim(node, guard, i, dim, nd, slug, base_fmt)

    def _expr_dim(self, node: Node, guard: str | None, i: int, dim: Dim, nd: str, slug: str,
                  base_fmt: dict[str, str]) -> None:
        spec = node.spec
        assert isinstance(spec, TensorArg) and dim.expr is not None
        for n in dim.expr.names:
            if n in self.symbols and n not in self.bound:
                raise ContractDefinitionError(
                    f"{self.name}: {node.label} uses symbol {n!r} before a required tensor binds it"
                )
        src = dim.expr.compile(self.scope())
        size = f"{node.local}.shape[{i}]"
        if dim.kind == "min":  # (kind, the value's name in the message, rule text, failing comparison)
            kind, key, rule, op = "min_size", "minimum", f"must be >= {dim.text[2:].strip()}", "<"
        else:
            kind, key, rule, op = "size", "expected", f"must equal {dim.text}", "!="
        self.add_check(
            self.make_check(node, kind, slug, ph.SIZE, self.family.template(kind + nd, spec.messages),
                            f"{node.label}.shape[{i}] {rule}", info={"dim": i, "expr": dim.text},
                            fmt={**base_fmt, key: src}),
            f"{size} {op} {src}", node, ph.SIZE, guard,
        )

    def _items(self, node: Node, guard: str | None) -> None:
        spec = node.spec
        assert isinstance(spec, ItemsArg)
        item = node.children[0]
        v = node.local
        if spec.max_len is not None:
            self.add_check(
                self.make_check(node, "max_len", f"{self._slug(node)}:max_len", ph.PRESENCE,
                                self.family.template("max_len", spec.messages),
                                f"{node.label} holds at most {spec.max_len} entries",
                                info={"max_len": spec.max_len},
                                fmt={"max_len": repr(spec.max_len), "actual": f"len({v})"}),
                f"len({v}) > {spec.max_len}", node, ph.PRESENCE, guard,
            )
        # item type check and item children
        tconst = self.const(item.pytype, "t")
        tname = _type_name(item.pytype)
        self.add_check(
            self.make_check(item, "type", f"{self._slug(item)}:type", ph.TYPE,
                            self.family.template("type", item.spec.messages), f"each {item.label} must be {tname}",
                            info={"expected_type": tname},
                            fmt={"expected_type": repr(tname), "type": f"type({item.local}).__name__"}),
            f"not isinstance({item.local}, {tconst})", item, ph.TYPE, None,
        )
        for child in item.children:
            self.emit_node(child)
        for rule in getattr(item.spec, "rules", ()):
            self.emit_rule(rule, struct=item)

    # -- rules --------------------------------------------------------------------------------------
    def _node(self, name: str, rule: Rule) -> Node:
        node = self.by_label.get(name) or self.by_path.get(name)
        if node is None:
            raise ContractDefinitionError(f"{self.name}: rule at {rule.origin} names unknown argument {name!r}")
        return node

    def emit_rule(self, rule: Rule, struct: Node | None = None) -> None:
        why, fix = rule.why, rule.fix
        loop_owner = struct.loop if struct is not None else None
        fake = None
        if loop_owner is not None:
            assert struct is not None
            fake = Node(struct.path, struct.label, struct.local, struct.spec, False, None, None, loop=loop_owner,
                        loop_var=loop_owner.loop_var, order=struct.order)
        if isinstance(rule, (AllOrNone, RequiredIf, ForbiddenUnless, RequiredWhen)):
            nodes = [self._node(f, rule) for f in rule.fields]
            joined = ", ".join(n.label for n in nodes)
            present = [f"{n.local} is not None" for n in nodes]
            pairs = ", ".join(f"({n.label!r}, {n.local})" for n in nodes)
            missing_fmt = f"', '.join(n for n, v in [{pairs}] if v is None) or '-'"
            given_fmt = f"', '.join(n for n, v in [{pairs}] if v is not None) or '-'"
            fmt = {"names": repr(joined), "missing": missing_fmt, "given": given_fmt}
            kind = rule.kind
            if isinstance(rule, AllOrNone):
                fail = f"len({{{', '.join(p for p in present)}}}) > 1"
                summary = f"{joined} are given together or not at all"
            elif isinstance(rule, (RequiredIf, ForbiddenUnless)):
                flag = self._node(rule.flag, rule)
                fmt["flag"] = repr(flag.label)
                if isinstance(rule, RequiredIf):
                    fail = f"{flag.local} and not ({' and '.join(present)})"
                    summary = f"{flag.label}=True requires {joined}"
                else:
                    fail = f"not {flag.local} and ({' or '.join(present)})"
                    summary = f"{joined} must be None when {flag.label}=False"
            else:
                cond = rule.condition.compile(self.scope())
                fail = f"{cond} and not ({' and '.join(present)})"
                summary = f"{joined} required when {rule.when}"
                fmt["when"] = repr(rule.when)
            template = rule.message or self.family.template(kind)
            for extra, src in rule.values.items():
                fmt[extra] = Expr.parse(src).compile(self.scope())
            check = self.make_check(None, kind, rule.slug, ph.PRESENCE, template, summary, why, fix,
                                    rule.error, rule, info={"rule": rule}, fmt=fmt,
                                    arguments=rule.arguments, origin=rule.origin)
            self.add_check(check, fail, None, ph.PRESENCE, None)
            return
        if isinstance(rule, RelationRule):
            scope = self.scope(struct)
            cond = rule.condition.compile(scope)
            guard = rule.guard.compile(scope) if rule.guard is not None else None
            names: set[str] = set(rule.condition.names) | (set(rule.guard.names) if rule.guard else set())
            uses_symbols = any(n in self.symbols for n in names)
            uses_tensors = struct is not None or any(
                isinstance(self.by_path[n].spec, (TensorArg, ItemsArg, StructArg)) for n in names if n in self.by_path
            )
            phase = ph.RELATION if (uses_symbols or uses_tensors) else ph.SCALAR
            rfmt: dict[str, str] = {n: scope[n] for n in names if n in scope}
            for extra, src in rule.values.items():
                rfmt[extra] = Expr.parse(src).compile(scope)
            if fake is not None:
                rfmt["i"] = fake.loop_var
            args = rule.arguments
            if struct is not None:
                args = tuple(
                    (f"{struct.label}.{a}" if a in scope and scope[a].startswith(struct.local + "__") else a)
                    for a in args
                )
            check = self.make_check(fake, "relation", (f"{self._slug(struct)}:" if struct else "") + rule.slug,
                                    phase, rule.message, f"requires `{rule.require}`"
                                    + (f" when `{rule.when}`" if rule.when else ""),
                                    why, fix, rule.error, rule, info={"rule": rule, "struct": struct},
                                    fmt=rfmt, arguments=args, origin=rule.origin)
            if fake is None:
                check.fmt.pop("name", None)
            fail = f"not {cond}"
            self.add_check(check, fail, fake, phase, guard)
            return
        raise ContractDefinitionError(f"unsupported rule {rule!r}")  # pragma: no cover

    # -- device -------------------------------------------------------------------------------------
    def emit_device(self) -> None:
        if self.device_key is None:
            return
        key = self.by_label.get(self.device_key) or self.by_path.get(self.device_key)
        if key is None or not isinstance(key.spec, TensorArg) or key.optional or key.loop is not None:
            raise ContractDefinitionError(f"{self.name}: device_key {self.device_key!r} must name a required tensor")
        self.add_lines(ph.DEVICE, None, [f"_dev = {key.local}.device", f"_meta = {key.local}.is_meta"], order=-1)
        if not self.family.allow_meta:
            self.add_check(
                self.make_check(key, "meta_device", f"{self._slug(key)}:not_meta", ph.DEVICE,
                                self.family.template("meta_device", key.spec.messages),
                                f"{key.label} (the launch's device) must not be on meta", fmt={"device": "str(_dev)"}),
                "_meta", key, ph.DEVICE, None, order=-1,
            )
        for node in self.nodes:
            spec = node.spec
            if node is key or not isinstance(spec, TensorArg) or not spec.same_device:
                continue
            self.add_check(
                self.make_check(node, "device", f"{self._slug(node)}:device", ph.DEVICE,
                                self.family.template("device", spec.messages),
                                f"{node.label} must be on the same device as {key.label}",
                                info={"reference": key.label},
                                fmt={"device": f"str({node.local}.device)", "reference_name": repr(key.label),
                                     "reference_device": "str(_dev)"}),
                f"{node.local}.device != _dev", node, ph.DEVICE, node.guard,
            )

    # -- aliasing -----------------------------------------------------------------------------------
    def written(self) -> list[Node]:
        """The tensor nodes the launch writes: ``TensorArg(writes=True)`` or named in ``writes``."""
        names = set(self.writes)
        known = {n.path for n in self.nodes} | {n.label for n in self.nodes}
        unknown = sorted(names - known)
        if unknown:
            raise ContractDefinitionError(f"{self.name}: writes names unknown arguments {unknown}")
        out = []
        for node in self.nodes:
            if node.path in names or node.label in names or getattr(node.spec, "writes", False):
                if not isinstance(node.spec, TensorArg) or node.loop is not None:
                    raise ContractDefinitionError(
                        f"{self.name}: {node.label} is declared written but is not a tensor outside a collection")
                out.append(node)
        return out

    def emit_alias(self) -> None:
        """One check: no written tensor overlaps another tensor argument (byte ranges, no device reads).

        The checker lists every tensor's first byte (``data_ptr()``) and end (plus a constant size where the
        spec fixes shape and dtype, else ``nbytes``, or the strided extent). Sorted apart, the k-th smallest
        end never exceeds the (k+1)-th smallest start exactly when no two ranges overlap: the usual case
        costs two sorts and one comparison pass, all in C. Only otherwise does :func:`first_overlap` look
        for a pair with a written tensor in it. Each tensor has a code (node index << 20 | item index) that
        names it in the message. Empty tensors overlap nothing.
        """
        written = self.written()
        if not written:
            return
        tensors = [n for n in self.nodes if isinstance(n.spec, TensorArg)]
        labels = tuple(n.label for n in tensors)
        top = [(k, n) for k, n in enumerate(tensors) if n.loop is None]
        static = tuple((int(n in written), k << 20) for k, n in top)

        def name(span: Span) -> str:
            return _label(labels[span[3] >> 20], span[3] & 0xFFFFF)

        def find(starts: list[int], ends: list[int], loop_codes: Sequence[int]) -> tuple[Span, Span] | None:
            codes = static + tuple((0, c) for c in loop_codes)
            return first_overlap([(a, b, w, c) for a, b, (w, c) in zip(starts, ends, codes, strict=True)])

        def which(a: Span, b: Span) -> str:
            return "both" if a[2] and b[2] else name(a if a[2] else b)

        # Ranges verified before (an engine launches with the same few buffer sets every step) are not sorted
        # again: a bounded set of their keys, added to only when the check passed.
        seen: set[tuple[int, ...]] = set()

        def passed(key: tuple[int, ...]) -> None:
            if len(seen) >= _ALIAS_SEEN_MAX:
                seen.clear()
            seen.add(key)

        self.env.update(_alias=find, _alias_name=name, _alias_written=which, _alias_seen=seen, _alias_pass=passed,
                        _gt=operator.gt)
        starts, ends = [], []
        for j, (_k, node) in enumerate(top):
            v = node.local
            size = self._static_size(node) or (f"{v}.nbytes" if _contiguous(node) else f"_extent({v})")
            if node.guard:
                starts.append(f"(_p{j} := {v}.data_ptr() if {node.guard} else 0)")
                ends.append(f"(_p{j} + {size} if {node.guard} else 0)")
            else:
                starts.append(f"(_p{j} := {v}.data_ptr())")
                ends.append(f"_p{j} + {size}")
        self.add_lines(ph.ALIAS, None, [f"_s = [{', '.join(starts)}]", f"_e = [{', '.join(ends)}]"], order=0)
        looped = [(k, n) for k, n in enumerate(tensors) if n.loop is not None]
        if looped:
            self.add_lines(ph.ALIAS, None, ["_lc = []"], order=1)
            for k, node in looped:
                v = node.local
                size = f"{v}.nbytes" if _contiguous(node) else f"_extent({v})"
                self.add_lines(ph.ALIAS, node, [
                    f"_p = {v}.data_ptr(); _s.append(_p); _e.append(_p + {size}); "
                    f"_lc.append({k << 20} | {node.loop_var})"], order=2)
        key = "tuple(_s + _e)"
        self.add_lines(ph.ALIAS, None, ["_h = None", f"_k = None if _meta else {key}" if self.device_key
                                        else f"_k = {key}", "_new = _k is not None and _k not in _alias_seen"],
                       order=3)
        fail = (f"any(map(_gt, sorted(_e), sorted(_s)[1:])) and "
                f"(_h := _alias(_s, _e, {'_lc' if looped else '()'})) is not None")
        self.add_check(
            self.make_check(None, "aliasing", "aliasing", ph.ALIAS, self.family.template("aliasing"),
                            "no tensor the launch writes may share memory with another argument",
                            info={"written": tuple(n.label for n in written)},
                            fmt={"first": "_alias_name(_h[0])", "second": "_alias_name(_h[1])",
                                 "shared": "min(_h[0][1], _h[1][1]) - _h[1][0]",
                                 "written": "_alias_written(_h[0], _h[1])"},
                            arguments=tuple(n.label for n in written),
                            origin=self.origin or written[0].spec.origin),
            fail, None, ph.ALIAS, "_new", order=4,
        )
        self.add_lines(ph.ALIAS, None, ["if _new and _h is None: _alias_pass(_k)"], order=5)

    def _static_size(self, node: Node) -> str | None:
        """The byte size of a contiguous tensor whose spec fixes its dtype and every dimension (constants, or
        symbols bound by a required tensor), as an expression over the checker's locals; else None."""
        spec = node.spec
        assert isinstance(spec, TensorArg)
        dims = spec.dims
        if not spec.contiguous or len(spec.dtypes) != 1 or dims is None:
            return None
        n = torch.empty((), dtype=spec.dtypes[0]).element_size()
        factors: list[str] = []
        for d in dims:
            if d.kind == "const":
                n *= d.value
                continue
            simple = d.expr.simple_symbol if d.kind == "symbol" and d.expr is not None else None
            if simple is None or simple[0] not in self.bound or simple[0] in self.top_names:
                return None
            sym, off = simple
            factors.append(f"(s_{sym} + {off})" if off else f"s_{sym}")
        return " * ".join([*factors, str(n)])

    # -- assembly -----------------------------------------------------------------------------------
    def compile(self) -> Compiled:
        self.build()
        if self.field_checks:
            for node in list(self.nodes):
                if node.loop is None and not node.path.endswith("[]"):
                    self.emit_node(node)
            for node in list(self.nodes):
                if isinstance(node.spec, StructArg) and node.loop is None:
                    for rule in node.spec.rules:
                        self.emit_rule(rule, struct=node)
        for rule in self.rules:
            self.emit_rule(rule)
        if self.field_checks:
            self.emit_device()
            self.emit_alias()
        source = self.assemble()
        fast = self.field_checks and not self.traceable and _TensorGuards is not None
        if fast:
            source += "\n\n" + self.assemble_fast()
            self.env.update(_fast_cache={}, _remember=_remember, _passed=_passed, _data_ptr=torch.Tensor.data_ptr)
        filename = f"<contract {self.name}{' traceable' if self.traceable else ''}>"
        register_source(filename, source)
        code = compile(source, filename, "exec")
        checks = self.checks
        family = self.family
        env = self.env
        compiled_fmt: list[dict[str, Any]] = []
        for check in checks:
            compiled_fmt.append({k: compile(src, f"<fmt {check.slug}:{k}>", "eval") for k, src in check.fmt.items()})

        traced = self.traceable

        def _fail(idx: int, scope: dict[str, Any]) -> typing.NoReturn:
            check = checks[idx]
            if traced and torch.compiler.is_compiling():
                # torch.compile traces this raise: a builtin error with a constant text (the rule and its code)
                # is what it can follow; the eager launcher raises the full ContractError.
                raise _builtin(check.error)(_static_text(family, check))
            values: dict[str, Any] = {}
            for k, c in compiled_fmt[idx].items():
                try:
                    values[k] = eval(c, env, scope)
                except Exception as exc:  # pragma: no cover - a broken template must still raise
                    values[k] = f"<{k}: {exc}>"
            message = family.prefix + check.template.format_map(_Missing(values))
            pointer = family.pointer.format(code=check.code or "?", contract=check.contract,
                                            summary=check.summary, slug=check.slug)
            notes: tuple[str, ...] = ()
            if "symbol" in check.info and "binder" in check.info:
                sym = check.info["symbol"]
                notes = (f"  ({sym}={scope.get(f's_{sym}')} was bound by {check.info['binder']})",)
            raise check.error(message, code=check.code or "?", contract=check.contract, check=check,
                              pointer=pointer, details=values, notes=notes)

        env["_fail"] = _fail
        namespace: dict[str, Any] = env
        exec(code, namespace)
        checker = typing.cast(Checker, namespace["_check_fast" if fast else "_check"])
        whole = typing.cast(Checker, namespace["_check"])
        memo = typing.cast(MemoChecker, namespace["_check_memo"]) if fast else None
        return Compiled(checker, checks, source, self.nodes, dict(self.symbols), whole, memo)

    def assemble(self) -> str:
        params = ", ".join(f"{name}=None" if name in self.none_defaults else name for name, *_ in self.fields)
        lines = [f"def _check(*, {params}):"]
        for sym in self.symbols:
            lines.append(f"    s_{sym} = None")
        steps = sorted((s for s in self.steps if not (self.traceable and s.memory)), key=lambda s: (s.phase, s.order))
        lines += self._body(steps, "    ")
        lines.append("    return _dev" if self.device_key else "    return None")
        return "\n".join(lines) + "\n"

    def _body(self, steps: list[Step], ind: str) -> list[str]:
        """The lines of ``steps`` (sorted), each collection's steps inside one loop over its items."""
        lines: list[str] = []
        i = 0
        while i < len(steps):
            step = steps[i]
            if step.loop is None:
                lines.extend(ind + ln for ln in step.lines)
                i += 1
                continue
            owner = step.loop
            item = owner.children[0]
            seq = f"({owner.local} or ())" if owner.optional else owner.local
            lines.append(f"{ind}for {owner.loop_var}, {item.local} in enumerate({seq}):")
            lines.extend(
                f"{ind}    {c.local} = getattr({item.local}, {c.path.rsplit('.', 1)[1]!r}, None)"
                for c in item.children
            )
            while i < len(steps) and steps[i].loop is owner:
                lines.extend(f"{ind}    " + ln for ln in steps[i].lines)
                i += 1
        return lines

    # -- the repeat-call path -----------------------------------------------------------------------
    def assemble_fast(self) -> str:
        """Two more functions beside ``_check``: ``_bind`` and the checker launchers call, ``_check_fast``.

        Every check is a function of the argument types, the Python scalars, each tensor's metadata (type,
        dtype, device, sizes, strides, dispatch keys) and the tensors' addresses; none reads a tensor's values.
        ``_check_fast`` keys a cache by the types and scalars, and keeps, per key, the metadata of a few calls
        that passed every check (a C guard compares them, ``TensorGuards``, the one torch.compile uses). A call
        that matches one runs only the checks that read addresses (alignment rules, aliasing), in the order
        ``_check`` runs them, with the symbols and device the passing call bound; any other call runs
        ``_check`` itself, and is remembered once it passes (``_bind`` recomputes what it bound). The errors
        are ``_check``'s: a matching call can fail only an address check, the first one ``_check`` would reach.
        """
        params = ", ".join(f"{name}=None" if name in self.none_defaults else name for name, *_ in self.fields)
        kwargs = ", ".join(f"{name}={name}" for name, *_ in self.fields)
        named = ", ".join(f"{name!r}: {name}" for name, *_ in self.fields)
        syms = [f"s_{sym}" for sym in self.symbols]
        state = ", ".join([*syms, "_dev", "_meta"])
        ordered = sorted(self.steps, key=lambda s: (s.phase, s.order))
        # _bind: the loads and bindings of _check, without its checks (run only after _check passed)
        bind = [f"def _bind(*, {params}):", *(f"    {s} = None" for s in syms)]
        bind += self._body([s for s in ordered if not s.check and s.phase != ph.ALIAS], "    ")
        if not self.device_key:
            bind += ["    _dev = None", "    _meta = False"]
        bind.append(f"    return ({state},)")
        # _check_fast: gather the key and the tensors, look up, run the address checks or fall back
        loads: list[str] = []
        key: list[str] = []
        tensors: list[str] = []
        loops: list[str] = []
        for node in self.nodes:
            if node.loop is None and "." not in node.path and not node.path.endswith("[]"):
                self._gather(node, loads, key, tensors, loops)
        gather = ["    try:", *("        " + ln for ln in loads)]
        if loops:
            gather += ["        _kx = []", "        _tx = []"] + ["        " + ln for ln in loops]
            gather.append(f"        _key = ({''.join(k + ', ' for k in key)}*_kx)")
            gather.append(f"        _tl = ({''.join(t + ', ' for t in tensors)}*_tx)")
        else:
            gather.append(f"        _key = ({''.join(k + ', ' for k in key)})")
            gather.append(f"        _tl = ({''.join(t + ', ' for t in tensors)})")
        gather += ["        _hit = _fast_cache.get(_key)",
                   "    except Exception:  # a malformed call: _check reports it",
                   "        _hit = _key = _tl = None"]
        address = self._body([s for s in ordered if s.memory], "                    ")

        def variant(fname: str, memo: bool) -> list[str]:
            # the memo variant also returns the memo of the call's addresses (see Compiled.memo)
            same = "_entry[1][-2], _entry[3]" if memo else "_entry[1][-2]"
            moved = "_entry[1][-2], _memo" if memo else "_entry[1][-2]"
            out = [f"def {fname}(*, {params}):", *gather,
                   "    if _hit is not None:",
                   "        for _entry in _hit:",
                   "            if _entry[0](*_tl):",
                   "                _ptrs = list(map(_data_ptr, _tl))",
                   "                if _ptrs == _entry[2]:",
                   f"                    return {same}",
                   "                _memo = _entry[4].get(_t := tuple(_ptrs))",
                   "                if _memo is None:  # addresses not seen with this metadata: check them",
                   f"                    ({state},) = _entry[1]",
                   *address,
                   "                    _memo = _passed(_entry[4], _t)",
                   "                _entry[2] = _ptrs",
                   "                _entry[3] = _memo",
                   f"                return {moved}",
                   f"    _dev = _check({kwargs})",
                   "    _memo = None",
                   "    if _key is not None:",
                   f"        _memo = _remember(_fast_cache, _key, _tl, _bind, {{{named}}})",
                   "    return _dev, _memo" if memo else "    return _dev"]
            return out

        fast = [*variant("_check_fast", False), "", "", *variant("_check_memo", True)]
        return "\n".join(bind) + "\n\n" + "\n".join(fast) + "\n"

    def _gather(self, node: Node, loads: list[str], key: list[str], tensors: list[str], loops: list[str]) -> None:
        """What ``_check_fast`` reads of ``node``: its type (and value, for a scalar) into the key, a tensor
        into the tensors the guard compares (whether an optional one is given into the key)."""
        spec, v = node.spec, node.local
        maybe = node.optional or node.guard is not None
        if isinstance(spec, TensorArg):
            if maybe:
                key.append(f"{v} is None")
                tensors.append(f"*(() if {v} is None else ({v},))")
            else:
                tensors.append(v)
        elif isinstance(spec, ScalarArg):
            key += [f"type({v})", v]
        elif isinstance(spec, StructArg):
            key.append(f"type({v})")
            for child in node.children:
                attr = child.path.rsplit(".", 1)[1]
                loads.append(f"{child.local} = {v}.{attr} if {v} is not None else None" if maybe
                             else f"{child.local} = {v}.{attr}")
                self._gather(child, loads, key, tensors, loops)
        elif isinstance(spec, ItemsArg):
            key += [f"type({v})", f"-1 if {v} is None else len({v})"]
            item = node.children[0]
            loops.append(f"for {item.local} in ({v} or ()):" if maybe else f"for {item.local} in {v}:")
            loops.append(f"    _kx.append(type({item.local}))")
            for child in item.children:
                loops.append(f"    {child.local} = getattr({item.local}, {child.path.rsplit('.', 1)[1]!r}, None)")
                if isinstance(child.spec, TensorArg):
                    loops.append(f"    _tx.append({child.local})")
                elif isinstance(child.spec, ScalarArg):
                    loops.append(f"    _kx.append(type({child.local})); _kx.append({child.local})")
                else:  # a struct or collection in an item: its own fields are not checked, its type is
                    loops.append(f"    _kx.append(type({child.local}))")


def _tensor_guards() -> Any:
    """The C guard torch.compile checks tensors with (None where torch lacks it: every call runs the whole
    checker then)."""
    try:
        from torch._C._dynamo.guards import TensorGuards
    except ImportError:  # pragma: no cover - a torch without dynamo
        return None
    return TensorGuards


_TensorGuards: Any = _tensor_guards()

_FAST_KEYS_MAX = 64  # argument-type and scalar keys a checker remembers (cleared when full)
_FAST_PER_KEY = 4  # tensor metadata sets remembered per key (the most recent first)
_SAFE_SCALARS = (int, float, str, type(None))  # bool is an int; enums are checked apart


Entry = list[Any]
"""``[guard, (symbols..., device, meta), data pointers, memo, memos]`` of one remembered call: the pointers of the
latest call with these tensors' metadata, the memo of those pointers, and ``memos``, the memo of every set of
pointers that passed the address checks with this metadata (at most :data:`_ADDRESSES_PER_ENTRY`). The checks
are functions of the metadata and the pointers alone, so a set seen to pass passes again; the memo of a set is
what a launcher derived from a call with those pointers (several call sites with the same metadata, a K and a V
buffer launched in turn, keep theirs)."""
_ADDRESSES_PER_ENTRY = 64


def _passed(memos: dict[tuple[int, ...], dict[Any, Any]], ptrs: tuple[int, ...]) -> dict[Any, Any]:
    """Record pointers that passed the address checks; returns their new, empty memo."""
    if len(memos) >= _ADDRESSES_PER_ENTRY:
        memos.clear()
    memo: dict[Any, Any] = {}
    memos[ptrs] = memo
    return memo


def _remember(cache: dict[tuple[Any, ...], list[Entry]],
              key: tuple[Any, ...], tensors: tuple[torch.Tensor, ...], bind: Callable[..., tuple[Any, ...]],
              kwargs: dict[str, Any]) -> dict[Any, Any] | None:
    """Remember a call that passed every check: a guard over its tensors' metadata, under its key; returns the
    new entry's (empty) memo, None when the call is not remembered.

    Only keys of plain values (types, ints, floats, strings, enums, None) are kept: their ``==`` is the
    value's, so a hit means the same scalars. Only calls of plain ``torch.Tensor`` objects are kept.
    """
    for part in key:
        if not isinstance(part, (*_SAFE_SCALARS, type, enum.Enum)):
            return None
    for t in tensors:  # plain tensors only: a subclass (a fake tensor under torch.compile, say) runs it all
        if type(t) is not torch.Tensor:
            return None
    try:
        guard = _TensorGuards(*tensors, dynamic_dims_sizes=[list(t.shape) for t in tensors],
                              dynamic_dims_strides=[list(t.stride()) for t in tensors]).check
        state = bind(**kwargs)
        ptrs = [t.data_ptr() for t in tensors]
    except Exception:  # a tensor-like the guard does not take: such calls always run the whole checker
        return None
    memo: dict[Any, Any] = {}
    entries = cache.get(key)
    entries = [[guard, state, ptrs, memo, {tuple(ptrs): memo}], *(entries or ())][:_FAST_PER_KEY]
    if key not in cache and len(cache) >= _FAST_KEYS_MAX:
        cache.clear()
    cache[key] = entries
    return memo


def _builtin(error: type[Exception]) -> type[Exception]:
    """The builtin exception class an error class derives from (ValueError for a ContractError)."""
    return next(c for c in error.__mro__ if c.__module__ == "builtins")


def _static_text(family: Family, check: Check) -> str:
    """A check's failure told without the call's values: its summary and the line naming its code."""
    pointer = family.pointer.format(code=check.code or "?", contract=check.contract, summary=check.summary,
                                    slug=check.slug)
    return f"{family.prefix}{check.summary}\n{pointer}"


class _Missing(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def register_source(filename: str, source: str) -> None:
    """Make generated ``source`` visible to tracebacks and :mod:`inspect` under ``filename``."""
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)


def _label(template: str, i: int) -> str:
    return template.replace("{i}", str(i))


INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
_ALIAS_SEEN_MAX = 256  # byte-range sets a checker remembers as verified (cleared when full)

Span = tuple[int, int, int, int]
"""``(start, end, written, code)``: one tensor's byte range, whether the launch writes it, and its name code."""


def _contiguous(node: Node) -> bool:
    """Whether the node's spec requires a contiguous tensor (then its bytes are ``[data_ptr, + nbytes)``)."""
    return isinstance(node.spec, TensorArg) and node.spec.contiguous


def first_overlap(spans: list[Span]) -> tuple[Span, Span] | None:
    """Two spans that overlap with at least one of them written (earlier start first), or None.

    Sorted by start, a span overlaps an earlier one exactly when it starts before the largest end seen so
    far; the sweep keeps that end over all spans and over written ones (and the spans that reach them), so a
    written span is tested against every earlier span and a read one against earlier written ones.
    """
    spans.sort()
    end_all = end_written = -1
    far_all: Span | None = None
    far_written: Span | None = None
    for span in spans:
        start, end, w = span[0], span[1], span[2]
        if start == end:
            continue
        if start < end_written:
            assert far_written is not None
            return far_written, span
        if w and start < end_all:
            assert far_all is not None
            return far_all, span
        if end > end_all:
            end_all, far_all = end, span
        if w and end > end_written:
            end_written, far_written = end, span
    return None


def extent(t: torch.Tensor) -> int:
    """Bytes from ``t``'s first element to just past its last, whatever its strides (0 when empty)."""
    if t.numel() == 0:
        return 0
    return (1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True))) * t.element_size()
