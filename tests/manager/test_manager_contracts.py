"""The manager's own arguments validate through contracts (KVC-M): ``CanaryManager(...)`` before anything is
allocated, and ``CanaryCapacities.check_batch``, which refuses a forward that does not fit the capacities with
SGLang's RuntimeError texts (``ContractRuntimeError``) and the rule's code."""

from __future__ import annotations

import dataclasses
import itertools
import re

import pytest
import torch

from kvcanary.consts import CanaryMode, PoolKind, RealKvHashMode
from kvcanary.manager import CanaryBatch, CanaryConfig, CanaryManager, ExpectedTokens, KvPoolSpec, PoolGroupSpec
from kvcanary.manager.capacities import CanaryCapacities
from kvcanary_contracts import ContractError, ContractRuntimeError, ContractTypeError
from tests.manager.world import make_world


def _refused(info: pytest.ExceptionInfo[BaseException], slug: str) -> ContractError:
    """The error is its rule's ContractError, with a KVC-M code the pointer line names."""
    err = info.value
    assert isinstance(err, ContractError), type(err)
    assert err.check.slug == slug, err.check.slug
    assert re.fullmatch(r"KVC-M\d{3}", err.code), err.code
    assert f"[{err.code}]" in str(err).splitlines()[1]
    return err


def _first_line(err: BaseException) -> str:
    return str(err).splitlines()[0]


def _pool(*, layers: tuple[torch.Tensor, ...] = ()) -> KvPoolSpec:
    k = torch.zeros(16, 2, 8)
    group = PoolGroupSpec(kind=PoolKind.FULL, k_layer0=k, v_layer0=torch.zeros(16, 2, 8), layers=layers)
    return KvPoolSpec(groups=(group,), req_to_token=torch.zeros(4, 8, dtype=torch.int32))


_CAPS = CanaryCapacities(verify_capacity=48, write_req_capacity=4, write_token_capacity=8, sweep_capacity=16,
                         expected_token_capacity=6)
_CONFIG = CanaryConfig(real_kv_mode=RealKvHashMode.PARTIAL)


# -- CanaryManager(...) ------------------------------------------------------------------------------------------
def test_a_good_manager_is_attached() -> None:
    m = CanaryManager.attach(pool=_pool(), capacities=_CAPS, config=_CONFIG)
    assert m.capacities is _CAPS and m.config is _CONFIG
    layers = (torch.zeros(16, 2, 8), torch.zeros(16, 2, 8))
    rotated = CanaryManager(pool=_pool(layers=layers), capacities=_CAPS,
                            config=dataclasses.replace(_CONFIG, layer_rotation=1))
    assert any(rotated.rotations)


@pytest.mark.parametrize(("kwargs", "slug", "text"), [
    ({"pool": None}, "pool:type", "kv-canary: pool must be a KvPoolSpec, got NoneType"),
    ({"capacities": {"verify_capacity": 1}}, "capacities:type", "kv-canary: capacities must be a CanaryCapacities, "
                                                                "got dict"),
    ({"config": "log"}, "config:type", "kv-canary: config must be a CanaryConfig, got str"),
])
def test_wrong_types_are_type_errors_naming_the_argument(kwargs: dict[str, object], slug: str, text: str) -> None:
    with pytest.raises(TypeError) as info:
        CanaryManager(**{"pool": _pool(), "capacities": _CAPS, "config": _CONFIG, **kwargs})  # type: ignore[arg-type]
    err = _refused(info, slug)
    assert isinstance(err, ContractTypeError) and _first_line(err) == text


@pytest.mark.parametrize(("config", "slug", "text"), [
    (CanaryConfig(mode=CanaryMode.NONE), "mode_not_none",
     "kv-canary: config.mode is NONE (canary disabled); do not attach a CanaryManager"),
    (CanaryConfig(graphs=True), "graphs_need_cuda_pool",
     "kv-canary: CanaryConfig.graphs=True needs a CUDA pool (CUDA graphs), but the pool is on cpu; leave graphs at "
     "None (on for CUDA pools only) or set it to False"),
    (CanaryConfig(real_kv_mode=RealKvHashMode.ALL, layer_rotation=2), "layer_rotation_needs_layers",
     "kv-canary: CanaryConfig.layer_rotation needs PoolGroupSpec.layers on some group"),
])
def test_each_constructor_rule_fires_with_its_code(config: CanaryConfig, slug: str, text: str) -> None:
    with pytest.raises(ValueError) as info:
        CanaryManager(pool=_pool(), capacities=_CAPS, config=config)
    assert _first_line(_refused(info, slug)) == text


