"""OpenAI's chat-completions and (legacy) completions bodies, as far as hsedit serves them: the
requests it validates (with Predicted Outputs: `prediction`) and the responses it writes, which
the official `openai` client reads. Fields hsedit has no use for are ignored, as OpenAI's
clients send many; the response bodies carry what OpenAI's do, `usage` with the prediction
counts included. Light, as `schema` is."""

from __future__ import annotations

import time
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, Field, field_validator

from hsedit.server.schema import RequestBody, SamplingFields, explained, refusal

ROLES = ("system", "developer", "user", "assistant")
CHAT, TEXT = "chat.completion", "text_completion"  # the two response object types


def _absent(value: object) -> bool:
    return value is None


def _now() -> int:
    return int(time.time())


# -- requests ----------------------------------------------------------------------------------
class TextPart(RequestBody):
    type: Literal["text"]
    text: str


# A content field: a string, or a list of {"type": "text", "text": ...} parts (no images here).
Content = Annotated[str | list[TextPart], explained("must be a string or a list of text parts")]


def text_of(content: str | list[TextPart]) -> str:
    return content if isinstance(content, str) else "".join(part.text for part in content)


class ChatMessage(RequestBody):
    role: Annotated[Literal["system", "developer", "user", "assistant"], explained(f"must be one of {', '.join(ROLES)}")]
    content: Content


class Prediction(RequestBody):
    """Predicted Outputs: text the answer is expected to repeat (the file being edited)."""

    type: Annotated[Literal["content"], explained('must be "content"')]
    content: Content


class StreamOptions(RequestBody):
    include_usage: Annotated[bool | None, explained("must be true or false")] = None


NonEmpty = Annotated[str, Field(min_length=1)]


class OpenAIRequest(SamplingFields):
    """The fields both endpoints share, each checked once."""

    model: Annotated[str | None, explained("must be a string")] = None
    n: Annotated[Literal[1] | None, explained("must be 1: this server returns one choice")] = 1
    stop: Annotated[
        NonEmpty | list[NonEmpty] | None, explained("must be a string or a list of non-empty strings")
    ] = None
    stream: Annotated[bool, explained("must be true or false")] = False
    stream_options: StreamOptions | None = None
    prediction: Prediction | None = None


class ChatCompletionRequest(OpenAIRequest):
    messages: list[ChatMessage]

    @field_validator("messages")
    @classmethod
    def _not_empty(cls, messages: list[ChatMessage]) -> list[ChatMessage]:
        if not messages:
            raise refusal("must be a non-empty list")
        return messages


def _the_one_prompt(value: object) -> object:
    """A list holding one prompt stands for that prompt (vLLM's benchmark client sends one)."""
    return value[0] if isinstance(value, list) and len(value) == 1 else value


class CompletionRequest(OpenAIRequest):
    prompt: Annotated[
        str, Field(min_length=1), BeforeValidator(_the_one_prompt),
        explained("must be a non-empty string (one prompt per request)"),
    ]


# -- responses ---------------------------------------------------------------------------------
class PredictionTokens(BaseModel):
    accepted_prediction_tokens: int
    rejected_prediction_tokens: int


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    completion_tokens_details: PredictionTokens


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: str
    logprobs: None = None


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = CHAT
    created: int = Field(default_factory=_now)
    model: str
    choices: list[ChatChoice]
    usage: Usage


class Delta(BaseModel):
    role: str | None = Field(None, exclude_if=_absent)  # the first chunk's only
    content: str | None = Field(None, exclude_if=_absent)


class ChunkChoice(BaseModel):
    index: int = 0
    delta: Delta
    finish_reason: str | None = None  # the last text chunk's
    logprobs: None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int = Field(default_factory=_now)
    model: str
    choices: list[ChunkChoice]  # none in the usage chunk
    usage: Usage | None = Field(None, exclude_if=_absent)  # the usage chunk's only


class TextChoice(BaseModel):
    index: int = 0
    text: str
    finish_reason: str | None = None
    logprobs: None = None


class TextCompletion(BaseModel):
    """A text completion, and each chunk of a streamed one (OpenAI's one shape for both)."""

    id: str
    object: Literal["text_completion"] = TEXT
    created: int = Field(default_factory=_now)
    model: str
    choices: list[TextChoice]
    usage: Usage | None = Field(None, exclude_if=_absent)


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str = "hsedit"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
