"""Attaching and detaching: the engine is restored, bad settings are refused, raise mode names requests."""

from __future__ import annotations

import gc
import re
import subprocess
import sys
import weakref
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import transformers
from transformers.generation.continuous_batching.model_runner import ModelRunner

from kvcanary.integrations.transformers import attach_canaries
from kvcanary.integrations.transformers.faults import FaultHook, TfFault
from kvcanary.integrations.transformers.session import check_runner
from kvcanary.integrations.transformers.version import check_version, parse_version
from kvcanary.integrations.transformers.workload import cb_config
from tests.integrations.transformers.harness import prompts


def test_detach_restores_the_engine(model: Any) -> None:
    before = ModelRunner.compute_batch
    with attach_canaries(model):
        assert ModelRunner.compute_batch is not before
    assert ModelRunner.compute_batch is before


def test_attaching_twice_to_one_model_is_refused(model: Any) -> None:
    with attach_canaries(model), pytest.raises(RuntimeError, match="already attached"):
        attach_canaries(model).attach()


def test_bad_settings_are_refused(model: Any) -> None:
    with pytest.raises(ValueError, match="real_kv must be 'partial' or 'all'"):
        attach_canaries(model, real_kv="none")
    with pytest.raises(ValueError, match="mode must be 'log' or 'raise'"):
        attach_canaries(model, mode="off")
    before = ModelRunner.compute_batch
    with pytest.raises(ValueError, match=r"CanaryConfig.guard_history must be a positive int or None, got 0"):
        attach_canaries(model, on_violation="isolate", guard_history=0)
    assert ModelRunner.compute_batch is before, "refused before anything was attached"
    assert attach_canaries(model, on_violation="isolate", guard_history=None).config.guard_history is None


def test_version_range() -> None:
    assert parse_version("5.17.0") == (5, 17)
    assert check_version("5.23.0.dev0") == (5, 23)
    for bad in ("4.57.1", "5.24.0", "6.0", "garbage"):
        with pytest.raises(RuntimeError, match=re.escape(">=5.17,<5.24")):
            check_version(bad)


generation_config: Any = transformers.GenerationConfig


def test_raise_mode_fails_the_step_naming_the_request(model: Any) -> None:
    hook = FaultHook(TfFault.POSITION_OFF_BY_ONE)
    gc = generation_config(max_new_tokens=8, do_sample=False, eos_token_id=-1, pad_token_id=0)
    with attach_canaries(model, mode="raise") as canary:
        canary.hooks.append(hook)
        out = model.generate_batch(prompts(), generation_config=gc, continuous_batching_config=cb_config(),
                                   progress_bar=False)
    assert hook.fired_step is not None and canary.reports
    errors = [o.error for o in out.values() if o.error]
    assert errors, "raise mode must fail the step's requests"
    assert any(f"requests affected: {hook.detail['request']}" in e for e in errors), errors[0]


