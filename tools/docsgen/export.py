"""Machine-readable export of every contract, and the site's contract reference page, from one walk.

``kvcanary contracts --json`` prints :func:`contracts_json`: per contract the JSON Schema of its fields,
the tensors its launch writes, its size symbols and what binds them, its model rules, and every check with
its stable code, message template, explanation and the catalog page that documents it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import kvcanary
from kvcanary import codes
from kvcanary.errors import FAMILY
from kvcanary_contracts import Check, Contract
from kvcanary_contracts.checks import PHASE_NAMES
from kvcanary_contracts.compiler import Node
from kvcanary_contracts.rules import AllOrNone, ForbiddenUnless, Relation, RequiredIf, RequiredWhen, Rule
from kvcanary_contracts.specs import ItemsArg, ScalarArg, StructArg, TensorArg
from tools.docsgen.catalog import anchor, declared, group_kind

FORMAT = "kvcanary-contracts/1"


def _rule(rule: Rule, checks: Sequence[Check]) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": rule.kind, "name": rule.slug, "arguments": list(rule.arguments)}
    if isinstance(rule, (AllOrNone, RequiredIf, ForbiddenUnless, RequiredWhen)):
        out["fields"] = list(rule.fields)
    if isinstance(rule, (RequiredIf, ForbiddenUnless)):
        out["flag"] = rule.flag
    if isinstance(rule, RequiredWhen):
        out["when"] = rule.when
    if isinstance(rule, Relation):
        out["require"] = rule.require
        if rule.when:
            out["when"] = rule.when
    out["message"] = FAMILY.prefix + (rule.message or "")
    out["why"] = rule.why
    out["fix"] = rule.fix
    out["codes"] = [c.code for c in checks if c.subject is rule]
    return out


def _check(check: Check) -> dict[str, Any]:
    where = declared(check.origin)
    return {
        "code": check.code,
        "kind": check.kind,
        "category": group_kind(check),
        "slug": check.slug,
        "phase": PHASE_NAMES[check.phase],
        "arguments": list(check.arguments),
        "field_path": check.field_path,
        "message": FAMILY.prefix + check.template,
        "summary": check.summary,
        "why": check.why,
        "fix": check.fix,
        "error": check.error.__name__,
        "error_bases": [b.__name__ for b in check.error.__mro__ if b.__module__ == "builtins" and b is not object
                        and issubclass(b, Exception) and b is not Exception and b is not BaseException],
        "declared_at": f"{where.file}:{where.line}",
        "page": f"errors/{check.code}.md",
    }


def _written(checks: Sequence[Check]) -> list[str]:
    """The labels of the tensors the launch writes (what its aliasing check protects)."""
    for c in checks:
        written = c.info.get("written")
        if c.kind == "aliasing" and isinstance(written, tuple):
            return [str(w) for w in written]
    return []


def _rules_of(contract: type[Contract]) -> list[Rule]:
    out: list[Rule] = []
    for node in contract.compiled().nodes:
        if isinstance(node.spec, StructArg):
            out.extend(node.spec.rules)
    out.extend(contract.contract.rules)
    return out


def contract_json(contract: type[Contract]) -> dict[str, Any]:
    """One contract: fields (JSON Schema), symbols, rules and checks."""
    info = contract.contract
    compiled = contract.compiled()
    checks = compiled.checks
    return {
        "name": info.name,
        "letter": info.letter,
        "summary": info.summary,
        "class": f"{contract.__module__}.{contract.__qualname__}",
        "device_key": info.device_key,
        "writes": _written(checks),
        "constants": {k: v for k, v in info.constants.items() if isinstance(v, (int, float, str, bool))},
        "symbols": dict(compiled.symbols),
        "schema": contract.model_json_schema(),
        "rules": [_rule(r, checks) for r in _rules_of(contract)],
        "checks": [_check(c) for c in checks],
    }


def contracts_json() -> dict[str, Any]:
    """Every contract of kvcanary, in code-letter order."""
    return {
        "format": FORMAT,
        "version": kvcanary.__version__,
        "family": {"name": FAMILY.name, "prefix": FAMILY.prefix, "pointer": FAMILY.pointer},
        "contracts": [contract_json(c) for c in codes.contracts()],
    }


def dumps() -> str:
    return json.dumps(contracts_json(), indent=1, default=str) + "\n"


# -- the reference page --------------------------------------------------------------------------------
def _spec_text(node: Node) -> str:
    spec = node.spec
    parts: list[str] = []
    if isinstance(spec, TensorArg):
        if spec.dtypes:
            parts.append(" or ".join(str(d).replace("torch.", "") for d in spec.dtypes))
        else:
            parts.append("tensor")
        if spec.shape is not None:
            parts.append("[" + ", ".join(d.text for d in spec.dims or ()) + "]")
        elif spec.min_rank is not None:
            parts.append(f"at least {spec.min_rank}-D")
        if not spec.contiguous:
            parts.append("any strides")
    elif isinstance(spec, (ScalarArg, StructArg)):
        parts.append(spec.type.__name__)
    elif isinstance(spec, ItemsArg):
        parts.append(f"tuple of {spec.item.type.__name__}")
        if spec.max_len is not None:
            parts.append(f"at most {spec.max_len}")
    if node.optional:
        parts.append("optional")
    return ", ".join(parts)


def _doc(contract: type[Contract], node: Node) -> str:
    if node.path in contract.model_fields:
        return contract.model_fields[node.path].description or node.spec.doc
    return node.spec.doc


def contracts_markdown() -> str:
    """The site's "Launcher contracts" page: arguments, size symbols and codes of every contract."""
    out = ["# Launcher contracts", "",
           "Every launcher (and checked constructor) validates its arguments against a contract before anything "
           "runs. This page is generated from the contracts; `kvcanary contracts --json` prints the same facts "
           "as JSON (JSON Schema of the fields, the rules, and every check's code).", ""]
    for contract in codes.contracts():
        info = contract.contract
        compiled = contract.compiled()
        out += [f"## {info.name} {{#{anchor(info.name)}}}", "", f"{info.summary} Codes `KVC-{info.letter}…`; "
                f"[all {len(compiled.checks)} of them](errors/index.md#{anchor(info.name)}).", ""]
        out += ["| argument | spec | description |", "|---|---|---|"]
        for node in compiled.nodes:
            if node.path.endswith("[]"):
                continue
            name = node.path.replace("[]", "[i]")
            out.append(f"| `{name}` | {_spec_text(node)} | {_doc(contract, node).replace('|', '/')} |")
        out.append("")
        if compiled.symbols:
            out.append("Size symbols: " + "; ".join(f"`{s}` = `{b}`" for s, b in compiled.symbols.items()) + ".")
            out.append("")
        if info.device_key:
            out += [f"Every tensor must be on `{info.device_key}`'s device.", ""]
        rules = _rules_of(contract)
        if rules:
            out += ["Rules:", ""]
            for rule in rules:
                codes_ = [c.code for c in compiled.checks if c.subject is rule]
                links = ", ".join(f"[{c}](errors/{c}.md)" for c in codes_)
                what = getattr(rule, "require", None) or rule.slug
                out.append(f"- `{what}` ({links})")
            out.append("")
    return "\n".join(out)
