"""The error catalog: one page per error code, generated from the check that raises it.

Each page has the message (template and the text the example raises), what it means, when it happens,
how to fix it, an example built from the contract (a valid call mutated to break exactly that check, and
the corrected call), related errors and where the rule is declared. :func:`catalog` builds every page;
``page.markdown()`` is the site's page and ``page.text()`` what ``kvcanary explain`` prints.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import kvcanary
from kvcanary import codes
from kvcanary.errors import FAMILY
from kvcanary.operation import operations
from kvcanary.valid_calls import ELSEWHERE, EXAMPLES
from kvcanary_contracts import Check, Contract, ContractTypeError
from kvcanary_contracts.checks import PHASE_NAMES
from kvcanary_contracts.compiler import Node
from kvcanary_contracts.examples import ExampleSet, unchecked
from kvcanary_contracts.expr import Expr
from kvcanary_contracts.rules import AllOrNone, ForbiddenUnless, Relation, RequiredIf, RequiredWhen
from tools.counterexamples import Counterexample, counterexample, mark_changes, render_call
from tools.docsgen.blocks import Block, Code, Items, Link, Note, Para, Section, markdown, text

KIND_TITLES: Mapping[str, str] = {
    "type": "type",
    "presence": "presence",
    "contiguous": "contiguity",
    "dtype": "dtype",
    "rank": "rank",
    "size": "size",
    "device": "device",
    "max_len": "collection-size",
    "relation": "relation",
    "scalar": "scalar",
    "aliasing": "aliasing",
}

KIND_NOUNS: Mapping[str, str] = {
    "type": "a type check",
    "presence": "a presence rule",
    "contiguous": "a contiguity check",
    "dtype": "a dtype check",
    "rank": "a rank check",
    "size": "a size check",
    "device": "a device check",
    "max_len": "a collection-size check",
    "relation": "a relation between arguments",
    "scalar": "a scalar check",
    "aliasing": "an aliasing check",
}

PRESENCE_KINDS = frozenset({"all_or_none", "required_if", "forbidden_unless", "required_when"})
_RELATED_LIMIT = 8


def examples_of(contract: type[Contract]) -> ExampleSet:
    """The valid calls the pages of ``contract`` are built from: its operation's, else the built-in table's."""
    for op in operations():
        if op.contract is contract and op.examples is not None:
            return op.examples
    return EXAMPLES[contract.contract.name]


def group_kind(check: Check) -> str:
    """The kind the catalog groups by (``min_size`` is a size, ``required_if`` a presence rule, ...)."""
    kind = check.family_kind
    return "presence" if kind in PRESENCE_KINDS else kind


def anchor(name: str) -> str:
    """The HTML id of a contract's section (``VerifyPlan.allocate`` -> ``verifyplan-allocate``)."""
    return name.lower().replace(".", "-").replace("_", "-")


def namespace(*, validate_only: bool = False) -> dict[str, Any]:
    """The names the catalog's example code uses: torch, kvcanary's API, ``SimpleNamespace``, ``unchecked``.

    With ``validate_only`` the launchers are replaced by their contracts' checkers (a corrected call is
    checked, not launched).
    """
    ns: dict[str, Any] = {name: getattr(kvcanary, name) for name in kvcanary.__all__}
    ns.update({op.contract.contract.name: op.launcher for op in operations()})
    ns.update({name: getattr(importlib.import_module(module), name) for name, module in ELSEWHERE.items()})
    ns.update(torch=torch, SimpleNamespace=types.SimpleNamespace, unchecked=unchecked)
    if validate_only:
        for c in codes.contracts():
            if c.contract.name in ns and c.contract.name.startswith("launch_"):
                ns[c.contract.name] = c.checker()
    return ns


