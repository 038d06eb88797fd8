"""Counterexamples: a valid call of a contract, mutated to break exactly one of its checks.

The error catalog shows, for every check, a failing call and the corrected call. Both are built here from
the contract itself: the product supplies a few valid calls (:class:`~kvcanary_contracts.examples.ExampleSet`,
the data types the package ships), and
:func:`counterexample` mutates one of them the way the check's kind says (a wrong object for ``type``, a
strided view for ``contiguous``, another dtype, an extra dimension, an off-by-one size, a ``meta`` tensor
for ``device``, one entry too many for ``max_len``, a dropped or added optional argument for the presence
rules, and for relations the mutation derived from the condition or declared in the rule's ``breaks``).
Every counterexample is verified: the failing call raises exactly that check, the corrected calls pass.

:func:`render_call` writes a call as readable Python (shapes and dtypes, never values) that re-executes to
an equivalent call, so the catalog's code can be run by the tests. This search is development tooling (the
docs generator and the tests use it): it lives in the repository's ``tools/``, outside the wheel.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import dataclasses
import difflib
import enum
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from kvcanary_contracts.checks import ALIAS, TYPE, Check
from kvcanary_contracts.compiler import Compiled, Node
from kvcanary_contracts.contract import Contract
from kvcanary_contracts.errors import ContractError
from kvcanary_contracts.examples import Call, ExampleSet, Variant, unchecked
from kvcanary_contracts.expr import Expr
from kvcanary_contracts.mutations import Misalign, PadStride, Resize, Strided
from kvcanary_contracts.rules import AllOrNone, ForbiddenUnless, Relation, RequiredIf, RequiredWhen
from kvcanary_contracts.specs import Dim, ItemsArg, ScalarArg, TensorArg

__all__ = [
    "Counterexample",
    "ExampleSet",
    "Fix",
    "Misalign",
    "NoCounterexample",
    "PadStride",
    "Variant",
    "all_failures",
    "counterexample",
    "mark_changes",
    "render_call",
    "render_tensor",
    "unchecked",
]


# -- results -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fix:
    """One way out: a label and a call that passes the contract."""

    label: str
    call: Call


@dataclass
class Counterexample:
    """A failing call for one check, the valid call it was made from, and the other ways out.

    ``unchecked`` holds the ids of objects in ``failing`` built without their constructors (``preempted``
    says which, and the code their constructor raises instead); ``also_breaks`` lists the other checks the
    failing call breaks (a collect-all run of the checker), empty when the mutation is exact.
    """

    check: Check
    variant: str
    failing: Call
    fixes: tuple[Fix, ...]
    change: str
    paths: tuple[str, ...]
    error: ContractError
    unchecked: frozenset[int] = frozenset()
    preempted: tuple[tuple[str, str], ...] = ()
    also_breaks: tuple[Check, ...] = ()
    views: Mapping[int, tuple[torch.Tensor, str]] = field(default_factory=dict)  # see render_call

    @property
    def valid(self) -> Call:
        return self.fixes[0].call


class NoCounterexample(Exception):
    """No mutation of any valid call raises exactly this check; ``attempts`` says what each one did."""

    def __init__(self, check: Check, attempts: Sequence[str]) -> None:
        self.check = check
        self.attempts = list(attempts)
        super().__init__(f"{check.code} {check.contract}/{check.slug}: no counterexample\n  " +
                         "\n  ".join(attempts or ["no applicable mutation"]))


# -- paths into a call ---------------------------------------------------------------------------------
Step = str | int


def _steps(path: str) -> list[Step]:
    out: list[Step] = []
    for part in path.split("."):
        if part.endswith("[]"):
            out.extend([part[:-2], 0])
        else:
            out.append(part)
    return out


def _display(path: str) -> str:
    return path.replace("[]", "[0]")


_MISSING = object()


def _get(obj: Any, steps: Sequence[Step]) -> Any:
    for s in steps:
        if obj is None:
            return _MISSING
        if isinstance(s, int):
            if not isinstance(obj, (tuple, list)) or len(obj) <= s:
                return _MISSING
            obj = obj[s]
        elif isinstance(obj, dict):
            obj = obj.get(s, _MISSING)
        else:
            obj = getattr(obj, s, _MISSING)
        if obj is _MISSING:
            return _MISSING
    return obj


class _Builder:
    """Rebuilds nested objects with one value replaced; records objects built past their constructors."""

    def __init__(self) -> None:
        self.unchecked: dict[int, Any] = {}
        self.preempted: list[tuple[str, str]] = []  # (object, code its constructor raised)
        self.views: dict[int, tuple[torch.Tensor, str]] = {}  # id of a view -> (its base, Python that makes it)

    def rebuild(self, obj: Any, attr: str, value: Any, label: str) -> Any:
        if isinstance(obj, types.SimpleNamespace):
            new = types.SimpleNamespace(**vars(obj))
            setattr(new, attr, value)
            return new
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            fields = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
            fields[attr] = value
            code = ""
            if id(obj) not in self.unchecked:
                try:
                    return type(obj)(**fields)
                except ContractError as exc:
                    code = exc.code
            made = unchecked(type(obj), **fields)
            self.unchecked[id(made)] = made
            if code:
                self.preempted.append((_display(label), code))
            return made
        raise TypeError(f"cannot rebuild {type(obj).__name__} with {attr}=...")

    def set(self, obj: Any, steps: Sequence[Step], value: Any, done: str = "") -> Any:
        head, rest = steps[0], steps[1:]
        if isinstance(head, int):
            items = list(obj)
            label = f"{done}[{head}]"
            items[head] = self.set(items[head], rest, value, label) if rest else value
            return type(obj)(items) if isinstance(obj, tuple) else items
        label = f"{done}.{head}" if done else head
        if isinstance(obj, dict):
            new = dict(obj)
            new[head] = self.set(obj[head], rest, value, label) if rest else value
            return new
        child = self.set(getattr(obj, head), rest, value, label) if rest else value
        return self.rebuild(obj, head, child, done)


# -- the engine ----------------------------------------------------------------------------------------
_DTYPE_SWAP: Mapping[torch.dtype, torch.dtype] = {
    torch.int64: torch.int32,
    torch.int32: torch.int64,
    torch.uint8: torch.int8,
    torch.int8: torch.uint8,
    torch.float32: torch.float16,
    torch.float16: torch.float32,
    torch.bfloat16: torch.float16,
}

_SAFE_BUILTINS: Mapping[str, object] = {
    n: getattr(builtins, n) for n in ("len", "min", "max", "abs", "int", "isinstance", "tuple", "str", "type")
}


@dataclass
class _Attempt:
    """One candidate mutation of a valid call."""

    call: Call
    change: str
    paths: tuple[str, ...]
    fixes: tuple[Fix, ...] = ()
    builder: _Builder | None = None


class _Engine:
    def __init__(self, contract: type[Contract], examples: ExampleSet) -> None:
        self.contract = contract
        self.examples = examples
        self.compiled: Compiled = contract.compiled()
        self.checker = self.compiled.whole  # every check, every call
        self.constants = dict(contract.contract.constants)
        self.fields = list(contract.model_fields)
        self.by_path = {n.path: n for n in self.compiled.nodes}
        self._collect: Callable[..., list[int]] | None = None

    # symbols ------------------------------------------------------------------------------------------
    def _symbol_dims(self) -> Iterator[tuple[Node, int, Dim]]:
        for node in self.compiled.nodes:
            if isinstance(node.spec, TensorArg) and node.spec.dims is not None:
                for i, dim in enumerate(node.spec.dims):
                    yield node, i, dim

    def symbols(self, call: Call) -> dict[str, int]:
        out: dict[str, int] = {}
        for node, i, dim in self._symbol_dims():
            if dim.kind != "symbol" or dim.expr is None:
                continue
            simple = dim.expr.simple_symbol
            assert simple is not None
            sym, off = simple
            if sym in out or sym in self.fields or sym in self.constants:
                continue
            t = _get(call, _steps(node.path))
            if isinstance(t, torch.Tensor) and t.dim() > i:
                out[sym] = int(t.shape[i]) - off
        return out

    def scope(self, call: Call, struct: Node | None = None) -> dict[str, Any]:
        env: dict[str, Any] = dict(self.constants)
        env.update(self.symbols(call))
        env.update({k: v for k, v in call.items()})
        if struct is not None:
            obj = _get(call, _steps(struct.path))
            for child in struct.children:
                attr = child.path.rsplit(".", 1)[1]
                env[attr] = getattr(obj, attr, None)
        return env

    @staticmethod
    def evaluate(source: str | ast.expr, env: Mapping[str, Any]) -> Any:
        tree = ast.Expression(body=source) if isinstance(source, ast.expr) else Expr.parse(source).tree
        code = compile(ast.fix_missing_locations(tree), "<counterexample>", "eval")
        return eval(code, {"__builtins__": dict(_SAFE_BUILTINS)}, dict(env))

    def resize(self, call: Call, symbol: str, value: int, builder: _Builder) -> tuple[Call, list[str]]:
        """Every tensor sized by ``symbol`` resized so that ``symbol == value`` (dependent minimums grown)."""
        values = self.symbols(call)
        values[symbol] = value
        env = {**self.constants, **{k: v for k, v in call.items()}, **values}
        shapes: dict[str, list[int]] = {}
        for node, i, dim in self._symbol_dims():
            t = _get(call, _steps(node.path))
            if not isinstance(t, torch.Tensor) or dim.expr is None or symbol not in dim.expr.names:
                continue
            shape = shapes.setdefault(node.path, list(t.shape))
            if dim.kind == "min":
                shape[i] = max(shape[i], int(self.evaluate(dim.text[2:], env)))
            else:
                shape[i] = int(self.evaluate(dim.text, env))
        for path, shape in shapes.items():
            t = _get(call, _steps(path))
            call = builder.set(call, _steps(path), torch.zeros(shape, dtype=t.dtype, device=t.device))
        return call, [_display(p) for p in shapes]

    # collect-all evaluation ---------------------------------------------------------------------------
    def failures(self, call: Call) -> list[Check]:
        """Every check the call breaks, in run order (stops early where a broken check makes later ones moot)."""
        if self._collect is None:
            env = dict(getattr(self.checker, "__globals__", {}))
            hits: list[int] = []

            def record(idx: int, scope: object) -> None:
                hits.append(idx)

            env["_fail"] = record
            exec(compile(self.compiled.source, f"<collect {self.contract.contract.name}>", "exec"), env)
            inner = env["_check"]

            def collect(**kw: Any) -> list[int]:
                hits.clear()
                with contextlib.suppress(Exception):  # a broken check can make later ones unevaluable
                    inner(**kw)
                return list(hits)

            self._collect = collect
        out: list[Check] = []
        broken: set[str] = set()  # arguments whose type (or int range) is already wrong: later checks are moot
        for i in dict.fromkeys(self._collect(**call)):
            check = self.compiled.checks[i]
            names = set(_argument_names(check))
            if names & broken or (check.phase == ALIAS and out):  # aliasing sizes assume every check before it
                continue
            out.append(check)
            if check.phase == TYPE:
                broken |= names
        return out

    # mutations by kind ------------------------------------------------------------------------------
    def attempts(self, check: Check, call: Call) -> Iterator[_Attempt]:
        kind = check.kind
        path = check.field_path
        if kind in ("required_if", "forbidden_unless", "required_when", "all_or_none"):
            yield from self._presence(check, call)
            return
        if kind == "relation":
            yield from self._relation(check, call)
            return
        if kind == "aliasing":
            yield from self._aliasing(check, call)
            return
        if kind == "meta_device":
            b = _Builder()
            yield _Attempt(_on_meta(call, b), "every tensor is on the meta device", tuple(call), builder=b)
            return
        assert path is not None
        steps = _steps(path)
        value = _get(call, steps)
        if value is _MISSING or value is None:
            return
        name = _display(path)
        b = _Builder()
        if kind == "type":
            wrong, what = self._wrong_object(value, check)
            yield self._make(b, call, steps, wrong, f"`{name}` is {what}", name)
            return
        if kind == "bool_as_int":
            yield self._make(b, call, steps, True, f"`{name}` is the bool True instead of an int", name)
            return
        if kind == "int64":
            for big, what in ((2**63, "2**63, one past the largest int64"),
                              (-(2**63) - 1, "-2**63 - 1, one below the smallest int64")):
                yield self._make(_Builder(), call, steps, big, f"`{name}` is {what}", name)
            return
        if kind == "max_len":
            limit = _info_int(check, "max_len")
            more = tuple(value) + (value[0],) * (limit + 1 - len(value)) if value else value
            yield self._make(b, call, steps, more, f"`{name}` holds {limit + 1} entries", name)
            return
        if not isinstance(value, torch.Tensor):
            return
        t = value
        if kind == "contiguous":
            strided = _strided(t)
            if strided is not None:
                yield self._make(b, call, steps, strided,
                                 f"`{name}` is a strided view (stride {tuple(strided.stride())})", name)
        elif kind == "dtype":
            dtypes = check.info.get("dtypes", ())
            allowed: tuple[object, ...] = tuple(dtypes) if isinstance(dtypes, (tuple, list, frozenset)) else ()
            other = _DTYPE_SWAP.get(t.dtype, torch.int32)
            cands: tuple[torch.dtype, ...] = (other, torch.int32, torch.int64, torch.float32)
            if other in allowed:  # a set of dtypes: prefer one of the same width (the bytes stay the same size)
                cands = tuple(sorted((*cands, torch.bool, torch.float16, torch.float64),
                                     key=lambda d: d.itemsize != t.element_size()))
            for cand in cands:
                if cand not in allowed:
                    yield self._make(b, call, steps, torch.zeros(t.shape, dtype=cand, device=t.device),
                                     f"`{name}` is {cand} instead of {t.dtype}", name)
                    return
        elif kind == "rank":
            yield self._make(b, call, steps, torch.zeros((*t.shape, 1), dtype=t.dtype, device=t.device),
                             f"`{name}` has an extra dimension ({t.dim() + 1}-D)", name)
        elif kind == "min_rank":
            rank = _info_int(check, "rank")
            flat = [int(n) for n in t.shape[: rank - 2]] + [int(torch.tensor(t.shape[rank - 2 :]).prod())]
            low = flat if rank >= 2 else []
            yield self._make(b, call, steps, torch.zeros(low, dtype=t.dtype, device=t.device),
                             f"`{name}` is {len(low)}-D", name)
        elif kind == "size":
            i = _info_int(check, "dim")
            bigger = [int(n) for n in t.shape]
            bigger[i] += 1
            yield self._make(b, call, steps, torch.zeros(bigger, dtype=t.dtype, device=t.device),
                             f"`{name}.shape[{i}]` is {bigger[i]}, one more than it must be", name)
        elif kind == "min_size":
            i = _info_int(check, "dim")
            text = str(check.info["expr"])[2:]
            minimum = int(self.evaluate(text, self.scope(call)))
            if minimum >= 1:
                smaller = [int(n) for n in t.shape]
                smaller[i] = minimum - 1
                yield self._make(b, call, steps, torch.zeros(smaller, dtype=t.dtype, device=t.device),
                                 f"`{name}.shape[{i}]` is {minimum - 1}, one less than the minimum {minimum}", name)
        elif kind == "device":
            meta = torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device="meta")
            yield self._make(b, call, steps, meta, f"`{name}` is on the meta device", name)

    def _make(self, b: _Builder, call: Call, steps: Sequence[Step], value: Any, change: str, *paths: str
              ) -> _Attempt:
        return _Attempt(b.set(call, steps, value), change, tuple(paths), builder=b)

    def _wrong_object(self, value: Any, check: Check) -> tuple[Any, str]:
        subject = check.subject
        if isinstance(value, torch.Tensor):
            return value.tolist(), "a Python list instead of a tensor"
        plain = value.value if isinstance(value, enum.Enum) else None
        if plain is not None and isinstance(subject, ScalarArg) and not isinstance(plain, subject.type):
            return value.value, f"the plain value {value.value!r} instead of a {type(value).__name__}"
        if isinstance(value, bool):
            return int(value), f"the int {int(value)} instead of a bool"
        if isinstance(subject, ScalarArg) and isinstance(value, int):
            return torch.tensor(int(value)), "a 0-d tensor instead of a Python int"
        if isinstance(subject, ItemsArg) and isinstance(value, (tuple, list)):
            if value:
                return value[0], "one entry instead of a tuple of entries"
            return set(), "a set instead of a tuple"
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            ns = types.SimpleNamespace(**{f.name: getattr(value, f.name) for f in dataclasses.fields(value)})
            return ns, f"a SimpleNamespace with {type(value).__name__}'s fields, not a {type(value).__name__}"
        if isinstance(value, (tuple, list)):
            return set(), f"a set instead of a {type(value).__name__}"
        if isinstance(value, str):
            return 0, "the int 0 instead of a str"
        return str(value), "a str"

    def _aliasing(self, check: Check, call: Call) -> Iterator[_Attempt]:
        """Another tensor argument replaced by a written tensor of its shape and dtype (one object, two roles)."""
        written = check.info.get("written", ())
        assert isinstance(written, tuple)
        tensors = [n for n in self.compiled.nodes if isinstance(n.spec, TensorArg)]
        for w in tensors:
            if w.label not in written:
                continue
            tw = _get(call, _steps(w.path))
            if not isinstance(tw, torch.Tensor):
                continue
            for o in tensors:
                to = _get(call, _steps(o.path))
                if o is w or not isinstance(to, torch.Tensor) or to.shape != tw.shape or to.dtype != tw.dtype:
                    continue
                b = _Builder()
                target, source = _display(o.path), _display(w.path)
                yield self._make(b, call, _steps(o.path), tw, f"`{target}` is the very tensor `{source}` is "
                                 "(the launch writes it)", target, source)
        for w in tensors:  # no tensor of the same shape and dtype: a view of the written one's bytes
            tw = _get(call, _steps(w.path))
            if w.label not in written or not isinstance(tw, torch.Tensor) or not tw.is_contiguous():
                continue
            for o in tensors:
                to = _get(call, _steps(o.path))
                if o is w or not isinstance(to, torch.Tensor) or to.dim() != 1 or tw.nbytes % to.element_size():
                    continue
                suffix = f".view({to.dtype}).view(-1)"
                view = tw.view(to.dtype).view(-1)
                b = _Builder()
                b.views[id(view)] = (tw, suffix)
                target, source = _display(o.path), _display(w.path)
                yield self._make(b, call, _steps(o.path), view, f"`{target}` is a view of the bytes of `{source}` "
                                 "(which the launch writes)", target, source)

    def _presence(self, check: Check, call: Call) -> Iterator[_Attempt]:
        rule = check.subject
        assert isinstance(rule, (RequiredIf, ForbiddenUnless, RequiredWhen, AllOrNone))
        fields = list(rule.fields)
        present = [f for f in fields if call.get(f) is not None]
        none = dict.fromkeys(fields)
        if isinstance(rule, RequiredIf):
            if call.get(rule.flag) is True and len(present) == len(fields):
                # the common misuse: the flag turned on and none of its arguments passed
                bad = {**call, **none}
                off = {**call, rule.flag: False, **none}
                given = _names(fields) if len(fields) == 1 else " and ".join(f"`{f}`" for f in fields)
                absent = f"{given} {'is' if len(fields) == 1 else 'are'} None"
                yield _Attempt(bad, f"`{rule.flag}=True` but {absent}", tuple(fields),
                               (Fix(f"pass {given}", call), Fix(f"or set `{rule.flag}=False`", off)))
        elif isinstance(rule, ForbiddenUnless):
            if call.get(rule.flag) is True and present:
                bad = {**call, rule.flag: False}
                yield _Attempt(bad, f"`{rule.flag}=False` but {_names(present)} given", (rule.flag,),
                               (Fix(f"set `{rule.flag}=True`", call),
                                Fix(f"or drop {_names(present)}", {**bad, **none})))
        elif isinstance(rule, RequiredWhen):
            if len(present) == len(fields):
                bad = {**call, **none}
                yield _Attempt(bad, f"`{rule.when}` holds but {_names(fields)} is None", tuple(fields),
                               (Fix(f"pass {_names(fields)}", call),))
        elif len(present) == len(fields) and len(fields) > 1:
            drop = fields[-1]
            yield _Attempt({**call, drop: None}, f"{_names(fields[:-1])} given without `{drop}`", (drop,),
                           (Fix(f"pass `{drop}` too", call), Fix("or pass none of them", {**call, **none})))

    def _relation(self, check: Check, call: Call) -> Iterator[_Attempt]:
        rule = check.subject
        assert isinstance(rule, Relation)
        struct = check.info.get("struct")
        struct_node = struct if isinstance(struct, Node) else None
        if struct_node is not None and _get(call, _steps(struct_node.path)) in (None, _MISSING):
            return  # the call has no such struct (an empty tuple of sources, a None argument): try another variant
        env = self.scope(call, struct_node)
        breaks: Mapping[str, object] = getattr(rule, "breaks", None) or {}
        overrides: dict[str, object] = dict(breaks)
        if not overrides:
            derived = self._derive(rule, env)
            if derived is None:
                return
            overrides = dict([derived])
        b = _Builder()
        new = call
        paths: list[str] = []
        changes: list[str] = []
        for name, how in overrides.items():
            target = self._target(name, struct_node)
            if target is None:
                raise ValueError(f"{check.contract}/{check.slug}: breaks names {name!r}, which is neither an "
                                 "argument, an attribute nor a symbol of the contract")
            kind, where = target
            if isinstance(how, (Misalign, PadStride, Resize, Strided)):
                t = _get(new, _steps(where))
                if not isinstance(t, torch.Tensor):
                    return
                new = b.set(new, _steps(where), how.apply(t))
                paths.append(_display(where))
                changes.append(how.describe(_display(where)))
                continue
            value = self.evaluate(how, env) if isinstance(how, str) and not isinstance(how, enum.Enum) else how
            if kind == "symbol":
                assert isinstance(value, int)
                new, resized = self.resize(new, where, value, b)
                paths.extend(resized)
                changes.append(f"`{where}` = {value} ({', '.join(f'`{p}`' for p in resized)} resized)")
            else:
                if _get(new, _steps(where)) is _MISSING:
                    return
                new = b.set(new, _steps(where), value)
                paths.append(_display(where))
                changes.append(f"`{_display(where)}` = {value!r}")
        yield _Attempt(new, "; ".join(changes), tuple(paths), builder=b)

    def _target(self, name: str, struct: Node | None) -> tuple[str, str] | None:
        if struct is not None:
            for child in struct.children:
                if child.path.rsplit(".", 1)[1] == name:
                    return "path", child.path
        if name in self.fields:
            return "path", name
        if name in self.compiled.symbols:
            return "symbol", name
        return None

    def _derive(self, rule: Relation, env: Mapping[str, Any]) -> tuple[str, object] | None:
        """``name OP rhs`` (or ``lhs OP name``) -> the value of ``name`` nearest to the valid one that breaks it."""
        body = rule.condition.tree.body
        if not (isinstance(body, ast.Compare) and len(body.ops) == 1):
            return None
        left, op, right = body.left, body.ops[0], body.comparators[0]
        if not isinstance(left, ast.Name) and isinstance(right, ast.Name) and type(op) in _MIRROR:
            left, op, right = right, _MIRROR[type(op)](), left
        if not isinstance(left, ast.Name):
            return None
        rhs = self.evaluate(right, env)
        value: object
        if isinstance(op, ast.In) and isinstance(rhs, (tuple, list, set, frozenset)):
            value = max(int(v) for v in rhs) + 1
        elif not isinstance(rhs, int):
            return None
        elif isinstance(op, (ast.Gt, ast.Lt, ast.NotEq)):
            value = rhs
        elif isinstance(op, ast.GtE):
            value = rhs - 1
        elif isinstance(op, (ast.LtE, ast.Eq)):
            value = rhs + 1
        else:
            return None
        return left.id, value


_MIRROR: Mapping[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Gt: ast.Lt, ast.Lt: ast.Gt, ast.GtE: ast.LtE, ast.LtE: ast.GtE, ast.Eq: ast.Eq, ast.NotEq: ast.NotEq,
}


def _argument_names(check: Check) -> list[str]:
    """The names of what a check reads: its arguments' labels and its field's path (``[i]`` for entries)."""
    names = [a.replace("{i}", "i") for a in check.arguments]
    return [*names, check.field_path] if check.field_path else names


def _on_meta(value: Any, b: _Builder, label: str = "") -> Any:
    """``value`` with every tensor it holds (through dicts, tuples and dataclasses) replaced by a meta tensor."""
    if isinstance(value, torch.Tensor):
        return torch.empty_strided(tuple(value.shape), tuple(value.stride()), dtype=value.dtype, device="meta")
    if isinstance(value, dict):
        return {k: _on_meta(v, b, k) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        items = [_on_meta(v, b, f"{label}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if isinstance(value, tuple) else items
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = value
        for f in dataclasses.fields(value):
            old = getattr(value, f.name)
            new = _on_meta(old, b, f"{label}.{f.name}")
            if new is not old:
                out = b.rebuild(out, f.name, new, label)
        return out
    return value


def _info_int(check: Check, key: str) -> int:
    value = check.info[key]
    assert isinstance(value, int), (check.slug, key, value)
    return value


def _names(fields: Sequence[str]) -> str:
    return ", ".join(f"`{f}`" for f in fields)


def _strided(t: torch.Tensor) -> torch.Tensor | None:
    """A non-contiguous tensor with ``t``'s shape, dtype and device (every other element of a larger one)."""
    for d in reversed(range(t.dim())):
        if t.shape[d] > 1:
            shape = list(t.shape)
            shape[d] *= 2
            index = [slice(None)] * t.dim()
            index[d] = slice(None, None, 2)
            return torch.zeros(shape, dtype=t.dtype, device=t.device)[tuple(index)]
    return None


