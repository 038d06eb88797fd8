"""Evidence bundles: on the first violation of a slot, everything needed to diagnose and replay it.

:class:`BundleSink` (a guard sink) captures a bundle per violated slot; :func:`read_bundle` loads one;
:func:`replay` re-runs its checks on the CPU; :mod:`kvcanary.evidence.report` renders it as text or as one
HTML page. Writing and reading bundles needs the ``kvcanary[evidence]`` extra (safetensors).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvcanary.evidence.attribution import Attribution, BugClass, attribute, claimants_at, first_anomaly
    from kvcanary.evidence.capture import BundleLimits, BundleSink
    from kvcanary.evidence.describe import RequestDescriber, RequestView
    from kvcanary.evidence.format import BUNDLE_FORMAT, BUNDLE_VERSION, Bundle, BundleError, read_bundle, write_bundle
    from kvcanary.evidence.install import FolderTaken
    from kvcanary.evidence.rerun import ReplayResult, replay

__all__ = [
    "BUNDLE_FORMAT",
    "BUNDLE_VERSION",
    "Attribution",
    "BugClass",
    "Bundle",
    "BundleError",
    "BundleLimits",
    "BundleSink",
    "FolderTaken",
    "ReplayResult",
    "RequestDescriber",
    "RequestView",
    "attribute",
    "claimants_at",
    "first_anomaly",
    "read_bundle",
    "replay",
    "write_bundle",
]


if not TYPE_CHECKING:  # names are imported on first use: `kvcanary inspect --help` imports no torch
    from kvcanary._lazy import attach

    __getattr__, __dir__ = attach(__name__, globals(), __all__)
    del attach
