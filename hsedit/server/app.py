"""The HTTP server: OpenAI's chat completions with Predicted Outputs, hsedit's own `/v1/apply`,
health and metrics, over one `EngineThread`.

Safety: loopback by default (a non-loopback host needs an API key, checked in constant time);
bodies over `max_body_bytes` get 413, requests beyond `max_queue` get 429 with Retry-After; a
client that goes away has its request aborted (its KV cache freed at the next step). The
server never reads or writes files: a client sends the text and writes the result itself.

Each body is a pydantic model the client shares (`schema`, `openai_schema`, `wire`); each route
is declared once, below, and the metrics' endpoint labels are read off the routes. The API key
(`auth.RequireKey`) and the request count (`metrics.CountRequests`) are two middlewares apart.
Every error is `schema.ErrorBody`, {"error": {"message", "type"}} (and "exit_code" for edits),
with one clear message, whether it is a response, an SSE event or a `/v1/apply` line.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from hsedit.apply import EditJob, edit_request, finish_edit
from hsedit.edit.files import SourceFile
from hsedit.engine.requests import Generation, GenerationRequest, StepEvent
from hsedit.errors import HseditError, UsageError
from hsedit.server import openai_api, wire
from hsedit.server.auth import RequireKey
from hsedit.server.http_error import HttpError, error_response
from hsedit.server.metrics import CountRequests
from hsedit.server.openai_api import UnknownModel
from hsedit.server.openai_schema import ChatCompletionRequest, CompletionRequest, ModelCard, ModelList
from hsedit.server.schema import ApplyRequest, BadRequest, DrafterTargetBody, ErrorBody, Health, parse
from hsedit.server.engine_thread import Aborted, Admitted, EngineThread, QueueFull, ShuttingDown

DISCONNECT_POLL_S = 0.5  # how often a non-streaming request checks that its client is still there
OPEN_PATHS = ("/health",)  # asked without a key: the daemon's readiness check, load balancers


@dataclass(frozen=True)
class ServerSettings:
    served_model: str  # the name /v1/models lists and requests must use
    drafter: str
    api_key: str | None = None
    max_queue: int = 64  # requests held at once (waiting + running); beyond: 429
    max_body_bytes: int = 4 << 20
    max_tokens: int | None = None  # per request; None: the model's context length
    daemon: dict | None = None  # a background engine's own state (hsedit/daemon.py), for /health
    dtype: str | None = None  # the target's dtype as it runs, and whether vLLM's compiled mode runs it
    compiled: bool | None = None


def create_app(engine_thread: EngineThread, settings: ServerSettings) -> FastAPI:
    engine = engine_thread.engine
    metrics = engine_thread.metrics
    max_tokens_limit = min(settings.max_tokens or engine.max_model_len, engine.max_model_len)
    app = FastAPI(title="hsedit", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(HttpError)
    async def http_error(request: Request, error: HttpError) -> JSONResponse:
        return error_response(error)

    @app.exception_handler(404)
    async def not_found(request: Request, error: Exception) -> JSONResponse:
        return error_response(HttpError(404, f"no such endpoint: {request.url.path}", "not_found_error"))

    @app.exception_handler(405)
    async def wrong_method(request: Request, error: Exception) -> JSONResponse:
        message = f"{request.method} is not allowed on {request.url.path}"
        return error_response(HttpError(405, message, "invalid_request_error"))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, error: Exception) -> JSONResponse:
        return error_response(HttpError(500, f"internal error: {type(error).__name__}: {error}", "server_error"))

    def json_body(model: type[BaseModel], *, exit_code: int | None = None) -> Any:
        """A route's body as `model`: read up to --max-body-bytes, then validated; a refusal is a
        400 in one line (`exit_code`: the hsedit exit code it stands for, on the edit route).
        Read here rather than by FastAPI, which would take any size and answer 422 with
        pydantic's full report."""

        async def read(request: Request) -> BaseModel:
            raw = await _read_body(request, settings.max_body_bytes)
            try:
                return parse(model, raw, max_tokens_limit=max_tokens_limit)
            except BadRequest as error:
                raise HttpError(400, str(error), "invalid_request_error", exit_code) from None

        return Depends(read)

    @app.get("/health")
    async def health() -> Health:
        engine_thread.note_contact()
        target = engine.drafter_target
        daemon = settings.daemon and {**settings.daemon, "idle_s": round(engine_thread.idle_seconds(), 1)}
        return Health(model=settings.served_model, drafter=settings.drafter, waiting=engine_thread.waiting,
                      running=engine_thread.running, dtype=settings.dtype, compiled=settings.compiled, daemon=daemon,
                      dspark_target=DrafterTargetBody(**target.as_dict()) if target else None)

    @app.get("/metrics")
    async def prometheus() -> PlainTextResponse:
        target = engine.drafter_target
        text = metrics.render(waiting=engine_thread.waiting, running=engine_thread.running,
                              dspark_target_matches=None if target is None else target.matches)
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    @app.get("/v1/models")
    async def models() -> ModelList:
        return ModelList(data=[ModelCard(id=settings.served_model)])

    @app.post("/v1/chat/completions")
    async def chat_completions(
        request: Request, body: ChatCompletionRequest = json_body(ChatCompletionRequest)
    ) -> Response:
        return await _openai_completion(request, body)

    @app.post("/v1/completions")
    async def completions(request: Request, body: CompletionRequest = json_body(CompletionRequest)) -> Response:
        return await _openai_completion(request, body)

    async def _openai_completion(request: Request, body: ChatCompletionRequest | CompletionRequest) -> Response:
        try:
            chat = openai_api.openai_job(body, served_model=settings.served_model, max_tokens_limit=max_tokens_limit)
        except UnknownModel as error:
            raise HttpError(404, str(error), "not_found_error") from None

        def build_request(engine) -> GenerationRequest:
            ids = engine.tokenizer.encode(chat.prompt(engine.tokenizer))
            # max_tokens the client asked for must fit; the default only caps the answer
            needed = chat.generation.max_tokens if chat.asked_max_tokens else 1
            room = engine.answer_room(ids, needed, "the request does not fit the model's context")
            return replace(chat.generation, prompt=ids, max_tokens=min(chat.generation.max_tokens, room))

        feed = await _start(engine_thread, build_request, request)
        cid = openai_api.completion_id(chat.kind)
        if chat.stream:
            return StreamingResponse(_chat_chunks(feed, cid, settings.served_model, chat), media_type="text/event-stream")
        text, stats = "", None
        async for event in feed.events(request):
            text += event.text
            stats = event.stats
        if stats is None:  # the client went away; nobody reads this
            return Response(status_code=499)
        answer = openai_api.completion(cid, settings.served_model, text, stats, chat.has_prediction, chat.kind)
        return JSONResponse(answer.model_dump(mode="json"))

    @app.post("/v1/apply")
    async def apply(
        request: Request, body: ApplyRequest = json_body(ApplyRequest, exit_code=UsageError.exit_code)
    ) -> Response:
        job = EditJob.for_source(SourceFile.from_raw(body.path, body.code), body.path, body.instruction, body.update)

        def build_request(engine) -> GenerationRequest:
            return edit_request(
                engine, job, max_tokens=body.requested_max_tokens, temperature=body.temperature, seed=body.seed
            )

        feed = await _start(engine_thread, build_request, request)
        plain_step = engine.cost_table.step_time(1) if engine.cost_table else None
        return StreamingResponse(
            _apply_lines(feed, job, body.max_deletion, plain_step), media_type="application/x-ndjson"
        )

    app.add_middleware(RequireKey, api_key=settings.api_key, open_paths=OPEN_PATHS)
    # Added last, so it runs first and counts the key's refusals too.
    app.add_middleware(CountRequests, metrics=metrics, endpoints=[route.path for route in app.routes])
    return app


