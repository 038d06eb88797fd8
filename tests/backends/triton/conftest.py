"""Triton tests: without a GPU the kernels run through Triton's interpreter, which must be selected before
anything imports (decorates) them; the root conftest does the same, this keeps the folder self-contained."""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_configure() -> None:
    """Register the backend when the checkout is not pip-installed (no entry-point metadata on the path)."""
    import kvcanary as kc
    from kvcanary_backends.triton import BACKEND

    if "triton" not in kc.registered_backends():
        kc.register_backend(BACKEND)
