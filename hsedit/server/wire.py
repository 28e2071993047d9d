"""The `/v1/apply` stream, both ways: the JSON lines the server writes, and the client's way of
reading them back into the StepEvents, Generation and errors the embedded engine gives, so that
`hsedit apply`, `batch` and the hooks print, check and write exactly as they do embedded.

One request body (`schema.ApplyRequest`), then one JSON object per line, each a model below:

    {"type": "start", "request_id", "prompt_tokens", "max_tokens", "plain_step_s"}
    {"type": "step", "pieces": [[text, source], ...], "text", "record": {source, drafted, matched, emitted, price},
     "finished": false}
    ... the last step: "finished": true, "finish_reason", "engine_reported": [drafted, accepted] (vLLM's, if any)
    {"type": "result", ...}   what `hsedit apply --json` prints: new_text, diff, validation, guard, check, stats
    {"type": "error", "error": {"message", "type", "exit_code"}}   instead of "result" when the answer is refused

A request refused before it starts (bad fields, a file too long for the context) is an HTTP
error with the same {"error": {...}} body. Light: pydantic, no torch, no vLLM.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel

from hsedit.drafting.chain import StepRecord
from hsedit.engine.requests import Generation, GenerationRequest, StepEvent
from hsedit.errors import HseditError, error_for_exit_code
from hsedit.server.schema import ErrorBody, parse

EDIT_ERROR = "edit_error"  # the error type of an answer refused after it was generated


def _absent(value: object) -> bool:
    return value is None


class StartLine(BaseModel):
    type: Literal["start"] = "start"
    request_id: str
    prompt_tokens: int
    max_tokens: int  # what the request runs under (the server may have capped it)
    plain_step_s: float | None = None  # the server's plain step time: the client's speedup estimate


class RecordBody(BaseModel):
    """A `StepRecord` (without its calibration features)."""

    model_config = ConfigDict(ser_json_inf_nan="constants")  # a price is a float like any other

    source: str | None
    drafted: int
    matched: int
    emitted: list[int]
    price: float | None = None


class StepLine(BaseModel):
    type: Literal["step"] = "step"
    pieces: list[tuple[str, str]]  # (text, source) runs, for the live view
    text: str
    record: RecordBody
    finished: bool
    finish_reason: str | None = Field(None, exclude_if=_absent)  # the last step's
    engine_reported: tuple[int, int] | None = Field(None, exclude_if=_absent)  # vLLM's (drafted, accepted)


class ResultLine(BaseModel):
    """What `hsedit apply --json` prints (`EditResult.as_dict`), and why it must not be written."""

    model_config = ConfigDict(extra="allow")  # EditResult.as_dict's fields, as they are

    type: Literal["result"] = "result"
    refusal: str | None  # the guard's, the parse's or the instruction check's, in one line


class ErrorLine(ErrorBody):
    type: Literal["error"] = "error"


class ApplyLine(RootModel):
    root: Annotated[StartLine | StepLine | ResultLine | ErrorLine, Field(discriminator="type")]


def as_line(message: BaseModel) -> str:
    return message.model_dump_json() + "\n"


def read_line(raw: bytes | str) -> StartLine | StepLine | ResultLine | ErrorLine:
    """One line of the stream as its model (`schema.BadRequest`, one line, if it is none)."""
    return parse(ApplyLine, raw).root


# -- server side -------------------------------------------------------------------------------
def start_line(request_id: str, request: GenerationRequest, plain_step_s: float | None) -> StartLine:
    """`request` as the engine took it: its prompt is token ids."""
    return StartLine(request_id=request_id, prompt_tokens=len(request.prompt), max_tokens=request.max_tokens,
                     plain_step_s=plain_step_s)


def step_line(event: StepEvent) -> StepLine:
    record = event.record
    body = RecordBody(source=record.source, drafted=record.drafted, matched=record.matched,
                      emitted=list(record.emitted), price=record.price)
    line = StepLine(pieces=event.pieces, text=event.text, record=body, finished=event.finished)
    if event.finished:
        line.finish_reason = event.stats.finish_reason
        line.engine_reported = event.stats.engine_reported
    return line


def result_line(result: Any) -> ResultLine:
    """`result`: the `EditResult` of the finished answer."""
    refusal = result.refusal()
    return ResultLine(**result.as_dict(), refusal=None if refusal is None else str(refusal))


def error_line(error: HseditError, kind: str = EDIT_ERROR) -> ErrorLine:
    return ErrorLine.of(str(error), kind, error.exit_code)


# -- client side -------------------------------------------------------------------------------
@dataclass
class StreamReader:
    """Rebuilds one request's StepEvents and Generation from its lines, on the client's clock
    (tok/s and time to first token are what the user waited, network included)."""

    key: int
    request_id: str = ""
    request: GenerationRequest | None = None  # what the server ran (its max_tokens)
    generation: Generation = field(default_factory=Generation)
    finished: bool = False

    def __post_init__(self) -> None:
        self.generation.stats.started_at = time.perf_counter()

    def feed(self, line: StartLine | StepLine | ResultLine | ErrorLine) -> StepEvent | None:
        """The StepEvent a step line stands for (None for the others)."""
        stats = self.generation.stats
        if isinstance(line, StartLine):
            self.request_id = line.request_id
            self.request = GenerationRequest([], max_tokens=line.max_tokens)
            stats.prompt_tokens = line.prompt_tokens
            stats.plain_estimate_s = line.plain_step_s
            return None
        if isinstance(line, StepLine):
            body = line.record
            record = StepRecord(body.source, body.drafted, body.matched, tuple(body.emitted), price=body.price)
            stats.record(record, time.perf_counter())
            sources = record.token_sources()
            self.generation.token_ids += list(record.emitted)
            self.generation.sources += sources
            self.generation.text += line.text
            if line.finished:
                stats.finished_at = time.perf_counter()
                stats.finish_reason = line.finish_reason
                stats.engine_reported = line.engine_reported
                self.finished = True
            return StepEvent(
                self.key, self.request_id, list(record.emitted), sources, list(line.pieces), line.text,
                self.finished, record, stats,
            )
        if isinstance(line, ErrorLine) and not self.finished:
            raise error_for_exit_code(line.error.exit_code or 1, line.error.message)
        return None
