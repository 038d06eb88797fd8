"""Typed overloads for generated launchers, written as a ``.pyi`` stub from the contracts' presence rules.

A type checker cannot see a generated function's parameters, so each launcher module gets a stub. Its
overloads enumerate every presence combination the rules speak of (flags ``True``/``False``, optional
tensors given or ``None``): combinations the rules accept are plain overloads; each rejected one is a
``@deprecated`` overload whose message is the rule's code and runtime text, so a type checker reports the
misuse in the words the runtime error would use. A last overload takes the declared types, for calls whose
flags are not literals (the runtime contract decides those).

Rules over values (``swa_window_size > 0``) cannot be typed and are left to the runtime check. This is
tooling: runtime code never imports it.
"""

from __future__ import annotations

import inspect
import itertools
import sys
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union, get_args, get_origin

from kvcanary_contracts.contract import Contract
from kvcanary_contracts.launcher import Extra
from kvcanary_contracts.rules import AllOrNone, ForbiddenUnless, RequiredIf, RequiredWhen, Rule

HEADER = "# Generated from the contracts by `{command}`; do not edit (a test fails when it drifts).\n"


@dataclass(frozen=True)
class Presence:
    """The presence variables of one contract and the rules that relate them."""

    flags: tuple[str, ...]
    optionals: tuple[str, ...]
    rules: tuple[tuple[Rule, str | None], ...]  # (rule, the optional field its condition tests, if any)

    def violated(self, values: Mapping[str, bool]) -> Rule | None:
        """The first rule that ``values`` (flag -> value, optional -> given) breaks, or None."""
        for rule, subject in self.rules:
            if isinstance(rule, RequiredIf) and values[rule.flag] and not all(values[f] for f in rule.fields):
                return rule
            if isinstance(rule, ForbiddenUnless) and not values[rule.flag] and any(values[f] for f in rule.fields):
                return rule
            if isinstance(rule, AllOrNone) and len({values[f] for f in rule.fields}) > 1:
                return rule
            if (isinstance(rule, RequiredWhen) and subject is not None and values[subject]
                    and not all(values[f] for f in rule.fields)):
                return rule
        return None


def _tested_field(rule: RequiredWhen) -> str | None:
    """``name`` when the rule's condition is exactly ``name is not None`` (the only typeable condition)."""
    parts = rule.when.split()
    if len(parts) == 4 and parts[1:] == ["is", "not", "None"] and parts[0].isidentifier():
        return parts[0]
    return None


def presence(contract: type[Contract]) -> Presence:
    """Collect the typeable presence rules of ``contract``, in declaration order."""
    flags: list[str] = []
    optionals: list[str] = []
    rules: list[tuple[Rule, str | None]] = []

    def add(names: Iterable[str], into: list[str]) -> None:
        into.extend(n for n in names if n not in into)

    for rule in contract.contract.rules:
        if isinstance(rule, (RequiredIf, ForbiddenUnless)):
            add([rule.flag], flags)
            add(rule.fields, optionals)
            rules.append((rule, None))
        elif isinstance(rule, AllOrNone):
            add(rule.fields, optionals)
            rules.append((rule, None))
        elif isinstance(rule, RequiredWhen) and (subject := _tested_field(rule)) is not None:
            add([subject, *rule.fields], optionals)
            rules.append((rule, subject))
    return Presence(tuple(flags), tuple(optionals), tuple(rules))


