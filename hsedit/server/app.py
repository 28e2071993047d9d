"""The HTTP server: OpenAI's chat completions with Predicted Outputs, hsedit's own `/v1/apply`,
health and metrics, over one `EngineWorker`.

Safety: loopback by default (a non-loopback host needs an API key, checked in constant time);
bodies over `max_body_bytes` get 413, requests beyond `max_queue` get 429 with Retry-After; a
client that goes away has its request aborted (its KV cache freed at the next step). The
server never reads or writes files: a client sends the text and writes the result itself.
Every error is a JSON body {"error": {"message", "type"}} with one clear message.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from hsedit.apply import EditJob, edit_request, finish_edit
from hsedit.edit.files import SourceFile
from hsedit.edit.guard import DEFAULT_MAX_DELETION
from hsedit.engine.requests import Generation, GenerationRequest, StepEvent
from hsedit.errors import HseditError, UsageError
from hsedit.server import openai_api, wire
from hsedit.server.openai_api import BadRequest, UnknownModel
from hsedit.server.worker import Aborted, Admitted, EngineWorker, QueueFull, ShuttingDown

DISCONNECT_POLL_S = 0.5  # how often a non-streaming request checks that its client is still there


@dataclass(frozen=True)
class ServerSettings:
    served_model: str  # the name /v1/models lists and requests must use
    drafter: str
    api_key: str | None = None
    max_queue: int = 64  # requests held at once (waiting + running); beyond: 429
    max_body_bytes: int = 4 << 20
    max_tokens: int | None = None  # per request; None: the model's context length
    daemon: dict | None = None  # a background engine's own state (hsedit/daemon.py), for /health


class HttpError(Exception):
    def __init__(self, status: int, message: str, kind: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.exit_code = status, kind, exit_code


def create_app(worker: EngineWorker, settings: ServerSettings) -> FastAPI:
    engine = worker.engine
    metrics = worker.metrics
    max_tokens_limit = min(settings.max_tokens or engine.max_model_len, engine.max_model_len)
    app = FastAPI(title="hsedit", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(_Gate, api_key=settings.api_key, metrics=metrics)

    @app.exception_handler(HttpError)
    async def http_error(request: Request, error: HttpError) -> JSONResponse:
        return _error_response(error)

    @app.exception_handler(404)
    async def not_found(request: Request, error: Exception) -> JSONResponse:
        return _error_response(HttpError(404, f"no such endpoint: {request.url.path}", "not_found_error"))

    @app.exception_handler(405)
    async def wrong_method(request: Request, error: Exception) -> JSONResponse:
        message = f"{request.method} is not allowed on {request.url.path}"
        return _error_response(HttpError(405, message, "invalid_request_error"))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, error: Exception) -> JSONResponse:
        return _error_response(HttpError(500, f"internal error: {type(error).__name__}: {error}", "server_error"))

    @app.get("/health")
    async def health() -> dict:
        target = engine.drafter_target
        daemon = settings.daemon and {**settings.daemon, "idle_s": round(worker.idle_seconds(), 1)}
        return {"status": "ok", "model": settings.served_model, "drafter": settings.drafter,
                "waiting": worker.waiting, "running": worker.running,
                "dspark_target": target.as_dict() if target else None, "daemon": daemon}

    @app.get("/metrics")
    async def prometheus() -> PlainTextResponse:
        target = engine.drafter_target
        text = metrics.render(waiting=worker.waiting, running=worker.running,
                              dspark_target_matches=None if target is None else target.matches)
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    @app.get("/v1/models")
    async def models() -> dict:
        card = {"id": settings.served_model, "object": "model", "created": 0, "owned_by": "hsedit"}
        return {"object": "list", "data": [card]}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await _openai_completion(request, openai_api.parse_chat_request)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await _openai_completion(request, openai_api.parse_completion_request)

    async def _openai_completion(request: Request, parse) -> Response:
        body = await _read_json(request, settings.max_body_bytes)
        try:
            chat = parse(body, served_model=settings.served_model, max_tokens_limit=max_tokens_limit)
        except BadRequest as error:
            raise HttpError(400, str(error), "invalid_request_error") from None
        except UnknownModel as error:
            raise HttpError(404, str(error), "not_found_error") from None
        asked_tokens = "max_tokens" in body or "max_completion_tokens" in body

        def build_request(engine) -> GenerationRequest:
            ids = engine.tokenizer.encode(chat.prompt(engine.tokenizer))
            # max_tokens the client asked for must fit; the default only caps the answer
            needed = chat.generation.max_tokens if asked_tokens else 1
            room = engine.answer_room(ids, needed, "the request does not fit the model's context")
            return replace(chat.generation, prompt=ids, max_tokens=min(chat.generation.max_tokens, room))

        feed = await _start(worker, build_request, request)
        cid = openai_api.completion_id(chat.kind)
        if chat.stream:
            return StreamingResponse(_chat_chunks(feed, cid, settings.served_model, chat), media_type="text/event-stream")
        text, stats = "", None
        async for event in feed.events(request):
            text += event.text
            stats = event.stats
        if stats is None:  # the client went away; nobody reads this
            return Response(status_code=499)
        return JSONResponse(openai_api.completion(cid, settings.served_model, text, stats, chat.has_prediction, chat.kind))

    @app.post("/v1/apply")
    async def apply(request: Request) -> Response:
        body = await _read_json(request, settings.max_body_bytes)
        fields = _apply_fields(body, max_tokens_limit)
        job = EditJob.for_source(
            SourceFile.from_raw(fields["path"], fields["code"]), fields["path"], fields["instruction"], fields["update"]
        )

        def build_request(engine) -> GenerationRequest:
            return edit_request(
                engine, job, max_tokens=fields["max_tokens"], temperature=fields["temperature"], seed=fields["seed"]
            )

        feed = await _start(worker, build_request, request)
        plain_step = engine.cost_table.step_time(1) if engine.cost_table else None
        return StreamingResponse(
            _apply_lines(feed, job, fields["max_deletion"], plain_step), media_type="application/x-ndjson"
        )

    return app


class EventFeed:
    """One request's items, from the engine thread to the route's asyncio task."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: asyncio.Queue = asyncio.Queue()
        self.ticket = None
        self.worker: EngineWorker | None = None
        self.admitted: Admitted | None = None
        self.done = False

    def put(self, item: Any) -> None:  # the engine thread
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)
        except RuntimeError:  # the loop is closed: the server is gone, and this request with it
            pass

    async def first(self) -> Admitted:
        item = await self.queue.get()
        if isinstance(item, BaseException):
            raise item
        self.admitted = item
        return item

    async def events(self, request: Request | None = None) -> AsyncIterator[StepEvent]:
        """Its StepEvents until the last; a client that goes away (seen through `request` while
        waiting, or by the stream's cancellation) has the request aborted."""
        try:
            while True:
                if request is None:
                    item = await self.queue.get()
                else:
                    try:
                        item = await asyncio.wait_for(self.queue.get(), DISCONNECT_POLL_S)
                    except TimeoutError:
                        if await request.is_disconnected():
                            return
                        continue
                if isinstance(item, BaseException):
                    raise item
                yield item
                if item.finished:
                    self.done = True
                    return
        finally:
            if not self.done:
                self.worker.cancel(self.ticket)


