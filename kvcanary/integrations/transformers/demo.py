"""``kvcanary demo --engine transformers``: the clean-then-faults table on transformers' real engine.

A tiny seeded Llama serves a shared-prefix workload through ``generate_batch`` with canaries attached:
first clean (it must be silent, and its tokens must equal a run without canaries), then once per fault
class injected into the engine's own state. Exit status 0 when all of that holds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from kvcanary.integrations.transformers.fault_kinds import DESCRIPTIONS, TfFault
from kvcanary.quiet_logs import TRANSFORMERS_LOGGERS, quiet_logs


@dataclass(frozen=True)
class TfOutcome:
    """One run: the fault (None: clean), where it fired, what the canary reported."""

    fault: TfFault | None
    model: str
    fired_step: int | None
    detail: str
    reports: tuple[Any, ...]
    steps: int
    seconds: float
    identical: bool = True

    @property
    def ok(self) -> bool:
        if self.fault is None:
            return not self.reports and self.identical
        return bool(self.reports)


def run_one(model: Any, prompts: list[list[int]], fault: TfFault | None, *, backend: str | None,
            max_new_tokens: int, reference: dict[str, list[int]] | None = None, name: str = "llama") -> TfOutcome:
    """One generate_batch run with canaries attached and ``fault`` armed."""
    from kvcanary.integrations.transformers.faults import FaultHook
    from kvcanary.integrations.transformers.session import attach_canaries
    from kvcanary.integrations.transformers.workload import generate

    hook = FaultHook(fault) if fault is not None else None
    start = time.perf_counter()
    with attach_canaries(model, backend=backend) as canary:
        if hook is not None:
            canary.hooks.append(hook)
        out = generate(model, prompts, max_new_tokens=max_new_tokens)
    return TfOutcome(fault=fault, model=name, fired_step=hook.fired_step if hook else None,
                     detail=", ".join(f"{k}={v}" for k, v in hook.detail.items()) if hook else "",
                     reports=tuple(canary.reports), steps=canary.steps, seconds=time.perf_counter() - start,
                     identical=reference is None or out == reference)


def _name(o: TfOutcome) -> str:
    return (o.fault.value if o.fault is not None else "clean") + (" (swa)" if o.model == "hybrid" else "")


def describe(o: TfOutcome, out: TextIO) -> None:
    """The per-run block."""
    name = _name(o)
    out.write(f"\n=== {name} [{'OK' if o.ok else 'FAILED'}] ({o.seconds:.1f}s, {o.steps} steps)\n")
    if o.fault is None:
        out.write(f"  no fault injected; {len(o.reports)} violation(s); tokens "
                  f"{'identical to' if o.identical else 'DIFFERENT from'} a run without canaries\n")
        return
    out.write(f"  bug: {DESCRIPTIONS[o.fault]}\n")
    out.write(f"  injected at step {o.fired_step}: {o.detail}\n" if o.fired_step is not None
              else "  the fault found no place to fire in this workload\n")
    if not o.reports:
        out.write("  NOT DETECTED\n")
        return
    first = o.reports[0]
    v = first.event.violation
    out.write(f"  detected in step {first.event.step_recorded} by {v.tag_name}: {'+'.join(v.reason_labels)} at "
              f"slot {v.slot_idx} (request(s) {', '.join(first.request_ids) or 'none'})\n")
    out.write(f"  {len(o.reports)} violation row(s); checks that fired: "
              f"{', '.join(sorted({r.event.violation.tag_name for r in o.reports}))}\n")


def summary(outcomes: Sequence[TfOutcome], out: TextIO) -> None:
    """The table: one row per run."""
    head = f"{'run':<24} {'fired':>5} {'found':>5}  {'first check':<13} {'reasons':<34} {'rows':>5}  result"
    out.write("\nsummary (transformers continuous batching)\n" + head + "\n" + "-" * len(head) + "\n")
    for o in outcomes:
        first = o.reports[0] if o.reports else None
        name = _name(o)
        fired = "-" if o.fired_step is None else str(o.fired_step)
        found = "-" if first is None else str(first.event.step_recorded)
        tag = first.event.violation.tag_name if first is not None else "-"
        reasons = "+".join(first.event.violation.reason_labels) if first is not None else "-"
        result = ("silent" if o.ok else "FALSE POSITIVE") if o.fault is None else ("detected" if o.ok else "MISSED")
        out.write(f"{name:<24} {fired:>5} {found:>5}  {tag:<13} {reasons:<34} {len(o.reports):>5}  {result}\n")


def run_demo(faults: Sequence[TfFault], *, device: str, backend: str | None, seed: int, max_new_tokens: int,
             out: TextIO) -> list[TfOutcome]:
    """Clean runs of both models (checked against runs without canaries), then one run per fault (a
    sliding-window fault on the hybrid model); prints the table."""
    import transformers

    from kvcanary.integrations.transformers.fault_kinds import NEEDS_SLIDING_WINDOW
    from kvcanary.integrations.transformers.version import sliding_supported
    from kvcanary.integrations.transformers.workload import generate, shared_prefix_prompts, tiny_hybrid, tiny_llama

    models = {"llama": tiny_llama(seed=seed, device=device)}
    if sliding_supported(transformers.__version__):
        models["hybrid"] = tiny_hybrid(seed=seed, device=device)
    else:
        out.write(f"transformers {transformers.__version__} predates the layout the sliding-window support reads "
                  "(5.22): the swa runs are left out\n")
        faults = [f for f in faults if f not in NEEDS_SLIDING_WINDOW]
    prompts = shared_prefix_prompts(seed=seed)
    out.write(f"kvcanary demo on transformers {transformers.__version__} continuous batching ({device}): tiny "
              f"Llama (full attention) and Qwen2 (a sliding-window layer, marked swa), {len(prompts)} shared-prefix "
              f"requests, {max_new_tokens} new tokens each\n")
    # the demo prints the reports itself; a fault may fail requests
    with quiet_logs(TRANSFORMERS_LOGGERS, logging.CRITICAL):
        outcomes = []
        for name, model in models.items():
            reference = generate(model, prompts, max_new_tokens=max_new_tokens)
            outcomes.append(run_one(model, prompts, None, backend=backend, max_new_tokens=max_new_tokens,
                                    reference=reference, name=name))
        for f in faults:
            name = "hybrid" if f in NEEDS_SLIDING_WINDOW else "llama"
            outcomes.append(run_one(models[name], prompts, f, backend=backend, max_new_tokens=max_new_tokens,
                                    name=name))
    for o in outcomes:
        describe(o, out)
    summary(outcomes, out)
    return outcomes