def test_each_constructor_rule_has_its_own_code() -> None:
    codes = set()
    for config in (CanaryConfig(mode=CanaryMode.NONE), CanaryConfig(graphs=True),
                   CanaryConfig(real_kv_mode=RealKvHashMode.ALL, layer_rotation=1)):
        with pytest.raises(ContractError) as info:
            CanaryManager(pool=_pool(), capacities=_CAPS, config=config)
        codes.add(info.value.code)
    assert len(codes) == 3


# -- CanaryCapacities.check_batch, and prepare() ------------------------------------------------------------------
def _batch(bs: int, n: int, snapshot: int | None = None) -> CanaryBatch:
    def z(k: int) -> torch.Tensor:
        return torch.zeros(k, dtype=torch.int64)

    exp = None
    if snapshot is not None:  # `snapshot` tokens over the rows, the first row holding the rest
        lens = [snapshot - (bs - 1)] + [1] * (bs - 1) if bs else []
        exp = ExpectedTokens(flat=z(snapshot), lens=torch.tensor(lens, dtype=torch.int64))
    return CanaryBatch(req_pool_indices=z(bs), prefix_lens=z(bs), extend_lens=z(bs), input_ids=z(n), positions=z(n),
                       out_cache_loc=z(n), expected_tokens=exp)


@pytest.mark.parametrize(("batch", "verify", "slug", "error", "text"), [
    (_batch(5, 5), False, "batch_rows_fit", RuntimeError,
     "kv-canary: forward_batch.batch_size=5 exceeds pre-allocated write_req_capacity=4; raise the engine's max "
     "batch size or check CanaryCapacities"),
    (_batch(2, 9), False, "batch_tokens_fit", RuntimeError,
     "kv-canary: forward_batch token count=9 exceeds pre-allocated write_entry_capacity=8; raise the "
     "chunked-prefill size or check CanaryCapacities"),
    (_batch(2, 2), True, "expected_tokens_given", ValueError,
     "kv-canary: CanaryBatch.expected_tokens is required when enable_verify_token=True"),
    (_batch(2, 2, snapshot=7), True, "expected_tokens_fit", RuntimeError,
     "kv-canary: expected-token snapshot of 7 tokens exceeds pre-allocated expected_token_capacity=6"),
])
def test_each_fit_rule_fires_with_its_code_and_sglangs_text(batch: CanaryBatch, verify: bool, slug: str,
                                                            error: type[Exception], text: str) -> None:
    with pytest.raises(error) as info:
        _CAPS.check_batch(batch, enable_verify_token=verify)
    err = _refused(info, slug)
    assert _first_line(err) == text
    assert isinstance(err, ContractRuntimeError) == (error is RuntimeError)


def test_a_batch_that_fits_passes() -> None:
    _CAPS.check_batch(_batch(4, 8), enable_verify_token=False)
    _CAPS.check_batch(_batch(4, 8, snapshot=6), enable_verify_token=True)
    _CAPS.check_batch(_batch(4, 8, snapshot=7), enable_verify_token=False)  # the snapshot is not read


