"""Generate ``extensions_cases.json``: extension scenarios with torch_ref's outputs (the oracle).

Run from the repository root: ``python -m tests.golden.make_extensions_cases``. Each case is a scenario of
``tests/backends/_extensions.py`` (plain data), the extensions it runs with (the flags that are on, or None:
a new flag leaves the earlier cases' encoding as it was), and what torch_ref produced: the verify plans'
active slots, the ring rows (sorted), the canary buffer.

The owner scenarios' WRITE_SLOT_OWNER_MISMATCH rows are not torch_ref's word alone: :func:`owner_rows`
derives them from the scenario with a plain-Python model of the rule (the chain hashes from
``kvcanary.hashing``), and the generator refuses to write a case whose torch_ref rows differ from it.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict
from typing import Any

from kvcanary.consts import INVALID_SLOT, CanaryLaunchTag, FailReason
from kvcanary.extensions import Extensions
from kvcanary.hashing import ANCHOR_HASH, record_hash, to_int64
from tests.backends import _extensions as X
from tests.golden.loader import DIR

SEEDS = range(24)
OWNER_SEEDS = range(100, 116)
ON = Extensions(zero_slot_in_live_range=True, write_slot_mismatch=True)
ALL = X.ALL
OWNER_BIT = int(FailReason.WRITE_SLOT_OWNER_MISMATCH)


def owner_rows(sc: X.Scenario) -> list[list[int]]:
    """The WRITE_SLOT_OWNER_MISMATCH rows of an owner scenario, sorted, by the rule alone.

    Per step (a plan, a verify, a write): each active request row ``rp`` writes its ``extend`` tokens, chained
    from the record of its last prefix slot (``req_to_token[rp][prefix - 1]``, through the LUT; the anchor
    when the prefix is empty); a token whose canary slot is in the buffer and whose holder in that step's
    owner map is not ``rp`` is one row ``[tag, slot, position, token, rp, hash before the token, holder,
    bit]``. Records are stored after the step's seeds are read.
    """
    lut, steps, r2t = sc["lut"], sc["steps"], [list(r) for r in sc["req_to_token"]]
    kind = int(CanaryLaunchTag.TAIL_K_SWA if lut is not None else CanaryLaunchTag.TAIL_K_FULL)
    records: dict[int, tuple[int, int, int]] = {}  # canary slot -> (token, position, prev_hash as uint64)
    out: list[list[int]] = []
    for k, st in enumerate(steps):
        if k == 1:
            for row, p in sc["zeros"]:
                r2t[row][p] = 0
        owner = sc["owner"][k]
        stored: dict[int, tuple[int, int, int]] = {}
        i = 0
        for rp, prefix, extend in zip(st["rpi"], st["prefix"], st["extend"], strict=True):
            n = max(extend, 0) if rp != 0 else 0
            if n == 0:
                continue
            running = ANCHOR_HASH
            if prefix > 0:
                raw = r2t[rp][prefix - 1]
                seed = raw if lut is None or raw < 0 else (lut[raw] if raw < len(lut) else INVALID_SLOT)
                if 0 <= seed < X.NUM_SLOTS:
                    tok, pos, prev = records.get(seed, (0, 0, 0))
                    running = record_hash(prev, tok, pos)
            for tok, pos, loc in zip(st["ids"][i:i + n], st["pos"][i:i + n], st["loc"][i:i + n], strict=True):
                slot = X.canary_slot(lut, loc)
                if slot < 0:
                    continue
                if slot < X.NUM_SLOTS:
                    if owner[slot] != rp:
                        out.append([kind, slot, pos, tok, rp, to_int64(running), owner[slot], OWNER_BIT])
                    stored[slot] = (tok, pos, running)
                running = record_hash(running, tok, pos)
            i += n
        records.update(stored)
    return sorted(out)


def _case(name: str, sc: X.Scenario, ext: Extensions | None) -> dict[str, Any]:
    flags = None if ext is None else {k: v for k, v in asdict(ext).items() if v}  # flags off are left out
    return {"name": name, "scenario": sc, "extensions": flags,
            "outputs": X.run(sc, "torch_ref", ext)}


def main() -> None:
    cases = []
    for seed in SEEDS:
        sc = X.make(seed)
        for ext in (ON, None):
            cases.append(_case(f"seed{seed}-{'on' if ext else 'off'}", sc, ext))
    for seed in OWNER_SEEDS:
        sc = X.make_owner(seed)
        for ext in (ALL, None):
            case = _case(f"owner{seed}-{'on' if ext else 'off'}", sc, ext)
            got = [r for r in case["outputs"]["rows"] if r[7] & OWNER_BIT]
            want = owner_rows(sc) if ext else []
            if Counter(map(tuple, got)) != Counter(map(tuple, want)):
                raise SystemExit(f"{case['name']}: torch_ref's owner rows {got} differ from the rule's {want}")
            cases.append(case)
    (DIR / "extensions_cases.json").write_text(json.dumps({"format": "kvcanary-extensions/1", "cases": cases}))


if __name__ == "__main__":
    main()
