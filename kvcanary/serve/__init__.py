"""``kvcanary serve``: transformers' OpenAI-compatible server with canaries attached, kvcanary's metrics at
``/metrics`` and its health at ``/kvcanary/health`` (``pip install 'kvcanary[serve]'``). See docs/serve.md.
Nothing is imported until a name is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvcanary.serve.server import CanaryServer
    from kvcanary.serve.settings import ServeSettings
    from kvcanary.serve.tiny import build_tiny_model

__all__ = ["CanaryServer", "ServeSettings", "build_tiny_model"]

if not TYPE_CHECKING:  # hidden from type checkers, which would otherwise accept any attribute
    from kvcanary._lazy import attach

    __getattr__, __dir__ = attach(__name__, globals(), __all__)
