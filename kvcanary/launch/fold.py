"""``launch_digest_fold_kernel``: add the tensor-parallel digest of the records at some slots to an accumulator."""

from __future__ import annotations

from kvcanary.ops.fold import launch_digest_fold_kernel

__all__ = ["launch_digest_fold_kernel"]