async def _start(worker: EngineWorker, build_request, request: Request) -> EventFeed:
    """Submit and wait until the engine took it: a request that cannot run is an HTTP error."""
    feed = EventFeed(asyncio.get_running_loop())
    try:
        feed.ticket = worker.submit(build_request, feed.put)
    except QueueFull as error:
        raise HttpError(429, str(error), "rate_limit_error") from None
    except ShuttingDown as error:
        raise HttpError(503, str(error), "unavailable") from None
    feed.worker = worker
    try:
        await feed.first()
    except HseditError as error:
        raise HttpError(400, str(error), "invalid_request_error", error.exit_code) from None
    except Aborted as error:
        raise HttpError(503, str(error), "unavailable") from None
    except Exception as error:
        raise HttpError(500, f"the engine could not run the request: {error}", "server_error") from None
    except asyncio.CancelledError:
        worker.cancel(feed.ticket)
        raise
    return feed


async def _chat_chunks(feed: EventFeed, cid: str, model: str, chat: openai_api.ChatRequest) -> AsyncIterator[str]:
    kind = chat.kind
    if kind == openai_api.CHAT:
        yield _sse(openai_api.chunk(cid, model, {"role": "assistant", "content": ""}))
    try:
        async for event in feed.events():
            if event.text:
                yield _sse(openai_api.chunk(cid, model, {"content": event.text}, kind=kind))
            if event.finished:
                yield _sse(openai_api.chunk(cid, model, {}, openai_api.finish_reason(event.stats), kind=kind))
                if chat.include_usage:
                    usage = openai_api.usage(event.stats, chat.has_prediction)
                    yield _sse(openai_api.chunk(cid, model, {}, usage_=usage, kind=kind))
    except Exception as error:  # the headers are sent: the error goes in the stream
        yield _sse(openai_api.error_body(f"the generation failed: {error}", "server_error"))
    yield "data: [DONE]\n\n"


