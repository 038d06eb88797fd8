"""Where a spec or rule was declared (module and line), for the error catalog's "declared at" section."""

from __future__ import annotations

import sys

_PACKAGE = __name__.rpartition(".")[0]  # this framework, under whatever name it is installed


def caller_origin() -> str:
    """``module:line`` of the nearest frame outside this package.

    Generated ``__init__`` frames of the spec dataclasses carry this package's globals, so they are skipped
    too. Declaring modules should not use ``from __future__ import annotations``: with it, specs are built
    when pydantic evaluates the annotation strings and the line would be lost.
    """
    frame = sys._getframe(1)
    while frame is not None:
        name = str(frame.f_globals.get("__name__", ""))
        if name != _PACKAGE and not name.startswith(_PACKAGE + ".") and name not in ("typing", "pydantic"):
            return f"{name}:{frame.f_lineno}"
        frame = frame.f_back  # type: ignore[assignment]
    return "<unknown>"  # pragma: no cover
