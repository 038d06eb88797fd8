"""contracts: declare a kernel launcher's argument contract once, as a pydantic model.

The same declaration yields the runtime checks (compiled to plain ``if``s, no device reads), the
``ContractError`` messages with stable codes, a JSON export, and the data the error catalog is built from.
Nothing in this package knows about any particular product.
"""

from kvcanary_contracts.checks import Check
from kvcanary_contracts.codebook import CodeBook
from kvcanary_contracts.compiler import Checker, Compiled
from kvcanary_contracts.contract import Contract, ContractInfo, all_contracts
from kvcanary_contracts.errors import ContractDefinitionError, ContractError, ContractRuntimeError, ContractTypeError
from kvcanary_contracts.expr import Expr
from kvcanary_contracts.family import DEFAULT_KIND_DOCS, DEFAULT_MESSAGES, Family
from kvcanary_contracts.rules import AllOrNone, ForbiddenUnless, Relation, RequiredIf, RequiredWhen, Rule
from kvcanary_contracts.specs import Dim, ItemsArg, ScalarArg, StructArg, TensorArg

__all__ = [
    "DEFAULT_KIND_DOCS",
    "DEFAULT_MESSAGES",
    "AllOrNone",
    "Check",
    "Checker",
    "CodeBook",
    "Compiled",
    "Contract",
    "ContractDefinitionError",
    "ContractError",
    "ContractInfo",
    "ContractRuntimeError",
    "ContractTypeError",
    "Dim",
    "Expr",
    "Family",
    "ForbiddenUnless",
    "ItemsArg",
    "Relation",
    "RequiredIf",
    "RequiredWhen",
    "Rule",
    "ScalarArg",
    "StructArg",
    "TensorArg",
    "all_contracts",
]
