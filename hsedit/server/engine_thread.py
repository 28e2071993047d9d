"""The engine's own thread: requests from any thread join the running batch at the next step.

vLLM's engine is driven by one caller; the HTTP server has many. `EngineThread` owns the
`Engine` on one thread, from its start to its close, and loops: admit what was submitted, abort
what was cancelled, run one step, hand every request its event. The engine is built on that
thread too, never handed over from another: torch's OpenMP runs a team of worker threads for each
thread that computes, and once a second team exists every parallel region pays for it (an
engine started on the main thread and stepped on this one decoded far slower than on one thread
alone: docs/benchmarks.md, "A second computing thread"). A request submitted while others run
joins them at the next step (continuous batching), so the hybrid drafter's allocation works on
real concurrency.

A request is submitted as a `build_request` function, run on the engine thread just before the
request is added: all tokenizing happens on that one thread (the tokenizer is not shared
across threads), and a request that cannot run (a prompt too long for the context) fails there
alone. The listener then receives `Admitted`, each StepEvent in order, and an exception if the
request failed or was aborted. It runs on the engine thread, between steps: it must only hand
the item over (the server's routes put it on their asyncio queue), never block.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hsedit.engine.requests import GenerationRequest, StepEvent
from hsedit.server.metrics import Metrics


@dataclass(frozen=True)
class Admitted:
    """The request is in the engine (first item a listener receives)."""

    request_id: str
    request: GenerationRequest  # as `build_request` made it: its prompt is token ids


Listener = Callable[[Admitted | StepEvent | BaseException], None]
BuildRequest = Callable[[Any], GenerationRequest]  # the engine -> the request to run


class QueueFull(Exception):
    """The server holds as many requests as it may (`--max-queue`): the client should retry."""


class ShuttingDown(Exception):
    """The server is stopping and takes no new requests."""


class Aborted(Exception):
    """The request was aborted (its client went away, or the server stopped) before it finished."""


@dataclass
class Ticket:
    id: int
    build_request: BuildRequest
    listener: Listener
    request_id: str | None = None  # the engine's, once admitted


class EngineThread:
    def __init__(
        self, make_engine: Callable[[], Any], *, max_queue: int, metrics: Metrics | None = None
    ) -> None:
        self._make_engine = make_engine
        self.engine: Any = None  # built by `start`, on the engine thread
        self._started = threading.Event()
        self._start_error: BaseException | None = None
        self.max_queue = max_queue
        self.metrics = metrics or Metrics()
        self._ids = itertools.count()
        self._wake = threading.Condition()
        self._submitted: deque[Ticket] = deque()  # not yet handed to the engine
        self._cancelled: set[int] = set()  # ticket ids
        self._running: dict[int, Ticket] = {}  # in the engine; touched by the engine thread only
        self._held = 0  # submitted + running: what --max-queue bounds
        self._last_active = time.monotonic()  # when a request last came in or finished
        self._last_contact = time.monotonic()  # when a client last asked anything (/health too)
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="hsedit-engine", daemon=True)

    # -- any thread ----------------------------------------------------------------------------
    def start(self) -> None:
        """Build the engine on the engine thread and start serving; return once it is ready (a
        failed start raises its error here)."""
        self._thread.start()
        self._started.wait()
        if self._start_error is not None:
            raise self._start_error

    def submit(self, build_request: BuildRequest, listener: Listener) -> Ticket:
        with self._wake:
            if self._stopping:
                raise ShuttingDown("the server is shutting down")
            if self._held >= self.max_queue:
                raise QueueFull(f"the server already holds {self._held} requests (--max-queue {self.max_queue})")
            ticket = Ticket(next(self._ids), build_request, listener)
            self._submitted.append(ticket)
            self._held += 1
            self._last_active = time.monotonic()
            self._wake.notify()
        return ticket

    def cancel(self, ticket: Ticket) -> None:
        """Abort the request (a client went away): its KV cache is freed before the next step."""
        with self._wake:
            self._cancelled.add(ticket.id)
            self._wake.notify()

    def stop(self, *, abort: bool = True, timeout: float | None = None) -> None:
        """No new requests; abort the running ones (or let them finish), then end the thread."""
        with self._wake:
            self._stopping = True
            if abort:
                self._cancelled.update(t.id for t in self._submitted)
                self._cancelled.update(self._running)
            self._wake.notify()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def idle_seconds(self) -> float:
        """How long the server has held no request (0 while it holds one)."""
        with self._wake:
            return 0.0 if self._held else time.monotonic() - self._last_active

    def note_contact(self) -> None:
        """A client asked something that holds no request (its readiness check)."""
        with self._wake:
            self._last_contact = time.monotonic()

    def quiet_seconds(self) -> float:
        """How long no client has asked anything: a client that found this server ready sends
        its request within that time, so a server may go away once it is long enough."""
        with self._wake:  # a re-entrant lock: idle_seconds takes it too
            return min(self.idle_seconds(), time.monotonic() - self._last_contact)

    @property
    def waiting(self) -> int:
        return len(self._submitted)

    @property
    def running(self) -> int:
        return len(self._running)

    # -- the engine thread ---------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self.engine = self._make_engine()
        except BaseException as error:  # noqa: BLE001 - the caller of `start` re-raises it
            self._start_error = error
            return
        finally:
            self._started.set()
        try:
            self._loop()
        finally:
            self.engine.close()

    def _loop(self) -> None:
        while True:
            with self._wake:
                while not (self._submitted or self._cancelled or self._running or self._stopping):
                    self._wake.wait()
                if self._stopping and not self._running and not self._submitted:
                    return
                submitted, self._submitted = list(self._submitted), deque()
                cancelled, self._cancelled = self._cancelled, set()
            for ticket in submitted:
                if ticket.id in cancelled:
                    self._finish(ticket, Aborted("aborted before it started"))
                else:
                    self._admit(ticket)
            self._abort([self._running[i] for i in cancelled if i in self._running])
            if self._running:
                self._step()

    def _admit(self, ticket: Ticket) -> None:
        try:
            request = ticket.build_request(self.engine)
            ticket.request_id = self.engine.add(request, key=ticket.id)
        except Exception as error:  # a request that cannot run fails alone
            self._finish(ticket, error)
            return
        self._running[ticket.id] = ticket
        ticket.listener(Admitted(ticket.request_id, request))

    def _abort(self, tickets: list[Ticket]) -> None:
        if not tickets:
            return
        self.engine.abort([t.request_id for t in tickets])
        for ticket in tickets:
            del self._running[ticket.id]
            self._finish(ticket, Aborted("aborted"))
            self.metrics.aborted += 1

    def _step(self) -> None:
        started = time.perf_counter()
        try:
            events = self.engine.step()
        except Exception as error:  # the engine failed: every running request learns why
            failed = list(self._running.values())
            self._running.clear()
            self.engine.abort([t.request_id for t in failed])
            for ticket in failed:
                self._finish(ticket, error)
            return
        self.metrics.record_step(time.perf_counter() - started, events)
        for event in events:
            ticket = self._running.get(event.key)
            if ticket is None:
                continue
            ticket.listener(event)
            if event.finished:
                del self._running[ticket.id]
                self._finish(ticket, None)

    def _finish(self, ticket: Ticket, error: BaseException | None) -> None:
        if error is not None:
            ticket.listener(error)
        with self._wake:
            self._held -= 1
            self._last_active = time.monotonic()