_ENGINES: dict[tuple[int, int], _Engine] = {}


def _engine(contract: type[Contract], examples: ExampleSet) -> _Engine:
    key = (id(contract), id(examples))
    eng = _ENGINES.get(key)
    if eng is None:
        eng = _ENGINES[key] = _Engine(contract, examples)
    return eng


def all_failures(contract: type[Contract], examples: ExampleSet, call: Call) -> list[Check]:
    """Every check ``call`` breaks (a collect-all run of the contract's generated checker)."""
    return _engine(contract, examples).failures(call)


def counterexample(contract: type[Contract], examples: ExampleSet, check: Check) -> Counterexample:
    """The first mutation of a valid call that raises exactly ``check``; raises :class:`NoCounterexample`."""
    eng = _engine(contract, examples)
    tried: list[str] = []
    first: Counterexample | None = None
    for variant in examples.variants:
        base = variant.build()
        try:
            eng.checker(**base)
        except ContractError as exc:
            raise ValueError(f"{contract.contract.name}: example {variant.name!r} is not valid: {exc}") from exc
        for attempt in eng.attempts(check, base):
            builder = attempt.builder
            try:
                eng.checker(**attempt.call)
            except ContractError as exc:
                if exc.check is not check:
                    tried.append(f"{variant.name}: {attempt.change} -> {exc.code} ({exc.check.slug}) instead")
                    continue
                fixes = attempt.fixes or (Fix("the valid call", base),)
                for fix in fixes:
                    eng.checker(**fix.call)  # a way out that does not pass is a bug of the engine
                others = tuple(c for c in eng.failures(attempt.call) if c is not check)
                found = Counterexample(
                    check=check, variant=variant.name, failing=attempt.call, fixes=fixes, change=attempt.change,
                    paths=attempt.paths, error=exc,
                    unchecked=frozenset(builder.unchecked) if builder else frozenset(),
                    preempted=tuple(builder.preempted) if builder else (), also_breaks=others,
                    views=dict(builder.views) if builder else {},
                )
                if not others:
                    return found
                first = first or found  # breaks more than this check: keep looking for one that does not
            else:
                tried.append(f"{variant.name}: {attempt.change} -> passed")
    if first is not None:
        return first
    raise NoCounterexample(check, tried)


