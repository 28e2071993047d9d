"""OpenAI's chat-completions and (legacy) completions shapes: a request body in, a
GenerationRequest out; a finished (or streaming) generation in, OpenAI's response objects out.
Pure functions, tested without a server. Both endpoints share every sampling field's check.

Predicted Outputs (`prediction: {"type": "content", "content": ...}`) seed the request's copy
drafter with the predicted text, as the original file does for `hsedit apply`; the answer is
still exactly the model's. `usage.completion_tokens_details` counts, as OpenAI defines them for
a request with a prediction: `accepted_prediction_tokens` = draft tokens of the copy drafter
(which copies from the prediction and from the conversation) that the model kept;
`rejected_prediction_tokens` = the copy drafter's draft tokens it verified and rejected. Both
are 0 without a prediction (as OpenAI reports them), and with a drafter that does not copy.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from hsedit.drafting.chain import COPY
from hsedit.engine.requests import GenerationRequest
from hsedit.engine.stats import RequestStats

ROLES = ("system", "developer", "user", "assistant")


class BadRequest(ValueError):
    """The body is not a chat completion request hsedit can run: HTTP 400 with this message."""


class UnknownModel(LookupError):
    """The request names another model than the one served: HTTP 404."""


CHAT, TEXT = "chat.completion", "text_completion"  # the two response object types


@dataclass(frozen=True)
class ChatRequest:
    messages: list[dict[str, str]] | None  # chat completions; None for a text completion
    generation: GenerationRequest  # its prompt is filled in by the server (the chat template)
    stream: bool
    include_usage: bool
    has_prediction: bool
    text_prompt: str | None = None  # text completions: the prompt as given

    @property
    def kind(self) -> str:
        return CHAT if self.messages is not None else TEXT

    def prompt(self, tokenizer) -> str:
        """The text the model continues: the chat in its template, or the text prompt as given."""
        if self.messages is None:
            return self.text_prompt
        return tokenizer.apply_chat_template(self.messages, tokenize=False, add_generation_prompt=True)


def parse_chat_request(body: Any, *, served_model: str, max_tokens_limit: int) -> ChatRequest:
    _check_body(body, served_model)
    return _sampling(body, max_tokens_limit, messages=_messages(body.get("messages")))


def parse_completion_request(body: Any, *, served_model: str, max_tokens_limit: int) -> ChatRequest:
    """/v1/completions: a prompt string (or a list holding one) continued as it is."""
    _check_body(body, served_model)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if not isinstance(prompt, str) or not prompt:
        raise BadRequest("prompt must be a non-empty string (one prompt per request)")
    return _sampling(body, max_tokens_limit, text_prompt=prompt)


def _check_body(body: Any, served_model: str) -> None:
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    model = body.get("model")
    if model is not None and model != served_model:
        raise UnknownModel(f"the model {model!r} is not served here; this server serves {served_model!r}")


def _sampling(body: dict, max_tokens_limit: int, *, messages: list | None = None, text_prompt: str | None = None) -> ChatRequest:
    """The fields both endpoints share, each checked once."""
    n = body.get("n", 1)
    if n not in (1, None):
        raise BadRequest("n must be 1: this server returns one choice")
    max_tokens, temperature, seed = generation_fields(body, max_tokens_limit)
    if max_tokens is None:
        max_tokens = max_tokens_limit
    stop = body.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    if stop is not None and (not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop)):
        raise BadRequest("stop must be a string or a list of non-empty strings")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest("stream must be true or false")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise BadRequest("stream_options must be an object")
    prediction = _prediction(body.get("prediction"))
    generation = GenerationRequest(
        prompt="", max_tokens=max_tokens, temperature=float(temperature), seed=seed, stop=stop, prediction=prediction
    )
    return ChatRequest(messages, generation, stream, bool(options.get("include_usage")), prediction is not None, text_prompt)


def generation_fields(body: dict, max_tokens_limit: int) -> tuple[int | None, float, int | None]:
    """max_tokens (None when not given), temperature (0, greedy, when not given: an editing
    server) and seed: the checks every endpoint that generates shares (chat, completions, apply)."""
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise BadRequest("max_tokens must be a positive integer")
        if max_tokens > max_tokens_limit:
            raise BadRequest(f"max_tokens is {max_tokens}; this server allows at most {max_tokens_limit}")
    temperature = body.get("temperature")
    if temperature is None:
        temperature = 0.0
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 <= temperature <= 2:
        raise BadRequest("temperature must be a number from 0 to 2")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise BadRequest("seed must be an integer")
    return max_tokens, float(temperature), seed


def _messages(value: Any) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        raise BadRequest("messages must be a non-empty list")
    out = []
    for i, message in enumerate(value):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise BadRequest(f"messages[{i}] needs a role: one of {', '.join(ROLES)}")
        role = "system" if message["role"] == "developer" else message["role"]
        out.append({"role": role, "content": _text(message.get("content"), f"messages[{i}].content")})
    return out


def _prediction(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("type") != "content":
        raise BadRequest('prediction must be {"type": "content", "content": ...}')
    return _text(value.get("content"), "prediction.content") or None


def _text(content: Any, where: str) -> str:
    """A content field: a string, or a list of {"type": "text", "text": ...} parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str) for part in content
    ):
        return "".join(part["text"] for part in content)
    raise BadRequest(f"{where} must be a string or a list of text parts")


def completion_id(kind: str = CHAT) -> str:
    return ("chatcmpl-" if kind == CHAT else "cmpl-") + uuid.uuid4().hex


def usage(stats: RequestStats, has_prediction: bool) -> dict:
    accepted = stats.accepted[COPY] if has_prediction else 0
    rejected = stats.drafted[COPY] - accepted if has_prediction else 0
    return {
        "prompt_tokens": stats.prompt_tokens,
        "completion_tokens": stats.completion_tokens,
        "total_tokens": stats.prompt_tokens + stats.completion_tokens,
        "completion_tokens_details": {
            "accepted_prediction_tokens": accepted,
            "rejected_prediction_tokens": rejected,
        },
    }


def finish_reason(stats: RequestStats) -> str:
    return "length" if stats.finish_reason == "length" else "stop"


def completion(cid: str, model: str, text: str, stats: RequestStats, has_prediction: bool, kind: str = CHAT) -> dict:
    content = {"message": {"role": "assistant", "content": text}} if kind == CHAT else {"text": text}
    return {
        "id": cid,
        "object": kind,
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, **content, "finish_reason": finish_reason(stats), "logprobs": None}],
        "usage": usage(stats, has_prediction),
    }


def chunk(
    cid: str, model: str, delta: dict, finish: str | None = None, usage_: dict | None = None, kind: str = CHAT
) -> dict:
    """One streamed chunk; the usage chunk (stream_options.include_usage) has no choices. A text
    completion's chunk carries its text where a chat chunk has the delta."""
    content = {"delta": delta} if kind == CHAT else {"text": delta.get("content", "")}
    body: dict[str, Any] = {
        "id": cid,
        "object": "chat.completion.chunk" if kind == CHAT else TEXT,
        "created": int(time.time()),
        "model": model,
        "choices": [] if usage_ is not None else [{"index": 0, **content, "finish_reason": finish, "logprobs": None}],
    }
    if usage_ is not None:
        body["usage"] = usage_
    return body


def error_body(message: str, kind: str, exit_code: int | None = None) -> dict:
    error: dict[str, Any] = {"message": message, "type": kind}
    if exit_code is not None:
        error["exit_code"] = exit_code
    return {"error": error}
