"""Launchers generated from a contract: the argument list is the contract's fields, written nowhere else.

:func:`build_launcher` turns a :class:`~kvcanary_contracts.Contract` into a keyword-only function whose
parameters are the contract's fields (plus the caller's extras, such as ``backend=None``). Each call runs
the compiled checker, packs the arguments into an unvalidated instance of the contract model (the typed
call object implementations receive) and hands it to ``dispatch(call, device, *extras)``. The source is
generated once and registered with :mod:`linecache`, so a traceback through a launcher shows its lines.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from kvcanary_contracts.compiler import register_source
from kvcanary_contracts.contract import Contract
from kvcanary_contracts.torch_op import OpSignature, register_contract_op

Launcher = Callable[..., None]
Prepare = Callable[..., bool]
"""``prepare(memo, key, call, device, *extras) -> bool``: see :func:`build_launcher`."""


def _always_watched() -> object:
    """Stand-in for a torch without the frame-callback query: assume torch.compile may be watching."""
    return True


_frame_callback: Callable[[], object] = (getattr(torch._C._dynamo.eval_frame, "get_eval_frame_callback", None)
                                         or _always_watched)
"""The frame evaluator torch.compile installed on this thread (None in plain eager code)."""


@dataclass(frozen=True)
class Extra:
    """A launcher parameter that is not a contract field (``backend=None``): its default, its type, and its
    type in an operator schema (``"str?"``)."""

    default: object
    annotation: str
    schema: str = ""
    doc: str = ""


def launcher_source(name: str, fields: list[str], extras: Mapping[str, Extra],
                    none_defaults: frozenset[str] = frozenset(), flat: list[str] | None = None,
                    memo: bool = False) -> str:
    """The launcher's source: check, pack the call object, dispatch (fields in ``none_defaults`` default to None).

    With ``flat`` (the operator's arguments as expressions over the fields), a launch that ``torch.compile``
    traces runs the traceable checks and calls the operator instead. With ``memo``, an eager call that
    repeats a remembered one exactly replays what ``_prepare`` left in the checker's memo (see
    :func:`build_launcher`).
    """
    params = ", ".join([*(f"{f}=None" if f in none_defaults else f for f in fields),
                        *(f"{k}={k}_default" for k in extras)])
    kwargs = ", ".join(f"{f}={f}" for f in fields)
    values = ", ".join(f"{f!r}: {f}" for f in fields)
    extra_args = "".join(f", {k}" for k in extras)
    traced = "" if flat is None else (
        "    if _compiling():\n"
        f"        _tcheck({kwargs})\n"
        f"        _op({', '.join(flat)}{extra_args})\n"
        "        return\n"
    )
    lines = ["_call = _new(_cls)", f"_set(_call, '__dict__', {{{values}}})",
             "_set(_call, '__pydantic_fields_set__', _fields)", "_set(_call, '__pydantic_extra__', None)",
             "_set(_call, '__pydantic_private__', None)"]
    build = "".join(f"    {ln}\n" for ln in lines)
    nested = "".join(f"        {ln}\n" for ln in lines)
    if not memo:
        return (
            f"def {name}(*, {params}):\n"
            f"{traced}"
            "    _w = _eager()\n"
            f"    _dev = (_check if _w is None else _check_all)({kwargs})\n"
            f"{build}"
            f"    (_dispatch if _w is None else _dispatch_off)(_call, _dev{extra_args})\n"
        )
    key = f"(_site{extra_args})"
    return (
        f"def {name}(*, {params}):\n"
        f"{traced}"
        "    if _eager() is None:\n"
        f"        _dev, _memo = _check_memo({kwargs})\n"
        "        if _memo is not None:\n"
        f"            _k = {key}\n"
        "            _r = _memo.get(_k)\n"
        "            if _r is not None:\n"
        "                if _r():\n"
        "                    return\n"
        "                if _k in _memo:  # a marker that holds: dispatch (a void replay removed itself)\n"
        "                    _memo = None\n"
        f"{nested}"
        f"        if _memo is not None and _prepare(_memo, _k, _call, _dev{extra_args}):\n"
        "            return\n"
        f"        _dispatch(_call, _dev{extra_args})\n"
        "        return\n"
        f"    _dev = _check_all({kwargs})\n"
        f"{build}"
        f"    _dispatch_off(_call, _dev{extra_args})\n"
    )


def build_launcher(
    contract: type[Contract],
    *,
    dispatch: Callable[..., None],
    extras: Mapping[str, Extra] | None = None,
    name: str | None = None,
    doc: str = "",
    module: str | None = None,
    operator: str | None = None,
    prepare: Prepare | None = None,
) -> Launcher:
    """Generate the launcher of ``contract`` (named after the contract unless ``name`` is given).

    ``extras`` are keyword parameters with defaults that the launcher passes to ``dispatch`` after the call
    object and the device, in order. The call object skips pydantic validation: the checker has already run.
    ``operator`` (``"namespace::name"``) also registers the launch as a ``torch.library`` operator
    (:mod:`~kvcanary_contracts.torch_op`), which the launcher calls while ``torch.compile`` traces it.

    ``prepare(memo, key, call, device, *extras) -> bool`` (optional) is the repeat-call path of the dispatch:
    for an eager call the contract's repeat-call checker remembers, it runs the call (True) and may leave in
    ``memo[key]`` a replay, ``() -> bool``, that a later call repeating this one exactly (same types, scalars,
    tensor metadata and addresses: :attr:`Compiled.memo`) runs instead of building the call object and
    dispatching; a replay returns False (and removes itself) when what it was derived from changed, and the
    call then dispatches. False from ``prepare``: it ran nothing, dispatch runs the call.
    """
    extras = dict(extras or {})
    fields = list(contract.model_fields)
    clash = set(fields) & set(extras)
    if clash:
        raise ValueError(f"{contract.__name__}: extra launcher parameters shadow fields: {sorted(clash)}")
    fname = name or contract.contract.name
    signature = OpSignature(contract) if operator else None
    flat = signature.flat_exprs() if signature else None
    compiled = contract.compiled()
    memo = prepare is not None and compiled.memo is not None
    source = launcher_source(fname, fields, extras, contract.none_defaults(), flat, memo)
    filename = f"<launcher {fname}>"
    register_source(filename, source)
    env: dict[str, Any] = {
        # under torch.compile's frame evaluator (a frame it gave up on), the whole checker: the repeat-call path
        # uses a guard object the compiler cannot trace
        "_check": compiled.checker,
        "_check_all": compiled.whole,
        "_check_memo": compiled.memo,
        "_prepare": prepare,
        "_site": object(),  # this launcher's part of a memo (a contract's checker may serve several launchers)
        "_new": object.__new__,
        "_set": object.__setattr__,
        "_cls": contract,
        "_fields": set(fields),  # shared: pydantic copies it before changing it
        # an operator's launcher may run natively while torch.compile watches (a frame it gave up on): its
        # backends' launch code must never be traced, so dispatch then runs with the compiler off (its cost:
        # docs/compile.md); with no frame evaluator installed (eager), nothing can trace it: a direct call
        "_dispatch": dispatch,
        "_dispatch_off": torch.compiler.disable(dispatch, recursive=True) if operator else dispatch,  # type: ignore[no-untyped-call]
        "_eager": _frame_callback,
        "_compiling": torch.compiler.is_compiling,
        **{f"{k}_default": v.default for k, v in extras.items()},
    }
    exec(compile(source, filename, "exec"), env)
    fn: Launcher = env[fname]
    fn.__doc__ = launcher_doc(contract, doc or contract.__doc__ or "", extras)
    fn.__signature__ = launcher_signature(contract, extras)  # type: ignore[attr-defined]
    fn.__annotations__ = {**{p.name: p.annotation for p in fn.__signature__.parameters.values()},  # type: ignore[attr-defined]
                          "return": None}
    fn.__module__ = module or contract.__module__
    fn.__qualname__ = fname
    fn.__kvc_contract__ = contract  # type: ignore[attr-defined]  # read by the stub generator
    fn.__kvc_extras__ = extras  # type: ignore[attr-defined]
    if operator:
        registered = register_contract_op(contract, operator, fn, {k: v.schema for k, v in extras.items()})
        env["_op"] = registered.op
        env["_tcheck"] = contract.traceable_checker()
        fn.__kvc_operator__ = registered  # type: ignore[attr-defined]
    return fn


def launcher_signature(contract: type[Contract], extras: Mapping[str, Extra] = {}) -> inspect.Signature:
    """The launcher's signature: every field keyword-only, with its annotation (optional fields default to
    None), then the extras with theirs; returns None. ``help()`` and ``inspect.signature`` show it."""
    optional = contract.none_defaults()
    params = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=finfo.annotation,
                          default=None if name in optional else inspect.Parameter.empty)
        for name, finfo in contract.model_fields.items()
    ]
    params += [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=_annotation(extra.annotation),
                                 default=extra.default) for name, extra in extras.items()]
    return inspect.Signature(params, return_annotation=None)


_SIMPLE_TYPES: dict[str, object] = {"str": str, "int": int, "bool": bool, "float": float, "None": None}


def _annotation(text: str) -> object:
    """An extra's annotation as a type where it names only builtin scalars (``"str | None"``), else the text."""
    try:
        return eval(text, {"__builtins__": {}}, _SIMPLE_TYPES)
    except Exception:
        return text


