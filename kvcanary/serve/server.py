"""``transformers serve`` with canaries: transformers' OpenAI-compatible server (continuous batching), the
canary attached to the model it serves, kvcanary's metrics at ``/metrics`` and its health at
``/kvcanary/health`` beside transformers' own routes.

``with CanaryServer(model_dir) as server: ...`` starts uvicorn on ``server.url`` in a background thread (on a
socket bound before the model loads: the port is known and free, and a bad one fails at once) and always stops
it on exit. The transformers parts are the ones ``transformers serve`` itself builds (its ``Serve`` command,
told not to start its own server); two of them are set before the first request: the continuous-batching
settings the canary needs (eager steps, synchronous batching, small pages) and the canary itself. Its host,
port and sweep interval are checked before anything is done (their rules and codes: ``KVC-F``). See
docs/serve.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import socket
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvcanary.backend_names import check_backend
from kvcanary.devices import check_device
from kvcanary.guard.violation_policy import ViolationPolicy
from kvcanary.monitor.monitor import Monitor
from kvcanary.serve.settings import ServeSettings

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

    from kvcanary.integrations.transformers.session import TransformersCanary

HEALTH_ROUTE = "/kvcanary/health"
METRICS_ROUTE = "/metrics"
_LOGGERS = ("uvicorn.access", "uvicorn.error", "transformers")


def require_serving() -> None:
    """Raise an ImportError naming the extra when transformers' server cannot run here."""
    missing = []
    for name in ("fastapi", "uvicorn", "openai", "prometheus_client", "transformers"):
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise ImportError(f"kv-canary: serving needs {', '.join(missing)}; install them with "
                          "pip install 'kvcanary[serve]'")


def cb_config(*, page: int = 4, num_blocks: int = 512, max_batch_tokens: int = 256, max_requests: int = 8) -> Any:
    """The continuous-batching settings the canary follows: eager steps, synchronous batching, no offload."""
    import dataclasses

    from transformers.generation import configuration_utils

    config_cls: Any = configuration_utils.ContinuousBatchingConfig
    names = {f.name for f in dataclasses.fields(config_cls)}
    extra: dict[str, object] = {"page_size": page} if "page_size" in names else {"block_size": page}
    if "auto_switch_to_flash" in names:
        extra["auto_switch_to_flash"] = False
    return config_cls(num_blocks=num_blocks, max_batch_tokens=max_batch_tokens, max_requests_per_batch=max_requests,
                      use_cuda_graph=False, use_async_batching=False, **extra)


def _attach(model: Any, *, on_violation: str, backend: str | None, sweep_interval: int) -> TransformersCanary:
    """``attach_canaries`` with the policy under whichever keyword this release of the integration takes."""
    from kvcanary.integrations.transformers.session import attach_canaries

    attach: Any = attach_canaries
    params = inspect.signature(attach_canaries).parameters
    policy = {"on_violation": on_violation} if "on_violation" in params else {"mode": on_violation}
    canary: TransformersCanary = attach(model, backend=backend, sweep_interval=sweep_interval, **policy)
    return canary


