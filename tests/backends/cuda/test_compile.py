"""CI checks of the cuda backend that need no GPU.

Every kernel specialization compiles with NVRTC (the run-time compiler, for sm_90 and the oldest supported
architecture) and a representative set with nvcc; every kernel parameter is 8 bytes and the host packers pass
exactly as many as each kernel takes; the header's constants are kvcanary's; the backend declares every
operation.
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch

import kvcanary as kc
from kvcanary import consts
from kvcanary.hashing import ANCHOR_HASH
from kvcanary.ops.verify import VerifyLaunch
from kvcanary.registry import REGISTRY, Op
from kvcanary.testing.builders import context
from kvcanary_backends.cuda import (
    BACKEND,
    budget,
    plan,
    plan_entries,
    plan_offsets,
    scatter,
    verify,
    write,
)
from kvcanary_backends.cuda._specs import EXTENSION_KEYS, KEYS, all_specs, attached
from kvcanary_backends.cuda._toolchain import KERNEL_DIR, Spec
from tests.backends.cuda import _nvrtc
from tests.backends.cuda._emu import call_of
from tools.scenarios import GENERATORS, kv_sources

SPECS = all_specs()
REPO = Path(__file__).resolve().parents[3]
PROBES = REPO / "benchmarks" / "floors_probes.cu"  # the benchmarks' CUDA floor probes
SHAPE = REPO / "benchmarks" / "sglang_shape.cu"  # the benchmarks' SGLang-shaped write (the head-to-head)
ARCHS = ("sm_90", "sm_75")  # the H200, and the oldest compute capability the backend accepts


def _options(spec: Spec, arch: str) -> list[str]:
    inc = [f"-I{KERNEL_DIR}"] + ([f"-I{spec.extra_include}"] if spec.extra_include else [])
    return [f"--gpu-architecture={arch}", "-std=c++17", *inc, *[f"-D{k}={v}" for k, v in spec.define_list()]]


@pytest.fixture(scope="module")
def nvrtc() -> Any:
    lib = _nvrtc.load()
    if lib is None:
        pytest.skip("NVRTC not found (pip install nvidia-cuda-nvrtc, part of the dev extra, or a CUDA toolkit)")
    return lib


_PTX: dict[Spec, str] = {}


def _ptx(lib: Any, spec: Spec) -> str:
    if spec not in _PTX:
        _PTX[spec] = _nvrtc.compile_source(lib, spec.path().read_text(), spec.source,
                                          _options(spec, "compute_90"), ptx=True).decode()
    return _PTX[spec]


@pytest.mark.parametrize("spec", SPECS, ids=[s.label() for s in SPECS])
def test_nvrtc_compiles_every_specialization(nvrtc: Any, spec: Spec) -> None:
    for arch in ARCHS:
        cubin = _nvrtc.compile_source(nvrtc, spec.path().read_text(), spec.source, _options(spec, arch), ptx=False)
        assert len(cubin) > 0
    params = _nvrtc.entry_params(_ptx(nvrtc, spec), spec.entry)
    assert params and all(re.search(r"\.(u64|b64|s64)\b", p) for p in params), params


def test_nvrtc_compiles_the_benchmark_probes(nvrtc: Any) -> None:
    for arch in ARCHS:
        assert _nvrtc.compile_source(nvrtc, PROBES.read_text(), PROBES.name,
                                     [f"--gpu-architecture={arch}", "-std=c++17", f"-I{KERNEL_DIR}"], ptx=False)


@pytest.mark.parametrize("source", sorted(p.name for p in (REPO / "benchmarks" / "before").glob("*.cu")))
def test_nvrtc_compiles_the_benchmarks_before_kernels(nvrtc: Any, source: str) -> None:
    """The kernels as they were before a change, which benchmarks time beside the current ones."""
    path = REPO / "benchmarks" / "before" / source
    for arch in ARCHS:
        assert _nvrtc.compile_source(nvrtc, path.read_text(), path.name,
                                     [f"--gpu-architecture={arch}", "-std=c++17", f"-I{KERNEL_DIR}"], ptx=False)


@pytest.mark.parametrize("nsrc", [0, 1, 4])
def test_nvrtc_compiles_the_sglang_shaped_write(nvrtc: Any, nsrc: int) -> None:
    """Every parameter 8 bytes, like the backend's kernels (the benchmark launches it the same way)."""
    opts = ["--gpu-architecture=compute_90", "-std=c++17", f"-I{KERNEL_DIR}", f"-DKVC_NSRC={nsrc}"]
    ptx = _nvrtc.compile_source(nvrtc, SHAPE.read_text(), SHAPE.name, opts, ptx=True).decode()
    params = _nvrtc.entry_params(ptx, "kvc_shape_write_serial")
    assert len(params) == 15 + 6 * nsrc and all(re.search(r"\.(u64|b64|s64)\b", p) for p in params), params


