"""``ServeSettings``: where ``CanaryServer`` listens and how often its canary sweeps, checked on construction.

Light on purpose (no transformers, no FastAPI): ``kvcanary serve`` checks its ``--host`` and ``--port`` with it
before anything is written or loaded. The rules and their codes: kvcanary/constructors/serve_settings.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvcanary.constructors.serve_settings import validate_serve_settings


@dataclass(frozen=True)
class ServeSettings:
    """``host``: a bare address (an IP address or a host name); ``port``: 0 to 65535 (0: any free port);
    ``sweep_interval``: steps between sweeps of the prefix cache (0: none). A value that breaks a rule raises
    its ContractError (``KVC-F``)."""

    host: str = "127.0.0.1"
    port: int = 0
    sweep_interval: int = 4

    def __post_init__(self) -> None:
        validate_serve_settings(self)
