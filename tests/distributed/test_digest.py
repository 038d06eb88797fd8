"""The TP digest fold: the fused Triton fold, the torch-ops fold and a pure-Python reference agree bit for bit.

On the CPU the fused fold runs through Triton's interpreter (small sizes, tiny blocks, so several blocks and
both interpreter programs are exercised); the GPU tests run it compiled, at a decode batch and a prefill
size, and capture the accumulator's update in a CUDA graph. Inputs are fresh random draws every run.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable

import pytest
import torch

from kvcanary.consts import INVALID_SLOT
from kvcanary.distributed import DigestAccumulator, fold_records, fold_records_torch, fused_fold
from kvcanary.hashing import MASK64, splitmix64, to_int64
from kvcanary.ops.fold import FOLD
from kvcanary.registry import REGISTRY
from kvcanary.testing.opcheck import opcheck
from kvcanary_contracts import ContractError

CUDA = torch.cuda.is_available()
DEV = torch.device("cuda" if CUDA else "cpu")
gpu = pytest.mark.skipif(not CUDA, reason="needs CUDA")
SALT = 0x9E3779B97F4A7C15


def reference(buf: torch.Tensor, slots: torch.Tensor) -> list[int]:
    """The digest in Python ints: (Σ mix mod 2**64 as int64, count); a slot past the buffer folds zeros."""
    words = buf.cpu().contiguous().view(torch.int64).tolist()
    total = count = 0
    for s in slots.cpu().tolist():
        if s <= 0:
            continue
        tok, pos, prev = words[s][:3] if s < len(words) else (0, 0, 0)
        h = splitmix64((s ^ SALT) & MASK64)
        for f in (tok, pos, prev):
            h = splitmix64(h ^ (f & MASK64))
        total, count = (total + h) & MASK64, count + 1
    return [to_int64(total), count]


def random_buf(num_slots: int, rng: random.Random, row_words: int = 4) -> torch.Tensor:
    """``uint8 [num_slots, 32]`` of random records (full int64 range); a view of wider rows when
    ``row_words`` > 4 (a padded buffer, rows ``8 * row_words`` bytes apart)."""
    g = torch.Generator().manual_seed(rng.getrandbits(63))
    words = torch.randint(-(1 << 63), (1 << 63) - 1, (num_slots, row_words), dtype=torch.int64, generator=g)
    return words.view(torch.uint8).to(DEV)[:, :32]


def random_slots(n: int, num_slots: int, rng: random.Random, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """Live slots (duplicates allowed) mixed with padding: 0, -1, other negatives, INVALID_SLOT (int64)."""
    pads = [0, -1, -rng.randrange(2, 1 << 30)] + ([INVALID_SLOT] if dtype == torch.int64 else [])
    out = [rng.randrange(1, num_slots) if rng.random() < 0.7 else rng.choice(pads) for _ in range(n)]
    return torch.tensor(out, dtype=dtype, device=DEV)


def fused(buf: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    return fold_records(buf, slots, fused=True)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_fused_and_torch_folds_match_the_python_reference(dtype: torch.dtype) -> None:
    rng = random.Random()
    for n in (0, 1, rng.randrange(2, 8), rng.randrange(9, 40)):
        buf = random_buf(rng.randrange(8, 64), rng, row_words=rng.choice([4, 6]))
        slots = random_slots(n, buf.shape[0], rng, dtype)
        want = reference(buf, slots)
        assert fold_records_torch(buf, slots).tolist() == want
        assert fused(buf, slots).tolist() == want


def test_strided_slots_and_a_single_live_record() -> None:
    rng = random.Random()
    buf = random_buf(32, rng)
    wide = random_slots(2 * 21, 32, rng)
    slots = wide[::2]
    assert not slots.is_contiguous()
    assert fused(buf, slots).tolist() == reference(buf, slots) == fold_records_torch(buf, slots).tolist()
    one = torch.tensor([0, rng.randrange(1, 32), -1], device=DEV)
    assert fused(buf, one).tolist() == reference(buf, one)


def test_the_fused_accumulator_adds_in_place_and_take_zeroes_it() -> None:
    rng = random.Random()
    buf = random_buf(48, rng)
    acc = DigestAccumulator(buf, fused=True)
    assert acc.fused
    a, b = random_slots(rng.randrange(1, 30), 48, rng), random_slots(rng.randrange(1, 30), 48, rng)
    acc_before = acc.acc
    acc.add(a)
    acc.add(b)
    acc.add(a)
    assert acc.acc is acc_before  # updated in place (what a captured graph replays)
    ra, rb = reference(buf, a), reference(buf, b)
    want = [to_int64(2 * ra[0] + rb[0]), 2 * ra[1] + rb[1]]
    assert acc.acc.tolist() == want
    out = torch.full((3,), 7, dtype=torch.int64, device=DEV)
    acc.take(out)
    assert out.tolist() == [*want, 7] and acc.acc.tolist() == [0, 0]


def test_a_slot_past_the_buffer_is_not_read_by_either_fold() -> None:
    """A corrupted slot (past the buffer, up to INT64_MAX) folds zeros in both folds: nothing out of bounds is
    read (on a GPU, torch's index check would end the process), and the two still agree."""
    rng = random.Random()
    buf = random_buf(16, rng)
    slots = torch.tensor([rng.randrange(1, 16), 16, 16 + rng.randrange(1 << 20), (1 << 63) - 1, 0], device=DEV)
    want = reference(buf, slots)
    assert fused(buf, slots).tolist() == want == fold_records_torch(buf, slots).tolist()
    empty = buf[:0]
    assert fused(empty, slots).tolist() == reference(empty, slots) == fold_records_torch(empty, slots).tolist()


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16])
def test_a_buffer_of_wider_words_folds_as_its_bytes(dtype: torch.dtype) -> None:
    """The records are bytes: a buffer viewed as int64, int32 or int16 words folds as its uint8 view does."""
    rng = random.Random()
    buf = random_buf(24, rng, row_words=rng.choice([4, 6]))
    slots = random_slots(20, 24, rng)
    as_words = buf.view(dtype)
    want = reference(buf, slots)
    assert fused(as_words, slots).tolist() == want == fold_records_torch(as_words, slots).tolist()


