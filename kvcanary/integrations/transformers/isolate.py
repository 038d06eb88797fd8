"""``kvcanary demo --engine transformers --on-violation isolate``: the isolate policy on transformers' real
engine, per fault class (and a corruption of a block only the prefix cache holds): the requests failed, the
requests served and whether they equal a run without canaries, the blocks quarantined.

A run keeps the promise when every served request's tokens equal the reference run's, every failed request
held a block a violation named (or a quarantined block), and no violation names a quarantined block after
its quarantine; a fault run must also fire and be reported. Each run is an
:class:`~kvcanary.guard.outcome.IsolationOutcome` in blocks, printed as the demo engine's runs are.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import torch

from kvcanary.guard.outcome import BLOCKS, IsolationOutcome, describe, sorted_ids, summary
from kvcanary.guard.policy import uncovered_note
from kvcanary.integrations.transformers.fault_kinds import TfFault
from kvcanary.integrations.transformers.session import StepView
from kvcanary.quiet_logs import TRANSFORMERS_LOGGERS, quiet_logs

Outputs = dict[str, tuple[str, tuple[int, ...]]]
"""Request id -> (transformers' final status name, generated tokens)."""

CACHED_FLIP = "kv_flip_cached_block"
"""The extra scenario: one bit of layer 0's K flips in a block only the prefix cache holds."""


def generate_status(model: Any, prompts: list[list[int]], *, max_new_tokens: int) -> tuple[Outputs, dict[str, str]]:
    """Greedy continuous batching (the workload's settings); statuses, tokens and the failed requests' errors."""
    import transformers

    from kvcanary.integrations.transformers.workload import cb_config

    generation_config: Any = transformers.GenerationConfig
    gc = generation_config(max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=-1, pad_token_id=0)
    out = model.generate_batch(prompts, generation_config=gc, continuous_batching_config=cb_config(),
                               progress_bar=False)
    outputs = {rid: (o.status.name, tuple(o.generated_tokens)) for rid, o in out.items()}
    errors = {rid: str(o.error) for rid, o in out.items() if o.status.name == "FAILED"}
    return outputs, errors


@dataclass
class CachedFlip:
    """A step hook: at the first step from ``start_step`` on where the prefix cache keeps a block no request
    references, flip one bit of layer 0's K in it (only the sweep reads such a block)."""

    start_step: int = 2
    fired_step: int | None = None
    detail: dict[str, object] = field(default_factory=dict)

    def __call__(self, view: StepView) -> None:
        if self.fired_step is not None or view.step < self.start_step:
            return
        held = {b for blocks in view.layout.block_table.values() for b in blocks}
        free = [b for b in view.layout.cached_blocks() if b not in held]
        if not free:
            return
        slot = view.layout.slot(free[0], 1)
        view.layout.k_rows[slot].reshape(-1).view(torch.uint8)[0] ^= 0x01
        self.fired_step = view.step
        self.detail = {"block": free[0], "slot": slot}


def run_isolated(model: Any, prompts: list[list[int]], scenario: TfFault | str | None, *, reference: Outputs,
                 backend: str | None, max_new_tokens: int, name: str = "llama") -> IsolationOutcome:
    """One generate_batch run under the isolate policy with ``scenario`` armed (a fault class, ``CACHED_FLIP``,
    or None: clean), compared with ``reference``."""
    from kvcanary.integrations.transformers.faults import FaultHook
    from kvcanary.integrations.transformers.session import attach_canaries

    hook: FaultHook | CachedFlip | None = None
    if isinstance(scenario, TfFault):
        hook = FaultHook(scenario)
    elif scenario == CACHED_FLIP:
        hook = CachedFlip()
    start = time.perf_counter()
    # the sweep every step: a block only the cache holds is read by nothing else; every decision and failure
    # kept (the outcome is computed from them)
    with attach_canaries(model, backend=backend, on_violation="isolate", guard_history=None,
                         sweep_interval=1 if scenario == CACHED_FLIP else 4) as canary:
        if hook is not None:
            canary.hooks.append(hook)
        got, errors = generate_status(model, prompts, max_new_tokens=max_new_tokens)
    failed = {r: errors.get(r, "") for r, (status, _) in got.items() if status == "FAILED"}
    served = [r for r, (status, _) in got.items() if status == "FINISHED"]
    affected: set[str] = set()
    repeated = 0
    uncovered: list[str] = []
    quarantined: set[int] = set()
    quarantined_swa: set[int] = set()
    finished: list[tuple[str, int]] = []
    for g in canary.guards:
        m = g.manager
        quarantined |= g.quarantined
        quarantined_swa |= g.quarantined_swa
        finished += [(f.request_id, f.finished_step) for d in g.decisions for f in d.finished]
        q_step = {(swa, b): d.step for d in g.decisions for swa, bs in ((False, d.quarantine), (True, d.quarantine_swa))
                  for b in bs}
        for e in m.events:
            swa = e.violation.tag_name.endswith("_SWA")
            journal = m.swa_journal if swa else m.journal
            slot = e.violation.slot_idx
            affected |= {o.id for o in journal.owners_between(slot, e.step_recorded, m.step)
                         if o.kind.value == "request"}
            if not journal.covers(e.step_recorded):
                uncovered.append(uncovered_note(e.violation.tag_name, slot, e.step_recorded, m.step))
            qs = q_step.get((swa, journal.block_of(slot)))
            if qs is not None and e.step_recorded > qs:
                repeated += 1
        affected |= {r for r, msg in g.failed.items() if "holds quarantined" in msg}
    label = scenario.value if isinstance(scenario, TfFault) else scenario or "clean"
    return IsolationOutcome(
        label=label + (" (swa)" if name == "hybrid" else ""), injected=scenario is not None,
        fired_step=hook.fired_step if hook is not None else None, violations=len(canary.reports), failed=failed,
        served_equal=sorted_ids(r for r in served if got[r] == reference.get(r)),
        served_changed=sorted_ids(r for r in served if got[r] != reference.get(r)), affected=frozenset(affected),
        quarantined=tuple(sorted(quarantined)), quarantined_swa=tuple(sorted(quarantined_swa)),
        finished_reported=tuple(finished), repeated=repeated, seconds=time.perf_counter() - start,
        units=BLOCKS, reference="the run without canaries", must_fire=True, uncovered=tuple(dict.fromkeys(uncovered)))


def run_isolation_demo(faults: Sequence[TfFault], *, device: str, backend: str | None, seed: int,
                       max_new_tokens: int, out: TextIO) -> list[IsolationOutcome]:
    """Clean runs, then one run per fault class and the cached-block flip, under the isolate policy."""
    import logging

    import transformers

    from kvcanary.integrations.transformers.fault_kinds import NEEDS_SLIDING_WINDOW
    from kvcanary.integrations.transformers.version import sliding_supported
    from kvcanary.integrations.transformers.workload import shared_prefix_prompts, tiny_hybrid, tiny_llama

    models = {"llama": tiny_llama(seed=seed, device=device)}
    if sliding_supported(transformers.__version__):
        models["hybrid"] = tiny_hybrid(seed=seed, device=device)
    else:
        faults = [f for f in faults if f not in NEEDS_SLIDING_WINDOW]
    prompts = shared_prefix_prompts(seed=seed)
    out.write(f"kvcanary demo on transformers {transformers.__version__} continuous batching ({device}), isolate "
              f"policy: {len(prompts)} shared-prefix requests, {max_new_tokens} new tokens each\n")
    outcomes: list[IsolationOutcome] = []
    with quiet_logs(TRANSFORMERS_LOGGERS, logging.CRITICAL):
        refs = {name: generate_status(m, prompts, max_new_tokens=max_new_tokens)[0] for name, m in models.items()}
        runs: list[tuple[str, TfFault | str | None]] = [(name, None) for name in models]
        runs += [("hybrid" if f in NEEDS_SLIDING_WINDOW else "llama", f) for f in faults]
        if faults:
            runs.append(("llama", CACHED_FLIP))
        for name, scenario in runs:
            o = run_isolated(models[name], prompts, scenario, reference=refs[name], backend=backend,
                             max_new_tokens=max_new_tokens, name=name)
            describe(o, out)
            outcomes.append(o)
    return outcomes


def main_isolate(faults: Sequence[TfFault], *, device: str, backend: str | None, seed: int,
                 max_new_tokens: int) -> int:
    """``kvcanary demo --engine transformers --on-violation isolate``: 0 when every run keeps the promise."""
    import sys

    from kvcanary.cli.common import backend_usage_error
    from kvcanary.registry import BackendError

    start = time.perf_counter()
    try:
        outcomes = run_isolation_demo(faults, device=device, backend=backend, seed=seed,
                                      max_new_tokens=max_new_tokens, out=sys.stdout)
    except BackendError as exc:
        raise backend_usage_error(exc, backend) from None
    print("\n" + summary(outcomes, time.perf_counter() - start, "every affected request failed, every served "
                          "request identical to the run without canaries"))
    return 0 if all(o.ok for o in outcomes) else 1
