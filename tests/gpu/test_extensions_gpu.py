"""The extension checks on the GPU: the cuda and Triton backends replay the golden vectors and fresh random
scenarios on the device (owner scenarios with the write-time owner check among them), eagerly and with the
second step captured in a CUDA graph, equal to torch_ref."""

from __future__ import annotations

import json
import random

import pytest
import torch

import kvcanary as kc
from tests.backends import _extensions as X
from tests.backends.cuda import _support
from tests.golden import loader as g

_SKIP = _support.cuda_skip_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_SKIP is not None, reason=f"cuda backend unavailable: {_SKIP}")]
GOLDEN = json.loads((g.DIR / "extensions_cases.json").read_text())["cases"]
ON = kc.Extensions(zero_slot_in_live_range=True, write_slot_mismatch=True)
BACKENDS = ["cuda", "triton"]


def _ext(enc: dict[str, bool] | None) -> kc.Extensions | None:
    return None if enc is None else kc.Extensions(**enc)


@pytest.mark.parametrize("backend", BACKENDS)
def test_golden_vectors_on_the_device(backend: str) -> None:
    for case in GOLDEN:
        assert X.run(case["scenario"], backend, _ext(case["extensions"]), "cuda") == case["outputs"], case["name"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_fresh_scenarios_on_the_device_eager_and_captured(backend: str) -> None:
    for seed in random.Random().sample(range(10**6, 10**7), 12):
        sc = X.make(seed)
        for ext in (ON, None):
            want = X.run(sc, "torch_ref", ext)
            assert X.run(sc, backend, ext, "cuda") == want, (seed, ext)
            assert X.run(sc, backend, ext, "cuda", capture=True) == want, (seed, ext, "graph")


@pytest.mark.parametrize("backend", BACKENDS)
def test_owner_scenarios_on_the_device_eager_and_captured(backend: str) -> None:
    """The write-time owner check (alone and with every flag on) on fresh owner scenarios; its rows are also the
    plain-Python model's."""
    from tests.golden.make_extensions_cases import owner_rows

    for seed in random.Random().sample(range(10**6, 10**7), 12):
        sc = X.make_owner(seed)
        for ext in (X.ALL, kc.Extensions(write_slot_owner_mismatch=True), None):
            want = X.run(sc, "torch_ref", ext)
            got = X.run(sc, backend, ext, "cuda")
            assert got == want, (seed, ext)
            assert sorted(r for r in got["rows"] if r[7] & 512) == (owner_rows(sc) if ext else []), (seed, ext)
            assert X.run(sc, backend, ext, "cuda", capture=True) == want, (seed, ext, "graph")


def test_default_path_is_capturable_with_every_flag_off() -> None:
    sc = X.make(12345)
    for backend in BACKENDS:
        X.run(sc, backend, kc.Extensions(), "cuda")
        assert X.run(sc, backend, kc.Extensions(), "cuda", capture=True) == X.run(sc, "torch_ref", None)
    torch.cuda.synchronize()
