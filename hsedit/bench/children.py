"""vLLM's own drafters, each in an engine process of its own: once one has loaded numba, vLLM
0.32 on CPU starts no further engine in that process. A `ChildEngine` is what the bench's runs
need of an `Engine`; requests are made (tokenized) here, with the parent's plain engine of the
same model and dtype."""

from __future__ import annotations

import multiprocessing
from collections.abc import Sequence

from hsedit.engine.engine import Engine, EngineOptions, Generation, GenerationRequest


class ChildEngine:
    proposer = None
    drafter_target = None  # it runs one of vLLM's own drafters, never DSpark

    def __init__(self, options: EngineOptions, like: Engine, extra_path: str | None = None) -> None:
        from hsedit.bench.methods import UnavailableMethod

        context = multiprocessing.get_context("spawn")
        self._conn, theirs = context.Pipe()
        self._process = context.Process(target=_serve_engine, args=(options, theirs, extra_path), daemon=True)
        self._process.start()
        kind, payload = self._conn.recv()
        if kind != "ready":
            self._process.join(timeout=10)
            raise UnavailableMethod(f"{options.drafter} did not start: {payload}")
        self.options = options
        self.cost_table = payload
        self._like = like  # the same model in this process: its tokenizer and context

    @property
    def tokenizer(self):
        return self._like.tokenizer

    @property
    def max_model_len(self) -> int:
        return self._like.max_model_len

    @property
    def flops_per_token(self) -> float | None:
        return self._like.flops_per_token

    def count_tokens(self, text: str) -> int:
        return self._like.count_tokens(text)

    def chat_prompt(self, text: str) -> str:
        return self._like.chat_prompt(text)

    def answer_room(self, prompt_ids: Sequence[int], needed: int, what: str) -> int:
        return self._like.answer_room(prompt_ids, needed, what)

    def generate(self, requests: list[GenerationRequest]) -> list[Generation]:
        self._conn.send(list(requests))
        kind, payload = self._conn.recv()
        if kind != "ok":
            raise RuntimeError(f"the child engine failed: {payload}")
        return payload


def _serve_engine(options: EngineOptions, conn, extra_path: str | None = None) -> None:
    import sys

    if extra_path:  # before vLLM starts: it finds its plugins on the path then
        sys.path.insert(0, extra_path)

    try:
        engine = Engine(options)
    except Exception as exc:  # reported to the parent as the method's skip reason
        conn.send(("error", " ".join(str(exc).split())[:300]))
        return
    conn.send(("ready", engine.cost_table))
    while (requests := conn.recv()) is not None:
        try:
            conn.send(("ok", engine.generate(requests)))
        except Exception as exc:
            conn.send(("error", str(exc)))
