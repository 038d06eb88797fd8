"""First look at the GPU machine: versions, cuda.core's API, torch_ref on CUDA (golden + graph capture), floors."""

from __future__ import annotations

import importlib
import json
import os
import sys
import time

import torch

out_dir = os.environ.get("OUT", "/tmp")
report: dict[str, object] = {}
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)
print("device", torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0),
      torch.cuda.get_device_properties(0).multi_processor_count, "SMs")
for mod in ("triton", "cuda.core", "cuda.bindings", "cupy", "pydantic", "hypothesis", "typing_extensions"):
    try:
        m = importlib.import_module(mod)
        print(mod, getattr(m, "__version__", "?"))
    except Exception as exc:
        print(mod, "MISSING", exc)
try:
    import cuda.core as cc

    print("cuda.core names:", sorted(n for n in dir(cc) if not n.startswith("_")))
    try:
        import cuda.core.experimental as cce

        print("cuda.core.experimental names:", sorted(n for n in dir(cce) if not n.startswith("_")))
    except Exception as exc:
        print("no cuda.core.experimental", exc)
except Exception as exc:
    print("cuda.core import failed", exc)

import kvcanary as kc  # noqa: E402
from kvcanary.testing import golden as g  # noqa: E402

print("backends:", sorted(kc.registered_backends()))
dev = torch.device("cuda")
bad = 0
t = time.time()
for f, run in (("verify_cases", g.run_verify), ("write_cases", g.run_write), ("plan_cases", g.run_plan),
               ("scatter_cases", g.run_scatter)):
    for c in g.load(f):
        got = run(c, dev, "torch_ref")
        for k, w in g.expected(c).items():
            if not torch.equal(got[k].cpu(), w):
                bad += 1
                print("MISMATCH", c.name, k)
print("torch_ref golden on cuda:", "OK" if not bad else f"{bad} mismatches", f"{time.time() - t:.1f}s")

# torch_ref plan + verify under CUDA-graph capture (they claim to be sync-free)
from kvcanary.testing import calls  # noqa: E402

kw_v = calls.verify(dev)
kw_p = calls.plan(dev)
try:
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            kc.launch_canary_verify_kernel(**kw_v, backend="torch_ref")
            kc.launch_canary_plan_kernels(**kw_p, backend="torch_ref")
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kc.launch_canary_verify_kernel(**kw_v, backend="torch_ref")
        kc.launch_canary_plan_kernels(**kw_p, backend="torch_ref")
    before = int(kw_v["context"].kernel_run_counter[0])
    for _ in range(5):
        graph.replay()
    torch.cuda.synchronize()
    print("torch_ref capture OK; replays counted:", int(kw_v["context"].kernel_run_counter[0]) - before)
except Exception as exc:
    print("torch_ref capture FAILED:", type(exc).__name__, exc)

sys.path.insert(0, os.getcwd())
from benchmarks import floors  # noqa: E402

bw = floors.copy_bandwidth()
report["copy_bandwidth_Bps"] = bw
print(f"copy bandwidth {bw / 1e12:.2f} TB/s")
for n in (1 << 16, 1 << 20, 1 << 24):
    tt = floors.gather_floor(n)
    report[f"gather_{n}"] = tt
    print(f"gather floor {n} entries: {tt * 1e6:.1f} us = {n / tt / 1e9:.1f} G entries/s")
st = floors.serial_step_floor()
report["serial_step_s"] = st
print(f"serial mix3 step: {st * 1e9:.1f} ns")
el = floors.empty_launch()
report["empty_launch_s"] = el
print(f"empty launch: {el * 1e6:.2f} us")
with open(os.path.join(out_dir, "probe.json"), "w") as fh:
    json.dump(report, fh, indent=1)