def test_kvcanary_imports_without_transformers() -> None:
    code = ("import sys; sys.modules['transformers'] = None\n"  # any import of it would now fail
            "import kvcanary, kvcanary.manager, kvcanary.integrations.transformers\n"
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == "ok", out.stderr


def _errors(model: Any, cb: Any) -> list[str]:
    gc = generation_config(max_new_tokens=4, do_sample=False, eos_token_id=-1, pad_token_id=0)
    with attach_canaries(model):
        out = model.generate_batch(prompts()[:2], generation_config=gc, continuous_batching_config=cb,
                                   progress_bar=False)
    return [o.error or "" for o in out.values()]


def test_models_without_full_attention_are_refused_with_a_message() -> None:
    mistral_config: Any = transformers.MistralConfig
    mistral: Any = transformers.MistralForCausalLM
    cfg = mistral_config(vocab_size=192, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, sliding_window=8)
    errors = _errors(mistral(cfg).eval(), cb_config())
    assert errors and all("supports models with full-attention layers" in e for e in errors), errors


@pytest.mark.parametrize(("settings", "match"), [
    ({"cpu_offload_space": 1.0}, "cpu_offload_space=0"), ({"cpu_offload_space": None}, "cpu_offload_space=0"),
    ({"pad_inputs": True}, "turn CUDA graphs and torch.compile off"), ({"io": object()}, "use_async_batching=False")])
def test_runner_settings_the_canary_cannot_follow_are_refused(settings: dict[str, Any], match: str) -> None:
    io = settings.get("io", SimpleNamespace(requests_in_batch=[]))
    runner = SimpleNamespace(pad_inputs=settings.get("pad_inputs", False), inputs_and_outputs=io,
                             cb_config=SimpleNamespace(cpu_offload_space=settings.get("cpu_offload_space", 0.0)))
    with pytest.raises(RuntimeError, match=re.escape(match)):
        check_runner(runner)
    check_runner(SimpleNamespace(pad_inputs=False, inputs_and_outputs=SimpleNamespace(requests_in_batch=[]),
                                 cb_config=SimpleNamespace(cpu_offload_space=0.0)))


def test_a_runner_is_checked_once_per_cache(model: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner check and the pool lookup run when a step brings another runner or cache, not at every step;
    each run's new cache gets a new pool, and the session keeps no runner once detached."""
    from kvcanary.integrations.transformers import session as session_mod

    checked: list[Any] = []

    def counted(runner: Any) -> None:
        checked.append(runner)
        check_runner(runner)

    monkeypatch.setattr(session_mod, "check_runner", counted)
    with attach_canaries(model) as canary:
        _run(model, prompts())
        first, steps = canary.managers, canary.steps
        assert len(checked) == 1 and steps > 4 and canary._ready is not None
        _run(model, prompts())
        assert len(checked) == 2 and checked[0] is not checked[1] and canary.managers != first
    assert canary._ready is None and not canary.reports


def test_a_finished_run_leaves_its_runner_to_transformers(model: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once generate_batch returns, the session holds no reference to the run's model runner: transformers lets
    it and its input/output buffers go with the run (with eager or SDPA attention those hold a mask of
    max_batch_tokens by max_tokens_read + max_batch_tokens per layer type), attached or not. The session's
    cached runner (a step of the same runner skips its check) must not keep it alive until detach."""
    from kvcanary.integrations.transformers import session as session_mod

    runners: list[weakref.ref[Any]] = []

    def kept(runner: Any) -> None:
        runners.append(weakref.ref(runner))
        check_runner(runner)

    monkeypatch.setattr(session_mod, "check_runner", kept)
    with attach_canaries(model) as canary:
        _run(model, prompts())
        gc.collect()
        assert runners and canary.steps > 4
        assert all(r() is None for r in runners), "the finished run's model runner is still referenced"
        assert canary.managers  # the cache's pool (and its reports) are kept until the next run, as before


def _run(model: Any, prompts_: list[list[int]], **kwargs: Any) -> dict[str, Any]:
    n = kwargs.pop("num_return_sequences", 1)
    gc = generation_config(max_new_tokens=4, do_sample=n > 1, eos_token_id=-1, pad_token_id=0, num_return_sequences=n)
    out: dict[str, Any] = model.generate_batch(prompts_, generation_config=gc, continuous_batching_config=cb_config(),
                                               progress_bar=False, **kwargs)
    return out


def test_a_stale_detach_leaves_a_later_session_attached(model: Any) -> None:
    """Detaching is idempotent: a session detached twice does not take down the one attached after it."""
    before = ModelRunner.compute_batch
    a = attach_canaries(model)
    with a:
        pass
    with attach_canaries(model) as b:
        a.detach()
        assert ModelRunner.compute_batch is not before
        _run(model, prompts()[:2])
        assert b.steps > 0
    assert ModelRunner.compute_batch is before


def test_each_run_lets_the_previous_cache_go(model: Any) -> None:
    """Several generate_batch runs in one block keep one cache's state at a time, and every run's reports."""
    hook = FaultHook(TfFault.POSITION_OFF_BY_ONE)
    with attach_canaries(model) as canary:
        canary.hooks.append(hook)
        _run(model, prompts()[:3])
        assert len(canary.managers) == 1 and canary.reports
        first = canary.managers[0]
        canary.hooks.clear()
        _run(model, prompts()[3:5])  # the first run's cache is let go: its last read-back lands in the reports
        assert canary.managers != [first] and len(canary.managers) == 1
        found = len(canary.reports)
        _run(model, prompts()[3:5])
        assert len(canary.managers) == 1
    assert found > 0 and len(canary.reports) == found  # the clean runs added nothing; the first run's stayed


def test_a_cache_filled_without_canaries_is_refused(model: Any) -> None:
    """A persistent manager's prefix cache filled by an unwatched run has no records: the step says so instead
    of reporting every cached slot."""
    try:
        _run(model, prompts()[:4], persistent_manager=True)  # no canaries: its cached blocks carry no records
        with attach_canaries(model) as canary:
            out = _run(model, prompts()[4:], persistent_manager=True)
        errors = [o.error for o in out.values() if o.error]
        assert errors and all("already holds KV written without canaries" in e for e in errors), errors
        assert canary.reports == [] and canary.steps == 0
    finally:
        model.destroy_cached_continuous_batching_manager()


def test_forks_are_refused(model: Any) -> None:
    with attach_canaries(model) as canary:
        out = _run(model, prompts()[:2], num_return_sequences=2)
    errors = [o.error for o in out.values() if o.error]
    assert errors and any("is a fork" in e for e in errors), errors
    assert canary.reports == []


def test_raise_mode_raises_what_only_the_last_read_back_finds(model: Any) -> None:
    """A flip at the run's last step is found by the read-back at detach: raised there, naming the request,
    with the report kept."""
    def last_step_flip(view: Any) -> None:
        if view.step == 3:  # one prefill and three decodes: the last step
            r = view.requests[0]
            slot = view.layout.slot(view.layout.block_table[r.request_id][0], 1)
            view.layout.k_rows[slot].reshape(-1).view(torch.uint8)[0] ^= 1

    canary = attach_canaries(model, mode="raise")
    with pytest.raises(RuntimeError, match="requests affected: req_0"), canary:
        canary.hooks.append(last_step_flip)
        _run(model, prompts()[:1])
    assert canary.reports and canary.reports[0].request_ids == ("req_0",)
    with pytest.raises(KeyError), attach_canaries(model, mode="raise") as quiet:  # an error already leaving wins
        quiet.hooks.append(last_step_flip)
        _run(model, prompts()[:1])
        raise KeyError("the caller's own error")
    assert quiet.reports

