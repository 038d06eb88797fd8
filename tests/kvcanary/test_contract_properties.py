"""Property: any call with one argument broken raises ContractError and leaves every tensor untouched."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import kvcanary as kc
from kvcanary.testing import calls

LAUNCHES: dict[str, tuple[Callable[..., None], Callable[[], dict[str, Any]]]] = {
    "verify": (kc.launch_canary_verify_kernel, calls.verify),
    "write": (kc.launch_canary_write_kernel, lambda: calls.write(assert_inputs=True)),
    "plan": (kc.launch_canary_plan_kernels, lambda: calls.plan(swa=2, pool=True)),
    "plan_offsets": (kc.launch_plan_offsets_kernel, calls.plan_offsets),
    "plan_entries": (kc.launch_plan_entries_kernel, lambda: calls.plan_entries(pool=True)),
    "scatter": (kc.launch_scatter_req_token_ids_kernel, calls.scatter),
}

Path = tuple[str | int, ...]


def leaves(obj: Any, path: Path = ()) -> list[tuple[Path, torch.Tensor]]:
    """Every tensor reachable from the call (through plans, the context and its sources)."""
    if isinstance(obj, torch.Tensor):
        return [(path, obj)]
    if isinstance(obj, dict):
        return [x for k, v in obj.items() for x in leaves(v, (*path, k))]
    if isinstance(obj, tuple):
        return [x for i, v in enumerate(obj) for x in leaves(v, (*path, i))]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [x for f in dataclasses.fields(obj) for x in leaves(getattr(obj, f.name), (*path, f.name))]
    return []


def replace(obj: Any, path: Path, value: Any) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(obj, dict):
        return {**obj, head: replace(obj[head], rest, value)}
    if isinstance(obj, tuple):
        assert isinstance(head, int)
        return tuple(replace(v, rest, value) if i == head else v for i, v in enumerate(obj))
    assert isinstance(head, str)
    if isinstance(obj, kc.RealKvSource):  # its constructor checks the new tensor too: bypass, like a bad caller
        new = object.__new__(kc.RealKvSource)
        for f in dataclasses.fields(obj):
            object.__setattr__(new, f.name, replace(getattr(obj, f.name), rest, value) if f.name == head else
                               getattr(obj, f.name))
        return new
    return dataclasses.replace(obj, **{head: replace(getattr(obj, head), rest, value)})


def strided(t: torch.Tensor) -> torch.Tensor:
    wide = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype, device=t.device)
    return wide[..., ::2]


MUTATIONS: dict[str, Callable[[torch.Tensor], Any]] = {
    "not_a_tensor": lambda t: 3,
    "float64": lambda t: t.to(torch.float64),
    "extra_dim": lambda t: t.unsqueeze(0),
    "meta_device": lambda t: torch.empty(t.shape, dtype=t.dtype, device="meta"),
    "strided": strided,
}


def applicable(name: str, path: Path, t: torch.Tensor) -> bool:
    in_source = "real_kv_sources" in path
    if name == "float64":
        return not in_source  # sources accept any dtype (viewed as uint8)
    if name == "strided":
        return t.numel() > 1 and t.dim() >= 1
    return True


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(sorted(LAUNCHES)), st.sampled_from(sorted(MUTATIONS)), st.integers(0, 10_000))
def test_one_broken_argument_raises_and_changes_nothing(launch_name: str, mutation: str, pick: int) -> None:
    launch, build = LAUNCHES[launch_name]
    kw = build()
    candidates = [(p, t) for p, t in leaves(kw) if applicable(mutation, p, t)]
    path, tensor = candidates[pick % len(candidates)]
    bad = replace(kw, path, MUTATIONS[mutation](tensor))
    before = [(p, t.clone()) for p, t in leaves(bad) if t.device.type != "meta"]
    try:
        launch(**bad)
    except kc.ContractError as err:
        assert err.code.startswith("KVC-") and err.arguments
    else:
        raise AssertionError(f"{launch_name}: {mutation} of {path} was accepted")
    after = dict(leaves(bad))
    for p, t in before:
        assert torch.equal(after[p], t), f"{p} changed"


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(LAUNCHES)), st.sampled_from(["flag_as_int", "negative_window", "none_required"]))
def test_broken_scalars_raise(launch_name: str, what: str) -> None:
    launch, build = LAUNCHES[launch_name]
    kw = build()
    flags = [k for k, v in kw.items() if isinstance(v, bool)]
    if what == "flag_as_int" and flags:
        kw[flags[0]] = int(kw[flags[0]])
    elif what == "negative_window" and "swa_window_size" in kw:
        kw["swa_window_size"] = -1
    else:
        required = [k for k, v in kw.items() if isinstance(v, torch.Tensor) or dataclasses.is_dataclass(v)]
        kw[required[0]] = None
    with pytest.raises(kc.ContractError):
        launch(**kw)
