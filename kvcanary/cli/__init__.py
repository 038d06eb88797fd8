"""The ``kvcanary`` command: one module per subcommand, the parser and entry point in :mod:`.parser`.

``selfcheck``, ``backends``, ``explain``, ``contracts``, ``docs`` and ``demo`` live in the modules named for
them; :mod:`.common` holds the checks several share (a usable ``--device``, a registered backend). Importing
this package imports neither torch nor any subcommand, so ``kvcanary --help`` stays fast.
"""

from __future__ import annotations

from kvcanary.cli.parser import COMMANDS, UsageError, arguments, main, parser

__all__ = ["COMMANDS", "UsageError", "arguments", "main", "parser"]
