"""The host staging of the manager's eager inputs: parts of any int dtype and layout packed in order, host parts
with numpy (the copy to the device is the one copy op)."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kvcanary.manager.h2d import HostStaging


class _Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.names: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.names.append(str(func.overloadpacket.__name__))
        return func(*args, **(kwargs or {}))


def test_parts_are_packed_in_order_with_their_values_cast_to_int64() -> None:
    staging = HostStaging(64, torch.device("cpu"))
    dst = torch.full((64,), -9, dtype=torch.int64)
    a = torch.tensor([1, 2, 3], dtype=torch.int64)
    b = torch.tensor([[4, 5], [6, 7]], dtype=torch.int32).t()  # not contiguous: 4, 6, 5, 7
    c = torch.tensor([2**40, -(2**40)], dtype=torch.int64)
    empty = torch.zeros(0, dtype=torch.int64)
    for _ in range(3):  # both buffers, then the first again
        assert staging.copy(dst, [a, empty, b, c]) == 9
        assert dst[:9].tolist() == [1, 2, 3, 4, 6, 5, 7, 2**40, -(2**40)] and dst[9:].eq(-9).all()
    assert staging.copy(dst, [c]) == 2 and dst[:3].tolist() == [2**40, -(2**40), 3]


def test_host_parts_cost_no_copy_but_the_one_to_the_device() -> None:
    staging = HostStaging(64, torch.device("cpu"))
    dst = torch.zeros(64, dtype=torch.int64)
    parts = [torch.arange(10), torch.arange(5, dtype=torch.int32), torch.arange(7)]
    with _Ops() as ops:
        staging.copy(dst, parts)
    # a host part is read through numpy (torch's ``numpy()`` is a detach: an alias, no kernel); the one copy
    assert sorted(n for n in ops.names if n != "detach") == ["copy_", "slice", "slice"]
    assert ops.names.count("detach") <= len(parts)
    assert dst[:22].tolist() == list(range(10)) + list(range(5)) + list(range(7))


def test_too_many_values_are_refused_before_anything_is_written() -> None:
    staging = HostStaging(4, torch.device("cpu"))
    dst = torch.zeros(8, dtype=torch.int64)
    try:
        staging.copy(dst, [torch.arange(5)])
    except RuntimeError as err:
        assert "exceeds its capacity 4" in str(err)
    else:
        raise AssertionError("5 values into a staging of 4 must be refused")
    assert dst.eq(0).all()
