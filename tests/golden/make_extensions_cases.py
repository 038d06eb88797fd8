"""Generate ``extensions_cases.json``: extension scenarios with torch_ref's outputs (the oracle).

Run from the repository root: ``python -m tests.golden.make_extensions_cases``. Each case is a scenario of
``tests/backends/_extensions.py`` (plain data), the extensions it runs with (every flag on, or None), and
what torch_ref produced: the verify plans' active slots, the ring rows (sorted), the canary buffer.
"""

from __future__ import annotations

import json
from dataclasses import asdict

from kvcanary.extensions import Extensions
from tests.backends import _extensions as X
from tests.golden.loader import DIR

SEEDS = range(24)
ON = Extensions(zero_slot_in_live_range=True, write_slot_mismatch=True)


def main() -> None:
    cases = []
    for seed in SEEDS:
        sc = X.make(seed)
        for ext in (ON, None):
            cases.append({"name": f"seed{seed}-{'on' if ext else 'off'}", "scenario": sc,
                          "extensions": None if ext is None else asdict(ext),
                          "outputs": X.run(sc, "torch_ref", ext)})
    (DIR / "extensions_cases.json").write_text(json.dumps({"format": "kvcanary-extensions/1", "cases": cases}))


if __name__ == "__main__":
    main()