def _code(fn: Callable[[], object]) -> str:
    with pytest.raises(ContractError) as info:
        fn()
    return info.value.code


def test_bad_arguments_are_refused_before_anything_moves() -> None:
    """The fold's contract refuses each bad argument with its own code; nothing is added."""
    rng = random.Random()
    buf = random_buf(16, rng)
    acc = DigestAccumulator(buf, fused=True)
    slots = random_slots(5, 16, rng)
    acc.add(slots)
    before = acc.acc.clone()
    book = FOLD.contract.contract.family.codebook
    name = FOLD.contract.contract.name

    def code(slug: str) -> str:
        found = book.lookup(name, slug)
        assert found is not None, slug
        return found

    assert _code(lambda: acc.add(slots.view(1, -1))) == code("slots:rank")
    assert _code(lambda: acc.add(slots.to(torch.float32))) == code("slots:dtype")
    assert torch.equal(acc.acc, before)
    assert _code(lambda: DigestAccumulator(buf[:, :16])) == code("canary_buf_rows_are_records")
    assert _code(lambda: fold_records(buf.reshape(-1), slots)) == code("canary_buf:rank")
    assert _code(lambda: fold_records(torch.zeros(4, 40, dtype=torch.uint8, device=DEV)[:, 3:35], slots)) \
        == code("canary_buf_aligned")
    assert _code(lambda: fold_records(torch.zeros(4, 64, dtype=torch.uint8, device=DEV)[:, ::2], slots)) \
        == code("canary_buf_row_contiguous")
    assert _code(lambda: fold_records(torch.zeros(4, 36, dtype=torch.uint8, device=DEV)[:, :32], slots)) \
        == code("canary_buf_row_stride_whole_words")
    assert _code(lambda: fold_records(torch.zeros(4, 2, dtype=torch.complex128, device=DEV), slots)) \
        == code("canary_buf:dtype")
    with pytest.raises(ValueError, match=r"slots must be 1-D, got shape \(1, 5\)"):
        acc.add(slots.view(1, -1))