def example_imports(*sources: str) -> str:
    """The import lines that make the example code ``sources`` run when pasted into a fresh file."""
    import ast

    names: set[str] = set()
    assigned: set[str] = set()
    for src in sources:
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Name):
                (assigned if isinstance(node.ctx, ast.Store) else names).add(node.id)
    names -= assigned
    public = sorted(n for n in names if n in kvcanary.__all__)
    elsewhere = {op.contract.contract.name: op.launcher.__module__ for op in operations()
                 if op.contract.contract.name in names and op.contract.contract.name not in kvcanary.__all__}
    elsewhere.update({name: module for name, module in ELSEWHERE.items() if name in names})
    lines = ["import torch"] if "torch" in names else []
    if "SimpleNamespace" in names:
        lines.insert(0, "from types import SimpleNamespace")
    if public:
        lines.append(f"from kvcanary import {', '.join(public)}")
    lines += [f"from {module} import {name}" for name, module in sorted(elsewhere.items())]
    if "unchecked" in names:
        lines.append("from kvcanary_contracts.examples import unchecked  # builds an object without its checks")
    return "\n".join(lines) + "\n\n" if lines else ""


def _shifted(lines: tuple[int, ...], by: str) -> tuple[int, ...]:
    n = by.count("\n")
    return tuple(i + n for i in lines)


def other_names(template: str, name: str) -> list[str]:
    """Functions a message names other than its own launcher ``name`` (the reference's own wording)."""
    import re

    found = re.findall(r"\b(launch_\w+|\w+_torch_reference)\b", template)
    return [n for n in dict.fromkeys(found) if n != name]


@dataclass(frozen=True)
class Declared:
    """Where something is declared: module, line, and the file as a path inside the package.

    The path is derived from the module's name (``kvcanary/ops/verify.py``), so it reads the same in a
    checkout and in an installed package, and nothing outside the package is consulted.
    """

    module: str
    line: int
    file: str

    def __str__(self) -> str:
        return f"`{self.file}` line {self.line} (module `{self.module}`)"


def module_file(module: str) -> str:
    """``kvcanary.ops.verify`` -> ``kvcanary/ops/verify.py`` (``.../__init__.py`` for a package)."""
    spec = importlib.util.find_spec(module) if module else None
    if spec is None or not spec.origin:
        return module
    parts = module.split(".")
    if spec.submodule_search_locations is not None:
        return "/".join([*parts, Path(spec.origin).name])
    return "/".join([*parts[:-1], Path(spec.origin).name])


def declared(origin: str) -> Declared:
    """Where ``origin`` (``module:line``, as checks record it) is declared."""
    module, _, line = origin.rpartition(":")
    return Declared(module, int(line) if line.isdigit() else 0, module_file(module))


def contract_declared(contract: type[Contract]) -> Declared:
    """The class statement of ``contract``, or, for a contract made by a factory, the line that called it."""
    try:
        _lines, start = inspect.getsourcelines(contract)
    except (OSError, TypeError):
        return declared(contract.contract.origin)
    return declared(f"{contract.__module__}:{start}")


@dataclass(frozen=True)
class ErrorPage:
    """Everything the catalog says about one code."""

    code: str
    check: Check
    contract: type[Contract]
    example: Counterexample
    failing_src: str
    fixed_srcs: tuple[tuple[str, str], ...]
    error_text: str
    title: str
    lead: tuple[Block, ...]
    sections: tuple[Section, ...]
    imports: str = ""  # the import lines the page shows above each call (the calls run pasted as shown)

    @property
    def message(self) -> str:
        """The first line of the error the example raises."""
        return self.error_text.splitlines()[0]

    @property
    def path(self) -> str:
        return f"errors/{self.code}.md"

    def markdown(self) -> str:
        return markdown(self.title, self.lead, self.sections)

    def text(self) -> str:
        return text(self.title, self.lead, self.sections)


class _Ctx:
    """A contract's compiled nodes and field docs, for describing its checks."""

    def __init__(self, contract: type[Contract]) -> None:
        self.contract = contract
        self.compiled = contract.compiled()
        self.by_path = {n.path: n for n in self.compiled.nodes}
        self.by_label = {n.label.replace("{i}", "i"): n for n in self.compiled.nodes}

    def node(self, name: str | None) -> Node | None:
        if name is None:
            return None
        return self.by_path.get(name) or self.by_label.get(name.replace("{i}", "i"))

    def doc(self, node: Node) -> str:
        if node.path in self.contract.model_fields:
            return self.contract.model_fields[node.path].description or node.spec.doc
        return node.spec.doc

    def bindings(self, names: set[str]) -> list[str]:
        out = []
        for name in sorted(names):
            if name in self.compiled.symbols:
                out.append(f"`{name}` is `{self.compiled.symbols[name]}`")
            elif name in self.contract.contract.constants:
                out.append(f"`{name}` = {self.contract.contract.constants[name]}")
        return out


