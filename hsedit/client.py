"""The client of `hsedit serve`: `hsedit apply`, `batch` and the hooks run their edits on a
server instead of an embedded engine, with the same output, exit codes and live view.

Only the generation runs on the server. The client reads the file, sends its text (`/v1/apply`),
rebuilds the step events from the server's stream (`server.wire.StreamReader`), and then
extracts, checks and writes exactly as it does embedded. Standard library only: the light
install that pre-commit uses (no torch, no vLLM) can talk to a server.
"""

from __future__ import annotations

import http.client
import json
import os
import queue
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from urllib.parse import urlsplit

from hsedit.apply import EditJob, GeneratedEdit
from hsedit.config import API_KEY_VARIABLE
from hsedit.engine.provision import DrafterTarget
from hsedit.engine.requests import StepEvent
from hsedit.errors import HseditError, ServerError, UsageError, error_for_exit_code
from hsedit.server.wire import StreamReader, apply_body

CONNECT_TIMEOUT_S = 10
READ_TIMEOUT_S = 600  # one step of a loaded server never takes this long


class _UnixConnection(http.client.HTTPConnection):
    """HTTP over a Unix socket (a background engine's: hsedit/daemon.py)."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


class ServerClient:
    def __init__(self, url: str, api_key: str | None = None) -> None:
        self.socket_path = url[len("unix:") :] if url.startswith("unix:") else None
        if self.socket_path is not None:
            self.url, self.base, self.secure = url, "", False
            self.api_key = None
            return
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError(f"--server takes http://HOST:PORT, not {url!r}")
        self.url = f"{parts.scheme}://{parts.netloc}"
        self.secure = parts.scheme == "https"
        self.host, self.port = parts.hostname, parts.port
        self.base = parts.path.rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get(API_KEY_VARIABLE)

    def get_json(self, path: str) -> dict:
        connection, response = self._request("GET", path, None)
        try:
            return self._json(response)
        finally:
            connection.close()

    def stream_lines(self, path: str, body: dict) -> Iterator[dict]:
        """POST `body` and yield the JSON objects of the answer, one per line, as they arrive."""
        connection, response = self._request("POST", path, body)
        try:
            if response.status != 200:
                self._json(response)  # raises the server's error
            while True:
                try:
                    line = response.readline()
                except OSError as error:
                    raise ServerError(f"lost the connection to {self.url}: {error}") from None
                if not line:
                    return
                if line.strip():
                    yield json.loads(line)
        finally:
            connection.close()

    def _request(self, method: str, path: str, body: dict | None) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        if self.socket_path is not None:
            connection: http.client.HTTPConnection = _UnixConnection(self.socket_path, CONNECT_TIMEOUT_S)
        else:
            kind = http.client.HTTPSConnection if self.secure else http.client.HTTPConnection
            connection = kind(self.host, self.port, timeout=CONNECT_TIMEOUT_S)
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        try:
            connection.request(method, self.base + path, None if body is None else json.dumps(body), headers)
            connection.sock.settimeout(READ_TIMEOUT_S)
            return connection, connection.getresponse()
        except OSError as error:
            connection.close()
            raise ServerError(f"cannot reach the hsedit server at {self.url}: {error.strerror or error}") from None

    def _json(self, response: http.client.HTTPResponse) -> dict:
        raw = response.read()
        try:
            data = json.loads(raw)
        except json.JSONDecodeError:
            data = None
        if response.status == 200 and isinstance(data, dict):
            return data
        error = data.get("error", {}) if isinstance(data, dict) else {}
        message = error.get("message") or f"HTTP {response.status} from {self.url}"
        if "exit_code" in error:  # an edit the server refused as hsedit would here
            raise error_for_exit_code(int(error["exit_code"]), message)
        raise ServerError(f"the server at {self.url} answered {response.status}: {message}")


class ServerRunner:
    """An EditRunner on a server: up to `max_in_flight` edits at once, one connection each.
    `lost`: what to say when the connection drops mid-edit (the file is untouched either way)."""

    def __init__(self, client: ServerClient, lost: str | None = None) -> None:
        self.client = client
        self.lost = lost
        health = client.get_json("/health")
        where = "background engine" if health.get("daemon") else f"server {client.url}"
        self.description = f"{where}, drafter: {health.get('drafter', '?')}"
        target = health.get("dspark_target")
        self.dspark_target = DrafterTarget(target["trained_for"], target["target"]) if target else None

    def generate(
        self,
        jobs: Iterable[EditJob],
        *,
        max_tokens: int | None = None,
        temperature: float = 0.0,
        seed: int | None = None,
        max_in_flight: int = 1,
        on_step: Callable[[StepEvent], None] | None = None,
    ) -> Iterator[GeneratedEdit]:
        # Connections run on threads; their events come back here, so on_step and the caller
        # only ever run on this thread, as with the embedded engine.
        inbox: queue.Queue = queue.Queue()
        pending = enumerate(jobs)
        running = 0

        def admit() -> None:
            nonlocal running
            while running < max_in_flight:
                entry = next(pending, None)
                if entry is None:
                    return
                index, job = entry
                body = apply_body(
                    job.display_path, job.source.text, job.instruction, job.update,
                    max_tokens=max_tokens, temperature=temperature, seed=seed,
                )
                threading.Thread(target=self._run_one, args=(index, body, inbox), daemon=True).start()
                running += 1

        admit()
        while running:
            kind, item = inbox.get()
            if kind == "step":
                if on_step is not None:
                    on_step(item)
                continue
            running -= 1
            yield item
            admit()

    def _run_one(self, index: int, body: dict, inbox: queue.Queue) -> None:
        reader = StreamReader(index)
        try:
            for message in self.client.stream_lines("/v1/apply", body):
                event = reader.feed(message)
                if event is not None:
                    inbox.put(("step", event))
                if reader.finished:
                    break  # the server's own result follows; this client makes its own
            if not reader.finished:
                raise ServerError(f"the server at {self.client.url} ended the answer early")
            inbox.put(("done", GeneratedEdit(index, reader.request, reader.generation)))
        except ServerError as error:
            failure = ServerError(f"{self.lost}; nothing was written") if self.lost else error
            inbox.put(("done", GeneratedEdit(index, None, None, failure)))
        except HseditError as error:
            inbox.put(("done", GeneratedEdit(index, None, None, error)))
        except Exception as error:  # a malformed answer: this edit fails, the others go on
            failure = ServerError(f"unreadable answer from {self.client.url}: {type(error).__name__}: {error}")
            inbox.put(("done", GeneratedEdit(index, None, None, failure)))
