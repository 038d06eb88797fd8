"""Which of a run's first bundles the demo keeps: the first, in capture order, that replays."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

CANDIDATES = 4
"""Bundles a demo run captures (its first violated slots) before it keeps one."""


def pick_replayable(paths: Sequence[Path]) -> Path:
    """The first bundle of ``paths`` whose rows replay (a slot rewritten after its check may hold too little
    evidence to replay); the first one when none does."""
    from kvcanary.evidence.format import read_bundle
    from kvcanary.evidence.replay import replay

    for p in paths:
        if replay(read_bundle(p)).ok:
            return p
    return paths[0]
