"""The Triton write's fold tile: chosen from shapes (a narrow one for decode-shaped writes with sources), and
either tile gives torch_ref's records for any write.

The random writes of ``tools.scenarios`` have requests of several tokens, so forcing each tile onto every
call runs the narrow one over several iterations per request too (a decode write folds only one).
"""

from __future__ import annotations

import zlib

import pytest

from kvcanary.registry import Op
from kvcanary_backends.triton import write as triton_write
from kvcanary_backends.triton._jit import TUNING
from tests.backends.triton._support import device
from tools.scenarios import fuzz

DEV = device()
CASES = 12 if DEV.type == "cuda" else 5


def test_the_narrow_tile_is_for_decode_shaped_writes_with_sources() -> None:
    decode, wide = TUNING["write_fold_tile_decode"], TUNING["write_fold_tile"]
    assert decode < wide
    assert triton_write.fold_tile(2, num_tokens=8, capacity=8) == decode
    assert triton_write.fold_tile(1, num_tokens=1, capacity=1024) == decode
    assert triton_write.fold_tile(2, num_tokens=9, capacity=8) == wide  # more tokens than rows: prefill-shaped
    assert triton_write.fold_tile(0, num_tokens=8, capacity=8) == wide  # nothing to fold: one variant


@pytest.mark.parametrize("hostile", [False, True], ids=["realistic", "hostile"])
@pytest.mark.parametrize("key", ["write_fold_tile_decode", "write_fold_tile"])
def test_either_tile_writes_what_torch_ref_writes(key: str, hostile: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(triton_write, "fold_tile", lambda num_sources, num_tokens, capacity: TUNING[key])
    seed = zlib.crc32(f"{key}/{hostile}".encode())
    failures = fuzz(Op.WRITE, DEV, "triton", seed=seed, count=CASES, hostile=hostile)
    assert not failures, f"{key}: " + "\n".join(failures)
