"""The client of `hsedit serve`: `hsedit apply`, `batch` and the hooks run their edits on a
server instead of an embedded engine, with the same output, exit codes and live view.

Only the generation runs on the server. The client reads the file, sends its text (`/v1/apply`),
rebuilds the step events from the server's stream (`server.wire.StreamReader`), and then
extracts, checks and writes exactly as it does embedded. The bodies are the server's own models
(`server.schema`, `server.wire`): the standard library and pydantic only, so the light install
that pre-commit uses (no torch, no vLLM, no FastAPI) can talk to a server.
"""

from __future__ import annotations

import http.client
import json
import os
import queue
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar
from urllib.parse import urlsplit

from pydantic import BaseModel

from hsedit.apply import EditJob, GeneratedEdit
from hsedit.config import API_KEY_VARIABLE
from hsedit.engine.provision import DrafterTarget
from hsedit.engine.requests import StepEvent
from hsedit.errors import HseditError, ServerError, UsageError, error_for_exit_code
from hsedit.server.schema import ApplyRequest, BadRequest, ErrorBody, Health, parse
from hsedit.server.wire import StreamReader, read_line

Reply = TypeVar("Reply", bound=BaseModel)
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
        """Any GET's JSON object, as it is (`hsedit daemon status` shows a daemon's /health)."""
        connection, response = self._request("GET", path, None)
        try:
            self._check(response)
            raw = response.read()
        finally:
            connection.close()
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise ServerError(f"unreadable answer from {self.url}: not a JSON object")
        return data

    def health(self) -> Health:
        connection, response = self._request("GET", "/health", None)
        try:
            self._check(response)
            return self._reply(Health, response.read())
        finally:
            connection.close()

    def stream_lines(self, path: str, body: BaseModel) -> Iterator[bytes]:
        """POST `body` and yield the lines of the answer (one JSON object each) as they arrive."""
        connection, response = self._request("POST", path, body.model_dump_json(exclude_none=True).encode())
        try:
            self._check(response)
            while True:
                try:
                    line = response.readline()
                except OSError as error:
                    raise ServerError(f"lost the connection to {self.url}: {error}") from None
                if not line:
                    return
                if line.strip():
                    yield line
        finally:
            connection.close()

    def _request(self, method: str, path: str, body: bytes | None) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        if self.socket_path is not None:
            connection: http.client.HTTPConnection = _UnixConnection(self.socket_path, CONNECT_TIMEOUT_S)
        else:
            kind = http.client.HTTPSConnection if self.secure else http.client.HTTPConnection
            connection = kind(self.host, self.port, timeout=CONNECT_TIMEOUT_S)
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        try:
            connection.request(method, self.base + path, body, headers)
            connection.sock.settimeout(READ_TIMEOUT_S)
            return connection, connection.getresponse()
        except OSError as error:
            connection.close()
            raise ServerError(f"cannot reach the hsedit server at {self.url}: {error.strerror or error}") from None

    def _check(self, response: http.client.HTTPResponse) -> None:
        """Any status but 200 raises the server's error: an edit it refused as hsedit would here
        is that error (its exit code), anything else exit 10."""
        if response.status == 200:
            return
        try:
            error = parse(ErrorBody, response.read()).error
        except BadRequest:  # not hsedit's error shape: a proxy's page, another server
            raise ServerError(f"the server at {self.url} answered {response.status}") from None
        if error.exit_code is not None:
            raise error_for_exit_code(error.exit_code, error.message)
        raise ServerError(f"the server at {self.url} answered {response.status}: {error.message}")

    def _reply(self, model: type[Reply], raw: bytes) -> Reply:
        try:
            return parse(model, raw)
        except BadRequest as error:
            raise ServerError(f"unreadable answer from {self.url}: {error}") from None


class ServerRunner:
    """An EditRunner on a server: up to `max_in_flight` edits at once, one connection each.
    `lost`: what to say when the connection drops mid-edit (the file is untouched either way)."""

    def __init__(self, client: ServerClient, lost: str | None = None) -> None:
        self.client = client
        self.lost = lost
        health = client.health()
        where = "background engine" if health.daemon else f"server {client.url}"
        self.description = f"{where}, drafter: {health.drafter}"
        target = health.dspark_target
        self.dspark_target = DrafterTarget(target.trained_for, target.target) if target else None

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
                try:  # the server's own checks, here: a body it would refuse is never sent
                    body = parse(ApplyRequest, {
                        "path": job.display_path, "code": job.source.text, "instruction": job.instruction,
                        "update": job.update, "max_tokens": max_tokens, "temperature": temperature,
                        "seed": job.seed_in(seed),
                    })
                except BadRequest as error:  # this edit fails as the server would fail it, the others go on
                    inbox.put(("done", GeneratedEdit(index, None, None, UsageError(str(error)))))
                    running += 1  # its answer is already in the inbox
                    continue
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

    def _run_one(self, index: int, body: ApplyRequest, inbox: queue.Queue) -> None:
        reader = StreamReader(index)
        try:
            for raw in self.client.stream_lines("/v1/apply", body):
                event = reader.feed(read_line(raw))
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
        except BadRequest as error:  # a line that is none of the stream's: this edit fails, the others go on
            failure = ServerError(f"unreadable answer from {self.client.url}: {error}")
            inbox.put(("done", GeneratedEdit(index, None, None, failure)))
        except Exception as error:  # a malformed answer: this edit fails, the others go on
            failure = ServerError(f"unreadable answer from {self.client.url}: {type(error).__name__}: {error}")
            inbox.put(("done", GeneratedEdit(index, None, None, failure)))
