"""cuda: CUDA C++ kernels compiled at first use."""

from __future__ import annotations

from kvcanary.registry import Backend

BACKEND = Backend(name="cuda", description="CUDA C++ kernels (not implemented yet).", ops={})
