"""Compile kernel variants for an sm_90 target without a GPU and report what the direct launch would pass.

Run as a script by ``test_direct_params.py`` (its own process: the kernels must be decorated by ``triton.jit``,
not by the interpreter the CPU tests select). Reads a JSON list of variants on stdin, each ``{"module",
"signature": {name: type}, "constexprs": {name: value}, "num_warps", "maxnreg"}`` (``maxnreg`` 0: no register cap); prints a JSON list with, for each,
the kernel name, the parameter types :func:`_direct.param_types` derives from the compiled kernel's own
signature, the byte widths of its PTX ``.entry`` parameters and :func:`_direct.refusal`.
"""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from kvcanary_backends.triton import _direct


def compile_one(v: dict[str, Any]) -> dict[str, Any]:
    fn = importlib.import_module(v["module"])._LAUNCH.fn
    names = list(fn.arg_names)
    consts = {(names.index(k),): val for k, val in v["constexprs"].items()}
    src = ASTSource(fn, v["signature"], constexprs=consts)
    options = {"num_warps": v["num_warps"]} | ({"maxnreg": v["maxnreg"]} if v.get("maxnreg") else {})
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
    return {"name": compiled.metadata.name, "types": _direct.param_types(compiled.src.signature),
            "ptx": _direct.ptx_param_widths(compiled.asm["ptx"], compiled.metadata.name),
            "refusal": _direct.refusal(compiled), "shared": compiled.metadata.shared}


def main() -> None:
    variants = json.load(sys.stdin)
    json.dump([compile_one(v) for v in variants], sys.stdout)


if __name__ == "__main__":
    main()
