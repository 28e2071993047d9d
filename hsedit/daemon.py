"""The warm engine: a background `hsedit serve` per set of engine settings, started on demand.

`hsedit apply`, `batch` and the hooks, when no server is named, look here for an engine that
was started for the same settings (model, drafter, DSpark drafter, compile, dtype) by the same
installation (hsedit's code, its shipped weights, the model's files); if there is none they
start one in the background and use it. It listens on a Unix socket in a directory only its
owner can enter (`$XDG_RUNTIME_DIR/hsedit`, else hsedit's cache `run/`, mode 0700), never on a
TCP port, and it exits by itself after `keep_alive` idle seconds, or when the installation it
was started from changes on disk (a new version, a retrained adapter), or on `hsedit daemon stop`.

    <dir>/<key>.sock   the socket          <dir>/<key>.log   the daemon's own output
    <dir>/<key>.json   what it runs (pid, settings, since when), written when it is ready
    <dir>/<key>.lock   held while one is being started: two first calls start one daemon

`key` is a digest of the settings and the installation, so a changed installation never talks
to an old daemon. A daemon that dies mid-edit leaves the user's file as it was (the client
writes, never the server) and the client says so in one line (exit 10).

Off with `--no-daemon`, `HSEDIT_DAEMON=0` or `daemon = false` in `[tool.hsedit]`: the engine
then starts in-process, as it always could.

Compiled behind: an eager engine starts in seconds, a compiled one takes a minute or more (three
the first time) and then steps 1.4-2x cheaper. So the eager daemon, once it has been idle
COMPILE_BEHIND_AFTER_IDLE_S, starts its compiled twin (the same settings, compiled) in the
background at niceness 19 (it yields to the user's work while it compiles, and serves at full
priority once ready); clients prefer the twin as soon as it answers, and the eager daemon exits
once no client has asked it anything for HANDOVER_QUIET_S. A twin that fails to start leaves
the eager daemon serving. Off with `compile_behind = false` or `HSEDIT_COMPILE_BEHIND=0`.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from hsedit.engine.options import EngineOptions
from hsedit.errors import ServerError, UsageError

DAEMON_VARIABLE = "HSEDIT_DAEMON"
KEEP_ALIVE_S = 600.0  # ten minutes idle, then it exits (Ollama keeps a model five)
START_TIMEOUT_S = 900.0  # a first compiled start takes minutes
WATCH_EVERY_S = 2.0
# The user's edit is done and nothing follows at once: a compile started now competes with little.
COMPILE_BEHIND_AFTER_IDLE_S = 10.0
# Far longer than a client takes from finding a daemon ready to sending its request.
HANDOVER_QUIET_S = 30.0
TWIN_NICENESS = 19
PACKAGE = Path(__file__).resolve().parent


def runtime_dir() -> Path:
    """The private directory of the user's daemons, made 0700 and checked to be the user's own."""
    from hsedit.engine.provision import cache_dir

    xdg = os.environ.get("XDG_RUNTIME_DIR")
    directory = Path(xdg) / "hsedit" if xdg else cache_dir() / "run"
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    info = directory.stat()
    if info.st_uid != os.getuid():
        raise UsageError(f"{directory} belongs to another user: the warm engine will not use it (--no-daemon)")
    if stat.S_IMODE(info.st_mode) & 0o077:
        os.chmod(directory, 0o700)
    return directory


@dataclass(frozen=True)
class DaemonSpec:
    """What a daemon runs, and where it lives."""

    options: EngineOptions
    key: str
    directory: Path

    @property
    def socket(self) -> Path:
        return self.directory / f"{self.key}.sock"

    @property
    def log(self) -> Path:
        return self.directory / f"{self.key}.log"

    @property
    def info(self) -> Path:
        return self.directory / f"{self.key}.json"

    @property
    def lock(self) -> Path:
        return self.directory / f"{self.key}.lock"

    @property
    def url(self) -> str:
        return f"unix:{self.socket}"


def settings_of(options: EngineOptions) -> dict:
    """The settings that change an engine's answers or speed: what makes two daemons different.
    The dtype as asked ("auto" resolves the same way for every process of this machine): resolving
    it here would import torch into every client, a second of its start."""
    return {"model": options.model or "embedded", "drafter": options.drafter, "dspark": options.dspark,
            "compile": options.compile, "dtype": options.dtype, "seed": options.seed}


def installation_identity(options: EngineOptions) -> str:
    """A digest of what the engine is made of on disk: hsedit's code and shipped weights, and the
    model's files where it names some. Sizes and modification times: cheap enough for every call."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        parts = [version("hsedit")]
    except PackageNotFoundError:
        parts = ["source"]
    watched = [*sorted(PACKAGE.rglob("*.py")), *sorted((PACKAGE / "models").rglob("*"))]
    model = Path(options.model).expanduser() if options.model else None
    if model is not None and model.exists():
        watched += [model] if model.is_file() else sorted(p for p in model.iterdir() if p.is_file())
    for path in watched:
        try:
            info = path.stat()
        except OSError:
            continue
        parts.append(f"{path}:{info.st_size}:{info.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def spec_for(options: EngineOptions, installation: str | None = None) -> DaemonSpec:
    installation = installation or installation_identity(options)
    identity = {"settings": settings_of(options), "installation": installation}
    key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
    return DaemonSpec(options, key, runtime_dir())


def twin_spec(spec: DaemonSpec, installation: str | None = None) -> DaemonSpec | None:
    """The compiled twin of an eager daemon (None for a compiled one)."""
    if spec.options.compile:
        return None
    return spec_for(replace(spec.options, compile=True), installation)


# -- the client's side -----------------------------------------------------------------------
def daemon_runner(options: EngineOptions, *, keep_alive_s: float = KEEP_ALIVE_S,
                  on_start: Callable[[DaemonSpec], None] | None = None, compile_behind: bool = True):
    """A runner on the daemon for these options, started first if none runs (`on_start` is told);
    its compiled twin where that answers (`compile_behind`)."""
    from hsedit.client import ServerClient, ServerRunner

    installation = installation_identity(options)
    spec = spec_for(options, installation)
    twin = twin_spec(spec, installation) if compile_behind else None
    if twin is not None and _answers(ServerClient(twin.url), twin):
        spec = twin
    client = ServerClient(spec.url)
    if not _answers(client, spec):
        with _locked(spec.lock):
            if not _answers(client, spec):  # nobody started it while we waited for the lock
                if on_start is not None:
                    on_start(spec)
                _wait_ready(spec, client, _start(spec, keep_alive_s, twin_key=twin.key if twin else None))
    return ServerRunner(client, lost=f"the background engine stopped during the edit (its log: {spec.log})")


def _answers(client, spec: DaemonSpec) -> bool:
    """Whether the daemon for `spec` is up and is the one it claims to be."""
    if not spec.socket.exists():
        return False
    try:
        health = client.get_json("/health")
    except Exception:  # a stale socket (no one listens), or a daemon that is going away
        return False
    return (health.get("daemon") or {}).get("key") == spec.key


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _start(spec: DaemonSpec, keep_alive_s: float, *, twin_key: str | None = None,
           niceness: int = 0) -> subprocess.Popen:
    spec.socket.unlink(missing_ok=True)  # a stale socket: its daemon is gone
    options = spec.options
    command = [sys.executable, "-m", "hsedit.cli", "serve", "--socket", str(spec.socket), "--daemon-key", spec.key,
               "--keep-alive", str(keep_alive_s), "--drafter", options.drafter, "--dtype", options.dtype]
    for flag, value in (("--model", options.model), ("--dspark", options.dspark), ("--twin-key", twin_key)):
        if value:
            command += [flag, value]
    command.append("--compile" if options.compile else "--no-compile")
    if niceness and shutil.which("nice"):  # not preexec_fn: the daemon that starts a twin runs threads
        command = ["nice", "-n", str(niceness), *command]
    env = {**os.environ, DAEMON_VARIABLE: "0", "PYTHONUNBUFFERED": "1"}
    with open(spec.log, "ab") as log:
        log.write(f"\n--- {time.strftime('%Y-%m-%d %H:%M:%S')} starting: {' '.join(command)}\n".encode())
        return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True, cwd="/")


