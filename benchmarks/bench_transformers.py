"""Tokens/s of transformers' continuous batching with and without kvcanary attached, same inputs.

One ``generate_batch`` run of ``bs`` seeded random prompts (greedy, eager: no CUDA graphs, no compile) on a
Llama-family model with seeded random weights, alternately without and with canaries (real-KV PARTIAL, K and
V, sweep every 4 steps), after one warm-up run of each. Figures (best of ``--rounds``):

- ``generate ... without canary`` / ``with canary``: wall time of the run (the floor of the second is the
  first: the same work without the canary), and ``tokens/s`` of each;
- ``canary_share``: (with - without) / with, the canary's share of the run;
- ``host phases``: per step, the host time of each phase of the wrapped step (map: block tables to
  canary rows; head: plan + HEAD verify/write; tail; end_step: sweep, read-back, report) beside the forward's;
  head and tail replay the manager's own CUDA graphs on a GPU (``manager graph replays per step``: 2 when
  every forward replays). Each run's cache gets a fresh manager, so each bucket's first use (run eagerly, then
  captured) falls inside the timed run: the phases are also reported per step over the steady steps (no
  first use, ``steady``) and over the steps with a first use (``first use``), apart.

GPU defaults: 8 layers, hidden 1024 (8 heads of 128, 8 KV heads), bs 32, 1536-token prompts + 128 new
tokens, bf16, page 256. ``--device cpu`` shrinks everything (2 layers, hidden 256, bs 8, 96 + 32 tokens).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from benchmarks import journal_cost
from benchmarks.report import Report, machine
from kvcanary.integrations.transformers import attach_canaries
from kvcanary.integrations.transformers.workload import cb_config, tiny_llama

BENCH = "bench_transformers"


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def graph_counts(session: Any) -> dict[str, int]:
    """The managers' own CUDA graphs in ``session`` (CanaryConfig.graphs, on by default for a CUDA pool), the
    forwards' and the sweep's: graphs captured, phases replayed, phases run eagerly on a bucket's padded inputs
    (a bucket's first use; the sweep's first run)."""
    out = {"captures": 0, "replays": 0, "padded_eager": 0}
    for pool in getattr(session, "_pools", {}).values():
        for g in [*pool.manager.graphs, pool.manager.sweep_graphs]:  # the forwards' and the sweep's
            if g is not None:
                out["captures"] += g.captures
                out["replays"] += g.replays
                out["padded_eager"] += g.padded_eager
    return out


class StepClock:
    """Splits a session's per-phase host time by step: steps in which some manager ran a graph bucket's first use
    (its launches eagerly, then the capture) apart from the steady ones (replays only, or no graphs at all).

    Installed as a step hook (called before each step's map): at each call the previous step is complete in
    ``session.host_seconds``; :meth:`finish` closes the last step after the run."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.steady: dict[str, float] = {}
        self.first_use: dict[str, float] = {}
        self.steady_steps = 0
        self.first_use_steps = 0
        self._last: tuple[dict[str, float], int] | None = None

    def _mark(self) -> tuple[dict[str, float], int]:
        return dict(self.session.host_seconds), graph_counts(self.session)["padded_eager"]

    def _close(self) -> None:
        now = self._mark()
        if self._last is not None:
            (was, eager_was), (seconds, eager) = self._last, now
            first = eager > eager_was
            into = self.first_use if first else self.steady
            for phase, t in seconds.items():
                into[phase] = into.get(phase, 0.0) + t - was.get(phase, 0.0)
            self.first_use_steps += first
            self.steady_steps += not first
        self._last = now

    def __call__(self, view: Any) -> None:
        self._close()

    def finish(self) -> None:
        """Close the run's last step."""
        self._close()
        self._last = None


def one_run(model: Any, prompts: list[list[int]], args: argparse.Namespace, canary: bool) -> tuple[float, Any]:
    """Seconds of one generate_batch run (and the attached canary, if any)."""
    import transformers

    gen_cls: Any = transformers.GenerationConfig
    gc = gen_cls(max_new_tokens=args.new_tokens, do_sample=False, eos_token_id=-1, pad_token_id=0)
    pages = (args.prompt_len + args.new_tokens + args.page - 1) // args.page
    cb = cb_config(page=args.page, num_blocks=args.bs * pages + 8, max_batch_tokens=args.batch_tokens,
                   max_requests=args.bs)
    session = attach_canaries(model, real_kv=args.real_kv, backend=args.backend,
                              on_violation=args.on_violation) if canary else None
    if session is not None:
        session.clock = StepClock(session)  # type: ignore[attr-defined]
        session.hooks.append(session.clock)  # type: ignore[attr-defined]
    _sync(args.device)
    start = time.perf_counter()
    if session is not None:
        with session:
            out = model.generate_batch(prompts, generation_config=gc, continuous_batching_config=cb,
                                       progress_bar=False)
            session.graph_counts = graph_counts(session)  # type: ignore[attr-defined]
            session.clock.finish()  # type: ignore[attr-defined]
    else:
        out = model.generate_batch(prompts, generation_config=gc, continuous_batching_config=cb, progress_bar=False)
    _sync(args.device)
    seconds = time.perf_counter() - start
    print(f"run {'with' if canary else 'without'} canary: {seconds:.2f} s", flush=True)
    bad = [rid for rid, o in out.items() if o.error or len(o.generated_tokens) != args.new_tokens]
    if bad:
        raise RuntimeError(f"requests failed or were cut short: {bad[:4]}")
    if session is not None and session.reports:
        raise RuntimeError(f"the clean benchmark run reported violations: {session.reports[0].event.message}")
    return seconds, session


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--backend", default=None, help="force a kvcanary backend (default: automatic)")
    p.add_argument("--real-kv", default="partial", choices=["partial", "all"])
    p.add_argument("--layers", type=int)
    p.add_argument("--hidden", type=int)
    p.add_argument("--heads", type=int)
    p.add_argument("--bs", type=int)
    p.add_argument("--prompt-len", type=int)
    p.add_argument("--new-tokens", type=int)
    p.add_argument("--page", type=int)
    p.add_argument("--batch-tokens", type=int)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--on-violation", default=None, choices=["log", "raise", "isolate"],
                   help="isolate: the guard feeds the slot journal each step (its cost is reported)")
    p.add_argument("--out", default=None, help="results JSON (benchmarks/report.py's schema)")
    args = p.parse_args()
    cpu = args.device == "cpu"
    defaults = dict(layers=2, hidden=256, heads=4, bs=8, prompt_len=96, new_tokens=32, page=16, batch_tokens=512) \
        if cpu else dict(layers=8, hidden=1024, heads=8, bs=32, prompt_len=1536, new_tokens=128, page=256,
                         batch_tokens=4096)
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    dtype = torch.float32 if cpu else torch.bfloat16
    vocab = 1024 if cpu else 32000
    if cpu:
        torch.set_num_threads(max(1, min(4, torch.get_num_threads())))
    model = tiny_llama(seed=0, layers=args.layers, hidden=args.hidden, heads=args.heads, kv_heads=args.heads,
                       vocab=vocab, dtype=dtype, device=args.device)
    rng = random.Random(0)
    prompts = [[rng.randrange(1, vocab) for _ in range(args.prompt_len)] for _ in range(args.bs)]
    import transformers

    from kvcanary.registry import REGISTRY, Op

    used = {op.value: REGISTRY.select(op, torch.device(args.device), args.backend).backend.name for op in Op}
    shape = (f"{args.layers}L h{args.hidden} bs={args.bs} ctx={args.prompt_len}+{args.new_tokens} "
             f"{str(dtype).removeprefix('torch.')} page={args.page} real_kv={args.real_kv} [{used['verify']}]")
    r = Report(BENCH, machine(args.device, f"transformers {transformers.__version__}"))
    r.details.update(vars(args))
    r.details["backend_per_op"] = used
    one_run(model, prompts, args, False)  # warm-up: allocator, kernels, autotuning
    one_run(model, prompts, args, True)
    off: list[float] = []
    on: list[float] = []
    sessions = []
    for _ in range(args.rounds):
        off.append(one_run(model, prompts, args, False)[0])
        t, s = one_run(model, prompts, args, True)
        on.append(t)
        sessions.append(s)
    t_off, t_on = min(off), min(on)
    tokens = args.bs * args.new_tokens
    r.add(f"generate without canary {shape}", t_off, t_off, unit="ms")
    r.add(f"generate with canary {shape}", t_on, t_off, unit="ms")
    r.value(f"tokens/s without canary {shape}", tokens / t_off, None, unit="tokens/s")
    r.value(f"tokens/s with canary {shape}", tokens / t_on, None, unit="tokens/s")
    r.value(f"canary_share {shape}", (t_on - t_off) / t_on * 100, None, unit="%",
            note="of the run's wall time (target on the GPU: < 3)")
    best = sessions[on.index(t_on)]
    steps = max(1, best.steps)
    for phase, seconds in best.host_seconds.items():
        r.add(f"host {phase} per step {shape}", seconds / steps, None, unit="us")
    clock: StepClock = best.clock
    for label, seconds_by_phase, n in (("steady", clock.steady, clock.steady_steps),
                                       ("first use", clock.first_use, clock.first_use_steps)):
        for phase, seconds in seconds_by_phase.items():
            r.add(f"host {phase} per step, {label} {shape}", seconds / max(1, n), None, unit="us",
                  note=f"over the {n} steps {'without' if label == 'steady' else 'with'} a graph bucket's first "
                       "use (its eager run and capture)")
    steady_host = sum(t for phase, t in clock.steady.items() if phase != "forward") / max(1, clock.steady_steps)
    r.add(f"host canary phases per step, steady {shape}", steady_host, None, unit="us",
          note="map + head + tail + end_step over the steady steps (goal on the GPU: <= 150)")
    r.add(f"host end_step: sweep entries per step {shape}", best.sweep_entry_seconds / steps, None, unit="us",
          note="part of end_step")
    graphs = best.graph_counts
    r.value(f"manager graph replays per step {shape}", graphs["replays"] / steps, None, unit="",
            note=f"HEAD and TAIL from the manager's own CUDA graphs: {graphs['captures']} captured, "
                 f"{graphs['padded_eager']} first uses run eagerly")
    r.details["manager_graphs"] = graphs
    # the canary's own host phases: the model's forward (timed between head and tail) is not the canary's
    canary_host = sum(t for phase, t in best.host_seconds.items() if phase != "forward") / steps
    jour, jfloor = journal_cost.journal_step_seconds(bs=args.bs, block_size=args.page)
    r.add(f"journal per decode step bs={args.bs} block={args.page}", jour, jfloor, unit="us",
          note="journal_cost.JOURNAL_FEED (a journal whose ring is full); floor: the step's blocks, positions "
               "and owner codes copied into machine arrays")
    tf_jour, tf_floor = journal_cost.journal_step_seconds(bs=args.bs, block_size=args.page,
                                                          feed=journal_cost.allocated_step_feed)
    r.add(f"transformers guard's journal per decode step bs={args.bs} block={args.page}", tf_jour, tf_floor,
          unit="us", note="journal_cost.allocated_step_feed (what TfGuard records: ALLOCATED on a new block, "
                          "from the rows' change list); floor: the step's blocks and owner codes copied into "
                          "machine arrays")
    sink_s = journal_cost.sink_step_seconds(best.managers[0]) if best.managers else 0.0
    r.add(f"bundle sink per step, nothing fires {shape}", sink_s, None, unit="us")
    r.value(f"journal_share {shape}", (jour + sink_s) / canary_host * 100, None, unit="%",
            note="journal + sink of the canary's own per-step host time (its host phases, the forward "
                 "excluded); goal < 2")
    r.value(f"transformers journal_share {shape}", (tf_jour + sink_s) / canary_host * 100, None, unit="%",
            note="the transformers guard's journal + sink of the canary's own per-step host time; goal < 2")
    if best.guards:  # isolate: the guard's own journal feed, timed inside the run's steps
        feed = sum(g.seconds for g in best.guards) / steps
        events = sum(m.journal.recorded + m.swa_journal.recorded for m in best.managers) / steps
        r.add(f"the guard's journal feed per step {shape}", feed, journal_cost.append_seconds(events), unit="us",
              note=f"TfGuard.observe (part of host map); floor: its {events:.2f} events a step copied into "
                   "machine arrays")
        r.value(f"guard_journal_share {shape}", (feed + sink_s) / canary_host * 100, None, unit="%",
                note="the guard's feed + sink of the canary's own per-step host time; goal < 2")
        r.details["guard_compared_per_step"] = sum(g.compared for g in best.guards) / steps
    r.details["host_seconds"] = best.host_seconds
    r.details["sweep_entry_seconds"] = best.sweep_entry_seconds
    r.details["swept_entries"] = best.swept_entries
    r.details["steps"] = best.steps
    r.details["steady_steps"] = clock.steady_steps
    r.details["first_use_steps"] = clock.first_use_steps
    r.details["host_seconds_steady"] = clock.steady
    r.details["host_seconds_first_use"] = clock.first_use
    r.details["attn_implementation"] = str(getattr(model.config, "_attn_implementation", "?"))
    r.details["rounds_off"] = off
    r.details["rounds_on"] = on
    r.write(args.out)


if __name__ == "__main__":
    main()
