"""The write kernel's candidate variants (``KVC_WRITE_VARIANT``, ``backends/cuda/write.py``) without a GPU.

Each variant runs on the host emulation against torch_ref byte for byte: decode-shaped writes (the path the
variants change) over 0 to 4 sources, pages that are and are not powers of two (the fold's shift or its
division), a source short of the buffer (the strips' range check), first tiles where only lane 0 advances
before a second tile (the lean chain's hand-over), varied and hostile writes, random scenarios. NVRTC compiles
each variant; the default specialization carries no variant define. On a GPU (skipped without one) the same
cases and random writes run each variant's compiled kernel (``write.prepare_variant``) against torch_ref. Each
test here runs its variant whatever the launch's shape (``write.variant_for`` replaced); the rule itself and a
launch on each side of it: ``test_write_variant_rule.py``.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

import kvcanary as kc
from kvcanary.ops.write import WriteLaunch
from kvcanary.registry import REGISTRY, Op, register_backend
from kvcanary.testing import builders
from kvcanary.testing.builders import Call
from kvcanary.testing.parity import check_call, compare_outputs, run_call, without_unspecified
from kvcanary_backends.cuda import write
from kvcanary_backends.cuda._toolchain import Spec
from tests.backends.cuda import _emu, _nvrtc, _support
from tools.scenarios import GENERATORS, fuzz, large_write_call

needs_cxx = pytest.mark.skipif(_emu.compiler() is None, reason="no C++ compiler (g++) for the host emulation")
EMU = "cuda_emu"
CANDIDATES = [v for v in write.VARIANTS if v != 0]


@pytest.fixture(scope="module", autouse=True)
def _emulated_backend() -> Iterator[None]:
    register_backend(_emu.BACKEND, replace=True)
    yield
    REGISTRY.unregister(EMU)


def _force(monkeypatch: pytest.MonkeyPatch, variant: int) -> None:
    """Every write packed from now on runs ``variant``, whatever its shape."""
    monkeypatch.setattr(write, "variant_for", lambda ntok, rows: variant)


def _with_sources(ctx: Any, sources: list[kc.RealKvSource]) -> Any:
    """``ctx`` (its records, ring and counters as they are) with other real-KV ``sources``."""
    return builders.context(
        canary_buf=ctx.canary_buf, sources=sources, mode=ctx.real_kv_hash_mode, ring=ctx.violation_ring,
        write_index=int(ctx.violation_write_index[0]), slot_counter=int(ctx.slot_run_counter[0]),
        kernel_counter=int(ctx.kernel_run_counter[0]), chain_assert=bool(ctx.enable_chain_position_assert[0]),
        kind=ctx.kernel_kind)


def _with_pages(call: Call, pages: tuple[int, ...]) -> Call:
    """``call`` with its real-KV sources rebuilt with these page sizes (same strips per slot, rows to cover the
    buffer), one per source."""
    def make(dev: Any) -> dict[str, Any]:
        kw = call.make(dev)
        ctx = kw["context"]
        num_slots = ctx.canary_buf.shape[0]
        g = torch.Generator().manual_seed(sum(pages))
        out = []
        for src, page in zip(ctx.real_kv_sources, pages, strict=True):
            rows = -(-num_slots // page)
            data = torch.randint(0, 256, (rows, page * src.num_bytes_per_token), dtype=torch.uint8, generator=g)
            out.append(kc.RealKvSource(tensor=data.to(dev), page_size=page, num_bytes_per_token=src.num_bytes_per_token,
                                       read_bytes=src.read_bytes))
        kw["context"] = _with_sources(ctx, out)
        return kw

    return dataclasses.replace(call, make=make, label=f"{call.label} pages {pages}")


def _short_at_a_written_slot(call: Call) -> Call:
    """``call`` with two sources (pages 1 and 4) whose rows end exactly at a slot the write stores (rounded down
    to a page for the second): that slot's strips are out of range, the slot before it in range."""
    def make(dev: Any) -> dict[str, Any]:
        kw = call.make(dev)
        ctx = kw["context"]
        locs = [x for x in kw["out_cache_loc"].tolist() if x >= 8]
        target = locs[len(locs) // 2] // 4 * 4
        kw["out_cache_loc"][0] = target
        g = torch.Generator().manual_seed(target)
        out = [kc.RealKvSource(tensor=torch.randint(0, 256, (target // page, page * 32), dtype=torch.uint8,
                                                    generator=g).to(dev),
                               page_size=page, num_bytes_per_token=32, read_bytes=32) for page in (1, 4)]
        kw["context"] = _with_sources(ctx, out)
        return kw

    return dataclasses.replace(call, make=make, label=f"{call.label} short at a written slot")


def _no_total(call: Call) -> Call:
    """``call`` with the plan's total (the offset at the number of valid requests) made 0: the reference's early
    exit, nothing written, though every other offset is one token a request."""
    def make(dev: Any) -> dict[str, Any]:
        kw = call.make(dev)
        kw["plan"].write_offsets[int(kw["plan"].write_num_valid_reqs[0])] = 0
        return kw

    return dataclasses.replace(call, make=make, label=f"{call.label} no total")


def _lane0_first(call: Call) -> Call:
    """``call`` with tokens 1 to 31 of every request longer than 32 skipped (slot -1): its first tile advances
    lane 0 alone and a second tile continues the chain."""
    def make(dev: Any) -> dict[str, Any]:
        kw = call.make(dev)
        offs = kw["plan"].write_offsets.tolist()
        nreq = int(kw["plan"].write_num_valid_reqs[0])
        for r in range(nreq):
            if offs[r + 1] - offs[r] > 32:
                kw["out_cache_loc"][offs[r] + 1 : offs[r] + 32] = -1
        return kw

    return dataclasses.replace(call, make=make, label=f"{call.label} lane 0 alone first")


S = _support
CASES: dict[str, Callable[[], Call]] = {
    "decode NONE": lambda: large_write_call(30, requests=11, length=1),
    "decode PARTIAL x1": lambda: large_write_call(31, requests=9, length=1, sources=1, mode=1),
    "decode PARTIAL x2": lambda: large_write_call(16, requests=9, length=1, sources=2, mode=1),
    "decode PARTIAL x4 hostile short source": lambda: large_write_call(32, requests=13, length=1, sources=4, mode=1,
                                                                       hostile=True, short_sources=True),
    "decode PARTIAL x3 pages 3, 16, 5": lambda: _with_pages(
        large_write_call(33, requests=10, length=1, sources=3, mode=1), (3, 16, 5)),
    "decode PARTIAL x4 pages 16, 1, 8, 2": lambda: _with_pages(
        large_write_call(34, requests=10, length=1, sources=4, mode=1, hostile=True), (16, 1, 8, 2)),
    "decode PARTIAL x2 short at a written slot": lambda: _short_at_a_written_slot(
        large_write_call(39, requests=12, length=1, sources=2, mode=1)),
    "decode PARTIAL x2 no total": lambda: _no_total(large_write_call(40, requests=9, length=1, sources=2, mode=1)),
    "decode ALL x2": lambda: large_write_call(35, requests=7, length=1, sources=2, mode=2),
    "0-1 tokens PARTIAL x2": lambda: S.large_write(17, requests=40, length=1, sources=2, mode=1,
                                                   assert_inputs=False),
    "varied PARTIAL x3 assert": lambda: S.large_write(36, requests=10, length=70, sources=3, mode=1,
                                                      assert_inputs=True),
    "lane 0 alone first PARTIAL x1": lambda: _lane0_first(large_write_call(37, requests=5, length=75, sources=1,
                                                                           mode=1)),
    "lane 0 alone first NONE hostile": lambda: _lane0_first(large_write_call(38, requests=6, length=40,
                                                                             hostile=True)),
}


@needs_cxx
@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("variant", CANDIDATES)
def test_variant_matches_the_reference(variant: int, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _force(monkeypatch, variant)
    assert check_call(CASES[name](), "cpu", EMU) == []


@needs_cxx
@pytest.mark.parametrize("hostile", [False, True], ids=["realistic", "hostile"])
def test_every_bit_on_random_writes(hostile: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Variant 7 holds every changed path (the chain's, the fold's early strips and its one-token test)."""
    _force(monkeypatch, 7)
    seed = _support.fuzz_seed()
    failures = fuzz(Op.WRITE, "cpu", EMU, seed=seed, count=_support.fuzz_count(12), hostile=hostile)
    assert not failures, f"replay with KVCANARY_FUZZ_SEED={seed}\n" + "\n".join(failures)


@needs_cxx
def test_every_bit_with_every_extension_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The extension checks (slot and owner) read the hash and position the lean chain hands them."""
    from tests.backends._extensions import with_extensions

    _force(monkeypatch, 7)
    seed = _support.fuzz_seed()
    rng = random.Random(seed)
    calls = [large_write_call(rng.getrandbits(32), requests=9, length=1, sources=2, mode=1, hostile=True),
             *(GENERATORS[Op.WRITE](rng, hostile=True) for _ in range(5))]
    failures = [f"call {i} ({c.label}): {bad}" for i, c in enumerate(calls)
                if (bad := check_call(with_extensions(c, rng), "cpu", EMU))]
    assert not failures, f"replay with KVCANARY_FUZZ_SEED={seed}\n" + "\n".join(failures)


def test_the_emulation_runs_the_variant_it_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """The parity above is of the variant's own code: the emulated backend builds the Spec from the packed key,
    whose last element is the variant."""
    call = _emu.call_of(write, CASES["decode PARTIAL x2"]().make("cpu"))
    for variant in write.VARIANTS:
        _force(monkeypatch, variant)
        key = write.pack(call)[0]
        assert key[-1] == variant
        defines = dict(write.KERNELS.spec(*key).defines)
        assert defines.get("KVC_WRITE_VARIANT", 0) == variant


def test_default_spec_has_no_variant_define_and_bad_variants_are_refused() -> None:
    assert write.DECODE_VARIANT in write.VARIANTS and write.LONG_VARIANT in write.VARIANTS
    base = write.spec(1, True, False, True, variant=0)
    assert base == Spec("write.cu", "kvc_write", (("KVC_NSRC", 1), ("KVC_PARTIAL", 1), ("KVC_ASSERT", 0),
                                                  ("KVC_VEC16", 1), ("KVC_WRITE_WARPS", write.WARPS)), write.THREADS)
    assert write.spec(1, True, False, True) == write.spec(1, True, False, True, variant=write.DECODE_VARIANT)
    for v in CANDIDATES:
        assert write.spec(1, True, False, True, variant=v).defines == (*base.defines, ("KVC_WRITE_VARIANT", v))
        assert write.KERNELS.spec(1, True, False, True, False, False, False, v) == write.spec(1, True, False, True,
                                                                                            variant=v)
    call = _emu.call_of(write, CASES["decode NONE"]().make("cpu"))
    for bad in (-1, 4, 5, 8):
        with pytest.raises(ValueError, match="KVC_WRITE_VARIANT must be one of"):
            write.spec(0, True, False, True, variant=bad)
        with pytest.raises(ValueError, match="KVC_WRITE_VARIANT must be one of"):
            write.prepare_variant(call, bad)


@pytest.fixture(scope="module")
def nvrtc() -> Any:
    lib = _nvrtc.load()
    if lib is None:
        pytest.skip("NVRTC not found (pip install nvidia-cuda-nvrtc, part of the dev extra, or a CUDA toolkit)")
    return lib


@pytest.mark.parametrize("variant", CANDIDATES)
def test_nvrtc_compiles_each_variant(nvrtc: Any, variant: int) -> None:
    """Every source count, PARTIAL and ALL, and the extensions' defines, for sm_90 (the benchmark's card)."""
    rng = random.Random(variant)
    keys = [(n, p, rng.random() < 0.5, rng.random() < 0.5, False, False, False)
            for n, p in ((0, True), (1, True), (2, True), (3, True), (4, True), (2, False))]
    keys.append((2, True, True, False, True, True, True))
    for key in keys:
        spec = write.spec(*key, variant=variant)
        opts = ["--gpu-architecture=sm_90", "-std=c++17", f"-I{spec.path().parent}",
                *[f"-D{k}={v}" for k, v in spec.define_list()]]
        assert _nvrtc.compile_source(nvrtc, spec.path().read_text(), spec.source, opts, ptx=False), spec.label()


# -- on a GPU: each variant's compiled kernel ------------------------------------------------------------------
_GPU_SKIP = _support.cuda_skip_reason()
_NO_GPU = f"cuda backend unavailable: {_GPU_SKIP}"


def _gpu_differences(call: Call, variant: int) -> list[str]:
    """``call`` launched on the GPU by ``variant``'s kernel against torch_ref on the CPU."""
    call = without_unspecified(call)
    want = run_call(call, "cpu", "torch_ref")
    kw = call.make("cuda")
    write.prepare_variant(WriteLaunch(**kw), variant)()
    got = {k: v.detach().cpu().clone() for k, v in call.outputs(kw).items()}
    return compare_outputs(got, want, base=call.ring_base, order_sensitive=call.order_sensitive)


@pytest.mark.gpu
@pytest.mark.skipif(_GPU_SKIP is not None, reason=_NO_GPU)
@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("variant", CANDIDATES)
def test_gpu_variant_matches_the_reference(variant: int, name: str) -> None:
    assert _gpu_differences(CASES[name](), variant) == []


@pytest.mark.gpu
@pytest.mark.skipif(_GPU_SKIP is not None, reason=_NO_GPU)
@pytest.mark.parametrize("hostile", [False, True], ids=["realistic", "hostile"])
@pytest.mark.parametrize("variant", CANDIDATES)
def test_gpu_variant_on_random_writes(variant: int, hostile: bool) -> None:
    seed = _support.fuzz_seed()
    rng = random.Random(seed)
    failures = []
    for i in range(_support.fuzz_count(12)):
        call = GENERATORS[Op.WRITE](rng, hostile=hostile)
        bad = _gpu_differences(call, variant)
        if bad:
            failures.append(f"call {i} ({call.label}): " + "; ".join(bad))
    assert not failures, f"replay with KVCANARY_FUZZ_SEED={seed}\n" + "\n".join(failures)
