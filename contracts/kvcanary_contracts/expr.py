"""Tiny expressions over symbols and scalar arguments: ``bs + 1``, ``slot_stride >= 32``, ``x is not None``.

An expression is parsed once with :mod:`ast`, its names are checked against the names the contract
declares, and it is rewritten to refer to the generated checker's local variables. Nothing is evaluated at
declaration time; the text is trusted (it is written by the contract's author, never by a caller).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass

from kvcanary_contracts.errors import ContractDefinitionError

_ALLOWED_CALLS = frozenset({"len", "min", "max", "abs", "int", "isinstance", "tuple", "str", "type"})


@dataclass(frozen=True)
class Expr:
    """A parsed expression and the logical names it reads."""

    source: str
    tree: ast.Expression
    names: frozenset[str]

    @classmethod
    def parse(cls, source: str) -> Expr:
        try:
            tree = ast.parse(source.strip(), mode="eval")
        except SyntaxError as exc:  # pragma: no cover - declaration bug
            raise ContractDefinitionError(f"bad contract expression {source!r}: {exc}") from exc
        names = frozenset(
            node.id
            for node in ast.walk(tree)
            if isinstance(node, ast.Name) and node.id not in _ALLOWED_CALLS and node.id not in ("None", "True", "False")
        )
        return cls(source.strip(), tree, names)

    def compile(self, mapping: Mapping[str, str]) -> str:
        """Python source with every logical name replaced by ``mapping[name]``."""
        missing = sorted(n for n in self.names if n not in mapping)
        if missing:
            raise ContractDefinitionError(
                f"contract expression {self.source!r} names {missing}, which the contract does not declare"
            )

        class _Rename(ast.NodeTransformer):
            def visit_Name(self, node: ast.Name) -> ast.AST:
                if node.id in mapping:
                    return ast.copy_location(ast.Name(id=mapping[node.id], ctx=node.ctx), node)
                return node

        tree = _Rename().visit(ast.parse(self.source, mode="eval"))
        return "(" + ast.unparse(tree) + ")"

    @property
    def simple_symbol(self) -> tuple[str, int] | None:
        """``(name, offset)`` when the expression is ``name``, ``name + k`` or ``name - k`` (bindable)."""
        body = self.tree.body
        if isinstance(body, ast.Name):
            return body.id, 0
        if (
            isinstance(body, ast.BinOp)
            and isinstance(body.left, ast.Name)
            and isinstance(body.right, ast.Constant)
            and isinstance(body.right.value, int)
            and isinstance(body.op, (ast.Add, ast.Sub))
        ):
            k = body.right.value
            return body.left.id, (k if isinstance(body.op, ast.Add) else -k)
        return None