def _nvcc_specs() -> list[Spec]:
    """Each source with its fewest and its most features (NSRC=4, ALL, asserts, 8-byte records)."""
    picks = {
        verify.KERNELS.spec(False, 0, True, True, 256), verify.KERNELS.spec(True, 4, False, False, 256),
        verify.KERNELS.spec(True, 3, True, True, 512),
        write.KERNELS.spec(0, True, False, True), write.KERNELS.spec(4, False, True, False),
        write.KERNELS.spec(1, True, True, True), write.KERNELS.spec(2, True, True, False, True, True, True, 0),
        plan.KERNELS.spec(False, False), plan.KERNELS.spec(True, True),
        plan_offsets.KERNELS.spec(True), plan_entries.KERNELS.spec(True, True), scatter.KERNELS.spec(),
    }
    return sorted(picks, key=Spec.label)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_nvcc_compiles_the_sources() -> None:
    nvcc = shutil.which("nvcc")
    assert nvcc is not None
    with tempfile.TemporaryDirectory() as tmp:
        def build(item: tuple[int, Path, list[str]]) -> str:
            i, src, defines = item
            cmd = [nvcc, "-std=c++17", "-arch=sm_90", "-c", f"-I{KERNEL_DIR}", *defines, str(src), "-o",
                   str(Path(tmp) / f"{i}.o")]
            res = subprocess.run(cmd, capture_output=True, text=True, check=False)
            return "" if res.returncode == 0 else f"{' '.join(cmd)}\n{res.stderr}"

        jobs = [(i, s.path(), [f"-D{k}={v}" for k, v in s.define_list()]) for i, s in enumerate(_nvcc_specs())]
        jobs.append((len(jobs), PROBES, []))
        with ThreadPoolExecutor(max_workers=2) as pool:
            errors = [e for e in pool.map(build, jobs) if e]
    assert not errors, "\n".join(errors)


def test_sources_include_no_system_header() -> None:
    files = [*KERNEL_DIR.glob("*.cu"), *KERNEL_DIR.glob("*.cuh"), PROBES]
    assert len(files) >= 8
    for f in files:
        text = f.read_text()
        assert not re.search(r"#\s*include\s*<", text), f"{f.name}: NVRTC has no host headers"
        for inc in re.findall(r'#\s*include\s*"([^"]+)"', text):
            assert (KERNEL_DIR / inc).is_file(), f"{f.name} includes {inc}, which is not a kernel header"


# -- constants ------------------------------------------------------------------------------------------------
def _header_constants() -> dict[str, int]:
    text = (KERNEL_DIR / "kvcanary_common.cuh").read_text()
    out: dict[str, int] = {}
    for name, raw in re.findall(r"constexpr\s+\w+\s+(k\w+)\s*=\s*([^;]+);", text):
        value = re.sub(r"[uUlL]+$", "", raw.strip())
        if value.startswith("-9223372036854775807"):  # INT64_MIN is spelled INT64_MIN + 1 - 1
            out[name] = -(2**63) if value.endswith("- 1") else -(2**63) + 1
        else:
            out[name] = int(value, 0)
    return out


