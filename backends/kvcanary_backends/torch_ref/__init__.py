"""torch_ref: the format's executable specification, vectorized with torch ops, on any device.

Plan and verify run without host syncs (device-side masks over the whole capacity), so they are safe to
capture in a CUDA graph; write and scatter size their work from device values and sync. On the CPU every
operation is the default.
"""

from __future__ import annotations

from kvcanary.registry import Backend

BACKEND = Backend(
    name="torch_ref",
    description="Reference implementation in torch ops (the specification; any device).",
    package=__name__,  # each operation's module attaches its kernel: @OP.kernel("torch_ref", ...)
)
