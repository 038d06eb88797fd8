"""Every kvcanary contract, every check, and the code book that numbers them.

``kvcanary docs --update-codes`` calls :func:`update_codebook` after a rule is added; a test fails while
any check still has a placeholder code, so a rule cannot ship without its stable code (and its page).
"""

from __future__ import annotations

import importlib

from kvcanary.errors import FAMILY
from kvcanary_contracts import Check, Contract, all_contracts

CONTRACT_MODULES: tuple[str, ...] = (
    "kvcanary.contract.real_kv_source",
    "kvcanary.contract.allocation",
    "kvcanary.contract.config",
    "kvcanary.contract.budget",
    "kvcanary.contract.capacities",
    "kvcanary.contract.pool",
    "kvcanary.contract.plan",
    "kvcanary.contract.plan_offsets",
    "kvcanary.contract.plan_entries",
    "kvcanary.contract.write",
    "kvcanary.contract.verify",
    "kvcanary.contract.scatter",
)


def contracts() -> list[type[Contract]]:
    """Every contract of kvcanary's family, in a stable order: by module as listed in ``CONTRACT_MODULES``,
    then as declared. (Declaration order alone follows import order, which depends on the name a program
    touches first, and the generated pages must not.)"""
    for name in CONTRACT_MODULES:
        importlib.import_module(name)
    declared = all_contracts(FAMILY)
    rank = {name: i for i, name in enumerate(CONTRACT_MODULES)}
    return sorted(declared, key=lambda c: (rank.get(c.__module__, len(rank)), declared.index(c)))


def checks() -> list[Check]:
    """Every check of every contract, in run order per contract."""
    return [check for c in contracts() for check in c.checks()]


def by_code() -> dict[str, Check]:
    return {c.code: c for c in checks()}


def update_codebook() -> list[str]:
    """Give new checks their codes (never renumbering), save the book, refresh live checks' codes."""
    book = FAMILY.codebook
    wanted = [(c.contract.name, check.slug, c.contract.letter) for c in contracts() for check in c.checks()]
    added = book.update(wanted)
    book.save()
    for c in contracts():
        for check in c.checks():
            check.code = book.lookup(c.contract.name, check.slug) or check.code
    return added
