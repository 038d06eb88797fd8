"""An unbucketed forward's staging (what an engine's captured forward runs): one ``torch.cat`` into the packed
buffer, with the values, dtype casts, SWA translation and expected inputs of the per-array copies it replaced."""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kvcanary.manager import CanaryBatch, CanaryCapacities
from kvcanary.manager.staging import StepStaging

_VIEWS = {"slice", "view", "alias", "as_strided", "detach", "lift_fresh"}


class _Ops(TorchDispatchMode):
    """The aten ops dispatched inside it that do device work (views left out)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = str(func.overloadpacket.__name__)
        if name not in _VIEWS:
            self.ops[name] += 1
        return func(*args, **(kwargs or {}))


def _caps() -> CanaryCapacities:
    return CanaryCapacities(verify_capacity=64, write_req_capacity=4, write_token_capacity=8, sweep_capacity=16)


def _batch(dtype: torch.dtype, *, expected: bool = False) -> CanaryBatch:
    def t(*xs: int) -> torch.Tensor:
        return torch.tensor(xs, dtype=dtype)

    return CanaryBatch(req_pool_indices=t(2, 1), prefix_lens=t(5, 0), extend_lens=t(1, 3), input_ids=t(7, 8, 9, 10),
                       positions=t(5, 0, 1, 2), out_cache_loc=t(11, 3, 40, -1),
                       expected_input_tokens=t(7, 8, 9, 10) if expected else None,
                       expected_input_positions=t(5, 0, 1, 2) if expected else None)


def _values(v: Any) -> list[list[int] | None]:
    return [None if x is None else x.tolist() for x in (
        v.req_pool_indices, v.prefix_lens, v.extend_lens, v.input_ids, v.positions, v.out_cache_loc,
        v.swa_out_cache_loc, v.expected_input_tokens, v.expected_input_positions)]


def test_int64_inputs_are_staged_by_one_cat() -> None:
    s = StepStaging(_caps(), torch.device("cpu"), swa_lut=None, swa_num_slots=0, write_input_assert=False)
    s.packed.fill_(-7)
    with _Ops() as ops:
        v = s.load(_batch(torch.int64))
    assert ops.ops == {"cat": 1}
    assert _values(v) == [[2, 1], [5, 0], [1, 3], [7, 8, 9, 10], [5, 0, 1, 2], [11, 3, 40, -1], None, None, None]
    assert all(x.dtype == torch.int64 for x in (v.req_pool_indices, v.input_ids, v.out_cache_loc))
    assert v.valid_lens.data_ptr() == s.valid_lens.data_ptr()  # load_expected's, untouched by load
    assert (s.packed[3 * 2 + 3 * 4 :] == -7).all()  # nothing written past the batch


def test_int32_inputs_expected_inputs_and_swa_translation() -> None:
    lut = torch.arange(32, dtype=torch.int64) * 10  # slot i -> SWA slot 10 i; slots >= 32 are out of range
    s = StepStaging(_caps(), torch.device("cpu"), swa_lut=lut, swa_num_slots=320, write_input_assert=True)
    v = s.load(_batch(torch.int32, expected=True))
    assert _values(v) == [[2, 1], [5, 0], [1, 3], [7, 8, 9, 10], [5, 0, 1, 2], [11, 3, 40, -1],
                          [110, 30, 320, -1], [7, 8, 9, 10], [5, 0, 1, 2]]
    # the same views as a bucket of exactly the batch: a later forward of that size reads the same addresses
    assert v.out_cache_loc.data_ptr() == s.padded_views(2, 4).out_cache_loc.data_ptr()
    w = s.load(_batch(torch.int64, expected=True))
    assert _values(w) == _values(v)
