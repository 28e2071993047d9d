"""OpenAI's chat-completions and (legacy) completions shapes: a request body in, a
GenerationRequest out; a finished (or streaming) generation in, OpenAI's response objects out.
Pure functions, tested without a server. The bodies themselves, and their checks (both endpoints
share every sampling field's), are `openai_schema`'s models.

Predicted Outputs (`prediction: {"type": "content", "content": ...}`) seed the request's copy
drafter with the predicted text, as the original file does for `hsedit apply`; the answer is
still exactly the model's. `usage.completion_tokens_details` counts, as OpenAI defines them for
a request with a prediction: `accepted_prediction_tokens` = draft tokens of the copy drafter
(which copies from the prediction and from the conversation) that the model kept;
`rejected_prediction_tokens` = the copy drafter's draft tokens it verified and rejected. Both
are 0 without a prediction (as OpenAI reports them), and with a drafter that does not copy.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from hsedit.drafting.chain import COPY
from hsedit.engine.requests import GenerationRequest
from hsedit.engine.stats import RequestStats
from hsedit.server.openai_schema import (
    CHAT,
    TEXT,
    AssistantMessage,
    ChatChoice,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChunkChoice,
    CompletionRequest,
    Delta,
    PredictionTokens,
    TextChoice,
    TextCompletion,
    Usage,
    text_of,
)


class UnknownModel(LookupError):
    """The request names another model than the one served: HTTP 404."""


@dataclass(frozen=True)
class OpenAIJob:
    """A chat completion or a text completion, as the engine runs it."""

    messages: list[dict[str, str]] | None  # chat completions; None for a text completion
    generation: GenerationRequest  # its prompt is filled in by the server (the chat template)
    stream: bool
    include_usage: bool
    has_prediction: bool
    text_prompt: str | None = None  # text completions: the prompt as given
    asked_max_tokens: bool = False  # the client named max_tokens: it must fit, not only cap the answer

    @property
    def kind(self) -> str:
        return CHAT if self.messages is not None else TEXT

    def prompt(self, tokenizer) -> str:
        """The text the model continues: the chat in its template, or the text prompt as given."""
        if self.messages is None:
            return self.text_prompt
        return tokenizer.apply_chat_template(self.messages, tokenize=False, add_generation_prompt=True)


def openai_job(
    body: ChatCompletionRequest | CompletionRequest, *, served_model: str, max_tokens_limit: int
) -> OpenAIJob:
    """A validated body (`schema.parse`) as the generation to run."""
    if body.model is not None and body.model != served_model:
        raise UnknownModel(f"the model {body.model!r} is not served here; this server serves {served_model!r}")
    messages = text_prompt = None
    if isinstance(body, ChatCompletionRequest):
        # "developer" is OpenAI's newer name for the system role, which chat templates know
        messages = [{"role": "system" if m.role == "developer" else m.role, "content": text_of(m.content)}
                    for m in body.messages]
    else:
        text_prompt = body.prompt
    prediction = None  # an empty prediction is none: there is nothing to copy
    if body.prediction is not None:
        prediction = text_of(body.prediction.content) or None
    asked = body.requested_max_tokens
    generation = GenerationRequest(
        prompt="", max_tokens=max_tokens_limit if asked is None else asked, temperature=body.temperature,
        seed=body.seed, stop=[body.stop] if isinstance(body.stop, str) else body.stop, prediction=prediction,
    )
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    return OpenAIJob(messages, generation, body.stream, include_usage, prediction is not None, text_prompt,
                       asked is not None)


def completion_id(kind: str = CHAT) -> str:
    return ("chatcmpl-" if kind == CHAT else "cmpl-") + uuid.uuid4().hex


def usage(stats: RequestStats, has_prediction: bool) -> Usage:
    accepted = stats.accepted[COPY] if has_prediction else 0
    rejected = stats.drafted[COPY] - accepted if has_prediction else 0
    return Usage(
        prompt_tokens=stats.prompt_tokens,
        completion_tokens=stats.completion_tokens,
        total_tokens=stats.prompt_tokens + stats.completion_tokens,
        completion_tokens_details=PredictionTokens(
            accepted_prediction_tokens=accepted, rejected_prediction_tokens=rejected
        ),
    )


def finish_reason(stats: RequestStats) -> str:
    return "length" if stats.finish_reason == "length" else "stop"


def completion(
    cid: str, model: str, text: str, stats: RequestStats, has_prediction: bool, kind: str = CHAT
) -> ChatCompletion | TextCompletion:
    reason, counts = finish_reason(stats), usage(stats, has_prediction)
    if kind == CHAT:
        choice = ChatChoice(message=AssistantMessage(content=text), finish_reason=reason)
        return ChatCompletion(id=cid, model=model, choices=[choice], usage=counts)
    return TextCompletion(id=cid, model=model, choices=[TextChoice(text=text, finish_reason=reason)], usage=counts)


def chunk(
    cid: str, model: str, kind: str = CHAT, *, text: str | None = None, role: str | None = None,
    finish: str | None = None, usage_: Usage | None = None,
) -> ChatCompletionChunk | TextCompletion:
    """One streamed chunk: a piece of text, the finish, or the usage chunk (stream_options.
    include_usage), which has no choices. A text completion's chunk carries its text where a
    chat chunk has the delta; only the chat's first chunk names the role."""
    if kind == CHAT:
        choices = [] if usage_ is not None else [ChunkChoice(delta=Delta(role=role, content=text), finish_reason=finish)]
        return ChatCompletionChunk(id=cid, model=model, choices=choices, usage=usage_)
    choices = [] if usage_ is not None else [TextChoice(text=text or "", finish_reason=finish)]
    return TextCompletion(id=cid, model=model, choices=choices, usage=usage_)
