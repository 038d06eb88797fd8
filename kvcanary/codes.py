"""Every kvcanary contract, every check, and the code book that numbers them (and the guard's failure codes).

The contracts are those of the declared operations (:func:`kvcanary.operation.operations`: every module of
:mod:`kvcanary.ops`, then any declared elsewhere) and the constructors' contracts in ``CONTRACT_MODULES``.

``kvcanary docs --update-codes`` calls :func:`update_codebook` after a rule is added; a test fails while
any check still has a placeholder code, so a rule cannot ship without its stable code (and its page).
"""

from __future__ import annotations

import importlib

from kvcanary.errors import FAMILY
from kvcanary.operation import operations
from kvcanary_contracts import Check, Contract, all_contracts

CONTRACT_MODULES: tuple[str, ...] = (
    "kvcanary.constructors.real_kv_source",
    "kvcanary.constructors.allocation",
    "kvcanary.constructors.config",
    "kvcanary.constructors.server_strings",
    "kvcanary.constructors.attach",
    "kvcanary.constructors.serve_settings",
    "kvcanary.constructors.budget",
    "kvcanary.constructors.budget_methods",
    "kvcanary.constructors.capacities",
    "kvcanary.constructors.pool",
    "kvcanary.constructors.expected_tokens",
    "kvcanary.constructors.batch",
    "kvcanary.constructors.batch_device",
    "kvcanary.constructors.sweep_entries",
    "kvcanary.constructors.evidence",
    "kvcanary.constructors.journal",
    "kvcanary.constructors.manager",
    "kvcanary.constructors.row_source",
    "kvcanary.constructors.transfer",
)
"""The modules of contracts that are not operations (constructors' arguments); listed first in the catalog."""


def contracts() -> list[type[Contract]]:
    """Every contract of kvcanary's family, in a stable order: those of ``CONTRACT_MODULES`` as listed, then
    each operation's (in :func:`~kvcanary.operation.operations` order), then any other, as declared.
    (Declaration order alone follows import order, which depends on the name a program touches first, and
    the generated pages must not.)"""
    for name in CONTRACT_MODULES:
        importlib.import_module(name)
    rank = {name: i for i, name in enumerate(CONTRACT_MODULES)}
    for op in operations():
        rank.setdefault(op.contract.__module__, len(rank))
    declared = all_contracts(FAMILY)
    return sorted(declared, key=lambda c: (rank.get(c.__module__, len(rank)), declared.index(c)))


def checks() -> list[Check]:
    """Every check of every contract, in run order per contract."""
    return [check for c in contracts() for check in c.checks()]


def by_code() -> dict[str, Check]:
    return {c.code: c for c in checks()}


def all_codes() -> list[str]:
    """Every code the catalog has a page for: each check's, then each guard failure code's
    (:mod:`kvcanary.guard.codes`)."""
    from kvcanary.guard.codes import failure_codes

    return [c.code for c in checks()] + [f.code for f in failure_codes()]


def update_codebook() -> list[str]:
    """Give new checks and guard failure codes their codes (never renumbering), save the book, refresh live
    checks' codes."""
    from kvcanary.guard import codes as guard_codes

    book = FAMILY.codebook
    wanted = [(c.contract.name, check.slug, c.contract.letter) for c in contracts() for check in c.checks()]
    wanted += [(guard_codes.CONTRACT, f.slug, guard_codes.LETTER) for f in guard_codes.failure_codes()]
    added = book.update(wanted)
    book.save()
    for c in contracts():
        for check in c.checks():
            check.code = book.lookup(c.contract.name, check.slug) or check.code
    guard_codes.reload()
    return added