# -- rendering -----------------------------------------------------------------------------------------
_INDENT = "    "


def _dtype(d: torch.dtype) -> str:
    return str(d)


def _contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    out: list[int] = []
    acc = 1
    for n in reversed(shape):
        out.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(out))


def _zeros(shape: Sequence[int], dtype: torch.dtype, device: torch.device) -> str:
    dims = ", ".join(str(n) for n in shape) if shape else "()"
    dev = "" if device.type == "cpu" else f", device={device.type!r}"
    return f"torch.zeros({dims}, dtype={_dtype(dtype)}{dev})"


def _index(rank: int, d: int, text: str) -> str:
    parts = [":"] * rank
    parts[d] = text
    while parts and parts[-1] == ":":
        parts.pop()
    return "[" + ", ".join(parts) + "]"


def _host_values(t: torch.Tensor) -> bool:
    """Whether ``t`` is a short, contiguous 1-D integer CPU tensor with a non-zero value (rendered by value)."""
    return (t.dim() == 1 and t.device.type == "cpu" and not t.is_floating_point() and t.dtype is not torch.bool
            and 0 < t.numel() <= 16 and t.is_contiguous() and int(t.storage_offset()) == 0 and bool(t.any()))


def render_tensor(t: torch.Tensor) -> str:
    """Python that makes a tensor of ``t``'s shape, dtype, device, strides and alignment (zeros, but for a
    short host tensor of integers with a non-zero value, shown by value)."""
    shape = tuple(int(n) for n in t.shape)
    stride = tuple(int(n) for n in t.stride())
    offset = int(t.storage_offset())
    if t.dim() == 0:
        value = t.item() if t.device.type != "meta" else 0
        return f"torch.tensor({value!r})"
    if _host_values(t):  # a small host tensor whose values a rule reads (lengths, say): shown as they are
        return f"torch.tensor({t.tolist()!r}, dtype={_dtype(t.dtype)})"
    if offset == 0 and ((t.is_contiguous() and stride == _contiguous_strides(shape)) or t.numel() <= 1):
        return _zeros(shape, t.dtype, t.device)
    if t.is_contiguous() and stride == _contiguous_strides(shape):
        flat = _zeros((t.numel() + offset,), t.dtype, t.device)
        view = "" if t.dim() == 1 else f".view({', '.join(str(n) for n in shape)})"
        return f"{flat}[{offset}:]{view}"
    if offset == 0:
        for d in range(t.dim()):  # every other element along one dimension
            wide = list(shape)
            wide[d] *= 2
            want = list(_contiguous_strides(wide))
            want[d] *= 2
            if tuple(want) == stride:
                return _zeros(wide, t.dtype, t.device) + _index(t.dim(), d, "::2")
        for d in range(t.dim() - 1):  # a prefix of a wider dimension
            inner = 1
            for n in shape[d + 2 :]:
                inner *= n
            if inner == 0 or stride[d] % inner:
                continue
            wide = list(shape)
            wide[d + 1] = stride[d] // inner
            if wide[d + 1] > shape[d + 1] and _contiguous_strides(wide) == stride:
                return _zeros(wide, t.dtype, t.device) + _index(t.dim(), d + 1, f":{shape[d + 1]}")
    dims = ", ".join(str(n) for n in shape)
    dev = "" if t.device.type == "cpu" else f", device={t.device.type!r}"
    return f"torch.empty_strided(({dims},), {stride}, dtype={_dtype(t.dtype)}{dev})"