def _label(check: Check) -> str:
    return check.arguments[0].replace("{i}", "i") if check.arguments else ""


def _names(items: Sequence[str]) -> str:
    return ", ".join(f"`{n}`" for n in items)


def _any(fields: Sequence[str]) -> str:
    return f"`{fields[0]}`" if len(fields) == 1 else f"any of {_names(fields)}"


def _trigger(check: Check, ctx: _Ctx) -> list[str]:
    """When the check fails, in terms of the arguments."""
    info = check.info
    label = _label(check)
    rule = check.subject
    kind = check.kind
    names: set[str] = set()
    if kind == "type":
        s = f"`{label}` is not {info['expected_type']}"
        node = ctx.node(check.field_path)
        if node is not None and node.optional:
            s += " (None is fine: the argument is optional)"
        out = [s + "."]
    elif kind == "contiguous":
        out = [f"`{label}.is_contiguous()` is False: a slice with a step, a transpose, or a column range of a "
               "wider tensor."]
    elif kind == "dtype":
        dtypes = info.get("dtypes", ())
        assert isinstance(dtypes, tuple)
        out = [f"`{label}.dtype` is not {' or '.join(str(d) for d in dtypes)}."]
    elif kind == "rank":
        out = [f"`{label}.dim() != {info['rank']}`."]
    elif kind == "min_rank":
        out = [f"`{label}.dim() < {info['rank']}`."]
    elif kind in ("size", "min_size"):
        expr = str(info["expr"])
        op, rhs = ("<", expr[2:].strip()) if kind == "min_size" else ("!=", expr)
        out = [f"`{label}.shape[{info['dim']}] {op} {rhs}`."]
        names = set(Expr.parse(rhs).names) if not rhs.isdigit() else set()
    elif kind == "device":
        out = [f"`{label}.device` differs from `{info['reference']}.device` (the launch's device)."]
    elif kind == "max_len":
        out = [f"`len({label}) > {info['max_len']}`."]
    elif kind == "bool_as_int":
        out = [f"`{label}` is True or False (a bool is an int in Python, so the type check alone accepts it)."]
    elif kind == "int64":
        out = [f"`{label}` is an int outside [-2**63, 2**63 - 1]."]
    elif kind == "meta_device":
        out = [f"`{label}` is a meta tensor (and so, by the device checks, is every other tensor of the call)."]
    elif kind == "aliasing":
        written = info.get("written", ())
        assert isinstance(written, tuple)
        out = [f"The byte range of a tensor the launch writes ({_names(written)}) overlaps the byte range of "
               "another tensor argument: the same tensor passed twice, or views of one buffer that share "
               "elements. Read-only arguments may share memory with each other; empty tensors overlap nothing."]
    elif isinstance(rule, RequiredIf):
        out = [f"`{rule.flag}` is True and {_any(rule.fields)} is None."]
    elif isinstance(rule, ForbiddenUnless):
        out = [f"`{rule.flag}` is False and {_any(rule.fields)} is given."]
    elif isinstance(rule, RequiredWhen):
        out = [f"`{rule.when}` holds and {_any(rule.fields)} is None."]
        names = set(rule.condition.names)
    elif isinstance(rule, AllOrNone):
        out = [f"Some, but not all, of {_names(rule.fields)} are given."]
    elif isinstance(rule, Relation):
        s = f"`{rule.require}` is false"
        if rule.when:
            s += f", on a call where `{rule.when}`"
        struct = info.get("struct")
        if isinstance(struct, Node):
            where = struct.label.replace("{i}", "i")
            s += f" (names are attributes of `{where}`" + (", for every entry i)" if "{i}" in struct.label else ")")
        out = [s + "."]
        names = set(rule.condition.names) | (set(rule.guard.names) if rule.guard else set())
    else:  # pragma: no cover - a new kind must be described here
        raise ValueError(f"no trigger text for kind {kind!r}")
    node = ctx.node(check.field_path)
    if node is not None and node.loop is not None and kind != "relation":
        out.append("It is checked for every entry `i` of the collection.")
    if node is not None and node.optional and kind != "type":
        out.append(f"`{label}` is optional: the check applies only when it is given.")
    bound = ctx.bindings(names)
    if kind == "size" and "symbol" in info:
        bound = [f"`{info['symbol']}` is `{info['binder']}` (the first tensor to use a size symbol binds it)"]
    if bound:
        out.append("Here " + "; ".join(bound) + ".")
    return out


