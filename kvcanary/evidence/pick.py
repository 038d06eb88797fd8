"""Which of a run's first bundles the demo keeps: the first, in capture order, that replays."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvcanary.evidence.capture import BundleSink

CANDIDATES = 4
"""Bundles a demo run captures (its first violated slots) before it keeps one."""


class KeepError(RuntimeError):
    """A run's bundle could not be kept at ``path``: the sink failed to write, or the path is taken or
    cannot be written. ``reason`` says which, in a few words."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def pick_replayable(paths: Sequence[Path]) -> Path:
    """The first bundle of ``paths`` whose rows replay (a slot rewritten after its check may hold too little
    evidence to replay); the first one when none does."""
    from kvcanary.evidence.format import read_bundle
    from kvcanary.evidence.rerun import replay

    for p in paths:
        if replay(read_bundle(p)).ok:
            return p
    return paths[0]


def keep_replayable(sink: BundleSink, target: Path) -> Path | None:
    """Close ``sink`` and put the bundle :func:`pick_replayable` picks of those it wrote at ``target``, whole or
    not at all: copied beside ``target``, then renamed onto it (a bundle already there is replaced, and kept
    if that fails); None when it wrote none. Raises :class:`KeepError` naming ``target`` if the sink had write
    errors, a file or a folder that is not a bundle sits at ``target`` (it is left as it is), or the copy
    fails."""
    from kvcanary.evidence.format import META_FILE
    from kvcanary.evidence.install import FolderTaken, install_folder, is_replaceable, staging_folder

    written = sink.close()
    if sink.errors:
        raise KeepError(target, "the bundle could not be written (" + "; ".join(sink.errors) + ")")
    if not written:
        return None
    if os.path.lexists(target) and not target.is_dir():
        raise KeepError(target, "a file is there, not a bundle folder")
    if os.path.lexists(target) and not is_replaceable(target, META_FILE):
        raise KeepError(target, f"a folder that is not a bundle (no {META_FILE}) is there: not replaced")
    try:
        staged = staging_folder(target)
        try:
            shutil.copytree(pick_replayable(written), staged, dirs_exist_ok=True)
        except BaseException:
            shutil.rmtree(staged, ignore_errors=True)
            raise
        install_folder(staged, target, replace=True, marker=META_FILE)
    except FolderTaken as exc:
        raise KeepError(target, f"{exc.strerror}") from exc
    except OSError as exc:
        raise KeepError(target, f"cannot be written ({exc.strerror or exc})") from exc
    return target
