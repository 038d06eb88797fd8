"""Put a finished bundle folder in place under its final name in one rename, so no reader ever sees half.

A bundle is written into a hidden sibling folder (:func:`staging_folder`), then renamed onto its name
(:func:`install_folder`). Replacing a bundle moves the old one aside first and back if the rename fails, so a
failure at any point leaves either the old bundle or none, never a mix. Same-filesystem renames only: the
staging folder is a sibling of the target.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
from pathlib import Path


class FolderTaken(FileExistsError):
    """The target name holds another writer's bundle, or something that is not a bundle: not replaced."""


def staging_folder(target: Path, what: str = "tmp") -> Path:
    """A new empty hidden sibling of ``target`` (``.<name>.<what>-<random>``), created with the mode a plain
    ``mkdir`` gives (0777 less the umask), so the bundle renamed from it has the usual permissions."""
    target.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(100):
        p = target.parent / f".{target.name}.{what}-{secrets.token_hex(4)}"
        try:
            p.mkdir()
        except FileExistsError:
            continue
        return p
    raise FileExistsError(errno.EEXIST, "no free staging name beside the target", str(target))


def is_replaceable(path: Path, marker: str) -> bool:
    """A real folder (not a link) holding the file ``marker`` (a bundle's ``bundle.json``), or an empty one."""
    return (not path.is_symlink() and path.is_dir()
            and ((path / marker).is_file() or not any(path.iterdir())))


def install_folder(staged: Path, target: Path, *, replace: bool, marker: str) -> None:
    """Rename ``staged`` onto ``target``. ``replace``: a folder at ``target`` that holds ``marker`` (a bundle)
    is moved aside, replaced, then removed (and moved back if the rename fails). Without ``replace``, or when
    ``target`` is anything else, :class:`FolderTaken` and nothing moves. ``staged`` is removed in every case
    but success."""
    try:
        if os.path.lexists(target):
            if not replace:
                raise FolderTaken(errno.EEXIST, "a bundle is already there", str(target))
            if not is_replaceable(target, marker):
                raise FolderTaken(errno.EEXIST, f"not a bundle folder (no {marker}): not replaced", str(target))
            aside = staging_folder(target, "old")
            os.rename(target, aside / "b")
            try:
                os.rename(staged, target)
            except BaseException as exc:
                try:
                    os.rename(aside / "b", target)
                except OSError as back:  # another writer installed its bundle meanwhile: the old one is superseded
                    if back.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                        raise
                    shutil.rmtree(aside, ignore_errors=True)
                    raise FolderTaken(errno.EEXIST, "another writer replaced the bundle meanwhile",
                                      str(target)) from exc
                aside.rmdir()
                raise
            shutil.rmtree(aside, ignore_errors=True)
            return
        try:
            os.rename(staged, target)
        except OSError as exc:  # another writer took the name meanwhile (its folder is not empty)
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                raise FolderTaken(errno.EEXIST, "a bundle is already there", str(target)) from exc
            raise
    finally:
        if staged.exists():
            shutil.rmtree(staged, ignore_errors=True)
