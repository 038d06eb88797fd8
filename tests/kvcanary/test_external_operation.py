"""A new operation declared outside the package gets everything a built-in one has, editing no file of it.

The operation (``count_live``: add the number of live slots, ``slot > 0``, to an ``int64 [1]`` counter) is a
contract, its valid calls and a torch_ref kernel written here. From that declaration alone it gets a launcher
with generated checks and error codes (its own code book, in a temporary folder), a ``torch.ops`` operator
that passes ``torch.library.opcheck``, selection through the registry (a second kernel of a test backend
outranks torch_ref), catalog pages rendered by the docs generator from its examples, and the conformance
kit's call builder. Everything registered is removed at the end.
"""

from __future__ import annotations

import contextlib
import inspect
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, ClassVar

import pytest
import torch
from pydantic import Field

from kvcanary import codes
from kvcanary.errors import FAMILY
from kvcanary.operation import Operation, operations
from kvcanary.registry import REGISTRY, Backend, register_backend
from kvcanary.testing import calls
from kvcanary_contracts import CodeBook, Contract, ContractError, ContractInfo, Relation, TensorArg
from kvcanary_contracts.contract import forget_contract
from kvcanary_contracts.examples import ExampleSet, Variant
from kvcanary_contracts.torch_op import drop_namespace
from tools.docsgen import catalog

NAMESPACE = "kvcanary_external_test"
LETTER = "Z"  # a letter no built-in contract uses


class CountLiveLaunch(Contract):
    """Count the live slots (``> 0``) of ``slots`` into ``counter``."""

    contract: ClassVar[ContractInfo] = FAMILY.contract(
        "launch_count_live_kernel", LETTER,
        "Add the number of live slots to a counter.",
        device_key="counter",
        rules=(
            Relation(
                name="slots_not_too_many",
                require="n <= 4096",
                message="count_live takes at most 4096 slots, got {n}",
                why="The test kernel counts in one block of at most 4096 slots.",
                fix="Split the slots into chunks of 4096.",
                breaks={"n": 4097},
            ),
        ),
    )

    counter: Annotated[torch.Tensor, TensorArg(dtype=torch.int64, shape=(1,), writes=True)] = Field(
        description="The counter the launch adds to.")
    slots: Annotated[torch.Tensor, TensorArg(dtype=torch.int64, shape=("n",))] = Field(
        description="The slots; those > 0 are live.")


forget_contract(CountLiveLaunch.contract.name)  # declared only while the operation is (see the fixture)


def _valid_call() -> dict[str, object]:
    return {"counter": torch.zeros(1, dtype=torch.int64), "slots": torch.zeros(6, dtype=torch.int64)}


def _call_on(device: torch.device | str = "cpu", *, n: int = 6) -> dict[str, object]:
    """The conformance kit's call: ``n`` slots on ``device``."""
    return {"counter": torch.zeros(1, dtype=torch.int64, device=device),
            "slots": torch.arange(n, dtype=torch.int64, device=device)}


def count_live_torch(call: CountLiveLaunch) -> None:
    call.counter.add_((call.slots > 0).sum().reshape(1))


CALLS: list[str] = []


def count_live_fast(call: CountLiveLaunch) -> None:
    CALLS.append("fast")
    count_live_torch(call)


@contextlib.contextmanager
def declared_operation(tmp_path: Path) -> Iterator[Operation]:
    """Declare the operation (with its own code numbers, in memory) and remove every trace of it afterwards."""
    book = FAMILY.codebook
    saved = (dict(book.codes), dict(book.retired))
    declared = Operation(
        "count_live", CountLiveLaunch, constant="COUNT_LIVE", namespace=NAMESPACE, module=__name__,
        doc="Add the number of live slots (``> 0``) to ``counter``.",
        examples=ExampleSet("launch_count_live_kernel", (Variant("six slots", _valid_call),)),
        call=_call_on,
    )
    declared.register_kernel("torch_ref", count_live_torch, devices={"*": 10})
    private = CodeBook(tmp_path / "codebook.json", "KVC")  # a third party's book; numbers the checks
    private.codes.update(book.codes)
    private.update([(CountLiveLaunch.contract.name, c.slug, LETTER) for c in CountLiveLaunch.checks()])
    private.save()
    book.codes.update({k: v for k, v in private.codes.items() if k.startswith("launch_count_live_kernel/")})
    CountLiveLaunch._compiled_ = CountLiveLaunch._traceable_ = None  # recompile with the codes
    try:
        yield declared
    finally:
        declared.discard()
        drop_namespace(NAMESPACE)
        REGISTRY.unregister("external_fast")
        book.codes, book.retired = saved
        catalog.catalog.cache_clear()


@pytest.fixture
def op(tmp_path: Path) -> Iterator[Operation]:
    with declared_operation(tmp_path) as declared:
        yield declared


def test_the_launcher_is_generated_with_checks_and_codes(op: Operation) -> None:
    launch = op.launcher
    counter = torch.zeros(1, dtype=torch.int64)
    launch(counter=counter, slots=torch.tensor([3, 0, -1, 7, 1]))
    assert counter.tolist() == [3]
    with pytest.raises(ContractError) as bad:
        launch(counter=counter, slots=torch.tensor([1.0]))
    assert bad.value.code.startswith(f"KVC-{LETTER}") and "slots" in str(bad.value)
    with pytest.raises(ContractError, match="count_live takes at most 4096 slots, got 5000") as big:
        launch(counter=counter, slots=torch.ones(5000, dtype=torch.int64))
    assert big.value.code.startswith(f"KVC-{LETTER}")
    assert counter.tolist() == [3]  # nothing ran
    params = inspect.signature(launch).parameters
    assert list(params) == ["counter", "slots", "backend"]
    assert params["slots"].annotation is torch.Tensor and params["backend"].default is None
    assert "slots: The slots; those > 0 are live." in (launch.__doc__ or "")


