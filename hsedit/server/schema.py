"""The bodies the server and its clients share, as pydantic models: the server validates what
arrives with them and the client builds its requests and reads the replies with the same ones.

- `ApplyRequest`: `POST /v1/apply` (its answer, the stream of JSON lines, is in `wire`).
- `SamplingFields`: what every endpoint that generates shares (chat, completions, apply), so a
  field is checked, and refused, the same way on each.
- `ErrorBody`: the one error shape, {"error": {"message", "type", "exit_code" for edits}}, of an
  HTTP error, a streamed (SSE) one and an error line of `/v1/apply` alike.
- `Health`: `GET /health`.

`parse` turns a body into its model or raises `BadRequest` with one short line naming the field:
a field declares its own explanation (`explained`), and pydantic's words are used only for what
no field explains. Light: pydantic only, no FastAPI, no torch, no vLLM (the client's install).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    WrapValidator,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from hsedit.edit.guard import DEFAULT_MAX_DELETION

REFUSED = "refused"  # the error type of a field's own explanation
Body = TypeVar("Body", bound=BaseModel)


class BadRequest(ValueError):
    """A body its model refuses: `str(error)` is one line that names the field (HTTP 400)."""


def parse(model: type[Body], data: bytes | str | dict, *, max_tokens_limit: int | None = None) -> Body:
    """`data` (a request's raw JSON, or the fields as Python values) as `model`.
    `max_tokens_limit`: the most tokens this server generates for one request (servers only)."""
    context = {"max_tokens_limit": max_tokens_limit}
    try:
        if isinstance(data, dict):
            return model.model_validate(data, context=context)
        return model.model_validate_json(data, context=context)
    except ValidationError as error:
        raise BadRequest(one_line(error)) from None


def one_line(error: ValidationError) -> str:
    """The first thing wrong, in one line: a user fixes one field at a time, and pydantic's full
    report (every error, each with its input echoed) is no message to show anyone."""
    first = error.errors(include_url=False)[0]
    where, kind = _place(first["loc"]), first["type"]
    if kind == REFUSED:
        return f"{where} {first['msg']}" if where else first["msg"]
    if kind == "json_invalid":
        return f"the body is not valid JSON: {first.get('ctx', {}).get('error', first['msg'])}"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"{where or 'the body'} must be a JSON object"
    if kind == "missing":
        return f"{where} is required"
    if kind == "list_type":
        return f"{where} must be a list"
    return f"{where or 'the body'}: {first['msg'][:1].lower()}{first['msg'][1:]}"


def _place(loc: tuple) -> str:
    """("messages", 0, "content") -> "messages[0].content"."""
    place = ""
    for part in loc:
        place += f"[{part}]" if isinstance(part, int) else f".{part}" if place else str(part)
    return place


def refusal(message: str) -> PydanticCustomError:
    """A check's own refusal (raise it from a validator); the field's place goes before it."""
    return PydanticCustomError(REFUSED, message)


def explained(message: str) -> WrapValidator:
    """Any failure of the field's value (its type, its range, a check inside) is `message`."""

    def check(value: Any, handler: Any) -> Any:
        try:
            return handler(value)
        except ValidationError:
            raise refusal(message) from None

    return WrapValidator(check)


def _not_blank(text: str) -> str:
    if not text.strip():
        raise ValueError("blank")
    return text


def _none_is(default: Any) -> BeforeValidator:
    """JSON null stands for the default (clients send `"seed": null` and the like)."""
    return BeforeValidator(lambda value: default if value is None else value)


class RequestBody(BaseModel):
    # strict: a JSON true is no 1 and "7" no seed; unknown fields are ignored, as OpenAI's
    # clients send many this server has no use for (user, logprobs, tools, ...)
    model_config = ConfigDict(strict=True, extra="ignore")


TokenCount = Annotated[int | None, Field(ge=1), explained("must be a positive integer")]


class SamplingFields(RequestBody):
    max_tokens: TokenCount = None
    max_completion_tokens: TokenCount = None  # OpenAI's newer name; wins over max_tokens
    # 0 (greedy) when not given, not OpenAI's 1: this is an editing server
    temperature: Annotated[float, _none_is(0.0), Field(ge=0, le=2), explained("must be a number from 0 to 2")] = 0.0
    seed: Annotated[int | None, explained("must be an integer")] = None

    @field_validator("max_tokens", "max_completion_tokens")
    @classmethod
    def _within_the_servers_limit(cls, value: int | None, info: ValidationInfo) -> int | None:
        limit = (info.context or {}).get("max_tokens_limit")
        if value is not None and limit is not None and value > limit:
            raise refusal(f"is {value}; this server allows at most {limit}")
        return value

    @property
    def requested_max_tokens(self) -> int | None:
        """What the client asked for (None: as much as the server allows)."""
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


class ApplyRequest(SamplingFields):
    """An edit: the file's text travels, never its path on disk (the server reads and writes no
    files); `path` names the language and appears in the prompt and the diff."""

    path: Annotated[
        str, AfterValidator(_not_blank), explained("must name the file (its language and how the diff names it)")
    ]
    code: Annotated[str, explained("must be the file's text")]
    instruction: Annotated[str, _none_is(""), explained("must be a string")] = ""
    update: Annotated[str | None, explained("must be a string")] = None  # a snippet to merge
    max_deletion: Annotated[float, Field(ge=0, le=1), explained("must be a number from 0 to 1")] = DEFAULT_MAX_DELETION

    @model_validator(mode="after")
    def _says_what_to_change(self) -> ApplyRequest:
        if not self.instruction.strip() and self.update is None:
            raise refusal("the instruction is empty: say what to change")
        return self


class ErrorDetail(BaseModel):
    message: str  # one line
    type: str  # OpenAI's kinds: invalid_request_error, authentication_error, rate_limit_error, ...
    exit_code: int | None = Field(None, exclude_if=lambda code: code is None)  # hsedit's, for edits


class ErrorBody(BaseModel):
    error: ErrorDetail

    @classmethod
    def of(cls, message: str, kind: str, exit_code: int | None = None) -> Self:
        """The one way an error body is made, whichever way it travels."""
        return cls(error=ErrorDetail(message=message, type=kind, exit_code=exit_code))


class DrafterTargetBody(BaseModel):
    trained_for: str  # the identity the drafter's config records ("" if none)
    target: str  # the identity of the target it drafts for
    matches: bool


class Health(BaseModel):
    status: Literal["ok"] = "ok"
    model: str
    drafter: str
    waiting: int
    running: int
    dtype: str | None = None  # the target's, as it runs (None: a server from before hsedit said)
    compiled: bool | None = None  # vLLM's compiled mode, or eager
    dspark_target: DrafterTargetBody | None = None  # what the DSpark drafter was trained for
    daemon: dict[str, Any] | None = None  # a background engine's own state (hsedit/daemon.py)