class EventFeed:
    """One request's items, from the engine thread to the route's asyncio task."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.queue: asyncio.Queue = asyncio.Queue()
        self.ticket = None
        self.engine_thread: EngineThread | None = None
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
                self.engine_thread.cancel(self.ticket)


async def _start(engine_thread: EngineThread, build_request, request: Request) -> EventFeed:
    """Submit and wait until the engine took it: a request that cannot run is an HTTP error."""
    feed = EventFeed(asyncio.get_running_loop())
    try:
        feed.ticket = engine_thread.submit(build_request, feed.put)
    except QueueFull as error:
        raise HttpError(429, str(error), "rate_limit_error") from None
    except ShuttingDown as error:
        raise HttpError(503, str(error), "unavailable") from None
    feed.engine_thread = engine_thread
    try:
        await feed.first()
    except HseditError as error:
        raise HttpError(400, str(error), "invalid_request_error", error.exit_code) from None
    except Aborted as error:
        raise HttpError(503, str(error), "unavailable") from None
    except Exception as error:
        raise HttpError(500, f"the engine could not run the request: {error}", "server_error") from None
    except asyncio.CancelledError:
        engine_thread.cancel(feed.ticket)
        raise
    return feed


async def _chat_chunks(feed: EventFeed, cid: str, model: str, chat: openai_api.OpenAIJob) -> AsyncIterator[str]:
    kind = chat.kind
    if kind == openai_api.CHAT:
        yield _sse(openai_api.chunk(cid, model, kind, role="assistant", text=""))
    try:
        async for event in feed.events():
            if event.text:
                yield _sse(openai_api.chunk(cid, model, kind, text=event.text))
            if event.finished:
                yield _sse(openai_api.chunk(cid, model, kind, finish=openai_api.finish_reason(event.stats)))
                if chat.include_usage:
                    counts = openai_api.usage(event.stats, chat.has_prediction)
                    yield _sse(openai_api.chunk(cid, model, kind, usage_=counts))
    except Exception as error:  # the headers are sent: the error goes in the stream
        yield _sse(ErrorBody.of(f"the generation failed: {error}", "server_error"))
    yield "data: [DONE]\n\n"


async def _apply_lines(feed: EventFeed, job: EditJob, max_deletion: float, plain_step: float | None) -> AsyncIterator[str]:
    admitted = feed.admitted
    yield wire.as_line(wire.start_line(admitted.request_id, admitted.request, plain_step))
    generation = Generation()
    try:
        async for event in feed.events():
            generation.text += event.text
            generation.stats = event.stats
            yield wire.as_line(wire.step_line(event))
    except Exception as error:  # the headers are sent: the error is the stream's last line
        yield wire.as_line(wire.ErrorLine.of(f"the generation failed: {error}", "server_error", exit_code=1))
        return
    try:
        result = await run_in_threadpool(finish_edit, job, generation, admitted.request, max_deletion=max_deletion)
    except HseditError as error:
        yield wire.as_line(wire.error_line(error))
        return
    yield wire.as_line(wire.result_line(result))


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise HttpError(413, f"the body is over {limit} bytes", "invalid_request_error")
    data = bytearray()
    async for part in request.stream():
        data += part
        if len(data) > limit:
            raise HttpError(413, f"the body is over {limit} bytes", "invalid_request_error")
    return bytes(data)


def _sse(payload: BaseModel) -> str:
    return f"data: {payload.model_dump_json()}\n\n"
