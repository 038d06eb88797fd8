"""torch_ref: the format's executable specification, vectorized with torch ops, on any device.

Plan and verify run without host syncs (device-side masks over the whole capacity), so they are safe to
capture in a CUDA graph; write and scatter size their work from device values and sync. On the CPU every
operation is the default.
"""

from __future__ import annotations

from kvcanary.registry import Backend, Op, OpSupport

_ANY = {"*": 10}

BACKEND = Backend(
    name="torch_ref",
    description="Reference implementation in torch ops (the specification; any device).",
    ops={
        Op.PLAN: OpSupport("kvcanary.backends.torch_ref.plan:plan", _ANY, capture_safe=True),
        Op.PLAN_OFFSETS: OpSupport("kvcanary.backends.torch_ref.plan_offsets:plan_offsets", _ANY, capture_safe=True),
        Op.PLAN_ENTRIES: OpSupport("kvcanary.backends.torch_ref.plan_entries:plan_entries", _ANY, capture_safe=True),
        Op.VERIFY: OpSupport("kvcanary.backends.torch_ref.verify:verify", _ANY, capture_safe=True),
        Op.WRITE: OpSupport("kvcanary.backends.torch_ref.write:write", _ANY, host_sync=True,
                            notes="loops over the longest request's tokens; sizes the loop on the host"),
        Op.SCATTER: OpSupport("kvcanary.backends.torch_ref.scatter:scatter_req_token_ids", _ANY, host_sync=True),
    },
)
