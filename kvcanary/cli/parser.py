"""The ``kvcanary`` parser and entry point: the table of subcommands, their argument registry, and ``main``.

Each subcommand lives in the module of :mod:`kvcanary.cli` named for it, imported only when that subcommand
runs (or asks for its ``--help``): ``kvcanary --help`` and ``kvcanary --version`` import neither torch nor any
subcommand, and a missing optional dependency only affects the subcommand that needs it.

A user's mistake (an unknown device, an unusable backend, a bad option) is one line on stderr and exit
status 2, never a traceback: subcommands raise :class:`UsageError`. A closed pipe (``kvcanary contracts
--json | head``) ends the command quietly.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence

# subcommand -> (module, function, help); the function takes the parsed arguments and returns an exit code
COMMANDS: dict[str, tuple[str, str, str]] = {
    "selfcheck": ("kvcanary.cli.selfcheck", "main", "plan → write → verify with one injected fault"),
    "backends": ("kvcanary.cli.backends", "main", "which backend serves each operation here, and why the others "
                 "decline"),
    "explain": ("kvcanary.cli.explain", "main", "print the catalog page of an error code"),
    "contracts": ("kvcanary.cli.contracts", "main", "list the launcher contracts and their error codes (--json)"),
    "docs": ("kvcanary.cli.docs", "main", "generate the docs site's pages (error catalog, matrix, ...) in a checkout"),
    "demo": ("kvcanary.cli.demo", "main", "serve a workload clean, then once per fault class; show what is caught"),
    "inspect": ("kvcanary.cli.evidence", "inspect", "print an evidence bundle's report (--html: one page)"),
    "replay": ("kvcanary.cli.evidence", "replay", "re-run an evidence bundle's failing checks on the CPU"),
    "serve": ("kvcanary.cli.serve", "main", "transformers' OpenAI-compatible server with canaries, /metrics and "
              "/kvcanary/health"),
}

Setup = Callable[[argparse.ArgumentParser], None]
_ARGS: dict[str, Setup] = {}


class UsageError(Exception):
    """A mistake of the user's, not a bug: printed as one line (the rule, then a hint), exit status 2."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def line(self) -> str:
        return self.message + (f" (hint: {self.hint})" if self.hint else "")


def arguments(name: str) -> Callable[[Setup], Setup]:
    """Register the argument setup of subcommand ``name`` (run when the parser for it is built)."""

    def deco(fn: Setup) -> Setup:
        _ARGS[name] = fn
        return fn

    return deco


def _version() -> str:
    from kvcanary import __version__

    return f"kvcanary {__version__}"


def _named_command(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names: its first word that is not an option (the top level takes no values)."""
    return next((a for a in argv if not a.startswith("-")), None)


def parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The argument parser. With ``argv``, only the subcommand it names imports its module (for its
    arguments); without, every subcommand does (the full parser, for documentation)."""
    named = _named_command(argv) if argv is not None else None
    wanted = [m for name, (m, _, _) in COMMANDS.items() if argv is None or name == named]
    for module in dict.fromkeys(wanted):  # each registers its arguments on import
        importlib.import_module(module)
    p = argparse.ArgumentParser(prog="kvcanary", description="KV-cache canaries for LLM inference engines.")
    p.add_argument("--version", action="version", version=_version())
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (_, _, help_text) in COMMANDS.items():
        sp = sub.add_parser(name, help=help_text, description=help_text)
        if name in _ARGS and (argv is None or name == named):
            _ARGS[name](sp)
    return p


def _quiet_broken_pipe() -> int:
    """The reader went away (``| head``): stop quietly, and keep Python from complaining at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``kvcanary`` with ``argv`` (default: the command line); returns the exit status."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    args = parser(args_list).parse_args(args_list)
    module, func, _ = COMMANDS[args.command]
    try:
        fn: Callable[[argparse.Namespace], int] = getattr(importlib.import_module(module), func)
        status = int(fn(args))
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return status
    except UsageError as err:
        sys.stdout.flush()
        print(f"kvcanary {args.command}: {err.line()}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except KeyboardInterrupt:
        print(f"kvcanary {args.command}: interrupted", file=sys.stderr)
        return 130