def _marked(src: str) -> tuple[int, ...]:
    marks = ("# <- breaks the rule", "# <- fixed")
    return tuple(i for i, line in enumerate(src.splitlines(), 1) if line.endswith(marks))


def _statement_start(line: str) -> bool:
    """Whether a rendered line starts a top-level statement (not an indented or closing continuation line)."""
    return bool(line) and not line[0].isspace() and line[0] not in ")]}"


def corrected_tail(failing: str, fixed: str) -> str | None:
    """The part of a corrected call a page shows: from the top-level statement holding its first change to
    the end (the lines above it are the failing call's). None when the change is in the first statement (the
    whole call is shown)."""
    old, new = failing.splitlines(), fixed.splitlines()
    first = next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new)))
    start = next((i for i in range(first, -1, -1) if i < len(new) and _statement_start(new[i])), 0)
    if start == 0:
        return None
    return "\n".join(new[start:]) + ("\n" if fixed.endswith("\n") else "")


def _mutation_note(check: Check) -> str:
    rule = check.subject
    if isinstance(rule, Relation) and rule.breaks:
        return " The change is the one the rule declares in its `breaks`."
    return ""


def _page(check: Check, ctx: _Ctx, all_checks: Sequence[Check]) -> ErrorPage:
    contract = ctx.contract
    examples = examples_of(contract)
    ce = counterexample(contract, examples, check)
    failing = render_call(examples.callee, ce.failing, examples.extra, unchecked_ids=ce.unchecked, views=ce.views)
    fixed: list[tuple[str, str]] = []
    marked_failing = failing
    for i, fix in enumerate(ce.fixes):
        src = render_call(examples.callee, fix.call, examples.extra)
        marked_bad, marked_good = mark_changes(failing, src)
        if i == 0:
            marked_failing = marked_bad
        fixed.append((fix.label, marked_good))
    error_text = str(ce.error)
    name = contract.contract.name
    kind = group_kind(check)
    err = "`ContractTypeError`, both a `ValueError` and a `TypeError`" if issubclass(check.error, ContractTypeError) \
        else "`ContractError`, a `ValueError`"

    lead: list[Block] = [
        Para(f"**{check.summary}.** Raised by [`{name}`](../contracts.md#{anchor(name)}) "
             f"({KIND_NOUNS.get(kind, kind)}, run in the {PHASE_NAMES[check.phase]} phase)."),
    ]
    message_blocks: list[Block] = [
        Code(FAMILY.prefix + check.template, "text", "Template"),
        Code(error_text, "text", "Example (what the failing call below raises)"),
        Para(f"Raised as {err}; nothing is launched or modified. The first line is the message, the second "
             "names the code and points here; `err.code`, `err.arguments` and `err.to_dict()` carry the same "
             "facts for programs."),
    ]
    others = other_names(check.template, name)
    if others:
        message_blocks.append(Note(
            f"The first line names {_names(others)}, not `{name}`: it is the reference's own text, word for word "
            "(SGLang's kv-canary raises it from its torch reference implementation, which is named so). kvcanary "
            "keeps the reference's messages as they are, so that code and tests written against them keep "
            f"working; the second line names `{name}`, the launcher that raised it.",
            "info"))
    message = Section("The message", tuple(message_blocks))
    args: list[str] = []
    for a in check.arguments:
        node = ctx.node(a)
        doc = ctx.doc(node) if node is not None else ""
        args.append(f"`{a.replace('{i}', 'i')}`" + (f": {doc}" if doc else ""))
    meaning = Section("What it means", (Para(check.why), *((Items(tuple(args)),) if args else ())))
    when = Section("When it happens", (
        Para(" ".join(_trigger(check, ctx))),
        Para("Checks run in a fixed order (types, presence, contiguity, dtypes, scalar ranges, ranks, sizes, "
             "relations, devices, aliasing), and the first that fails is raised: a call that also breaks an earlier "
             "check reports that one."),
    ))
    fix_blocks: list[Block] = [Para(check.fix)]
    if len(ce.fixes) > 1:
        fix_blocks.append(Items(tuple(f.label[0].upper() + f.label[1:] for f in ce.fixes)))
    fixing = Section("How to fix it", tuple(fix_blocks))
    imports = example_imports(failing, *(src for _, src in fixed))
    tails = [corrected_tail(marked_failing, src) for _, src in fixed]
    runs = (" The failing call runs as shown, pasted into a fresh file; each corrected call shows the statement "
            "it changes onwards, the lines above it kept." if any(tails)
            else " Each block runs as shown, pasted into a fresh file.")
    ex_blocks: list[Block] = [
        Para(f"The contract's valid example call ({ce.variant}), changed so that {ce.change}."
             + _mutation_note(check) + runs),
        Code(imports + marked_failing, "python", "Failing call", _shifted(_marked(marked_failing), imports)),
    ]
    for (label, src), tail in zip(fixed, tails, strict=True):
        title = "Corrected call" if label == "the valid call" else f"Corrected call: {label}"
        body = src if tail is None else tail
        head = imports if tail is None else ""
        ex_blocks.append(Code(head + body, "python", title, _shifted(_marked(body), head)))
    if ce.preempted:
        who = "; ".join(f"`{obj}` (its constructor would raise {code} first)" for obj, code in ce.preempted)
        ex_blocks.append(Note(
            f"`unchecked(...)` builds an object without running its constructor: {who}. So this check only "
            "fires for an object built around its constructor; it is the launch's own guard on what it reads.",
            "info"))
    if ce.also_breaks:
        more = ", ".join(f"{c.code} ({c.summary})" for c in ce.also_breaks)
        ex_blocks.append(Note(f"The failing call also breaks {more}: no simple change of the example avoids it. "
                              "This check is the one reported, because checks run in order.", "info"))
    example = Section("Example", tuple(ex_blocks))

    same_rule = [c for c in all_checks if c.slug == check.slug and c.contract != check.contract]
    same_kind = [c for c in all_checks if c.contract == check.contract and group_kind(c) == kind and c is not check]
    same_arg = [c for c in all_checks if c.contract == check.contract and c is not check
                and c.field_path is not None and c.field_path == check.field_path and group_kind(c) != kind]
    related: list[Block] = []
    if same_rule:
        related += [Para("The same rule in other launchers:"),
                    Items(tuple(Link(c.code, f"{c.code}.md", f": {c.contract}") for c in same_rule))]
    if same_arg:
        related += [Para(f"Other checks of `{_label(check)}`:"),
                    Items(tuple(Link(c.code, f"{c.code}.md", f": {c.summary}") for c in same_arg))]
    if same_kind:
        shown = same_kind[:_RELATED_LIMIT]
        items: list[str | Link] = [Link(c.code, f"{c.code}.md", f": {c.summary}") for c in shown]
        if len(same_kind) > len(shown):
            items.append(Link(f"all {len(same_kind) + 1} {KIND_TITLES.get(kind, kind)} checks of {name}",
                              f"index.md#{anchor(name)}"))
        related += [Para(f"Other {KIND_TITLES.get(kind, kind)} checks of `{name}`:"), Items(tuple(items))]
    related_section = Section("Related errors", tuple(related) or (Para("None."),))

    where = declared(check.origin)
    cdecl = contract_declared(contract)
    declared_section = Section("Where it is declared", (Items((
        f"The {'rule' if check.kind in PRESENCE_KINDS or check.kind == 'relation' else 'argument spec'}: {where}.",
        f"The contract: `{contract.__module__}.{contract.__qualname__}`, {cdecl}.",
        f"The code: key `{FAMILY.codebook.key(check.contract, check.slug)}` in `kvcanary/codebook.json`.",
    )),))
    return ErrorPage(
        code=check.code, check=check, contract=contract, example=ce, failing_src=marked_failing,
        fixed_srcs=tuple(fixed), error_text=error_text, title=f"{check.code}: {check.summary}",
        lead=tuple(lead),
        sections=(message, meaning, when, fixing, example, related_section, declared_section),
        imports=imports,
    )


