"""How the daemon's server stops (pure logic, no engine): its watcher ends when the server starts
its own shutdown, and a second stop signal is not raised inside the exit."""

import signal
import threading
import time

import pytest

from hsedit import daemon
from hsedit.engine.options import EngineOptions
from hsedit.server.main import _exit_cleanly


@pytest.fixture
def recorded_sigterm():
    """SIGTERMs to this process, counted instead of acted on."""
    received = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    yield received
    signal.signal(signal.SIGTERM, previous)


def _watch_a_removed_socket(tmp_path, monkeypatch, stopping):
    monkeypatch.setattr(daemon, "WATCH_EVERY_S", 0.05)
    options = EngineOptions()
    state = daemon.DaemonState("key", str(tmp_path / "gone.sock"), 3600.0, 0, time.time(), {},
                               daemon.installation_identity(options), str(tmp_path / "log"))
    watcher = daemon.watch(state, options, lambda: 1.0, stopping)
    watcher.join(timeout=5)
    time.sleep(0.1)  # the signal handler runs on the main thread, at its next bytecode
    return watcher


def test_the_watcher_stops_the_daemon_whose_socket_was_removed(tmp_path, monkeypatch, recorded_sigterm):
    watcher = _watch_a_removed_socket(tmp_path, monkeypatch, threading.Event())
    assert not watcher.is_alive() and recorded_sigterm == [signal.SIGTERM]


def test_the_watcher_is_quiet_once_the_server_is_stopping(tmp_path, monkeypatch, recorded_sigterm):
    stopping = threading.Event()
    stopping.set()  # the server removes its own socket on the way out
    watcher = _watch_a_removed_socket(tmp_path, monkeypatch, stopping)
    assert not watcher.is_alive() and recorded_sigterm == []


def test_a_second_stop_signal_is_ignored():
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        with pytest.raises(SystemExit) as exit_:
            _exit_cleanly(signal.SIGTERM, None)
        assert exit_.value.code == 0
        assert all(signal.getsignal(s) is signal.SIG_IGN for s in previous)
    finally:
        for stop_signal, handler in previous.items():
            signal.signal(stop_signal, handler)
