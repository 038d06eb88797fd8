"""The sha256 digests a bundle carries of its own content, so a damaged bundle is refused, not replayed.

``bundle.json`` holds ``digests``: ``meta``, the sha256 of the rest of ``bundle.json`` in canonical form (its
decoded JSON dumped with sorted keys and no spaces, so the file's layout does not count, every value does),
and ``tensors``, the sha256 of ``tensors.safetensors``'s bytes. They detect damage (a flipped bit, a
truncated copy, a hand edit), not forgery: whoever can edit the bundle can compute them again.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

DIGESTS_KEY = "digests"
_HEX = re.compile(r"[0-9a-f]{64}")
_CHUNK = 1 << 20


def meta_digest(meta: dict[str, Any]) -> str:
    """The sha256 (hex) of ``meta``'s canonical JSON, its ``digests`` entry left out."""
    body = {k: v for k, v in meta.items() if k != DIGESTS_KEY}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def bytes_digest(data: bytes) -> str:
    """The sha256 (hex) of ``data`` (the tensors file's bytes, before they are written)."""
    return hashlib.sha256(data).hexdigest()


def file_digest(path: Path) -> str:
    """The sha256 (hex) of the file's bytes, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def digests_problem(value: object) -> str | None:
    """What is wrong with a ``digests`` entry (an object with ``meta`` and ``tensors``, each 64 lowercase hex
    digits), as 'field rule, got value'; None when it is well formed."""
    if not isinstance(value, dict):
        return f"{DIGESTS_KEY} must be an object with meta and tensors (sha256 hex), got {type(value).__name__}"
    for key in ("meta", "tensors"):
        got = value.get(key)
        if not isinstance(got, str) or _HEX.fullmatch(got) is None:
            return f"{DIGESTS_KEY}.{key} must be a sha256 (64 lowercase hex digits), got {str(got)[:70]!r}"
    return None