def test_prepare_refuses_exactly_what_the_contract_refuses() -> None:
    """prepare() compares plainly and hands a refused batch to the contract: over a grid around each capacity,
    a batch prepare() takes is one the contract passes, and a batch it refuses raises the contract's error."""
    for verify in (False, True):
        w = make_world(verify_token=verify)
        caps = w.manager.capacities
        rows = (caps.write_req_capacity, caps.write_req_capacity + 1)
        tokens = (caps.write_token_capacity, caps.write_token_capacity + 1)
        for bs, n in itertools.product(rows, tokens):
            for snapshot in (None, caps.expected_token_capacity, caps.expected_token_capacity + 1):
                batch = _batch(bs, n, snapshot)
                try:
                    caps.check_batch(batch, enable_verify_token=verify)
                    expected: ContractError | None = None
                except ContractError as exc:
                    expected = exc
                if expected is None:
                    w.manager.prepare(batch)
                    w.manager.head(batch)  # prepared: the forward runs on
                    w.manager.tail()
                    continue
                with pytest.raises(ContractError) as info:
                    w.manager.prepare(batch)
                assert info.value.code == expected.code and str(info.value) == str(expected)


# -- VerifyBudget.period, and stride's batch rule ----------------------------------------------------------------
def test_the_budget_arithmetic_refuses_with_its_codes() -> None:
    from kvcanary.manager import VerifyBudget

    b = VerifyBudget(max_entries=8, newest_per_request=2)
    assert b.period(batch_size=2, max_verify_len=10, slide=1) == 9  # stride 2 less 1 dropped: 8 older, 1 a step
    cases: list[tuple[dict[str, int], str, str]] = [
        ({"batch_size": 0}, "batch_size_positive", "kv-canary: batch_size must be positive, got 0"),
        ({"max_verify_len": -1}, "max_verify_len_non_negative", "kv-canary: max_verify_len must be non-negative, "
                                                                "got -1"),
        ({"slide": -1}, "slide_non_negative", "kv-canary: slide must be non-negative, got -1"),
        ({"slide": 2}, "stride_keeps_up", "kv-canary: a stride of 2 cannot keep up with windows sliding 2 entries "
                                          "per step; raise max_entries"),
    ]
    codes = set()
    for change, slug, text in cases:
        with pytest.raises(ValueError) as info:
            b.period(**{"batch_size": 2, "max_verify_len": 10, "slide": 0, **change})
        err = info.value
        assert isinstance(err, ContractError) and err.check.slug == slug and _first_line(err) == text
        assert re.fullmatch(r"KVC-C\d{3}", err.code) and f"[{err.code}]" in str(err).splitlines()[1]
        codes.add(err.code)
    assert len(codes) == len(cases)
    with pytest.raises(ValueError, match=r"^kv-canary: batch_size must be positive, got -3") as info:
        b.stride(-3)  # the same rule, with the same code
    assert isinstance(info.value, ContractError) and info.value.check.slug == "batch_size_positive"
    assert b.stride(1) == 6 and b.stride(100) == 1


# -- make_row_source: the real-KV source over a layer buffer --------------------------------------------------------
def test_a_strided_pool_buffer_is_refused_at_attach_with_its_code() -> None:
    from kvcanary.manager import make_row_source

    assert len(make_row_source(torch.zeros(16, 2, 8), RealKvHashMode.PARTIAL, name="FULL k_layer0")) == 1
    assert make_row_source(torch.zeros(16, 2, 8), RealKvHashMode.NONE, name="FULL k_layer0") == ()
    strided = torch.zeros(16, 8, 2).transpose(1, 2)
    group = PoolGroupSpec(kind=PoolKind.FULL, k_layer0=strided, v_layer0=torch.zeros(16, 2, 8))
    pool = KvPoolSpec(groups=(group,), req_to_token=torch.zeros(4, 8, dtype=torch.int32))
    with pytest.raises(ValueError) as info:
        CanaryManager(pool=pool, capacities=_CAPS, config=_CONFIG)
    err = _refused(info, "layer_buffer_contiguous")
    assert err.contract == "make_row_source"
    assert _first_line(err) == ("kv-canary: FULL k_layer0 must be contiguous (the fingerprint reads the live buffer "
                                "through a view)")
    with pytest.raises(TypeError, match=r"^kv-canary: mode must be a RealKvHashMode, got str") as again:
        make_row_source(torch.zeros(16, 2, 8), "partial", name="FULL k_layer0")  # type: ignore[arg-type]
    assert isinstance(_refused(again, "mode:type"), ContractTypeError)