def _render_list(value: list[Any]) -> str:
    if value and all(not isinstance(v, list) for v in value) and len(set(map(repr, value))) == 1:
        return f"[{value[0]!r}] * {len(value)}"
    if value and all(isinstance(v, list) for v in value) and len({repr(v) for v in value}) == 1:
        return f"[{_render_list(value[0])} for _ in range({len(value)})]"
    return repr(value)


class _Renderer:
    def __init__(self, unchecked_ids: frozenset[int], shared: Mapping[int, str] | None = None) -> None:
        self.unchecked_ids = unchecked_ids
        self.shared = dict(shared or {})  # id of a tensor that appears more than once -> its variable

    def value(self, v: Any, depth: int) -> str:
        if isinstance(v, torch.Tensor):
            return self.shared.get(id(v)) or render_tensor(v)
        if isinstance(v, enum.Enum):
            return f"{type(v).__name__}.{v.name}"
        if v is None or isinstance(v, (bool, int, float, str)):
            return repr(v)
        if isinstance(v, torch.dtype):
            return _dtype(v)
        if isinstance(v, torch.device):
            return f"torch.device({str(v)!r})"
        if isinstance(v, list):
            return _render_list(v)
        if isinstance(v, (tuple, set)):
            if not v:
                return "()" if isinstance(v, tuple) else "set()"
            pad = _INDENT * (depth + 1)
            items = "".join(f"{pad}{self.value(x, depth + 1)},\n" for x in v)
            return f"(\n{items}{_INDENT * depth})"
        if isinstance(v, types.SimpleNamespace):
            return self.fields("SimpleNamespace", vars(v), depth)
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            kw = {f.name: getattr(v, f.name) for f in dataclasses.fields(v)}
            return self.fields(type(v).__name__, kw, depth, bypass=id(v) in self.unchecked_ids)
        raise TypeError(f"cannot render a {type(v).__name__} as Python")

    def fields(self, head: str, kw: Mapping[str, Any], depth: int, *, bypass: bool = False) -> str:
        pad = _INDENT * (depth + 1)
        body = "".join(f"{pad}{k}={self.value(x, depth + 1)},\n" for k, x in kw.items())
        opening = f"unchecked({head},\n" if bypass else f"{head}(\n"
        return f"{opening}{body}{_INDENT * depth})"


