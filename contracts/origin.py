"""Where a spec or rule was declared (module and line), for the error catalog's "declared at" section."""

from __future__ import annotations

import sys


def caller_origin() -> str:
    """``module:line`` of the nearest frame outside this package (and outside generated ``__init__``s)."""
    frame = sys._getframe(1)
    while frame is not None:
        name = str(frame.f_globals.get("__name__", ""))
        generated = frame.f_code.co_filename.startswith("<")
        if not generated and name != "contracts" and not name.startswith("contracts."):
            return f"{name}:{frame.f_lineno}"
        frame = frame.f_back  # type: ignore[assignment]
    return "<unknown>"  # pragma: no cover