async def _apply_lines(feed: EventFeed, job: EditJob, max_deletion: float, plain_step: float | None) -> AsyncIterator[str]:
    admitted = feed.admitted
    yield _line(wire.start_message(admitted.request_id, admitted.request, plain_step))
    generation = Generation()
    try:
        async for event in feed.events():
            generation.text += event.text
            generation.stats = event.stats
            yield _line(wire.step_message(event))
    except Exception as error:
        yield _line({"type": wire.ERROR, "message": f"the generation failed: {error}", "exit_code": 1})
        return
    try:
        result = await run_in_threadpool(finish_edit, job, generation, admitted.request, max_deletion=max_deletion)
    except HseditError as error:
        yield _line(wire.error_message(error))
        return
    refusal = result.refusal()
    yield _line({"type": wire.RESULT, **result.as_dict(), "refusal": None if refusal is None else str(refusal)})


def _apply_fields(body: Any, max_tokens_limit: int) -> dict:
    def refuse(message: str) -> HttpError:
        return HttpError(400, message, "invalid_request_error", UsageError.exit_code)

    if not isinstance(body, dict):
        raise refuse("the body must be a JSON object")
    path, code = body.get("path"), body.get("code")
    if not isinstance(path, str) or not path.strip():
        raise refuse("path must name the file (its language and how the diff names it)")
    if not isinstance(code, str):
        raise refuse("code must be the file's text")
    instruction, update = body.get("instruction") or "", body.get("update")
    if not isinstance(instruction, str) or (update is not None and not isinstance(update, str)):
        raise refuse("instruction and update must be strings")
    if not instruction.strip() and update is None:
        raise refuse("the instruction is empty: say what to change")
    try:
        max_tokens, temperature, seed = openai_api.generation_fields(body, max_tokens_limit)
    except BadRequest as error:
        raise refuse(str(error)) from None
    max_deletion = body.get("max_deletion", DEFAULT_MAX_DELETION)
    if isinstance(max_deletion, bool) or not isinstance(max_deletion, (int, float)) or not 0 <= max_deletion <= 1:
        raise refuse("max_deletion must be a number from 0 to 1")
    return {"path": path, "code": code, "instruction": instruction, "update": update, "max_tokens": max_tokens,
            "temperature": float(temperature), "seed": seed, "max_deletion": float(max_deletion)}


ENDPOINTS = ("/health", "/metrics", "/v1/models", "/v1/chat/completions", "/v1/completions", "/v1/apply")


class _Gate:
    """The API key (every endpoint but /health) and the request count by endpoint and status.
    Plain ASGI, so streamed answers and disconnects pass through untouched."""

    def __init__(self, app: Any, api_key: str | None, metrics: Any) -> None:
        self.app, self.api_key, self.metrics = app, api_key, metrics

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500

        async def counted(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        path = scope["path"]
        try:
            if path != "/health" and not self._authorized(scope):
                refusal = HttpError(401, "missing or wrong API key (Authorization: Bearer KEY)", "authentication_error")
                await _error_response(refusal)(scope, receive, counted)
            else:
                await self.app(scope, receive, counted)
        finally:
            self.metrics.requests[(path if path in ENDPOINTS else "other", status)] += 1

    def _authorized(self, scope: dict) -> bool:
        if self.api_key is None:
            return True
        header = dict(scope["headers"]).get(b"authorization", b"")
        scheme, _, given = header.partition(b" ")
        # compare_digest: the time taken says nothing about how much of the key was right
        return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self.api_key.encode())


async def _read_json(request: Request, limit: int) -> Any:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise HttpError(413, f"the body is over {limit} bytes", "invalid_request_error")
    data = bytearray()
    async for part in request.stream():
        data += part
        if len(data) > limit:
            raise HttpError(413, f"the body is over {limit} bytes", "invalid_request_error")
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise HttpError(400, f"the body is not valid JSON: {error}", "invalid_request_error") from None


def _error_response(error: HttpError) -> JSONResponse:
    headers = {"Retry-After": "1"} if error.status == 429 else None
    body = openai_api.error_body(str(error), error.kind, error.exit_code)
    return JSONResponse(body, status_code=error.status, headers=headers)


def _sse(payload: dict) -> str:
    return f"data: {json.dumps(payload)}\n\n"


def _line(payload: dict) -> str:
    return json.dumps(payload) + "\n"