def test_constants_match_kvcanary_consts() -> None:
    h = _header_constants()
    want = {
        "kCanaryChainAnchor": consts.CANARY_CHAIN_ANCHOR, "kAnchorHash": ANCHOR_HASH,
        "kReqPoolIdxPadding": consts.REQ_POOL_IDX_PADDING, "kTokenToKvSlotPadding": consts.TOKEN_TO_KV_SLOT_PADDING,
        "kCanaryFieldsPerSlot": consts.CANARY_FIELDS_PER_SLOT, "kCanaryFieldToken": consts.CANARY_FIELD_TOKEN,
        "kCanaryFieldPosition": consts.CANARY_FIELD_POSITION, "kCanaryFieldPrevHash": consts.CANARY_FIELD_PREV_HASH,
        "kCanaryFieldRealKvHash": consts.CANARY_FIELD_REAL_KV_HASH, "kCanarySlotBytes": consts.CANARY_SLOT_BYTES,
        "kViolationFields": consts.VIOLATION_FIELDS, "kMaxRealKvSources": consts.MAX_REAL_KV_SOURCES,
        "kRealKvChunkBytes": consts.REAL_KV_CHUNK_BYTES, "kPlanBsBlockSize": consts.PLAN_BS_BLOCK_SIZE,
        "kInvalidSlot": consts.INVALID_SLOT, "kZeroSlotMark": consts.ZERO_SLOT_MARK,
        "kZeroSlotInLiveRange": kc.FailReason.ZERO_SLOT_IN_LIVE_RANGE,
        "kWriteSlotMismatch": kc.FailReason.WRITE_SLOT_MISMATCH,
        "kWriteSlotOwnerMismatch": kc.FailReason.WRITE_SLOT_OWNER_MISMATCH,
        "kVerifyChainHashMismatch": kc.FailReason.VERIFY_CHAIN_HASH_MISMATCH,
        "kVerifyPositionMismatch": kc.FailReason.VERIFY_POSITION_MISMATCH,
        "kVerifyRealKvHashMismatch": kc.FailReason.VERIFY_REAL_KV_HASH_MISMATCH,
        "kWriteTokenMismatch": kc.FailReason.WRITE_TOKEN_MISMATCH,
        "kWritePositionMismatch": kc.FailReason.WRITE_POSITION_MISMATCH,
        "kVerifyTokenMismatch": kc.FailReason.VERIFY_TOKEN_MISMATCH,
        "kIndexOutOfRange": kc.FailReason.INDEX_OUT_OF_RANGE,
    }
    assert {k: h.get(k) for k in want} == {k: int(v) for k, v in want.items()}


def test_splitmix64_constants_are_the_formats() -> None:
    text = (KERNEL_DIR / "kvcanary_common.cuh").read_text()
    assert "0xBF58476D1CE4E5B9ULL" in text and "0x94D049BB133111EBULL" in text
    assert re.search(r"x >> 30\).*\n.*x >> 27\).*\n.*x >> 31", text)


# -- the backend's declaration --------------------------------------------------------------------------------
def test_backend_declares_every_operation_like_the_launchers() -> None:
    """Every operation but the digest fold (Triton's and torch_ref's only: the table's ``-`` cell)."""
    assert set(BACKEND.ops) == set(Op) - {Op.FOLD}
    for support in BACKEND.ops.values():
        assert set(support.devices) == {"cuda"} and support.capture_safe and not support.host_sync


