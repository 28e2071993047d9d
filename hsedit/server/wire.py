"""The `/v1/apply` stream, both ways: the JSON lines the server writes, and the client's way of
reading them back into the StepEvents, Generation and errors the embedded engine gives, so that
`hsedit apply`, `batch` and the hooks print, check and write exactly as they do embedded.

One request body, then one JSON object per line:

    {"type": "start", "request_id", "prompt_tokens", "max_tokens", "plain_step_s"}
    {"type": "step", "pieces": [[text, source], ...], "text", "record": {source, drafted, matched, emitted, price},
     "finished": false}
    ... the last step: "finished": true, "finish_reason", "engine_reported": [drafted, accepted] | null
    {"type": "result", ...}   what `hsedit apply --json` prints: new_text, diff, validation, guard, check, stats
    {"type": "error", "message", "exit_code"}   instead of "result" when the answer is refused

A request refused before it starts (bad fields, a file too long for the context) is an HTTP
error with {"error": {"message", "type", "exit_code"}}. Light: no torch, no vLLM.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from hsedit.drafting.chain import StepRecord
from hsedit.engine.requests import Generation, GenerationRequest, StepEvent
from hsedit.errors import HseditError, error_for_exit_code

START, STEP, RESULT, ERROR = "start", "step", "result", "error"


def apply_body(
    path: str,
    code: str,
    instruction: str,
    update: str | None,
    *,
    max_tokens: int | None,
    temperature: float,
    seed: int | None,
) -> dict[str, Any]:
    """The client's request: the file's text travels, never its path on disk (the server reads
    and writes no files); `path` names the language and appears in the prompt and the diff."""
    return {
        "path": path,
        "code": code,
        "instruction": instruction,
        "update": update,
        "max_tokens": max_tokens,
        "temperature": temperature,
        "seed": seed,
    }


# -- server side -------------------------------------------------------------------------------
def start_message(request_id: str, request: GenerationRequest, plain_step_s: float | None) -> dict:
    """`request` as the engine took it: its prompt is token ids."""
    return {
        "type": START,
        "request_id": request_id,
        "prompt_tokens": len(request.prompt),
        "max_tokens": request.max_tokens,
        "plain_step_s": plain_step_s,
    }


def step_message(event: StepEvent) -> dict:
    record = event.record
    message = {
        "type": STEP,
        "pieces": [list(piece) for piece in event.pieces],
        "text": event.text,
        "record": {
            "source": record.source,
            "drafted": record.drafted,
            "matched": record.matched,
            "emitted": list(record.emitted),
            "price": record.price,
        },
        "finished": event.finished,
    }
    if event.finished:
        stats = event.stats
        message["finish_reason"] = stats.finish_reason
        message["engine_reported"] = list(stats.engine_reported) if stats.engine_reported else None
    return message


def error_message(error: HseditError) -> dict:
    return {"type": ERROR, "message": str(error), "exit_code": error.exit_code}


# -- client side -------------------------------------------------------------------------------
@dataclass
class StreamReader:
    """Rebuilds one request's StepEvents and Generation from its messages, on the client's clock
    (tok/s and time to first token are what the user waited, network included)."""

    key: int
    request_id: str = ""
    request: GenerationRequest | None = None  # what the server ran (its max_tokens)
    generation: Generation = field(default_factory=Generation)
    finished: bool = False

    def __post_init__(self) -> None:
        self.generation.stats.started_at = time.perf_counter()

    def feed(self, message: dict) -> StepEvent | None:
        """The StepEvent a "step" message stands for (None for the others)."""
        kind = message.get("type")
        stats = self.generation.stats
        if kind == START:
            self.request_id = str(message["request_id"])
            self.request = GenerationRequest([], max_tokens=int(message["max_tokens"]))
            stats.prompt_tokens = int(message["prompt_tokens"])
            stats.plain_estimate_s = message.get("plain_step_s")
            return None
        if kind == STEP:
            fields = message["record"]
            record = StepRecord(
                fields["source"], int(fields["drafted"]), int(fields["matched"]),
                tuple(int(t) for t in fields["emitted"]), price=fields.get("price"),
            )
            stats.record(record, time.perf_counter())
            sources = record.token_sources()
            self.generation.token_ids += list(record.emitted)
            self.generation.sources += sources
            self.generation.text += message["text"]
            if message.get("finished"):
                stats.finished_at = time.perf_counter()
                stats.finish_reason = message.get("finish_reason")
                reported = message.get("engine_reported")
                stats.engine_reported = (int(reported[0]), int(reported[1])) if reported else None
                self.finished = True
            pieces = [(str(text), str(source)) for text, source in message["pieces"]]
            return StepEvent(
                self.key, self.request_id, list(record.emitted), sources, pieces, message["text"],
                self.finished, record, stats,
            )
        if kind == ERROR and not self.finished:
            raise error_for_exit_code(int(message.get("exit_code", 1)), str(message.get("message", "")))
        return None