class _Types:
    """Renders annotations as stub text and collects the imports they need."""

    def __init__(self) -> None:
        self.imports: set[tuple[str, str]] = set()

    def text(self, annotation: Any) -> str:
        if annotation is None or annotation is type(None):
            return "None"
        origin = get_origin(annotation)
        if origin is Union or isinstance(annotation, types.UnionType):
            return " | ".join(self.text(a) for a in get_args(annotation))
        if origin is typing.Literal:
            return f"Literal[{', '.join(repr(a) for a in get_args(annotation))}]"
        if isinstance(annotation, type):
            if annotation.__module__ == "builtins":
                return annotation.__name__
            self.imports.add((annotation.__module__, annotation.__name__))
            return annotation.__name__
        raise TypeError(f"cannot write {annotation!r} in a stub")

    def without_none(self, annotation: Any) -> Any:
        args = [a for a in get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else annotation


@dataclass(frozen=True)
class StubLauncher:
    """One launcher to write: its name, its contract, its extra parameters, its docstring."""

    name: str
    contract: type[Contract]
    extras: Mapping[str, Extra]
    doc: str = ""

    @property
    def fields_type(self) -> str:
        """The TypedDict of the fields no presence rule speaks of (they are the same in every overload)."""
        return "_" + "".join(part.title() for part in self.name.split("_")) + "Fields"


def witnesses(pres: Presence) -> list[tuple[Rule, dict[str, bool]]]:
    """For every rule, the smallest partial assignments that break it (each names two variables)."""
    out: list[tuple[Rule, dict[str, bool]]] = []
    for rule, subject in pres.rules:
        if isinstance(rule, RequiredIf):
            out += [(rule, {rule.flag: True, f: False}) for f in rule.fields]
        elif isinstance(rule, ForbiddenUnless):
            out += [(rule, {rule.flag: False, f: True}) for f in rule.fields]
        elif isinstance(rule, AllOrNone):
            out += [(rule, {a: True, b: False}) for a in rule.fields for b in rule.fields if a != b]
        elif isinstance(rule, RequiredWhen) and subject is not None:
            out += [(rule, {subject: True, f: False}) for f in rule.fields if f != subject]
    return out


TRIPLE = '"' * 3


def _body(doc: str) -> str:
    """A stub function's body: its docstring, or ``...``."""
    if not doc.strip():
        return " ..."
    lines = inspect.cleandoc(doc).replace(TRIPLE, "'''").splitlines()
    text = "\n".join(f"    {ln}" if ln else "" for ln in lines).lstrip()
    return f"\n    {TRIPLE}{text}{TRIPLE}"


def overloads(launcher: StubLauncher, types_: _Types, code_of: Callable[[Rule], str]) -> list[str]:
    """The stub lines of one launcher: one signature per line, decorators above it.

    Valid combinations come first, spelled exactly; then one ``@deprecated`` overload per way to break a
    rule; last, the declared types (and the docstring). The fields no presence rule speaks of travel as
    ``**fields`` of a TypedDict, which keeps each overload, and a type checker's report of it, short.
    """
    fields = launcher.contract.model_fields
    extras = [f"{n}: {e.annotation} = {e.default!r}" for n, e in launcher.extras.items()]
    pres = presence(launcher.contract)
    dflt = launcher.contract.none_defaults()
    if not pres.flags and not pres.optionals:
        params = [f"{n}: {types_.text(f.annotation)}{' = None' if n in dflt else ''}" for n, f in fields.items()]
        return [f"def {launcher.name}(*, {', '.join([*params, *extras])}) -> None:{_body(launcher.doc)}"]
    names = (*pres.flags, *pres.optionals)

    def sig(values: Mapping[str, bool], body: str = " ...") -> str:
        params = []
        for n in names:
            if n not in values:
                params.append(f"{n}: {types_.text(fields[n].annotation)}")
            elif n in pres.flags:
                params.append(f"{n}: Literal[{values[n]}]")
            else:
                given = types_.text(types_.without_none(fields[n].annotation))
                params.append(f"{n}: {given if values[n] else 'None'}")
        rest = f"**fields: Unpack[{launcher.fields_type}]"
        return f"def {launcher.name}(*, {', '.join([*params, *extras, rest])}) -> None:{body}"

    def field_line(n: str, annotation: Any) -> str:
        text = types_.text(annotation)
        return f"    {n}: NotRequired[{text}]" if n in dflt else f"    {n}: {text}"

    common = [field_line(n, f.annotation) for n, f in fields.items() if n not in names]
    if dflt - set(names):
        types_.imports.add(("typing_extensions", "NotRequired"))
    lines = [f"class {launcher.fields_type}(TypedDict):", *common, ""]
    for combo in itertools.product((True, False), repeat=len(names)):
        values = dict(zip(names, combo, strict=True))
        if pres.violated(values) is None:
            lines += ["@overload", sig(values)]
    for rule, values in witnesses(pres):
        message = f"{code_of(rule)}: {rule.message}" if rule.message else code_of(rule)
        lines += ["@overload", f"@deprecated({message!r})", sig(values)]
    lines += ["@overload", sig({}, _body(launcher.doc))]
    types_.imports.update({("typing_extensions", "TypedDict"), ("typing_extensions", "Unpack"),
                           ("typing_extensions", "deprecated"), ("typing_extensions", "overload")})
    if pres.flags:
        types_.imports.add(("typing", "Literal"))
    return lines


def _codes(contract: type[Contract]) -> Callable[[Rule], str]:
    by_rule = {id(c.info.get("rule")): c.code for c in contract.checks() if c.info.get("rule") is not None}
    return lambda rule: by_rule.get(id(rule), "")


def render(doc: str, launchers: Sequence[StubLauncher], command: str) -> str:
    """The whole stub module for ``launchers``, with ``doc`` as its docstring."""
    types_ = _Types()
    body: list[str] = []
    for launcher in launchers:
        body += [*overloads(launcher, types_, _codes(launcher.contract)), ""]
    by_module: dict[str, list[str]] = {}
    for module, name in sorted(types_.imports):
        by_module.setdefault(module, []).append(name)
    first_party = {launcher.contract.__module__.partition(".")[0] for launcher in launchers}

    def group(module: str) -> int:
        top = module.partition(".")[0]
        return 0 if top in sys.stdlib_module_names else 2 if top in first_party else 1

    imports: list[str] = []
    for g in (0, 1, 2):
        block = [f"from {m} import {', '.join(sorted(n))}" for m, n in sorted(by_module.items()) if group(m) == g]
        imports += [*block, ""] if block else []
    head = [HEADER.format(command=command).rstrip("\n"), f"{TRIPLE}{doc}{TRIPLE}", ""]
    return "\n".join([*head, *imports, *body])