def _wait_ready(spec: DaemonSpec, client, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and process.poll() is None:
        if _answers(client, spec):
            return
        time.sleep(0.1)
    if process.poll() is None:
        process.terminate()
    tail = _log_tail(spec.log)
    raise ServerError(f"the background engine did not start ({tail or 'no output'}); its log: {spec.log}")


def _log_tail(path: Path) -> str:
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    errors = [line for line in lines if line.startswith("hsedit: error")]
    return (errors or lines or [""])[-1][-300:]


# -- the daemon's side -------------------------------------------------------------------------
@dataclass
class DaemonState:
    """What a daemon knows of itself: /health reports it, status reads it."""

    key: str
    socket: str
    keep_alive_s: float
    pid: int
    started_at: float
    settings: dict
    identity: str
    log: str

    def as_dict(self) -> dict:
        return asdict(self)


def daemon_state(options: EngineOptions, socket_path: Path, key: str, keep_alive_s: float) -> DaemonState:
    directory = socket_path.parent
    settings = {**settings_of(options), "dtype": options.resolved_dtype}  # what it runs, for status
    return DaemonState(key, str(socket_path), keep_alive_s, os.getpid(), time.time(), settings,
                       installation_identity(options), str(directory / f"{key}.log"))


def announce(state: DaemonState) -> None:
    """Written once the socket answers: `hsedit daemon status` finds the daemon by this file."""
    info = Path(state.socket).with_suffix(".json")
    staging = info.with_suffix(".json.tmp")
    staging.write_text(json.dumps(state.as_dict()))
    os.replace(staging, info)


def watch(state: DaemonState, options: EngineOptions, idle_seconds: Callable[[], float],
          stopping: threading.Event, *, quiet_seconds: Callable[[], float] | None = None,
          twin: DaemonSpec | None = None) -> threading.Thread:
    """A thread that ends the daemon (SIGTERM to itself: the server's clean stop) once it has
    been idle `keep_alive_s`, or once its installation changed on disk and nothing runs, or
    once its compiled `twin` (started here after COMPILE_BEHIND_AFTER_IDLE_S idle) answers and
    no client has asked anything for HANDOVER_QUIET_S (`quiet_seconds`).
    It ends once `stopping` is set: the server removes its own socket on the way out, and a
    SIGTERM then would land in the interpreter's exit."""
    twin_ready = threading.Event()
    twin_started = False

    def loop() -> None:
        nonlocal twin_started
        while not stopping.wait(WATCH_EVERY_S):
            idle = idle_seconds()
            if twin is not None and not twin_started and idle >= COMPILE_BEHIND_AFTER_IDLE_S:
                twin_started = True
                threading.Thread(target=_start_twin, args=(twin, state.keep_alive_s, twin_ready),
                                 name="hsedit-daemon-twin", daemon=True).start()
            if idle >= state.keep_alive_s:
                reason = f"idle for {idle:.0f} s"
            elif idle > 0 and installation_identity(options) != state.identity:
                reason = "hsedit or its weights changed on disk"
            elif not Path(state.socket).exists():
                reason = "its socket was removed"
            elif twin_ready.is_set() and quiet_seconds is not None and quiet_seconds() >= HANDOVER_QUIET_S:
                reason = f"its compiled twin serves ({twin.socket.name})"
            else:
                continue
            print(f"hsedit-daemon: stopping: {reason}", flush=True)
            os.kill(os.getpid(), signal.SIGTERM)
            return

    thread = threading.Thread(target=loop, name="hsedit-daemon-watch", daemon=True)
    thread.start()
    return thread


def _start_twin(twin: DaemonSpec, keep_alive_s: float, ready: threading.Event) -> None:
    """Start the compiled twin (unless one answers already) and wait for it, under its lock, as a
    client starts a daemon: a client asking for the compiled settings meanwhile waits for this one."""
    from hsedit.client import ServerClient

    client = ServerClient(twin.url)
    print(f"hsedit-daemon: compiling a twin behind this engine (its log: {twin.log})", flush=True)
    try:
        with _locked(twin.lock):
            if not _answers(client, twin):
                _wait_ready(twin, client, _start(twin, keep_alive_s, niceness=TWIN_NICENESS))
    except ServerError as error:
        print(f"hsedit-daemon: the compiled twin did not start, this engine keeps serving: {error}", flush=True)
        return
    print("hsedit-daemon: the compiled twin is ready", flush=True)
    ready.set()


def forget(socket_path: Path) -> None:
    """Remove the daemon's socket and state file on the way out (its log stays)."""
    for path in (socket_path, socket_path.with_suffix(".json")):
        path.unlink(missing_ok=True)


# -- status and stop ---------------------------------------------------------------------------
@dataclass(frozen=True)
class RunningDaemon:
    state: dict
    health: dict | None  # None: it does not answer (starting, or gone)
    memory_mib: float | None

    @property
    def pid(self) -> int:
        return int(self.state["pid"])


def running_daemons() -> list[RunningDaemon]:
    from hsedit.client import ServerClient

    found = []
    for info in sorted(runtime_dir().glob("*.json")):
        try:
            state = json.loads(info.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if not _alive(int(state.get("pid", 0))):
            forget(info.with_suffix(".sock"))
            continue
        try:
            health = ServerClient(f"unix:{state['socket']}").get_json("/health")
        except Exception:
            health = None
        found.append(RunningDaemon(state, health, _memory_mib(int(state["pid"]))))
    return found


def stop(daemon: RunningDaemon, timeout_s: float = 30.0) -> bool:
    """SIGTERM, then wait for it to go (it lets a running edit finish first, as `hsedit serve` does)."""
    try:
        os.kill(daemon.pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _alive(daemon.pid):
            return True
        time.sleep(0.1)
    return False


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped) is gone for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def _memory_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def socket_answers(path: Path) -> bool:
    """Whether anything listens on a Unix socket (a probe for the tests and status)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True