def _is_struct(v: Any) -> bool:
    return isinstance(v, types.SimpleNamespace) or (dataclasses.is_dataclass(v) and not isinstance(v, type))


def _tensor_uses(value: Any, name: str, out: dict[int, tuple[torch.Tensor, list[str]]]) -> None:
    """Every tensor reachable from ``value`` (by id), with the attribute or argument names it appears under."""
    if isinstance(value, torch.Tensor):
        out.setdefault(id(value), (value, []))[1].append(name)
    elif isinstance(value, dict):
        for k, v in value.items():
            _tensor_uses(v, str(k), out)
    elif isinstance(value, (tuple, list)):
        for v in value:
            _tensor_uses(v, name, out)
    elif isinstance(value, types.SimpleNamespace):
        for k, v in vars(value).items():
            _tensor_uses(v, k, out)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            _tensor_uses(getattr(value, f.name), f.name, out)


def render_call(callee: str, call: Mapping[str, Any], extra: Mapping[str, object] | None = None, *,
                unchecked_ids: frozenset[int] = frozenset(),
                views: Mapping[int, tuple[torch.Tensor, str]] | None = None) -> str:
    """The call as Python: one assignment per struct argument, then ``callee(...)`` one argument per line.

    A tensor that appears more than once (one object passed in two roles), or that ``views`` (id of a tensor
    -> its base tensor, and the Python suffix that makes it from the base) derives another from, is assigned
    to a variable first, named after its first use; every use names that variable (a view: the variable
    and the suffix), so the rendered call shares memory exactly as ``call`` does.
    """
    views = dict(views or {})
    uses: dict[int, tuple[torch.Tensor, list[str]]] = {}
    _tensor_uses(dict(call), "", uses)
    bases = {id(base) for key, (base, _) in views.items() if key in uses}
    taken = set(call)
    shared: dict[int, str] = {}
    hoisted: list[str] = []
    for key, (tensor, names) in uses.items():
        if key in views or (len(names) < 2 and key not in bases):
            continue
        var = names[0]
        while var in taken:
            var += "_"
        taken.add(var)
        shared[key] = var
        hoisted.append(f"{var} = {render_tensor(tensor)}")
    for key, (base, suffix) in views.items():
        if key in uses and id(base) in shared:
            shared[key] = shared[id(base)] + suffix
    r = _Renderer(unchecked_ids, shared)
    lines: list[str] = list(hoisted)
    args: list[str] = []
    for name, value in call.items():
        if _is_struct(value):
            lines.append(f"{name} = {r.value(value, 0)}")
            args.append(f"{name}={name}")
        else:
            args.append(f"{name}={r.value(value, 1)}")
    args.extend(f"{k}={r.value(v, 1)}" for k, v in (extra or {}).items())
    one_line = f"{callee}({', '.join(args)})"
    if len(one_line) <= 100 and "\n" not in one_line:
        lines.append(one_line)
    else:
        lines.append(f"{callee}(\n" + "".join(f"{_INDENT}{a},\n" for a in args) + ")")
    return "\n".join(lines) + "\n"


def mark_changes(failing: str, fixed: str, bad: str = "  # <- breaks the rule",
                 good: str = "  # <- fixed") -> tuple[str, str]:
    """Both renderings with the lines that differ marked by a trailing comment."""
    a, b = failing.splitlines(), fixed.splitlines()
    ma, mb = list(a), list(b)
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if op == "equal":
            continue
        for i in range(i1, i2):
            ma[i] = _comment(a[i], bad)
        for j in range(j1, j2):
            mb[j] = _comment(b[j], good)
    return "\n".join(ma) + "\n", "\n".join(mb) + "\n"


def _comment(line: str, text: str) -> str:
    if not line.strip() or line.strip() in (")", "),", "(", "],"):
        return line
    return line + text
