"""What a user sees of the generated launchers and operators: real signatures and docstrings from the
contracts (``help(kvcanary.launch_canary_write_kernel)``), and the one import that registers every operator."""

from __future__ import annotations

import inspect
import subprocess
import sys
import typing
from pathlib import Path

import pytest
import torch

import kvcanary as kc
from kvcanary.operation import Op

ROOT = Path(__file__).parents[2]


@pytest.mark.parametrize("op", list(Op), ids=lambda o: o.value)
def test_the_signature_carries_every_fields_annotation(op: Op) -> None:
    sig = inspect.signature(op.launcher)
    contract = op.contract
    assert list(sig.parameters) == [*contract.model_fields, "backend"]
    optional = contract.none_defaults()
    for name, finfo in contract.model_fields.items():
        param = sig.parameters[name]
        assert param.kind is inspect.Parameter.KEYWORD_ONLY
        assert param.annotation == finfo.annotation, name
        assert param.default is (None if name in optional else inspect.Parameter.empty), name
    assert sig.parameters["backend"].default is None and sig.return_annotation is None
    hints = typing.get_type_hints(op.launcher)
    assert hints["return"] is type(None) and set(hints) == {*sig.parameters, "return"}


@pytest.mark.parametrize("op", list(Op), ids=lambda o: o.value)
def test_the_docstring_lists_arguments_rules_and_codes(op: Op) -> None:
    doc = op.launcher.__doc__ or ""
    contract = op.contract
    args = doc[doc.index("Args:"):]
    for name, finfo in contract.model_fields.items():
        assert f"    {name}" in args and (finfo.description or "") in doc, name
    for rule in contract.contract.rules:
        assert rule.message.strip() in doc
    for check in contract.checks():
        assert check.code in doc, check.code  # each argument's checks, and the range of all of them
    assert contract.contract.summary in doc


def test_help_shows_types_and_the_contract() -> None:
    text = subprocess.run(
        [sys.executable, "-c", "import kvcanary, pydoc; print(pydoc.render_doc(kvcanary.launch_canary_write_kernel,"
                               " renderer=pydoc.plaintext))"],
        capture_output=True, text=True, cwd=ROOT, check=True, timeout=300).stdout
    assert "input_ids: torch.Tensor" in text and "backend: str | None = None" in text
    assert "extensions: kvcanary.extensions.Extensions | None = None" in text
    assert "Checks: KVC-W" in text and "expected input tensors are required when" in text


def test_importing_kvcanary_library_registers_every_operator() -> None:
    """``import kvcanary`` alone registers nothing (it imports no torch); ``import kvcanary.library`` registers
    every operation's ``torch.ops.kvcanary.<name>``, in a fresh process."""
    code = ("import sys, kvcanary; assert 'torch' not in sys.modules; import kvcanary.library, torch; "
            "print(' '.join(sorted(n for n in dir(torch.ops.kvcanary) if not n.startswith('_') and "
            "isinstance(getattr(torch.ops.kvcanary, n), torch._ops.OpOverloadPacket))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True,
                         timeout=300).stdout.split()
    assert out == sorted(op.value for op in Op)
    assert set(out) <= set(dir(torch.ops.kvcanary)) or kc.operators()  # this process: registered on use
