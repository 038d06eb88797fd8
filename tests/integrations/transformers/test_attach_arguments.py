"""``attach_canaries``'s model and sizes: a value the integration cannot follow is refused at the call, naming it.
Today each is taken, and the run goes on without a canary (a model transformers never steps) or every request of
the run fails inside transformers' generation loop with kvcanary's error in its log (rD)."""

from __future__ import annotations

from typing import Any

import pytest

from kvcanary.integrations.transformers import attach_canaries


@pytest.mark.xfail(strict=True, reason="rD: attach_canaries takes any object as the model; the inner base model "
                                       "(model.model) or a str attaches to nothing: a run with a fault armed "
                                       "reports nothing (0 steps)")
@pytest.mark.parametrize("which", ["base model", "str"])
def test_a_model_without_continuous_batching_is_refused(model: Any, which: str) -> None:
    target = model.model if which == "base model" else "meta-llama/Llama-3.2-1B"
    with pytest.raises(TypeError, match=r"\bmodel\b"):
        attach_canaries(target)


@pytest.mark.xfail(strict=True, reason="rD: max_requests / max_context_len are kept unchecked until the first step "
                                       "builds the pool; there they raise inside generate_batch and every request "
                                       "fails (0 is taken as the default)")
@pytest.mark.parametrize(("kwargs", "name"), [({"max_requests": -3}, "max_requests"), ({"max_requests": 0}, "max_requests"),
                                              ({"max_requests": "8"}, "max_requests"),
                                              ({"max_context_len": -1}, "max_context_len"),
                                              ({"max_context_len": 2.5}, "max_context_len")])
def test_a_table_size_below_one_is_refused_at_attach(model: Any, kwargs: dict[str, Any], name: str) -> None:
    with pytest.raises((TypeError, ValueError), match=rf"\b{name}\b"):
        attach_canaries(model, **kwargs)


@pytest.mark.xfail(strict=True, reason="rD: an unregistered backend is taken at attach (the CLI checks it, the API "
                                       "does not); every request of the run then fails with BackendError")
def test_an_unregistered_backend_is_refused_at_attach(model: Any) -> None:
    with pytest.raises(ValueError, match=r"\bbackend\b.*'nope'"):
        attach_canaries(model, backend="nope")
