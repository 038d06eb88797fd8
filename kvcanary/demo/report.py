"""The demo's printout: where it runs (device, backend per operation), a block per run (the bug, when it
was injected, how it was caught, the first report) and the summary table with its legend."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TextIO

from kvcanary.demo.outcome import RunOutcome

if TYPE_CHECKING:
    from kvcanary.demo.engine.faults import Fault

EXPECTED_UNSEEN = "not a failure: needs +ext"
"""The result of an extension-only bug class run with the extensions off: invisible to the default checks by
design, so not seeing it is the expected result (the ``+ext`` row shows it caught)."""

LEGEND = ("fired: step the bug was injected; found: step of the first violation; lag: found - fired; "
          "first check: launch tag that caught it; reasons: its fail reasons; rows: violation rows in all")


def header(device: str, chosen: Mapping[str, str], out: TextIO) -> None:
    """The device the demo runs on and the backend each operation's launches get there."""
    out.write(f"kvcanary demo on {device}; backend per operation: "
              + ", ".join(f"{op}={name}" for op, name in chosen.items()) + "\n")


def plan(faults: Sequence[Fault], runs: int, out: TextIO) -> None:
    """What the runs below are: the clean run, the bug classes the default checks catch, and the
    extension-only classes, each run twice (extensions off, then on)."""
    from kvcanary.demo.engine.faults import EXTENSION_FAULTS

    ext = [f for f in faults if f in EXTENSION_FAULTS]
    core = len(faults) - len(ext)
    text = f"{runs} run(s): the clean run"
    if core:
        text += f", {core} bug class(es) the default checks catch"
    if ext:
        text += (f", {len(ext)} extension-only class(es) run twice: with kvcanary.Extensions off (not seen, as "
                 "designed) and on (+ext: caught), after a clean +ext run")
    out.write(text + "\n")


def describe(o: RunOutcome, out: TextIO) -> None:
    """The per-run block: what was injected, whether, when and how it was caught, and the first report."""
    from kvcanary.demo.engine.faults import DESCRIPTIONS

    name = o.label
    status = "OK" if o.ok else "FAILED"
    out.write(f"\n=== {name} [{status}] ({o.seconds:.1f}s)\n")
    if o.fault is None:
        out.write(f"  no fault injected; {len(o.events)} violation(s) on the decode engine, {o.peer_violations} on "
                  f"the prefill engine; {o.protected_tokens} tokens verified, {o.sweep_passes} sweeps\n")
    else:
        out.write(f"  bug: {DESCRIPTIONS[o.fault]}\n")
        if o.fired_step is None:
            out.write("  the buggy code path never ran in this workload\n")
        else:
            out.write(f"  injected at step {o.fired_step}: {o.fired_detail}\n")
        first = o.first
        if first is None and o.expect_missed:
            out.write("  not detected, as expected: with kvcanary.Extensions off slot 0 is skipped and writes are "
                      "not matched against req_to_token (the +ext run catches it)\n")
        elif first is None:
            out.write("  NOT DETECTED\n")
        else:
            lag = first.step_recorded - o.fired_step if o.fired_step is not None else None
            lag_text = f", {lag} step(s) after the fault" if lag is not None else ""
            out.write(f"  detected in step {first.step_recorded}{lag_text} (on the host at the end of step "
                      f"{first.step_pumped}) by {first.violation.tag_name}: "
                      f"{'+'.join(first.violation.reason_labels)}\n")
            out.write(f"  {len(o.events)} violation row(s); checks that fired: {', '.join(o.tags)}; "
                      f"reasons: {', '.join(o.reasons)}\n")
            if o.fault.value == "corrupted_transfer":
                out.write(f"  prefill side: {o.peer_violations} violation(s) (it never sees the bad copy)\n")
            out.write("  first report:\n")
            for line in first.message.splitlines():
                out.write(f"    {line}\n")
    if o.error is not None:
        out.write(f"  engine error: {o.error}\n")


def summary(outcomes: Sequence[RunOutcome], out: TextIO) -> None:
    out.write("\nsummary\n")
    head = f"{'run':<26} {'fired':>5} {'found':>5} {'lag':>3}  {'first check':<13} {'reasons':<46} {'rows':>5}  result"
    out.write(LEGEND + "\n" + head + "\n" + "-" * len(head) + "\n")
    for o in outcomes:
        first = o.first
        name = o.label
        fired = "-" if o.fired_step is None else str(o.fired_step)
        found = "-" if first is None else str(first.step_recorded)
        lag = "-"
        if first is not None and o.fired_step is not None:
            lag = str(first.step_recorded - o.fired_step)
        tag = first.violation.tag_name if first is not None else "-"
        reasons = "+".join(first.violation.reason_labels) if first is not None else "-"
        clean_result = "silent" if o.ok else "FALSE POSITIVE"
        result = clean_result if o.fault is None else ("detected" if o.ok else "MISSED")
        if o.expect_missed:
            result = EXPECTED_UNSEEN if o.ok else "UNEXPECTEDLY DETECTED"
        if o.error is not None:
            result += " (engine error)"
        out.write(f"{name:<26} {fired:>5} {found:>5} {lag:>3}  {tag:<13} {reasons:<46} {len(o.events):>5}  {result}\n")
    if any(o.expect_missed for o in outcomes):
        out.write(f"\n'{EXPECTED_UNSEEN}': an extension-only bug class with kvcanary.Extensions off; the default "
                  "(SGLang-compatible) checks cannot see it by design. Its +ext row is the same bug caught with the "
                  "extensions on (docs/extensions/index.md).\n")
