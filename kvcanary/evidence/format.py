"""The evidence bundle's on-disk format: one folder holding ``bundle.json`` and ``tensors.safetensors``.

``bundle.json`` carries every decoded field (rows, records, owners, the slot's journal, the attribution, the
replay plan); ``tensors.safetensors`` the raw arrays the replay feeds to the verify kernel (records as int64
``[n, 4]`` and the real-KV bytes as uint8 ``[n, bytes]``), named as ``bundle.json``'s ``replay`` section says.
``format`` and ``version`` identify the layout; a reader refuses a bundle of another format or a newer
version, and one that breaks a rule of :mod:`kvcanary.evidence.schema` (which a writer checks too). The
safetensors package is the ``kvcanary[evidence]`` extra, imported only when a bundle is written or read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from kvcanary.evidence.schema import bundle_problem

BUNDLE_FORMAT = "kvcanary-evidence-bundle"
BUNDLE_VERSION = 2
"""2: write entries carry what the owner check read (``owner``), ``extensions.write_slot_owner_mismatch``."""
META_FILE = "bundle.json"
TENSORS_FILE = "tensors.safetensors"


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


def write_bundle(bundle: Bundle, path: Path | str) -> Path:
    """Write ``bundle`` as the folder ``path`` (created; an existing bundle there is replaced); a str is taken as
    :func:`read_bundle` takes it."""
    path = Path(path)
    st = _safetensors()
    meta = dict(bundle.meta)
    meta["format"], meta["version"] = BUNDLE_FORMAT, BUNDLE_VERSION
    text = json.dumps(meta, indent=1, sort_keys=False) + "\n"  # before anything is written: meta that is not
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in bundle.tensors.items()}  # JSON, or that a
    problem = bundle_problem(json.loads(text), tensors)        # reader refuses, leaves no half bundle behind
    if problem is not None:
        raise BundleError(f"kv-canary: bundle {str(path)!r} not written: {problem}")
    path.mkdir(parents=True, exist_ok=True)
    st.save_file(tensors, str(path / TENSORS_FILE))
    (path / META_FILE).write_text(text, encoding="utf-8")
    return path


def read_bundle(path: Path | str) -> Bundle:
    """Read the bundle folder ``path``; :class:`BundleError` naming the path and the rule otherwise."""
    p = Path(path)
    meta_path = p / META_FILE
    if not p.is_dir() or not meta_path.is_file():
        raise BundleError(f"kv-canary: bundle {str(p)!r} must be a folder holding {META_FILE} (as "
                          "`kvcanary demo --bundles` or BundleSink writes it)")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: not JSON, not UTF-8; too deeply nested
        raise BundleError(f"kv-canary: bundle {str(p)!r}: {META_FILE} is not valid JSON ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != BUNDLE_FORMAT:
        raise BundleError(f"kv-canary: bundle {str(p)!r}: format must be {BUNDLE_FORMAT!r}, got "
                          f"{meta.get('format') if isinstance(meta, dict) else type(meta).__name__!r}")
    version = meta.get("version")
    if type(version) is not int or not 1 <= version <= BUNDLE_VERSION:
        raise BundleError(f"kv-canary: bundle {str(p)!r}: version must be 1..{BUNDLE_VERSION} (this kvcanary), "
                          f"got {version!r}")
    tensors: dict[str, torch.Tensor] = {}
    tpath = p / TENSORS_FILE
    if tpath.is_file():
        st = _safetensors()
        from safetensors import SafetensorError

        try:
            tensors = dict(st.load_file(str(tpath)))
        except (OSError, SafetensorError) as exc:  # a truncated, empty or foreign file
            raise BundleError(f"kv-canary: bundle {str(p)!r}: {TENSORS_FILE} is not a readable safetensors "
                              f"file ({type(exc).__name__}: {exc})") from None
    problem = bundle_problem(meta, tensors)
    if problem is not None:
        raise BundleError(f"kv-canary: bundle {str(p)!r}: {problem}")
    return Bundle(meta, tensors)
