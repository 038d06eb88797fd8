"""torch_ref: the format's executable specification, vectorized with torch ops, on any device.

Plan and verify run without host syncs (device-side masks over the whole capacity), so they are safe to
capture in a CUDA graph; write and scatter size their work from device values and sync. On the CPU every
operation is the default.
"""

from __future__ import annotations

from kvcanary.registry import Backend, Op, OpSupport
from kvcanary_backends.priority import devices


def _op(op: Op, path: str, *, host_sync: bool = False, notes: str = "") -> OpSupport:
    return OpSupport(f"kvcanary_backends.torch_ref.{path}", devices("torch_ref", op), capture_safe=not host_sync,
                     host_sync=host_sync, notes=notes)


BACKEND = Backend(
    name="torch_ref",
    description="Reference implementation in torch ops (the specification; any device).",
    ops={
        Op.PLAN: _op(Op.PLAN, "plan:plan"),
        Op.PLAN_OFFSETS: _op(Op.PLAN_OFFSETS, "plan_offsets:plan_offsets"),
        Op.PLAN_ENTRIES: _op(Op.PLAN_ENTRIES, "plan_entries:plan_entries"),
        Op.VERIFY: _op(Op.VERIFY, "verify:verify"),
        Op.WRITE: _op(Op.WRITE, "write:write", host_sync=True,
                      notes="loops over the longest request's tokens; sizes the loop on the host"),
        Op.SCATTER: _op(Op.SCATTER, "scatter:scatter_req_token_ids", host_sync=True),
    },
)
