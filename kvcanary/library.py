"""``import kvcanary.library``: the one import that registers every operator, ``torch.ops.kvcanary.<operation>``.

``import kvcanary`` stays lazy (no torch import until a name is used, so ``kvcanary --help`` answers at
once); this module imports every operation's declaration (:mod:`kvcanary.ops`), and each declaration
registers its operator with ``torch.library``, as importing torchvision registers ``torch.ops.torchvision``.
What it costs over ``import torch`` is in docs/api/registry.md ("Operators").
"""

from __future__ import annotations

from kvcanary.operation import operations, operators

OPERATIONS = tuple(operations())
"""Every built-in operation, registered (their operators exist from here on)."""

__all__ = ["OPERATIONS", "operators"]