def test_the_operator_exists_and_passes_opcheck(op: Operation) -> None:
    operator = getattr(torch.ops, NAMESPACE).count_live.default
    assert operator is op.operator.op
    counter = torch.zeros(1, dtype=torch.int64)
    operator(counter, torch.tensor([1, 2, 0]), None)
    assert counter.tolist() == [2]
    torch.library.opcheck(operator, (torch.zeros(1, dtype=torch.int64), torch.tensor([1, -2, 5]), None))
    compiled = torch.compile(lambda c, s: op.launcher(counter=c, slots=s), backend="eager", fullgraph=True)
    counter.zero_()
    compiled(counter, torch.tensor([4, 4, 0, 9]))
    assert counter.tolist() == [3]


def test_the_registry_selects_among_its_kernels(op: Operation) -> None:
    assert op in operations() and Operation("count_live") is op
    assert REGISTRY.select(op, torch.device("cpu")).backend.name == "torch_ref"
    register_backend(Backend("external_fast", "a faster test kernel"))
    op.register_kernel("external_fast", count_live_fast, devices={"cpu": 100})
    CALLS.clear()
    counter = torch.zeros(1, dtype=torch.int64)
    op.launcher(counter=counter, slots=torch.tensor([1, 1]))
    assert CALLS == ["fast"] and counter.tolist() == [2]
    op.launcher(counter=counter, slots=torch.tensor([1]), backend="torch_ref")
    assert CALLS == ["fast"] and counter.tolist() == [3]


def _triton_kernel() -> Callable[[CountLiveLaunch], None]:
    """A Triton kernel for the operation: one program per 1024 slots, one atomic add each."""
    import triton
    import triton.language as tl

    @triton.jit  # type: ignore[untyped-decorator]
    def _count(slots: tl.tensor, n: tl.tensor, counter: tl.tensor, BLOCK: tl.constexpr) -> None:
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        live = tl.load(slots + offs, mask=offs < n, other=0) > 0
        tl.atomic_add(counter, tl.sum(live.to(tl.int64), axis=0))

    def count_live_triton(call: CountLiveLaunch) -> None:
        n = int(call.slots.shape[0])
        _count[(max(1, triton.cdiv(n, 1024)),)](call.slots, n, call.counter, BLOCK=1024)

    return count_live_triton


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available(),
                    reason="Triton runs on the CPU only through TRITON_INTERPRET=1")
def test_a_triton_kernel_matches_torch_ref(op: Operation) -> None:
    """A second backend's kernel attached to the same operation: selected when forced, byte-equal to torch_ref."""
    pytest.importorskip("triton")
    op.register_kernel("triton", _triton_kernel(), devices={"cuda": 50, "cpu": 1})
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    slots = torch.randint(-5, 5, (3000,), dtype=torch.int64, device=dev)
    want, got = (torch.zeros(1, dtype=torch.int64, device=dev) for _ in range(2))
    op.launcher(counter=want, slots=slots, backend="torch_ref")
    op.launcher(counter=got, slots=slots, backend="triton")
    assert torch.equal(got, want) and int(want) == int((slots > 0).sum())
    assert REGISTRY.select(op, torch.device(dev), "triton").backend.name == "triton"


def test_the_catalog_renders_its_pages(op: Operation) -> None:
    mine = [c for c in codes.checks() if c.contract == CountLiveLaunch.contract.name]
    assert mine and all(c.code.startswith(f"KVC-{LETTER}") for c in mine)
    for check in mine:
        page = catalog.page(check.code)
        assert page is not None and page.code == check.code
        text = page.markdown()
        assert f"from {__name__} import launch_count_live_kernel" in text
        assert page.error_text.splitlines()[1].startswith(f"[{check.code}]")


def test_the_conformance_kit_builds_its_calls(op: Operation) -> None:
    """The call builder declared with the operation is the kit's: by operation, by name, and as ``calls.<constant>``."""
    kw = calls.of(op, "cpu", n=4)
    assert set(kw) == {"counter", "slots"} and kw["slots"].tolist() == [0, 1, 2, 3]
    assert calls.of("count_live")["slots"].shape == (6,) and op.call(n=2)["slots"].tolist() == [0, 1]
    assert calls.builder("count_live") is _call_on and calls.count_live is _call_on
    out = calls.count_live(n=5)
    op.launcher(**out)
    assert out["counter"].tolist() == [4]
    assert catalog.examples_of(CountLiveLaunch) is op.examples


def test_cleanup_leaves_no_trace(tmp_path: Path) -> None:
    """After the declaration's cleanup, the operation, its operator, contract and codes are gone."""
    with declared_operation(tmp_path) as declared:
        assert hasattr(getattr(torch.ops, NAMESPACE), "count_live")
    assert declared not in operations()
    with pytest.raises(ValueError, match="not a kvcanary operation"):
        Operation("count_live")
    assert all(c.contract != CountLiveLaunch.contract.name for c in codes.checks())
    assert not any(k.startswith("launch_count_live_kernel/") for k in FAMILY.codebook.codes)
    assert not hasattr(getattr(torch.ops, NAMESPACE), "count_live")
    with pytest.raises(AttributeError, match="no declared operation with the constant 'COUNT_LIVE'"):
        calls.builder("count_live")