def launcher_doc(contract: type[Contract], doc: str, extras: Mapping[str, Extra] = {}) -> str:
    """The launcher's docstring, from the contract: what it does, every argument with its description and the
    codes of its checks, the cross-argument rules, and how a bad call is reported."""
    info = contract.contract
    checks = contract.checks()
    by_field: dict[str, list[str]] = {}
    for check in checks:
        top = (check.field_path or (check.arguments[0] if check.arguments else "")).split(".")[0].split("[")[0]
        if top in contract.model_fields:
            by_field.setdefault(top, []).append(check.code)
    lines = [inspect.cleandoc(doc), "", f"{info.summary}", "", "Args:"]
    optional = contract.none_defaults()
    for name, finfo in contract.model_fields.items():
        codes = by_field.get(name, [])
        head = f"    {name}{' (optional)' if name in optional else ''}: {finfo.description or ''}".rstrip()
        lines.append(head)
        if codes:
            lines.append(f"        Checks: {', '.join(sorted(codes))}.")
    for name, extra in extras.items():
        lines.append(f"    {name} (optional): {extra.doc or extra.annotation}".rstrip())
    listed = {code for codes in by_field.values() for code in codes}
    if info.rules:
        lines += ["", "Rules:"]
        for rule in info.rules:
            own = [c.code for c in checks if c.subject is rule and c.code not in listed]
            listed.update(own)
            lines.append(f"    - {rule.message.strip()}" + (f" ({', '.join(own)})" if own else ""))
    rest = [f"{c.code} ({c.summary})" for c in checks if c.code not in listed]
    if rest:
        lines += ["", "Other checks:"] + [f"    - {r}" for r in rest]
    codes = sorted(c.code for c in checks)
    lines += ["", "Raises:",
              f"    ContractError (a ValueError) before anything runs, for a call that breaks a check: {len(codes)} "
              f"checks, codes {codes[0]} to {codes[-1]}; each error names its code and the page that explains it."
              if codes else "    ContractError (a ValueError) for a bad call, before anything runs."]
    return "\n".join(lines)