def bound_socket(host: str, port: int) -> socket.socket:
    """A listening socket on ``host``:``port``, or an OSError that names both (a host that does not resolve,
    a port in use or not allowed): the machine's answer, given before a model is loaded."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as err:
        sock.close()
        raise OSError(err.errno, f"kv-canary: cannot listen on host {host!r}, port {port}: "
                                 f"{err.strerror or err}") from err
    return sock


class CanaryServer:
    """transformers' server for ``model_dir`` with canaries, ``/metrics`` and ``/kvcanary/health``.

    ``host``: a bare address (an IP address or a host name); ``port``: 0 to 65535, 0 picks a free port (read
    ``url`` after :meth:`start`); ``sweep_interval``: steps between sweeps, 0 for none. A value that breaks one
    of these rules is a ContractError (``KVC-F``, :class:`~kvcanary.serve.settings.ServeSettings`) here,
    before anything is done. ``on_violation``: ``log``, ``raise``
    or ``isolate`` (the last needs the isolation policy of the transformers integration). ``registry``:
    where the metrics go (default: a fresh one, served at ``/metrics``; pass prometheus-client's global
    ``REGISTRY`` to share the process's). ``device``: ``cpu``, ``cuda``, ``cuda:1``..., one torch can use here
    (else a ValueError, as the model would not load); ``backend``: a registered backend's name (else a
    ValueError: every completion would fail), None for the registry's choice.
    """

    def __init__(self, model_dir: str | Path, *, host: str = "127.0.0.1", port: int = 0, device: str = "cpu",
                 backend: str | None = None, on_violation: str = "log", sweep_interval: int = 4,
                 registry: CollectorRegistry | None = None, cb: Any = None, quiet: bool = True) -> None:
        ServeSettings(host=host, port=port, sweep_interval=sweep_interval)  # first; their rules and codes: KVC-F
        require_serving()
        on_violation = ViolationPolicy.parse(on_violation).value  # its rule and code: KVC-F
        check_device(device)  # the rules kvcanary serve's --device and --backend follow
        check_backend(backend)
        path = Path(model_dir)
        if not (path / "config.json").is_file():
            raise ValueError(f"kv-canary: model_dir must be a model directory with a config.json, got {str(path)!r}")
        from prometheus_client import CollectorRegistry

        self.model_dir = path
        self.host, self.port, self.device = host, port, device
        self.backend, self.on_violation, self.sweep_interval = backend, on_violation, sweep_interval
        self.registry = registry if registry is not None else CollectorRegistry()
        self.cb = cb
        self.quiet = quiet
        self.canary: TransformersCanary | None = None
        self._attached = False  # the canary is attached and not yet detached (stop detaches it once)
        self.monitor: Monitor | None = None
        self._serve: Any = None
        self._thread: threading.Thread | None = None
        self._server: Any = None
        self._sock: socket.socket | None = None
        self._error: BaseException | None = None
        self._levels: dict[str, int] = {}

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host  # an IPv6 address is bracketed in a URL
        return f"http://{host}:{self.port}"

    @property
    def serving(self) -> bool:
        """Whether :meth:`start` has this server running (its thread alive), until :meth:`stop`."""
        return self._thread is not None and self._thread.is_alive()

    # -- start / stop -----------------------------------------------------------------------------------------
    def start(self, timeout: float = 60.0) -> CanaryServer:
        """Load the model, attach the canary, mount the routes, serve; return once the server accepts. On a server
        already serving (``start()`` then ``with server:``), nothing is done: binding its port again would fail,
        and the clean-up of that failure would stop the server that runs."""
        if self.serving:
            return self
        try:
            self._start(timeout)
        except BaseException:
            with contextlib.suppress(RuntimeError):  # the failure to start is the error to see
                self.stop()
            raise
        return self

    def _start(self, timeout: float) -> None:
        self._sock = sock = bound_socket(self.host, self.port)  # first: a port in use fails before the model loads
        self.port = int(sock.getsockname()[1])
        from transformers.cli.serve import Serve

        class _Unstarted(Serve):
            def start_server(self) -> None:  # kvcanary starts uvicorn itself, on a socket it bound
                pass

        self._levels = {name: logging.getLogger(name).level for name in _LOGGERS}  # restored by stop()
        kwargs: dict[str, Any] = {"force_model": str(self.model_dir), "continuous_batching": True,
                                  "device": self.device, "host": self.host, "port": self.port,
                                  "non_blocking": True, "log_level": "error" if self.quiet else "warning"}
        self._serve = serve = _Unstarted(**kwargs)
        serve._generation_state._cb_config = self.cb if self.cb is not None else cb_config()
        model = next(iter(serve._model_manager.loaded_models.values())).model
        self.canary = canary = _attach(model, on_violation=self.on_violation, backend=self.backend,
                                       sweep_interval=self.sweep_interval)
        self._attached = True  # from here on stop() detaches it (a failed attach too: detach reads what it left)
        canary.attach()
        self.monitor = Monitor(registry=self.registry, owners=canary.owners)
        canary.add_sink(self.monitor)
        app = serve.server.config.app
        self.mount(app, self.monitor, self.registry)
        if self.quiet:
            for name in _LOGGERS:
                logging.getLogger(name).setLevel(logging.ERROR)
        self._server = server = serve.server
        server.config.host, server.config.port = self.host, self.port

        def run() -> None:
            try:
                asyncio.run(server.serve(sockets=[sock]))
            except BaseException as err:  # surfaced by start() / stop()
                self._error = err

        self._thread = threading.Thread(target=run, name="kvcanary-serve", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not server.started:
            if self._error is not None or not self._thread.is_alive():
                raise RuntimeError(f"kv-canary: the server stopped while starting: {self._error!r}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"kv-canary: the server did not start within {timeout}s")
            time.sleep(0.02)

    @staticmethod
    def mount(app: Any, monitor: Monitor, registry: CollectorRegistry) -> None:
        """Add ``/metrics`` (prometheus-client's ASGI app on ``registry``) and ``/kvcanary/health`` (the
        monitor's status as JSON; 503 when ``failed``) to a FastAPI ``app`` (before it starts), and return a
        request that kvcanary failed as an OpenAI-style JSON error with kvcanary's text, where the app would
        otherwise answer a bare ``Internal Server Error``."""
        from fastapi.responses import JSONResponse
        from prometheus_client import make_asgi_app
        from starlette.routing import Route

        metrics = make_asgi_app(registry=registry)

        class _Asgi:  # a callable object, so Starlette hands it the raw ASGI call (no redirect to /metrics/)
            async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
                await metrics(scope, receive, send)

        app.router.routes.append(Route(METRICS_ROUTE, endpoint=_Asgi(), methods=["GET"]))

        def health() -> JSONResponse:
            status = monitor.status()
            return JSONResponse(status.to_dict(), status_code=status.http_status)

        app.add_api_route(HEALTH_ROUTE, health, methods=["GET"])

        async def failed_by_kvcanary(request: Any, exc: Exception) -> JSONResponse:
            text = str(exc)
            if "kv-canary" not in text:
                raise exc  # anything else: the app's own 500, as before
            return JSONResponse({"error": {"message": text, "type": "kv_canary_error", "code": "kv_canary"}},
                                status_code=500)

        app.add_exception_handler(RuntimeError, failed_by_kvcanary)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop serving, stop transformers' batching thread, detach the canary (idempotent).

        Under ``raise``, violations that only detaching read back (the last steps') are logged and told to the
        sinks like any other, and then raised as the canary's RuntimeError, once everything here is stopped:
        the server is down either way, and the error is not lost. Leaving a ``with`` block on an exception
        already under way, or a :meth:`start` that failed, never replaces that exception with this one.
        """
        found: RuntimeError | None = None
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        if self._serve is not None:
            with contextlib.suppress(Exception):
                self._serve._generation_state.shutdown()
            with contextlib.suppress(Exception):
                self._serve._model_manager.shutdown()
            self._serve = None
        if self.canary is not None and self._attached:
            self._attached = False
            try:
                self.canary.detach()
            except RuntimeError as err:  # raise mode: the last violations; raised once all is stopped
                found = err
        if self.monitor is not None:
            self.monitor.close()
            self.monitor = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._server = None
        for name, level in self._levels.items():
            logging.getLogger(name).setLevel(level)
        self._levels.clear()
        if found is not None:
            raise found

    def __enter__(self) -> CanaryServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is None:
            self.stop()
            return
        with contextlib.suppress(RuntimeError):  # an exception is already on its way out: never replace it
            self.stop()
