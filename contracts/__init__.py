"""contracts: declare a kernel launcher's argument contract once, as a pydantic model.

The same declaration yields the runtime checks (compiled to plain ``if``s, no device reads), the
``ContractError`` messages with stable codes, a JSON export, and the data the error catalog is built from.
Nothing in this package knows about any particular product.
"""

from contracts.checks import Check
from contracts.codebook import CodeBook
from contracts.compiler import Checker, Compiled
from contracts.contract import Contract, ContractInfo, all_contracts
from contracts.errors import ContractDefinitionError, ContractError, ContractTypeError
from contracts.expr import Expr
from contracts.family import DEFAULT_KIND_DOCS, DEFAULT_MESSAGES, Family
from contracts.rules import AllOrNone, ForbiddenUnless, Relation, RequiredIf, RequiredWhen, Rule
from contracts.specs import Dim, ItemsArg, ScalarArg, StructArg, TensorArg

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
