"""`hsedit serve`: start the engine once, serve it until SIGTERM or Ctrl-C.

uvicorn stops taking connections on SIGTERM/SIGINT and lets the requests in flight finish for
up to `GRACEFUL_SHUTDOWN_S`; then the engine thread aborts what is left and closes the engine, exit 0.
(uvicorn re-raises the signal once it is done, to whatever handler was there before it: ours
turns that into a clean exit, where the default would kill the process.)
"""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import threading
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

from hsedit.config import API_KEY_VARIABLE, ProjectConfig
from hsedit.engine.engine import Engine, EngineOptions
from hsedit.errors import UsageError
from hsedit.server.app import ServerSettings, create_app
from hsedit.server.engine_thread import EngineThread

GRACEFUL_SHUTDOWN_S = 30


EXECUTOR_BACKENDS = ("mp", "ray")


def server_settings(
    config: ProjectConfig,
    *,
    host: str,
    model: str | None = None,
    drafter: str | None = None,
    api_key: str | None = None,
    max_queue: int = 64,
    max_tokens: int | None = None,
    max_body_bytes: int = 4 << 20,
    multiprocessing: bool = False,
    tensor_parallel_size: int = 1,
    pipeline_parallel_size: int = 1,
    distributed_executor_backend: str | None = None,
    compile: bool = False,
    dspark: str | None = None,
    dtype: str | None = None,
) -> tuple[EngineOptions, ServerSettings]:
    """`hsedit serve`'s flags (each resolved flag, environment, `config`, default) -> the engine's
    options and the server's settings, checked before the engine's slow start, not after it."""
    api_key = api_key or os.environ.get(API_KEY_VARIABLE) or None
    check_exposure(host, api_key)
    if distributed_executor_backend not in (None, *EXECUTOR_BACKENDS):
        raise UsageError(f"--distributed-executor-backend is mp or ray, not {distributed_executor_backend!r}")
    options = EngineOptions(
        model=config.resolve("model", model, None), drafter=config.drafter_or_default(drafter), compile=compile,
        dspark=dspark, tensor_parallel_size=tensor_parallel_size, pipeline_parallel_size=pipeline_parallel_size,
        distributed_executor_backend=distributed_executor_backend, multiprocessing=multiprocessing,
        dtype=config.dtype_or_default(dtype),
    )
    settings = ServerSettings(
        served_model=options.model or "embedded", drafter=options.drafter, api_key=api_key, max_queue=max_queue,
        max_body_bytes=max_body_bytes, max_tokens=max_tokens, dtype=options.resolved_dtype, compiled=options.compile,
    )
    return options, settings


def check_exposure(host: str, api_key: str | None) -> None:
    """A server reachable from other machines runs anyone's prompts on this one: demand a key."""
    if api_key is None and not is_loopback(host):
        raise UsageError(f"--host {host} is reachable from other machines: set --api-key (or HSEDIT_API_KEY)")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


def serve(
    options: EngineOptions,
    settings: ServerSettings,
    *,
    host: str,
    port: int,
    on_ready: Callable[[str], None] = print,
    socket_path: Path | None = None,
    daemon_key: str | None = None,
    keep_alive_s: float | None = None,
    twin_key: str | None = None,
) -> None:
    """Serve on host:port, or (a background engine, hsedit/daemon.py) on a Unix socket only its
    owner can reach, ending itself after `keep_alive_s` idle or when its installation changes,
    or (an eager one given `twin_key`) once its compiled twin has started and taken over."""
    import uvicorn

    from hsedit import daemon
    from hsedit.niceness import restore_session_priority, yield_like_niceness

    state, twin, yielded = None, None, False
    if socket_path is not None:
        state = daemon.daemon_state(options, socket_path, daemon_key or "", keep_alive_s or daemon.KEEP_ALIVE_S)
        settings = replace(settings, daemon=state.as_dict())
        if twin_key and not options.compile:
            twin = daemon.DaemonSpec(replace(options, compile=True), twin_key, socket_path.parent)
        yielded = yield_like_niceness()  # a twin started niced: it yields while it compiles
    else:
        check_exposure(host, settings.api_key)
        _check_port_free(host, port)
    engine_thread = EngineThread(lambda: Engine(options), max_queue=settings.max_queue)
    engine_thread.start()  # the engine is built, stepped and closed on its own thread
    listener = _unix_listener(socket_path) if socket_path is not None else None
    staging = Path(listener.getsockname()) if listener is not None else None

    stopping = threading.Event()

    @asynccontextmanager
    async def lifespan(app):
        if state is not None:
            # Clients find the socket only now, with the engine ready; connections made between
            # here and uvicorn's first accept wait in the listener's backlog.
            os.replace(staging, socket_path)
            daemon.announce(state)
            daemon.watch(state, options, engine_thread.idle_seconds, stopping,
                         quiet_seconds=engine_thread.quiet_seconds, twin=twin)
            if yielded:
                restore_session_priority()  # ready: it serves the user now
        on_ready(f"unix:{socket_path}" if socket_path is not None else f"http://{host}:{port}")
        try:
            yield
        finally:
            stopping.set()
            engine_thread.stop(abort=True)  # and closes the engine
            if socket_path is not None:
                daemon.forget(socket_path)

    app = create_app(engine_thread, settings)
    app.router.lifespan_context = lifespan
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        access_log=False,
    )
    for stop_signal in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop_signal, _exit_cleanly)
    try:
        uvicorn.Server(config).run(sockets=[listener] if listener is not None else None)
    finally:
        # uvicorn has closed the listener by now; its staging name is left only by a start that
        # failed before the rename.
        if staging is not None:
            staging.unlink(missing_ok=True)


def _unix_listener(socket_path: Path) -> socket.socket:
    """A listening Unix socket only its owner may connect to, bound under a temporary name beside
    `socket_path` (renamed into place once the engine is ready). Bound here rather than by
    uvicorn, which would open its socket to every user (mode 0666)."""
    staging = socket_path.with_name(f"{socket_path.name}.{os.getpid()}")
    staging.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_mask = os.umask(0o177)
    try:
        listener.bind(str(staging))
    finally:
        os.umask(old_mask)
    listener.listen(128)
    return listener


def _exit_cleanly(signum: int, frame: object) -> None:
    # Once only: a second Ctrl-C or SIGTERM would otherwise raise again inside the exit itself.
    for stop_signal in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop_signal, signal.SIG_IGN)
    raise SystemExit(0)


def _check_port_free(host: str, port: int) -> None:
    """Before the engine's seconds of start-up: a port in use is one line, not a late traceback."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            raise UsageError(f"cannot listen on {host}:{port}: {error.strerror or error}") from None
