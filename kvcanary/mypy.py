"""The mypy plugin ``kvcanary.mypy``: launcher calls that a contract's presence rules reject are errors.

Enable it with ``plugins = ["kvcanary.mypy"]`` in the mypy configuration. For every call of a launcher,
each argument a presence rule speaks of is read statically: a flag written ``True`` or ``False``, an
optional tensor written ``None`` or of a type that excludes ``None``. A rule that those values break is
reported at the call as ``KVC-W083: <the runtime message>`` with mypy error code ``kvcanary``; mypy's
``deprecated`` error code need not be enabled. Values mypy cannot pin down (a ``bool`` variable, a
``Tensor | None``) are left to the runtime check.

The rules are the contracts' own rule objects, and a rule counts as broken exactly when one of the
assignments that the launchers' typed stubs mark ``@deprecated`` holds (:func:`kvcanary_contracts.stubs.
witnesses`), so the plugin, the stubs and the runtime cannot disagree. Tooling: runtime code never imports
this module, and importing it needs mypy.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from mypy.errorcodes import ErrorCode
from mypy.nodes import ARG_NAMED, CallExpr, Expression, NameExpr
from mypy.plugin import CheckerPluginInterface, FunctionSigContext, Plugin
from mypy.types import AnyType, FunctionLike, Instance, LiteralType, NoneType, Type, UnionType, get_proper_type

KVCANARY = ErrorCode("kvcanary", "A kvcanary launcher contract rejects the call", "General")
LAUNCH_PACKAGE = "kvcanary.launch"


@dataclass(frozen=True)
class Broken:
    """One way to break a rule: the presence values that do it, and the line to report."""

    values: Mapping[str, bool]  # flag -> its value; optional argument -> whether it is given
    message: str


@dataclass(frozen=True)
class LauncherRules:
    """A launcher's presence variables and every way its contract's presence rules can be broken."""

    flags: frozenset[str]
    optionals: frozenset[str]
    broken: tuple[Broken, ...]

    def violations(self, known: Mapping[str, bool]) -> list[str]:
        """The messages of the rules that ``known`` (the statically known values) breaks, each once."""
        out: list[str] = []
        for b in self.broken:
            if all(known.get(name) is value for name, value in b.values.items()) and b.message not in out:
                out.append(b.message)
        return out


def launcher_rules() -> dict[str, LauncherRules]:
    """Every launcher with presence rules, by its full name (``kvcanary.launch.write.launch_canary_write_kernel``)."""
    import pkgutil

    from kvcanary_contracts.stubs import presence, witnesses

    launch = importlib.import_module(LAUNCH_PACKAGE)
    out: dict[str, LauncherRules] = {}
    for module_name in sorted(m.name for m in pkgutil.iter_modules(launch.__path__) if not m.name.startswith("_")):
        module = importlib.import_module(f"{LAUNCH_PACKAGE}.{module_name}")
        for name, fn in vars(module).items():
            contract = getattr(fn, "__kvc_contract__", None)
            if contract is None:
                continue
            pres = presence(contract)
            if not pres.rules:
                continue
            codes = {id(c.info["rule"]): c.code for c in contract.checks() if c.info.get("rule") is not None}
            broken = tuple(Broken(values, f"{codes.get(id(rule), '')}: {rule.message}".lstrip(": "))
                           for rule, values in witnesses(pres))
            out[f"{module.__name__}.{name}"] = LauncherRules(frozenset(pres.flags), frozenset(pres.optionals), broken)
    return out


def _literal_bool(expr: Expression, api: CheckerPluginInterface) -> bool | None:
    if isinstance(expr, NameExpr) and expr.fullname in ("builtins.True", "builtins.False"):
        return expr.fullname == "builtins.True"
    t = get_proper_type(api.get_expression_type(expr))
    literal = t if isinstance(t, LiteralType) else t.last_known_value if isinstance(t, Instance) else None
    return literal.value if literal is not None and isinstance(literal.value, bool) else None


def _given(expr: Expression, api: CheckerPluginInterface) -> bool | None:
    """False for ``None``, True for a type that excludes None, None when mypy cannot tell."""
    if isinstance(expr, NameExpr) and expr.fullname == "builtins.None":
        return False
    t: Type = get_proper_type(api.get_expression_type(expr))
    if isinstance(t, NoneType):
        return False
    if isinstance(t, AnyType):
        return None
    if isinstance(t, UnionType) and any(isinstance(get_proper_type(i), (NoneType, AnyType)) for i in t.items):
        return None
    return True


def known_values(rules: LauncherRules, names: Sequence[str | None], args: Sequence[Expression],
                 kinds: Sequence[object], api: CheckerPluginInterface) -> dict[str, bool]:
    """The presence values a call pins down, from its keyword arguments."""
    known: dict[str, bool] = {}
    for name, arg, kind in zip(names, args, kinds, strict=True):
        if kind != ARG_NAMED or name is None:
            continue
        value = (_literal_bool(arg, api) if name in rules.flags
                 else _given(arg, api) if name in rules.optionals else None)
        if value is not None:
            known[name] = value
    return known


class KvcanaryPlugin(Plugin):
    """Checks every call of a kvcanary launcher against its contract's presence rules."""

    _rules: dict[str, LauncherRules] | None = None

    def rules(self) -> dict[str, LauncherRules]:
        if self._rules is None:
            self._rules = launcher_rules()
        return self._rules

    def get_function_signature_hook(self, fullname: str) -> Callable[[FunctionSigContext], FunctionLike] | None:
        if not fullname.startswith(LAUNCH_PACKAGE + "."):
            return None
        rules = self.rules().get(fullname)
        if rules is None:
            return None

        def check(ctx: FunctionSigContext) -> FunctionLike:
            call = ctx.context
            if isinstance(call, CallExpr):
                known = known_values(rules, call.arg_names, call.args, call.arg_kinds, ctx.api)
                for message in rules.violations(known):
                    ctx.api.fail(message, call, code=KVCANARY)
            return ctx.default_signature

        return check


def plugin(version: str) -> type[Plugin]:
    """mypy's entry point (``plugins = ["kvcanary.mypy"]``)."""
    return KvcanaryPlugin
