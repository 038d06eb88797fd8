"""``attach_canaries``'s model, table sizes and backend: a value the integration cannot follow is refused at the
call, naming it, before anything is attached. Unchecked, each was taken, and the run went on without a canary (a
model transformers never steps) or every request of the run failed inside transformers' generation loop with
kvcanary's error in its log (rD)."""

from __future__ import annotations

from typing import Any

import pytest

from kvcanary.errors import ContractError
from kvcanary.integrations.transformers import attach_canaries
from kvcanary.registry import ENV_BACKEND, registered_backends


@pytest.mark.parametrize("which", ["base model", "str"])
def test_a_model_without_continuous_batching_is_refused(model: Any, which: str) -> None:
    target = model.model if which == "base model" else "meta-llama/Llama-3.2-1B"
    with pytest.raises(TypeError, match=r"^kv-canary: model must be a transformers model with continuous batching "
                                        rf"\(one with generate_batch.*got {type(target).__name__}$"):
        attach_canaries(target)


@pytest.mark.parametrize(("kwargs", "error"), [({"max_requests": -3}, ValueError), ({"max_requests": 0}, ValueError),
                                               ({"max_requests": "8"}, TypeError),
                                               ({"max_requests": True}, ValueError),
                                               ({"max_context_len": -1}, ValueError),
                                               ({"max_context_len": 0}, ValueError),
                                               ({"max_context_len": 2.5}, TypeError)])
def test_a_table_size_below_one_is_refused_at_attach(model: Any, kwargs: dict[str, Any], error: type[Exception]
                                                     ) -> None:
    (name,) = kwargs
    with pytest.raises(error, match=rf"^kv-canary: {name} must be (a positive int|int) or None, got ") as err:
        attach_canaries(model, **kwargs)
    assert isinstance(err.value, ContractError) and err.value.code.startswith("KVC-F"), err.value
    assert name in err.value.arguments


def test_table_sizes_of_one_and_up_or_none_are_taken(model: Any) -> None:
    canary = attach_canaries(model, max_requests=1, max_context_len=None)
    assert (canary.max_requests, canary.max_context_len) == (1, None)
    canary = attach_canaries(model, max_requests=None, max_context_len=4096)
    assert (canary.max_requests, canary.max_context_len) == (None, 4096)


def test_an_unregistered_backend_is_refused_at_attach(model: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_BACKEND, raising=False)
    with pytest.raises(ValueError, match=r"^kv-canary: backend must be a registered backend's name or None; "
                                         r"no backend named 'nope' is registered \(known: "):
        attach_canaries(model, backend="nope")
    name = sorted(registered_backends())[0]
    assert attach_canaries(model, backend=name).config.backend == name


def test_an_unregistered_backend_in_the_environment_is_refused_at_attach(model: Any,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_BACKEND, "nope")
    with pytest.raises(ValueError, match=rf"^kv-canary: {ENV_BACKEND} must be unset or name a registered backend; "
                                         r"no backend named 'nope'"):
        attach_canaries(model)
    name = sorted(registered_backends())[0]
    assert attach_canaries(model, backend=name).config.backend == name  # a name given wins, as at launch
