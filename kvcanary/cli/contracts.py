"""``kvcanary contracts``: list the launcher contracts and their error codes, or export them (``--json``).

Read from the package's copy of the contract export (:mod:`kvcanary.catalog`), so it needs no torch.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable

from kvcanary.cli.parser import UsageError, arguments


@arguments("contracts")
def _contracts_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true",
                   help="machine-readable export: JSON Schema of every contract's fields, its rules and codes")
    p.add_argument("--codes", action="store_true", help="list every error code with what it checks")
    p.add_argument("name", nargs="?", default=None, help="only this contract (e.g. launch_canary_write_kernel)")


def code_ranges(codes: Iterable[str]) -> str:
    """The codes as runs of consecutive numbers per letter, lowest first: ``KVC-A001..KVC-A002, KVC-A007``."""
    keys = sorted({(c[:5], int(c[5:])) for c in codes})
    runs: list[tuple[str, int, int]] = []
    for prefix, n in keys:
        if runs and runs[-1][0] == prefix and runs[-1][2] == n - 1:
            runs[-1] = (prefix, runs[-1][1], n)
        else:
            runs.append((prefix, n, n))
    return ", ".join(f"{p}{lo:03d}" if lo == hi else f"{p}{lo:03d}..{p}{hi:03d}" for p, lo, hi in runs) or "no codes"


def main(args: argparse.Namespace) -> int:
    from kvcanary import catalog

    data = catalog.contracts()
    items = data["contracts"]
    if args.name is not None:
        items = [c for c in items if c["name"] == args.name]
        if not items:
            raise UsageError(f"unknown contract {args.name!r}",
                             hint=f"known: {', '.join(c['name'] for c in data['contracts'])}")
        data = {**data, "contracts": items}
    if args.json:
        print(json.dumps(data, indent=1, default=str))
        return 0
    for c in items:
        checks = sorted(c["checks"], key=lambda k: int(k["code"][5:]))
        print(f"{c['name']} ({code_ranges(k['code'] for k in checks)}; {len(checks)} checks): {c['summary']}")
        if args.name is not None or args.codes:
            for k in checks:
                print(f"  {k['code']}  {k['category']:<16} {k['summary']}")
    if not args.codes and args.name is None:
        print("\n`kvcanary contracts --codes` lists every code; `kvcanary explain CODE` prints its page")
    return 0
