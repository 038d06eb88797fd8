"""The direct launch's parameter list equals the ``.entry`` of each kernel variant's own PTX (no GPU needed).

Every operation of the Triton backend is called (on the CPU under the interpreter, on the GPU where there
is one; random scenarios of ``tools.scenarios``, realistic and hostile, and the digest fold over each buffer
word type) with the launcher recording each launch instead of running it: the kernel, Triton's type of each
argument (``mangle_type``: what its JIT puts in the signature), the constexprs and the warps. Each distinct
variant, and its twin with every integer typed ``i64`` (sizes past 32 bits), is then compiled for sm_90 in
a separate process (the kernels decorated by ``triton.jit``, not by the interpreter), and the parameters
``_direct.param_types`` derives from the compiled kernel's signature must match its PTX ``.entry`` in count
and byte widths (so dropping the two scratch pointers Triton appends, or typing an ``i32`` as 8 bytes,
fails); so must the widths of what ``_direct.Packer`` makes of the recorded arguments as cuda.core packs
them (a Python int: 8 bytes, a numpy scalar: its own). ``_direct.refusal`` must accept every variant (else
the direct path would silently never run).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from triton.runtime.jit import mangle_type

import kvcanary_backends.triton._jit as jit
from kvcanary.registry import REGISTRY
from kvcanary.testing.parity import run_call
from kvcanary_backends.triton import _direct
from tools.scenarios import GENERATORS

ROOT = Path(__file__).resolve().parents[3]
SEEDS = 3  # scenarios per (operation, hostility): variants depend on types, which a few draws cover


def _module_of(launcher: jit.Launcher) -> str:
    from kvcanary_backends.triton import fold, plan, plan_entries, plan_offsets, scatter, verify, write

    for mod in (fold, plan, plan_entries, plan_offsets, scatter, verify, write):
        if mod._LAUNCH is launcher:
            return mod.__name__
    raise AssertionError(f"a launcher of no known module: {launcher.fn}")


def _packed_widths(signature: dict[str, str], args: Any) -> tuple[int, ...]:
    """Bytes cuda.core gives each value ``_direct.Packer`` passes it: a Python int (a bool too: cuda.core
    tests ``int`` first) as an 8-byte ``intptr_t``, a numpy scalar at its own width."""
    out: list[int] = []
    for x in _direct.Packer(signature)(args):
        assert isinstance(x, int | np.generic), type(x)
        out.append(8 if isinstance(x, int) else x.itemsize)
    return tuple(out)


def _variant(launcher: jit.Launcher, args: Any, consts: tuple[Any, ...], num_warps: int, maxnreg: int) -> str:
    names = list(launcher.fn.arg_names)
    runtime = names[: len(names) - len(launcher.const_names)]
    signature = {n: mangle_type(a) for n, a in zip(runtime, args, strict=True)}
    constexprs: dict[str, Any] = {n: None for n, a in zip(runtime, args, strict=True) if a is None}
    for n, c in zip(launcher.const_names, consts, strict=True):
        signature[n] = "constexpr"
        constexprs[n] = c
    v = {"module": _module_of(launcher), "signature": signature, "constexprs": constexprs, "num_warps": num_warps,
         "maxnreg": maxnreg}
    return json.dumps(v)


def _recorded(monkeypatch: pytest.MonkeyPatch) -> dict[str, tuple[int, ...]]:
    """Each variant launched (JSON, see ``_compile_variants.py``) and its twin with every integer typed i64,
    with the byte widths of what the direct path packs for it (from the recorded arguments)."""
    seen: dict[str, tuple[int, ...]] = {}

    def record(self: jit.Launcher, grid: tuple[int, ...], key: Any, args: Any, consts: tuple[Any, ...],
               num_warps: int, *, maxnreg: int = 0) -> None:
        variant = _variant(self, args, consts, num_warps, maxnreg)
        sig = json.loads(variant)["signature"]
        seen[variant] = _packed_widths(sig, args)
        wide = _wide(variant)
        seen[wide] = _packed_widths(json.loads(wide)["signature"], args)

    monkeypatch.setattr(jit.Launcher, "__call__", record)
    monkeypatch.setattr(jit.Launcher, "prepare", lambda *a, **k: None)  # no launch kept by an earlier test replays
    REGISTRY.invalidate()  # nor one the registry prepared
    dev = "cpu" if jit.INTERPRET else "cuda"  # where the backend's kernels (as decorated here) may run
    for op, make in GENERATORS.items():
        for hostile in (False, True):
            rng = random.Random(f"{op.value}/{hostile}")
            for _ in range(SEEDS):
                try:
                    run_call(make(rng, hostile=hostile), dev, "triton")
                except Exception:  # a hostile call the contract refuses launches nothing
                    continue
    from kvcanary.distributed import fold_records

    words = torch.zeros((8, 32), dtype=torch.uint8, device=dev)
    for dtype in (torch.uint8, torch.int16, torch.int32, torch.int64):
        for slots_dtype in (torch.int64, torch.int32):
            fold_records(words.view(dtype), torch.tensor([1, 2, -1], dtype=slots_dtype, device=dev), fused=True)
    return seen


def _wide(variant: str) -> str:
    """The variant with every integer argument typed i64 (sizes or counts past 32 bits)."""
    v = json.loads(variant)
    v["signature"] = {n: ("i64" if t == "i32" else t) for n, t in v["signature"].items()}
    return json.dumps(v)


def _compile(variants: list[str]) -> list[dict[str, Any]]:
    env = {**os.environ, "TRITON_INTERPRET": "0",
           "PYTHONPATH": os.pathsep.join([*(str(ROOT / p) for p in ("", "contracts", "backends")),
                                            *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run([sys.executable, str(Path(__file__).with_name("_compile_variants.py"))],
                          input="[" + ",".join(variants) + "]", capture_output=True, text=True, env=env,
                          timeout=900, check=False)
    if proc.returncode != 0:
        tail = proc.stderr[-3000:]
        if "ptxas" in tail and ("not found" in tail or "No such file" in tail):
            pytest.skip(f"this Triton cannot compile for sm_90 here (no ptxas): {tail[-300:]}")
        raise AssertionError(f"compiling the variants failed:\n{tail}")
    out: list[dict[str, Any]] = json.loads(proc.stdout)
    return out


def test_direct_parameters_match_every_variants_ptx_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _recorded(monkeypatch)
    modules = {json.loads(v)["module"].rsplit(".", 1)[1] for v in seen}
    assert modules == {"fold", "plan", "plan_entries", "plan_offsets", "scatter", "verify", "write"}, modules
    variants = sorted(seen)
    results = _compile(variants)
    assert len(results) == len(variants)
    for variant, got in zip(variants, results, strict=True):
        v = json.loads(variant)
        label = f"{v['module']} {v['signature']}"
        assert got["types"] is not None, label
        assert got["types"][-_direct.SCRATCH_POINTERS:] == [_direct.PTR] * _direct.SCRATCH_POINTERS, label
        runtime = [t for t in v["signature"].values() if t != "constexpr"]
        assert len(got["types"]) == len(runtime) + _direct.SCRATCH_POINTERS, label
        assert got["ptx"] == list(_direct.widths(got["types"])), (label, got)
        assert list(seen[variant]) == got["ptx"], (label, "packed", seen[variant], got)
        assert got["refusal"] is None, (label, got)


def test_ptx_entry_parsing_and_the_types_packed() -> None:
    ptx = """
