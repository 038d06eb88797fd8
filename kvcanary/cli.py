"""The ``kvcanary`` command: ``selfcheck``, ``backends``, ``explain``, ``contracts``, ``docs``, and the rest.

Each subcommand lives in the module named for it and is imported only when run, so ``kvcanary --help``
stays fast and a missing optional dependency only affects the subcommand that needs it.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

# subcommand -> (module, function, help); the function takes the parsed arguments and returns an exit code
COMMANDS: dict[str, tuple[str, str, str]] = {
    "selfcheck": ("kvcanary.cli_commands", "selfcheck", "plan → write → verify with one injected fault"),
    "backends": ("kvcanary.cli_commands", "backends", "list backends, their availability and reasons"),
    "explain": ("kvcanary.cli_commands", "explain", "print the catalog page of an error code"),
    "contracts": ("kvcanary.cli_commands", "contracts", "print every launcher contract (--json)"),
    "docs": ("kvcanary.cli_commands", "docs", "generate the docs site's pages (error catalog, matrix, ...)"),
    "demo": ("kvcanary.demo", "main", "serve a workload clean, then once per fault class; show what is caught"),
}

_ARGS: dict[str, Callable[[argparse.ArgumentParser], None]] = {}


Setup = Callable[[argparse.ArgumentParser], None]


def arguments(name: str) -> Callable[[Setup], Setup]:
    """Register the argument setup of subcommand ``name``."""

    def deco(fn: Setup) -> Setup:
        _ARGS[name] = fn
        return fn

    return deco


def parser() -> argparse.ArgumentParser:
    for module in dict.fromkeys(m for m, _, _ in COMMANDS.values()):  # each registers its arguments
        importlib.import_module(module)
    p = argparse.ArgumentParser(prog="kvcanary", description="KV-cache canaries for LLM inference engines.")
    sub = p.add_subparsers(dest="command", required=True)
    for name, (_, _, help_text) in COMMANDS.items():
        sp = sub.add_parser(name, help=help_text, description=help_text)
        if name in _ARGS:
            _ARGS[name](sp)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    module, func, _ = COMMANDS[args.command]
    fn: Callable[[argparse.Namespace], int] = getattr(importlib.import_module(module), func)
    return int(fn(args))


if __name__ == "__main__":  # pragma: no cover
    # run the imported module's main: subcommands register their arguments on `kvcanary.cli`, not `__main__`
    from kvcanary.cli import main as _main

    sys.exit(_main())
