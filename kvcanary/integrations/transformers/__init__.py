"""kvcanary inside Hugging Face transformers' continuous batching (``pip install 'kvcanary[transformers]'``).

``with attach_canaries(model) as canary: model.generate_batch(...)`` runs kvcanary's manager around every
step of the engine; ``canary.reports`` holds what it found. See ``docs/transformers.md``. The names are
imported on first use, so the package itself costs no torch (or transformers) import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvcanary.integrations.transformers.pool import ScheduledRequest
    from kvcanary.integrations.transformers.session import (
        CanaryReport,
        StepHook,
        StepView,
        TransformersCanary,
        attach_canaries,
    )
    from kvcanary.integrations.transformers.settings import attach_config
    from kvcanary.integrations.transformers.version import SUPPORTED_RANGE

__all__ = ["SUPPORTED_RANGE", "CanaryReport", "ScheduledRequest", "StepHook", "StepView", "TransformersCanary",
           "attach_canaries", "attach_config"]

if not TYPE_CHECKING:  # hidden from type checkers, which would otherwise accept any attribute
    from kvcanary._lazy import attach

    __getattr__, __dir__ = attach(__name__, globals(), __all__)
