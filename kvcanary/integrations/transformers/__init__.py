"""kvcanary inside Hugging Face transformers' continuous batching (``pip install 'kvcanary[transformers]'``).

``with attach_canaries(model) as canary: model.generate_batch(...)`` runs kvcanary's manager around every
step of the engine; ``canary.reports`` holds what it found. See ``docs/transformers.md``.
"""

from kvcanary.integrations.transformers.session import (
    CanaryReport,
    ScheduledRequest,
    StepHook,
    StepView,
    TransformersCanary,
    attach_canaries,
)
from kvcanary.integrations.transformers.version import SUPPORTED_RANGE

__all__ = ["SUPPORTED_RANGE", "CanaryReport", "ScheduledRequest", "StepHook", "StepView", "TransformersCanary",
           "attach_canaries"]