def test_specialization_tables_are_read_from_the_attached_kernels() -> None:
    """Each kernel module declares its specializations on its cache, beside the kernel it attaches: the tables
    hold exactly the operations the backend serves, each with its module's cache and keys; a cuda kernel
    attached without a cache (a replacement) drops its operation from the tables, and restoring it returns."""
    mods = {Op.VERIFY: verify, Op.WRITE: write, Op.PLAN: plan, Op.PLAN_OFFSETS: plan_offsets,
            Op.PLAN_ENTRIES: plan_entries, Op.SCATTER: scatter, Op.VERIFY_BUDGET: budget}
    assert set(KEYS) == set(BACKEND.ops) == set(mods)
    for op, mod in mods.items():
        assert KEYS[op] == (mod.KERNELS, list(mod.KERNELS.preload)) and KEYS[op][1]
        assert all(isinstance(k, tuple) for k in KEYS[op][1]) and len(set(KEYS[op][1])) == len(KEYS[op][1])
        assert (op in EXTENSION_KEYS) == bool(mod.KERNELS.extensions)
    assert set(EXTENSION_KEYS) == {Op.VERIFY, Op.WRITE, Op.PLAN, Op.PLAN_ENTRIES}
    kernel = Op.SCATTER.kernels["cuda"]
    try:
        Op.SCATTER.register_kernel("cuda", lambda call: None, devices={"cuda": 1})
        assert Op.SCATTER not in attached() and set(attached()) == set(mods) - {Op.SCATTER}
    finally:
        Op.SCATTER.kernels["cuda"] = kernel
        REGISTRY.invalidate()
    assert attached() == {op: mod.KERNELS for op, mod in mods.items()}


def test_availability_and_device_reasons_do_not_raise() -> None:
    reasons = BACKEND.availability()
    if not torch.cuda.is_available():
        assert reasons, "without a CUDA device the backend must decline, with a reason"
    explained = REGISTRY.explain(Op.VERIFY, torch.device("cpu"))["cuda"]
    assert explained, "the cuda backend does not run on the CPU"