def test_selection_fused_on_cuda_only_by_the_triton_backends_rules() -> None:
    """The registry picks the fold like any operation: torch ops on the CPU, Triton where it can run on CUDA."""
    cpu = torch.device("cpu")
    assert fused_fold(cpu) is None and fused_fold(DEV, False) is None
    assert not DigestAccumulator(torch.zeros(4, 32, dtype=torch.uint8)).fused
    assert DigestAccumulator(torch.zeros(4, 32, dtype=torch.uint8)).backend == "torch_ref"
    triton = REGISTRY.get("triton")
    if triton.availability():
        with pytest.raises(RuntimeError, match="triton is not installed"):
            fused_fold(cpu, True)
    elif os.environ.get("TRITON_INTERPRET") == "1":
        assert fused_fold(cpu, True) is not None  # forced: the interpreter serves it on the CPU
    else:
        with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
            fused_fold(cpu, True)


@pytest.mark.skipif(CUDA, reason="the interpreter's case: no CUDA, TRITON_INTERPRET=1")
def test_interpreted_kernels_are_not_picked_for_cuda_tensors() -> None:
    """Built for the interpreter, Triton would stage CUDA tensors through the host: torch ops instead."""
    assert fused_fold(torch.device("cuda")) is None
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
        fused_fold(torch.device("cuda"), True)


@pytest.mark.gpu
@gpu
def test_on_cuda_the_fused_fold_is_picked_and_matches_at_decode_and_prefill_sizes() -> None:
    rng = random.Random()
    buf = random_buf(1 << 16, rng)
    acc = DigestAccumulator(buf)
    assert acc.fused
    for n in (2, rng.randrange(100, 600), rng.randrange(5000, 20000)):
        slots = random_slots(n, buf.shape[0], rng, rng.choice([torch.int64, torch.int32]))
        want = reference(buf, slots)
        assert fold_records_torch(buf, slots).tolist() == want
        assert fold_records(buf, slots).tolist() == want
        acc.add(slots)
        out = torch.zeros(2, dtype=torch.int64, device=DEV)
        acc.take(out)
        assert out.tolist() == want


@pytest.mark.gpu
@gpu
def test_the_fused_fold_is_captured_in_a_cuda_graph_and_reads_the_slots_at_replay() -> None:
    rng = random.Random()
    buf = random_buf(4096, rng)
    slots = random_slots(64, 4096, rng)
    acc = DigestAccumulator(buf)
    assert acc.fused
    side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # compile and load outside the capture
        acc.add(slots)
    torch.cuda.current_stream().wait_stream(side)
    acc.acc.zero_()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        acc.add(slots)
        acc.add(slots)
    assert acc.acc.tolist() == [0, 0]  # captured, not run
    graph.replay()
    first = reference(buf, slots)
    fresh = random_slots(64, 4096, rng)
    slots.copy_(fresh)  # the graph reads the slots (and records) at replay time
    graph.replay()
    second = reference(buf, fresh)
    assert acc.acc.tolist() == [to_int64(2 * first[0] + 2 * second[0]), 2 * first[1] + 2 * second[1]]


def test_traced_by_torch_compile_the_accumulator_calls_the_fold_operator() -> None:
    """A compiled region that holds the HEAD observer traces the fold's operator (``torch.ops.kvcanary.fold``),
    which runs the accumulator's backend: the same bits."""
    rng = random.Random()
    buf = random_buf(32, rng)
    acc = DigestAccumulator(buf, fused=True)
    slots = random_slots(12, 32, rng)
    step = torch.compile(acc.add, backend="eager", fullgraph=True)
    step(slots)
    assert acc.acc.tolist() == reference(buf, slots)


@pytest.mark.parametrize("backend", ["torch_ref", "triton"])
def test_the_fold_operator_passes_opcheck(backend: str) -> None:
    """``torch.ops.kvcanary.fold`` (schema, fake kernel, mutation of ``acc`` only) on random valid calls."""
    if backend == "triton" and fused_fold(DEV, None) is None and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("triton runs here only through TRITON_INTERPRET=1")
    rng = random.Random()
    for n in (0, 5, rng.randrange(20, 200)):
        buf = random_buf(32, rng, row_words=rng.choice([4, 6]))
        opcheck(FOLD, {"acc": torch.zeros(2, dtype=torch.int64, device=DEV), "canary_buf": buf,
                       "slots": random_slots(n, 32, rng, rng.choice([torch.int64, torch.int32]))}, backend)