.visible .entry k(
\t.param .u64 .ptr .global .align 1 k_param_0,
\t.param .u32 k_param_1,
\t.param .u8 k_param_2,
\t.param .u64 .ptr .global .align 1 k_param_3,
\t.param .u64 .ptr .global .align 1 k_param_4
)
.maxntid 32, 1, 1
"""
    assert _direct.ptx_param_widths(ptx, "k") == (8, 4, 1, 8, 8)
    assert _direct.ptx_param_widths(ptx, "other") is None
    types = _direct.param_types({"a": "*i64", "n": "i32", "f": "i1", "X": "constexpr"})
    assert types == ("ptr", "i32", "i1", "ptr", "ptr")
    assert _direct.widths(types) == (8, 4, 1, 8, 8)
    assert _direct.param_types({"a": "*i64", "x": "fp32"}) is None
    assert _direct.param_types({"a": "*i64", "x": "u64"}) is None


def test_packer_drops_constexprs_and_types_integers() -> None:
    t = torch.zeros(4, dtype=torch.int64)
    sig = {"a": "*i64", "n": "i32", "m": "i64", "f": "i1", "none": "constexpr", "X": "constexpr"}
    got = _direct.Packer(sig)((t, 5, 1 << 40, True, None))
    assert got == (t.data_ptr(), 5, 1 << 40, True, 0, 0)
    assert [type(x) for x in got] == [int, np.int32, int, np.bool_, int, int]
    assert _packed_widths(sig, (t, 5, 1 << 40, True, None)) == _direct.widths(_direct.param_types(sig) or ())
