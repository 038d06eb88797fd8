"""triton: Triton kernels for every operation (GPU; CPU through TRITON_INTERPRET=1)."""

from __future__ import annotations

from kvcanary.registry import Backend

BACKEND = Backend(name="triton", description="Triton kernels (not implemented yet).", ops={})
