"""The transfer's argument rules: one copy of each, shared by every entry point."""

from __future__ import annotations

import pytest
import torch

from kvcanary.distributed.group import BACKENDS, init_loopback_group
from kvcanary.distributed.wire import Wire


def test_both_entry_points_refuse_an_unknown_backend_with_one_rule() -> None:
    """The transport and the loopback group name the argument the same way, before touching anything."""
    assert BACKENDS == ("gloo", "nccl")
    with pytest.raises(ValueError, match=r"backend must be 'gloo' or 'nccl', got 'mpi'"):
        Wire(backend="mpi", device=torch.device("cpu"))
    with pytest.raises(ValueError, match=r"backend must be 'gloo' or 'nccl', got 'mpi'"):
        init_loopback_group(0, 1, 1, backend="mpi")
    assert Wire(backend="gloo", device=torch.device("cpu")).wire_device == torch.device("cpu")