@dataclass(frozen=True)
class Catalog:
    """Every page, by code, in contract order and run order within a contract."""

    pages: Mapping[str, ErrorPage]
    contracts: tuple[type[Contract], ...]

    def by_contract(self, name: str) -> list[ErrorPage]:
        return [p for p in self.pages.values() if p.check.contract == name]


@functools.cache
def catalog() -> Catalog:
    """Build (once per process) every error page."""
    contracts = tuple(codes.contracts())
    all_checks = [c for k in contracts for c in k.checks()]
    pages: dict[str, ErrorPage] = {}
    for contract in contracts:
        ctx = _Ctx(contract)
        for check in contract.checks():
            pages[check.code] = _page(check, ctx, all_checks)
    return Catalog(pages, contracts)


def page(code: str) -> ErrorPage | None:
    """One page, building only its contract's pages (what ``kvcanary explain`` needs)."""
    code = code.strip().upper()
    check = codes.by_code().get(code)
    if check is None:
        return None
    contract = next(c for c in codes.contracts() if c.contract.name == check.contract)
    return _page(check, _Ctx(contract), codes.checks())


def _number(code: str) -> tuple[str, int]:
    """``KVC-A007`` -> ``("A", 7)``: codes sort by letter, then by number (not as text, not in check order)."""
    return code[4], int(code[5:])


