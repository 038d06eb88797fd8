"""bench_engine's prefilled engine: the steady decode batch every engine benchmark times."""

from __future__ import annotations

from benchmarks.bench_engine import prefilled_engine


def test_prefilled_engine_decodes_a_full_batch_for_its_steps_when_the_prefill_takes_many_steps() -> None:
    # 48 prompts, 8 per prefill step: 6 prefill steps, while the first prompts prefilled already decode
    bs, steps = 48, 3
    eng = prefilled_engine(None, device="cpu", bs=bs, ctx=4, steps=steps)
    assert all(r.state.value == "decode" for r in eng.requests.values())
    assert min(r.max_new_tokens - r.num_outputs for r in eng.requests.values()) >= steps + 4
    for _ in range(steps):
        rep = eng.step()
        assert (rep.decode_rows, rep.padded_rows, rep.extend_rows, rep.finished) == (bs, 0, 0, [])