def test_without_a_device_the_device_reason_comes_before_a_missing_package(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU-only machine is told "no CUDA device" first, not to install kvcanary[cuda]."""
    from kvcanary.registry import ReasonKind
    from kvcanary_backends import cuda as cuda_backend
    from kvcanary_backends.cuda import _toolchain

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(_toolchain, "core_missing", lambda: "cuda.core is not usable: No module named 'cuda'")
    reasons = cuda_backend._availability()
    assert [r.kind for r in reasons] == [ReasonKind.DEVICE, ReasonKind.PACKAGE], reasons
    assert "torch sees no CUDA device" in reasons[0].message
    monkeypatch.setattr(_toolchain, "core_missing", lambda: None)
    assert [r.kind for r in cuda_backend._availability()] == [ReasonKind.DEVICE]


# -- host-side packing ----------------------------------------------------------------------------------------
def _sample_calls() -> list[tuple[Any, dict[str, Any]]]:
    """(operation module, kwargs on CPU tensors) covering every specialization key."""
    out: list[tuple[Any, dict[str, Any]]] = []
    for nsrc, mode in ((0, 0), (2, 0), (1, 1), (2, 2), (3, 1), (4, 2), (4, 1)):
        for stride in (32, 40):
            sources = kv_sources(random.Random(7), 20, nsrc)
            ctx = context(canary_buf=torch.zeros(20, stride, dtype=torch.uint8), sources=sources,
                          mode=kc.RealKvHashMode(mode), ring=4)
            for check in (False, True):
                out.append((verify, {"context": ctx, "plan": kc.VerifyPlan.allocate(verify_capacity=5, device="cpu"),
                                     "check_verify_expected_token": check}))
                t = torch.zeros(6, dtype=torch.int64)
                out.append((write, {"context": ctx, "plan": kc.WritePlan.allocate(write_req_capacity=3, device="cpu"),
                                    "input_ids": t, "positions": t, "out_cache_loc": t,
                                    "enable_write_input_assert": check, "expected_input_tokens": t if check else None,
                                    "expected_input_positions": t if check else None}))
    rng = random.Random(3)
    mods = {Op.PLAN: plan, Op.PLAN_OFFSETS: plan_offsets, Op.PLAN_ENTRIES: plan_entries, Op.SCATTER: scatter}
    for op, mod in mods.items():
        for _ in range(12):
            out.append((mod, GENERATORS[op](rng, hostile=True).make("cpu")))
    out.append((budget, Op.VERIFY_BUDGET.call("cpu")))
    return out


def test_packers_pass_exactly_the_kernel_parameters(nvrtc: Any) -> None:
    seen: set[tuple[str, Any]] = set()
    for mod, kw in _sample_calls():
        key, _sizes, args = mod.pack(call_of(mod, kw))
        spec = mod.KERNELS.spec(*key)
        assert spec in SPECS, f"{spec.label()} is launched but not in backends.cuda._specs"
        n = len(_nvrtc.entry_params(_ptx(nvrtc, spec), spec.entry))
        assert len(args) == n, f"{spec.label()}: kernel takes {n} parameters, the packer passes {len(args)}"
        assert all(isinstance(a, int) and -(2**63) <= a < 2**63 for a in args), spec.label()
        seen.add((mod.__name__, key))
    for mod in (verify, write):  # every source count and mode of verify and write was packed
        keys = {k for m, k in seen if m == mod.__name__}
        assert {k[1] if mod is verify else k[0] for k in keys} == set(range(5)), mod.__name__
    assert all(k in KEYS[Op.VERIFY][1] for m, k in seen if m == verify.__name__)


def test_extension_packers_pass_exactly_the_kernel_parameters(nvrtc: Any) -> None:
    """With the extensions on, each launch picks an extension Spec CI compiles, with the parameters it takes;
    with them off (None or every flag off), today's Spec and arguments."""
    from tests.backends import _extensions as X

    rng = random.Random(7)
    packed: dict[str, list[tuple[Any, ...]]] = {}
    for mod in (verify, write, plan, plan_entries):
        for i in range(9):
            # the write-slot check, the owner check, both (every extension flag on)
            on = kc.Extensions(zero_slot_in_live_range=True, write_slot_mismatch=i % 3 != 1,
                               write_slot_owner_mismatch=i % 3 != 0)
            kw = GENERATORS[{verify: Op.VERIFY, write: Op.WRITE, plan: Op.PLAN, plan_entries: Op.PLAN_ENTRIES}[mod]](
                rng, hostile=False).make("cpu")
            base = mod.pack(call_of(mod, kw))
            assert mod.pack(call_of(mod, {**kw, "extensions": kc.Extensions()})) == base
            ext: dict[str, Any] = {"extensions": on}
            if mod is write:
                ext.update(req_pool_indices=torch.zeros(3, dtype=torch.int64),
                           req_to_token=torch.zeros(X.ROWS, X.COLS, dtype=torch.int32),
                           full_to_swa_index_mapping=torch.zeros(8, dtype=torch.int64) if rng.random() < 0.5 else None,
                           slot_owner=torch.zeros(kw["context"].canary_buf.shape[0], dtype=torch.int64))
            key, _sizes, args = mod.pack(call_of(mod, {**kw, **ext}))
            spec = mod.KERNELS.spec(*key)  # compiled here if CI's subset (EXTENSION_KEYS) does not hold it
            n = len(_nvrtc.entry_params(_ptx(nvrtc, spec), spec.entry))
            assert len(args) == n, f"{spec.label()}: kernel takes {n} parameters, the packer passes {len(args)}"
            packed.setdefault(mod.__name__, []).append(key)
    assert all(k[-1] for k in packed[verify.__name__])
    assert {(k[4], k[6]) for k in packed[write.__name__]} == {(True, False), (False, True), (True, True)}


def test_mode_none_folds_nothing_and_records_alignment_picks_vector_loads() -> None:
    src = kv_sources(random.Random(1), 8, 2)
    for stride, vec in ((32, True), (40, False), (48, True)):
        ctx = context(canary_buf=torch.zeros(8, stride, dtype=torch.uint8), sources=src, ring=4)
        key, _, args = verify.pack(VerifyLaunch(context=ctx, plan=kc.VerifyPlan.allocate(verify_capacity=3, device="cpu"),
                                                check_verify_expected_token=False))
        assert key == (False, 0, True, vec, verify.THREADS, False) and len(args) == 16
    ctx = context(canary_buf=torch.zeros(8, 32, dtype=torch.uint8), sources=src, mode=kc.RealKvHashMode.ALL, ring=4)
    key, _, args = verify.pack(VerifyLaunch(context=ctx, plan=kc.VerifyPlan.allocate(verify_capacity=3, device="cpu"),
                                            check_verify_expected_token=True))
    assert key[:3] == (True, 2, False)
    s0 = src[0]
    assert args[16:22] == (s0.tensor.data_ptr(), s0.tensor.shape[0], s0.tensor.shape[1], s0.page_size,
                           s0.num_bytes_per_token, s0.read_bytes // 16)


def test_entries_per_thread_match_the_kernels() -> None:
    text = (KERNEL_DIR / "plan_common.cuh").read_text()
    assert f"#define KVC_PLAN_EPT {plan_entries.ENTRIES_PER_THREAD}\n" in text  # the default
    assert "kEntriesPerThread = KVC_PLAN_EPT;" in text


def test_launch_shapes_depend_only_on_capacities() -> None:
    assert verify.shape((False, 0, True, True, 256, False), 0, 1000) == (1, 1, 256, 0)
    assert verify.shape((False, 0, True, True, 256, False), 10**8, 1056) == (1056, 1, 256, 0)
    assert verify.shape((False, 0, True, True, 256, False), 300, 1056) == (2, 1, 256, 0)
    assert write.shape((0, True, False, True, False, False, False, 7), (0, 0), 9) == (1, 1, write.THREADS, 0)
    assert write.shape((0, True, False, True, False, False, False, 7), (1024, 1024), 9) == (1024 // write.WARPS, 1, write.THREADS, 0)
    assert write.shape((2, True, False, True, False, False, False, 7), (17, 5), 9) == (-(-17 // write.WARPS), 2, write.THREADS, 0)
    assert write.shape((1, False, False, True, False, False, False, 7), (1, 32768), 9) == (1, 17, write.THREADS, 0)
    assert write.shape((1, False, False, True, False, False, False, 7), (1, 10**9), 9) == (1, 1 + write.MAX_FOLD_ROWS, write.THREADS, 0)
    assert plan.shape((False, False, False), (0, 0), 9) == (2, 1, plan_entries.THREADS, 32)
    assert plan.shape((True, True, False), (256, 10**6), 500) == (500, 1, plan_entries.THREADS, 32 * 256)  # all resident
    assert plan.shape((True, True, False), (4096, 10**6), 500) == (500, 1, plan_entries.THREADS, 8 * 4096)
    assert plan.shape((True, True, False), (8, 10**6), 1) == (2, 1, plan_entries.THREADS, 32 * 8)  # at least one entry block
    # tiles (256 x 4 = 1024 entries) never span rows: 256 rows of 16 entries are 256 tiles, not
    # cdiv(4096, 1024) = 4
    assert plan_entries.THREADS * plan_entries.ENTRIES_PER_THREAD == 1024
    assert plan.shape((False, False, False), (256, 4096), 600) == (1 + 4 + 256, 1, plan_entries.THREADS, 32 * 256)
    assert plan.shape((False, False, False), (256, 1 << 20), 10**4) == (1 + 1024 + 256, 1, plan_entries.THREADS, 32 * 256)
    assert plan_offsets.shape((False,), (4096), 9) == (1, 1, plan_offsets.THREADS, 0)
    assert plan_entries.shape((False, False, False), (0, 5), 9) is None and plan_entries.shape((False, False, False), (3, 0), 9) is None
    assert plan_entries.shape((False, False, False), (3, 600), 9) == (1 + 3, 1, plan_entries.THREADS, 96)
    assert plan_entries.shape((False, False, False), (3, 10**6), 9) == (9, 1, plan_entries.THREADS, 96)
    assert scatter.shape((), (0, 5, 3, 4), 0) is None and scatter.shape((), (2, 0, 3, 4), 0) is None
    assert scatter.shape((), (2, 5, 3, 4), 0) == (2, 1, scatter.THREADS, 0)
    assert scatter.shape((), (1, 10**6, 3, 32768), 0) == (1, 32, scatter.THREADS, 0)
