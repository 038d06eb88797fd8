"""``kvcanary serve MODEL_DIR``, and ``kvcanary demo --engine transformers --serve``: option checks, then
:class:`~kvcanary.serve.server.CanaryServer` or :func:`~kvcanary.serve.demo.run_serve_demo`."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from kvcanary.cli.parser import UsageError, arguments


def _policy(given: str | None) -> str:
    """The policy to serve with: the one given, else ``isolate`` where the integration has it, else ``log``."""
    import inspect

    from kvcanary.integrations.transformers.session import attach_canaries

    has_isolate = "on_violation" in inspect.signature(attach_canaries).parameters
    if given == "isolate" and not has_isolate:
        raise UsageError("--on-violation isolate needs the transformers integration's isolate policy",
                         hint="use log or raise")
    return given or ("isolate" if has_isolate else "log")


_FLAGS = {"host": "--host", "port": "--port"}
"""The options of ``kvcanary serve`` that :class:`~kvcanary.serve.settings.ServeSettings` checks."""


def _check_listen(host: str, port: int) -> None:
    """``--host`` and ``--port`` by ServeSettings' rules (the code of the rule broken, its fix as the hint), then
    a socket bound and closed (a host that does not resolve, a port in use): before ``--tiny`` writes anything."""
    from kvcanary.errors import ContractError
    from kvcanary.serve.server import bound_socket
    from kvcanary.serve.settings import ServeSettings

    try:
        ServeSettings(host=host, port=port)
    except ContractError as err:
        arg = next((a for a in err.arguments if a in _FLAGS), "")
        text = err.message.removeprefix("kv-canary: ")
        text = text.replace(f"ServeSettings.{arg}", _FLAGS[arg]) if arg else text
        raise UsageError(f"{text} [{err.code}]", hint=err.check.fix) from None
    try:
        bound_socket(host, port).close()
    except OSError as err:
        raise UsageError(str(err.strerror or err).removeprefix("kv-canary: "),
                         hint="pass another --host, or another --port (0: any free port)") from None


def _require() -> None:
    from kvcanary.serve.server import require_serving

    try:
        require_serving()
    except ImportError as exc:
        raise UsageError(str(exc).removeprefix("kv-canary: "), hint="pip install 'kvcanary[serve]'") from None


@arguments("serve")
def _serve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model_dir", help="a model directory (config.json, weights, tokenizer with a chat template)")
    p.add_argument("--tiny", action="store_true", help="first save a tiny random-weight Llama and its tokenizer "
                   "into MODEL_DIR (nothing downloaded)")
    p.add_argument("--host", default="127.0.0.1", help="listen address (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="listen port, 0 to 65535 (default: 8000; 0: any free port)")
    p.add_argument("--device", default="cpu", help="torch device of the model (default: cpu)")
    p.add_argument("--backend", default=None, help="force a kvcanary backend (default: automatic)")
    p.add_argument("--on-violation", choices=["log", "raise", "isolate"], default="log",
                   help="what a violation does (default: log)")


def main(args: argparse.Namespace) -> int:
    """Serve until interrupted; the routes are printed on start."""
    from kvcanary.cli.common import check_backend_name, usable_device

    _require()
    _check_listen(args.host, args.port)
    usable_device(args.device)
    check_backend_name(args.backend)
    policy = _policy(args.on_violation)
    model_dir = Path(args.model_dir)
    if args.tiny:
        from kvcanary.serve.tiny import build_tiny_model

        build_tiny_model(model_dir)
    if not (model_dir / "config.json").is_file():
        raise UsageError(f"{model_dir} is not a model directory (no config.json)",
                         hint="pass --tiny to create a tiny random-weight model there")
    from kvcanary.serve.server import HEALTH_ROUTE, METRICS_ROUTE, CanaryServer

    with CanaryServer(model_dir, host=args.host, port=args.port, device=args.device, backend=args.backend,
                      on_violation=policy, quiet=False) as server:
        print(f"serving {model_dir} with canaries ({policy}) on {server.url}: POST /v1/chat/completions, "
              f"GET /v1/models, GET /health, GET {METRICS_ROUTE}, GET {HEALTH_ROUTE}; Ctrl-C stops", flush=True)
        while True:
            time.sleep(3600)


def demo(args: argparse.Namespace, faults: list[object]) -> int:
    """``kvcanary demo --engine transformers --serve``: 0 when every fault is seen and no healthy request failed."""
    from kvcanary.integrations.transformers.fault_kinds import TfFault
    from kvcanary.serve.demo import run_serve_demo

    _require()
    policy = _policy(getattr(args, "on_violation", None))
    start = time.perf_counter()
    outcomes = run_serve_demo([f for f in faults if isinstance(f, TfFault)], device=args.device,
                              backend=args.backend, seed=args.seed, max_tokens=16, on_violation=policy,
                              out=sys.stdout)
    bad = [o for o in outcomes if not o.ok]
    print(f"\n{len(outcomes)} run(s) in {time.perf_counter() - start:.1f}s: "
          + (f"{len(bad)} run(s) FAILED" if bad else "clean run silent, every fault seen from outside, "
             "no healthy request failed"))
    return 1 if bad else 0
