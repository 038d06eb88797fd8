"""The evidence bundle's on-disk format: one folder holding ``bundle.json`` and ``tensors.safetensors``.

``bundle.json`` carries every decoded field (rows, records, owners, the slot's journal, the attribution, the
replay plan) and the sha256 digests of both files' content (:mod:`kvcanary.evidence.digests`);
``tensors.safetensors`` the raw arrays the replay feeds to the verify kernel (records as int64 ``[n, 4]`` and
the real-KV bytes as uint8 ``[n, bytes]``), named as ``bundle.json``'s ``replay`` section says.
``format`` and ``version`` identify the layout; a reader refuses a bundle of another format or a newer
version, a damaged one (a digest that does not match), an oversized one (before reading it), and one that
breaks a rule of :mod:`kvcanary.evidence.schema` (which a writer checks too). A writer builds the folder
beside its name and renames it into place (:mod:`kvcanary.evidence.install`), so a failed write leaves no
half bundle. The safetensors package is the ``kvcanary[evidence]`` extra, imported only when a bundle is
written or read.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from kvcanary.evidence.digests import DIGESTS_KEY, bytes_digest, digests_problem, file_digest, meta_digest
from kvcanary.evidence.install import FolderTaken, install_folder, staging_folder
from kvcanary.evidence.schema import bundle_problem

BUNDLE_FORMAT = "kvcanary-evidence-bundle"
BUNDLE_VERSION = 2
"""2: write entries carry what the owner check read (``owner``), ``extensions.write_slot_owner_mismatch``."""
META_FILE = "bundle.json"
TENSORS_FILE = "tensors.safetensors"
MAX_META_BYTES = 128 << 20
"""The largest ``bundle.json`` a reader reads (and a writer writes): a larger one is refused before it is read."""
MAX_HEADER_BYTES = 1 << 20
"""The most bytes ``tensors.safetensors`` may hold beyond the tensors ``bundle.json`` names (its header)."""


class BundleError(ValueError):
    """A path that is not a readable bundle of this format and version."""


@dataclass
class Bundle:
    """An evidence bundle in memory: ``meta`` (what ``bundle.json`` holds) and the named tensors."""

    meta: dict[str, Any]
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def slot(self) -> int:
        return int(self.meta["slot"])

    @property
    def bug_class(self) -> str:
        return str(self.meta["attribution"]["bug_class"])


def _safetensors() -> Any:
    try:
        import safetensors.torch as st
    except ImportError:
        raise BundleError("kv-canary: evidence bundles need the safetensors package: "
                          "pip install 'kvcanary[evidence]'") from None
    return st


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bundle(bundle: Bundle, path: Path | str, *, replace: bool = True) -> Path:
    """Write ``bundle`` as the folder ``path``, whole or not at all: it is built in a hidden sibling folder and
    renamed onto ``path``. ``replace``: a bundle already at ``path`` is replaced (kept if the write fails);
    without it, :class:`~kvcanary.evidence.install.FolderTaken` (a FileExistsError) and nothing is written.
    Something at ``path`` that is not a bundle folder is never replaced. A str is taken as :func:`read_bundle`
    takes it."""
    path = Path(path)
    st = _safetensors()
    meta = {k: v for k, v in bundle.meta.items() if k != DIGESTS_KEY}
    meta["format"], meta["version"] = BUNDLE_FORMAT, BUNDLE_VERSION
    meta = json.loads(json.dumps(meta))  # before anything is written: meta that is not JSON, or that a reader
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in bundle.tensors.items()}  # refuses, is
    problem = bundle_problem(meta, tensors)                                              # never written
    if problem is not None:
        raise BundleError(f"kv-canary: bundle {str(path)!r} not written: {problem}")
    if not replace and os.path.lexists(path):  # the rename checks again: this only saves the work
        raise FolderTaken(errno.EEXIST, "a bundle is already there", str(path))
    data: bytes = st.save(tensors)
    meta[DIGESTS_KEY] = {"meta": meta_digest(meta), "tensors": bytes_digest(data)}
    text = json.dumps(meta, indent=1) + "\n"
    size = len(text.encode("utf-8"))
    if size > MAX_META_BYTES:
        raise BundleError(f"kv-canary: bundle {str(path)!r} not written: {META_FILE} would be {size} bytes, over "
                          f"the {MAX_META_BYTES}-byte cap a reader reads")
    staged = staging_folder(path)
    try:
        (staged / TENSORS_FILE).write_bytes(data)
        (staged / META_FILE).write_text(text, encoding="utf-8")
        for name in (TENSORS_FILE, META_FILE):  # on disk before the name points at them
            _fsync(staged / name)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    install_folder(staged, path, replace=replace, marker=META_FILE)
    return path


def _refuse(p: Path, problem: str) -> BundleError:
    return BundleError(f"kv-canary: bundle {str(p)!r}: {problem}")


def _read_meta(p: Path) -> dict[str, Any]:
    """``bundle.json`` decoded, its size checked before it is read and its format, version and meta digest
    after; a bundle without ``digests`` (written before kvcanary carried them) is read unchecked."""
    meta_path = p / META_FILE
    try:
        with meta_path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            raw = f.read(MAX_META_BYTES + 1) if size <= MAX_META_BYTES else b""
    except OSError as exc:
        raise _refuse(p, f"{META_FILE} cannot be read ({exc.strerror or exc})") from None
    if size > MAX_META_BYTES or len(raw) > MAX_META_BYTES:
        raise _refuse(p, f"{META_FILE} must be at most {MAX_META_BYTES} bytes (what a writer writes), got "
                         f"{max(size, len(raw))}: not read")
    try:
        meta = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # ValueError: not JSON, not UTF-8; too deeply nested
        raise _refuse(p, f"{META_FILE} is not valid JSON ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != BUNDLE_FORMAT:
        raise _refuse(p, f"format must be {BUNDLE_FORMAT!r}, got "
                         f"{meta.get('format') if isinstance(meta, dict) else type(meta).__name__!r}")
    version = meta.get("version")
    if type(version) is not int or not 1 <= version <= BUNDLE_VERSION:
        raise _refuse(p, f"version must be 1..{BUNDLE_VERSION} (this kvcanary), got {version!r}")
    if DIGESTS_KEY in meta:
        problem = digests_problem(meta[DIGESTS_KEY])
        if problem is not None:
            raise _refuse(p, problem)
        if meta_digest(meta) != meta[DIGESTS_KEY]["meta"]:
            raise _refuse(p, f"{META_FILE} is damaged: its content does not match the sha256 it was written with "
                             f"({DIGESTS_KEY}.meta)")
    return meta


def _data_bytes(meta: dict[str, Any]) -> int:
    """The bytes of the tensors the replay section names (schema-checked meta)."""
    total = 0
    for buf in meta["replay"]["buffers"].values():
        total += len(buf["slots"]) * (32 + sum(buf["source_bytes"]))
    return total


def _read_tensors(p: Path, meta: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The tensors the replay section names, and only those, from ``tensors.safetensors``: its size checked
    against them before it is read, then its digest, then each named tensor loaded."""
    tpath = p / TENSORS_FILE
    digests = meta.get(DIGESTS_KEY)
    if not tpath.is_file():
        if digests is not None:
            raise _refuse(p, f"{TENSORS_FILE} is missing ({DIGESTS_KEY}.tensors names its content)")
        return {}
    _safetensors()  # the install hint, when it is missing
    limit = 8 + MAX_HEADER_BYTES + _data_bytes(meta)
    size = tpath.stat().st_size
    if size > limit:
        raise _refuse(p, f"{TENSORS_FILE} must be at most {limit} bytes (the tensors replay.buffers names and "
                         f"a header), got {size}: not read")
    if digests is not None and file_digest(tpath) != digests["tensors"]:
        raise _refuse(p, f"{TENSORS_FILE} is damaged: its bytes do not match the sha256 it was written with "
                         f"({DIGESTS_KEY}.tensors)")
    from safetensors import SafetensorError, safe_open

    names = [f"records/{tag}" for tag in meta["replay"]["buffers"]]
    names += [f"kv/{tag}/{i}" for tag, buf in meta["replay"]["buffers"].items()
              for i in range(len(buf["source_bytes"]))]
    out: dict[str, torch.Tensor] = {}
    try:
        with safe_open(str(tpath), framework="pt") as f:
            present = set(f.keys())
            for name in names:
                if name in present:
                    out[name] = f.get_tensor(name)
    except (OSError, SafetensorError) as exc:  # a truncated, empty or foreign file
        raise _refuse(p, f"{TENSORS_FILE} is not a readable safetensors file ({type(exc).__name__}: {exc})") from None
    return out


def read_bundle(path: Path | str) -> Bundle:
    """Read the bundle folder ``path``; :class:`BundleError` naming the path, the file and the rule otherwise
    (a damaged, oversized, foreign or newer bundle, or one that breaks a rule of the schema)."""
    p = Path(path)
    if not p.is_dir() or not (p / META_FILE).is_file():
        raise BundleError(f"kv-canary: bundle {str(p)!r} must be a folder holding {META_FILE} (as "
                          "`kvcanary demo --bundles` or BundleSink writes it)")
    meta = _read_meta(p)
    problem = bundle_problem(meta)
    if problem is not None:
        raise _refuse(p, problem)
    tensors = _read_tensors(p, meta)
    problem = bundle_problem(meta, tensors)
    if problem is not None:
        raise _refuse(p, problem)
    return Bundle(meta, tensors)