CATALOG_CLASS = "kvc-codes"
"""The class of the index's tables (docs/stylesheets/catalog.css keeps argument names on one line there)."""


def index_markdown(cat: Catalog) -> str:
    """The catalog's index: the letters, every code by contract (sorted by code), then by kind of check
    (named as ``kvcanary contracts --codes`` names them)."""
    letters: dict[str, list[type[Contract]]] = {}
    for c in cat.contracts:
        letters.setdefault(c.contract.letter, []).append(c)
    from tools.docsgen import guard_pages

    guard = guard_pages.pages()
    out = ["# Error catalog", "",
           f"Every `ContractError` kvcanary raises has a stable code; this page lists all {len(cat.pages)}, "
           f"and the {len(guard)} codes of the requests the isolate policy fails "
           "([below](#request-failures)). "
           "Each code's page shows the message, what it means, when it happens, how to fix it, and a failing "
           "call next to the corrected one, both generated from the contract and executed by the tests. "
           "`kvcanary explain CODE` prints the same page in a terminal.", "",
           "Codes are `KVC-<letter><number>`; the letter names the contract that checks the call: one launcher "
           "each, except **A**, which the `allocate` constructors of the two plans and of the violation log "
           "share (their numbers interleave); **G** names no contract: it is the guard's request failures.", ""]
    for letter, contracts in letters.items():
        n = sum(len(cat.by_contract(c.contract.name)) for c in contracts)
        names = ", ".join(f"[`{c.contract.name}`](#{anchor(c.contract.name)})" for c in contracts)
        out.append(f"- **{letter}**: {names}, {n} codes")
    out.append(f"- **G**: [request failures](#request-failures), {len(guard)} codes")
    out += ["", "## By launcher and constructor", ""]
    for c in cat.contracts:
        name = c.contract.name
        out += [f"### {name} {{#{anchor(name)}}}", "", c.contract.summary, "",
                f'<div class="{CATALOG_CLASS}" markdown>', "",
                "| code | kind | argument | what must hold |", "|---|---|---|---|"]
        for p in sorted(cat.by_contract(name), key=lambda p: _number(p.code)):
            arg = ", ".join(f"`{a.replace('{i}', 'i')}`" for a in p.check.arguments[:2])
            summary = p.check.summary.replace("|", "\\|")
            out.append(f"| [{p.code}]({p.code}.md) | `{group_kind(p.check)}` | {arg} | {summary} |")
        out += ["", "</div>", ""]
    out += guard_pages.index_markdown()
    out += ["## By kind of check", "",
            "The kinds are those `kvcanary contracts --codes` prints beside each code.", ""]
    kinds: dict[str, list[ErrorPage]] = {}
    for p in cat.pages.values():
        kinds.setdefault(group_kind(p.check), []).append(p)
    for kind, ps in sorted(kinds.items()):
        out += [f"### `{kind}`: {KIND_NOUNS.get(kind, 'a ' + kind).split(' ', 1)[1]} {{#kind-{kind}}}", ""]
        out.append(", ".join(f"[{p.code}]({p.code}.md)" for p in sorted(ps, key=lambda p: _number(p.code))))
        out.append("")
    return "\n".join(out)
