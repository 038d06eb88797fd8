"""Test-suite setup: Triton runs through its interpreter when there is no GPU (set before any import)."""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
