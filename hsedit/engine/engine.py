"""vLLM, streamed step by step with every token's source.

One `Engine` owns one vLLM engine. `stream()` runs a set of requests concurrently and yields
after every engine step, for every request that moved, the tokens it gained and where each
came from: the target model itself, or an accepted draft token and which drafter drafted it.
By default vLLM runs in this process, and so does hsedit's proposer; with vLLM's engine core or
workers in other processes (`multiprocessing`, tensor parallelism) the proposer drafts there and
the sources are known per request only (vLLM's spec-decode counts).
"""

from __future__ import annotations

import gc
import itertools
import logging
import os
import random
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from hsedit.drafting.chain import DSPARK, OWN_DRAFTERS, TARGET, VLLM_BUILTINS, StepRecord, attribute_step, check_drafter
from hsedit.engine import vllm_proposer
from hsedit.engine.costs import CostTable, engine_cost_table
from hsedit.engine.detokenize import IncrementalText
from hsedit.engine.options import EngineOptions
from hsedit.engine.provision import DrafterTarget, drafter_target, resolve_drafter, resolve_model
from hsedit.engine.repetition import REPETITION, ends_in_loop
from hsedit.engine.requests import Generation, GenerationRequest, StepEvent
from hsedit.engine.stats import RequestStats
from hsedit.engine.vllm_engine import (
    Proposer,
    SpecCounts,
    reported_spec_counts,
    seeds_sampling,
    silenced_stderr,
    start_vllm,
)
from hsedit.engine.vllm_model_runner import SEEDED_SAMPLING_ARG
from hsedit.errors import ContextTooLongError

__all__ = [
    "GREEDY_TOLERANCE",
    "Engine",
    "EngineOptions",
    "Generation",
    "GenerationRequest",
    "StepEvent",
    "shared_engine",
    "within_greedy_tolerance",
]




# How far below the model's top choice (nats) an emitted token may lie and still be greedy
# decoding: CPU kernels are not batch-invariant, so a k-token verification step and a one-token
# step can round a near tie apart. bf16 keeps 8 bits of mantissa: a logit between 32 and 64 is
# rounded to 0.25, and a tie flips within two such steps; a wrong token lies whole nats below.
GREEDY_TOLERANCE = {"float32": 0.01, "bfloat16": 0.5, "float16": 0.5}
# A gap is the difference of two float32 log-probabilities of one row, each rounded on its own:
# logits exactly 0.5 apart in bf16 can read 0.50000006. Gaps are compared to a tolerance at this
# resolution, far below the step between any two logits of a bf16 row that could tie.
GAP_RESOLUTION = 1e-4


def within_greedy_tolerance(gap: float, tolerance: float) -> bool:
    """Whether a token `gap` nats below the top choice is greedy decoding up to the kernels' noise."""
    return gap <= tolerance + GAP_RESOLUTION


class Engine:
    def __init__(self, options: EngineOptions | None = None) -> None:
        self.options = options = options or EngineOptions()
        check_drafter(options.drafter, "drafter")
        quiet = options.quiet and not os.environ.get("HSEDIT_VERBOSE")
        if quiet:
            # vLLM reads its level once, at import; its start-up chatter is not the user's business.
            os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
            logging.getLogger("vllm").setLevel(logging.ERROR)
            warnings.filterwarnings("ignore", category=FutureWarning)
        with silenced_stderr(quiet):
            self.model_path = resolve_model(options.model)
            self.counts = SpecCounts()
            self.proposer: Proposer | None
            self.core, self.proposer = start_vllm(options, self.model_path, self.counts)
            self.tokenizer = self.core.get_tokenizer()
            self.max_model_len = int(self.core.model_config.max_model_len)
            # Whether the DSpark drafter (where one runs) was trained for this target.
            self.drafter_target: DrafterTarget | None = None
            if DSPARK in OWN_DRAFTERS.get(options.drafter, ()):
                self.drafter_target = drafter_target(resolve_drafter(options.dspark, options.model), self.model_path)
            self._ids = itertools.count()
            self._running: dict[str, _Tracked] = {}  # request id -> state, until it finishes
            self.cost_table: CostTable | None = None  # profiling streams requests, which read it
            self.cost_table = engine_cost_table(self) if options.profile_costs else None
            if self.proposer is not None and self.cost_table is not None:
                self.proposer.set_costs(list(self.cost_table.tokens), list(self.cost_table.seconds))

    # -- running ---------------------------------------------------------------------------
    def chat_prompt(self, text: str) -> str:
        """A one-turn chat prompt in the model's own template, ready for the answer."""
        return self.tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
        )

    def close(self) -> None:
        """Stop vLLM's engine core and drop it, so a long-running caller gets its memory back."""
        core, self.core = self.core, None
        shutdown = getattr(getattr(core, "engine_core", None), "shutdown", None)
        if shutdown is not None:
            shutdown()
        gc.collect()

    @property
    def flops_per_token(self) -> float | None:
        """The target's matmul FLOPs per token (weights only: 2 per parameter of the projections
        and the LM head; attention over the context left out), from its HF config."""
        import json
        from pathlib import Path

        path = Path(self.model_path) / "config.json"
        if not path.is_file():
            return None
        c = json.loads(path.read_text())
        h, layers, inter, vocab = c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"], c["vocab_size"]
        head_dim = c.get("head_dim") or h // c["num_attention_heads"]
        kv = c.get("num_key_value_heads", c["num_attention_heads"]) * head_dim
        return 2.0 * (layers * (2 * h * h + 2 * h * kv + 3 * h * inter) + h * vocab)

    def greedy_gaps(self, prompt_ids: Sequence[int], answer_ids: Sequence[int]) -> list[float]:
        """Per answer token: how far its log-probability lies below the model's top choice at that
        position (0.0 where it is the top choice), from one prefill of prompt + answer. Greedy
        decoding at any batch and with any drafter writes only top choices up to the kernels'
        noise (`GREEDY_TOLERANCE`), so a wrong token shows whole nats below the top."""
        gaps = []
        for token, scored in zip(answer_ids, self.answer_logprobs(prompt_ids, answer_ids)):
            gaps.append(max(scored.values()) - scored[token])
        return gaps

    def answer_logprobs(self, prompt_ids: Sequence[int], answer_ids: Sequence[int], top: int = 1) -> list[dict[int, float]]:
        """Per answer token, from one prefill of prompt + answer: the log-probability of that token
        and of the model's `top` choices there, by token id."""
        from vllm import SamplingParams

        if not answer_ids:
            return []
        full = list(prompt_ids) + list(answer_ids)
        request_id = f"answer-logprobs-{next(self._ids)}"
        self.core.add_request(request_id, {"prompt_token_ids": full}, SamplingParams(max_tokens=1, temperature=0.0,
                                                                                     prompt_logprobs=top))
        finished = None
        while finished is None:
            finished = next((o for o in self.core.step() if o.request_id == request_id and o.finished), None)
        return [{t: entry.logprob for t, entry in finished.prompt_logprobs[position].items()}
                for position in range(len(prompt_ids), len(full))]

    def token_ids(self, text_or_ids: str | Sequence[int]) -> list[int]:
        """A prompt or prediction as token ids: text tokenized, ids as they are."""
        return self.tokenizer.encode(text_or_ids) if isinstance(text_or_ids, str) else list(text_or_ids)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text))

    def answer_room(self, prompt_ids: Sequence[int], needed: int, what: str) -> int:
        """The tokens an answer may take after `prompt_ids`: the one check that a request fits
        the model's context, for every endpoint. Fewer than `needed` is ContextTooLongError,
        its message starting with `what` (the request in the user's words)."""
        room = self.max_model_len - len(prompt_ids)
        if room < needed:
            raise ContextTooLongError(
                f"{what}: the prompt takes {len(prompt_ids)} tokens and the answer {needed} more, "
                f"but the model takes {self.max_model_len}"
            )
        return room

    # -- one request at a time: what a server's engine thread drives ---------------------
    def add(self, request: GenerationRequest, key: Any) -> str:
        """Queue a request; it joins the running batch at the next `step()`. Its events carry
        `key` as their `key` (the caller's handle: a position, a ticket). Returns its id, for `abort`."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        prompt_ids = self.token_ids(request.prompt)
        extra_args = {}
        if request.prediction and self.proposer is not None:
            # The copy drafter's predicted output travels with the request to whichever process drafts.
            extra_args[vllm_proposer.PREDICTION_ARG] = [int(t) for t in self.token_ids(request.prediction)]
        temperature, seed = request.temperature, request.seed
        if temperature > 0 and seeds_sampling(self.options.drafter):
            # vLLM sees a greedy request; the runner pins each step's logits to the request's draw.
            seed = random.getrandbits(63) if seed is None else seed
            extra_args[SEEDED_SAMPLING_ARG] = {"seed": int(seed), "temperature": float(temperature)}
            temperature, seed = 0.0, None
        params = SamplingParams(
            temperature=temperature,
            max_tokens=request.max_tokens,
            seed=seed,
            stop=request.stop,
            logprobs=request.logprobs or None,
            output_kind=RequestOutputKind.DELTA,
            skip_special_tokens=True,
            extra_args=extra_args or None,
        )
        external = f"hsedit-{next(self._ids)}"
        plain_step = self.cost_table.step_time(1) if self.cost_table else None
        stats = RequestStats(prompt_tokens=len(prompt_ids), plain_estimate_s=plain_step)
        stats.started_at = time.perf_counter()
        internal = self.core.add_request(external, {"prompt_token_ids": prompt_ids}, params)
        item = _Tracked(key, internal, stats, IncrementalText(self.tokenizer), self.counts.snapshot())
        if request.stop_repeating:
            prediction = request.prediction or ""
            item.reference = prediction if isinstance(prediction, str) else self.tokenizer.decode(list(prediction))
        if self._running:  # it shares the engine: the engine-wide counts are no longer its own
            item.alone = False
            for other in self._running.values():
                other.alone = False
        self._running[external] = item
        return external

    def step(self) -> list[StepEvent]:
        """One engine step: an event for every request that moved (none while all prefill)."""
        outputs = self.core.step()
        now = time.perf_counter()
        events = []
        for output in outputs:
            item = self._running.get(output.request_id)
            if item is None:
                continue
            event = self._event(item, output, now)
            if item.reference is not None and not event.finished:
                item.answer += event.text
                if "\n" in event.text and ends_in_loop(item.answer, item.reference):
                    self.core.abort_request([output.request_id])
                    event = self._stopped_in_loop(item, event, now)
            if event.finished:
                del self._running[output.request_id]
                self._forget(item)
                if item.stats.engine_reported is None and item.alone:
                    # vLLM leaves out its per-request counts when a stop string ends the
                    # request; alone in the engine, the engine-wide counts are the request's.
                    delta = self.counts.since(item.counts_at_start)
                    if delta.drafts:
                        item.stats.engine_reported = (delta.draft_tokens, delta.accepted_tokens)
            events.append(event)
        return events

    def abort(self, request_ids: Iterable[str]) -> None:
        """Stop these requests now and free their KV cache (unknown or finished ids are ignored)."""
        items = {rid: self._running.pop(rid) for rid in request_ids if rid in self._running}
        if items:
            self.core.abort_request(list(items))
            for item in items.values():
                self._forget(item)

    @property
    def busy(self) -> bool:
        return bool(self._running)

    def _forget(self, item: _Tracked) -> None:
        if self.proposer is not None:
            self.proposer.release(item.internal_id)

    def stream(
        self, requests: Iterable[GenerationRequest], *, max_in_flight: int | None = None
    ) -> Iterator[StepEvent]:
        """Run the requests concurrently, yielding after each engine step.

        Args:
            requests: what to generate; read lazily, so a caller may produce them as room frees.
            max_in_flight: at most this many run at once; the next joins the running batch as
                soon as one finishes (continuous batching). None: all at once.

        Yields:
            StepEvent: one per request that moved in a step (its `key` is the request's position
            in `requests`), in step order; a request's last event has `finished` True. Leaving
            the loop early aborts whatever still runs and frees its KV cache."""
        waiting = enumerate(requests)
        mine: set[str] = set()

        def admit() -> None:
            while max_in_flight is None or len(mine) < max_in_flight:
                entry = next(waiting, None)
                if entry is None:
                    return
                index, request = entry
                mine.add(self.add(request, key=index))

        try:
            admit()
            while mine:
                for event in self.step():
                    if event.finished:
                        mine.discard(event.request_id)
                    yield event
                admit()
        finally:
            self.abort(mine)

    def generate_each(
        self,
        requests: Iterable[GenerationRequest],
        *,
        max_in_flight: int | None = None,
        on_step: Callable[[StepEvent], None] | None = None,
    ) -> Iterator[tuple[int, Generation]]:
        """Each request's whole generation, as soon as it finishes.

        Args:
            requests, max_in_flight: as for `stream`.
            on_step: called with every StepEvent first (a live view, a progress bar).

        Yields:
            (position, Generation): the request's position in `requests` and what it produced,
            in the order requests finish."""
        running: dict[int, Generation] = {}
        for event in self.stream(requests, max_in_flight=max_in_flight):
            if on_step is not None:
                on_step(event)
            result = running.setdefault(event.key, Generation())
            result.token_ids += event.token_ids
            result.sources += event.sources
            result.stats = event.stats
            result.text += event.text
            result.logprobs += event.logprobs
            if event.finished:
                yield event.key, running.pop(event.key)

    def generate(
        self,
        requests: Sequence[GenerationRequest],
        on_step: Callable[[StepEvent], None] | None = None,
    ) -> list[Generation]:
        """Every request's Generation, in the order of `requests`, once all have finished (all
        run concurrently). `on_step` as for `generate_each`."""
        results: list[Generation | None] = [None] * len(requests)
        for index, generation in self.generate_each(requests, on_step=on_step):
            results[index] = generation
        return results  # type: ignore[return-value]

    def _event(self, item: _Tracked, output: Any, now: float) -> StepEvent:
        completion = output.outputs[0]
        new_ids = [int(t) for t in completion.token_ids]
        step = self._attribute(item, new_ids)
        sources = step.token_sources()
        item.stats.record(step, now)
        pieces: list[tuple[str, str]] = []
        for source, run in itertools.groupby(zip(new_ids, sources), key=lambda pair: pair[1]):
            text = item.text.push([token for token, _ in run])
            if text:
                pieces.append((text, source))
        if output.finished:
            item.stats.finished_at = now
            item.stats.finish_reason = completion.finish_reason
            item.stats.engine_reported = reported_spec_counts(completion)
            item.stats.cached_prompt_tokens = int(getattr(output, "num_cached_tokens", None) or 0)
            tail = item.text.flush()
            if tail:
                pieces.append((tail, sources[-1] if sources else TARGET))
        logprobs = [{int(t): entry.logprob for t, entry in scored.items()} for scored in completion.logprobs or ()]
        return StepEvent(
            item.key, output.request_id, new_ids, sources, pieces, completion.text, output.finished, step, item.stats,
            logprobs,
        )

    def _stopped_in_loop(self, item: _Tracked, event: StepEvent, now: float) -> StepEvent:
        """The request's last event: vLLM has been told to drop it, its answer ends in a loop."""
        item.stats.finished_at = now
        item.stats.finish_reason = REPETITION
        tail = item.text.flush()
        pieces = event.pieces + ([(tail, event.sources[-1] if event.sources else TARGET)] if tail else [])
        return replace(event, pieces=pieces, finished=True)

    def _attribute(self, item: _Tracked, new_ids: list[int]) -> StepRecord:
        """This step's record for the request, from the proposer where it runs in sight."""
        if self.proposer is not None:
            item.records.extend(self.proposer.records_for(item.internal_id))
        record = item.records.popleft() if item.records else None
        out_of_sight = self.options.drafter in VLLM_BUILTINS or isinstance(self.proposer, vllm_proposer.RemoteProposer)
        return attribute_step(record, tuple(new_ids), self.options.drafter if out_of_sight else None)


_shared_engines: dict[EngineOptions, Engine] = {}


def shared_engine(options: EngineOptions) -> Engine:
    """One engine per set of options in this process (engines take seconds to start)."""
    engine = _shared_engines.get(options)
    if engine is None:
        engine = _shared_engines[options] = Engine(options)
    return engine


@dataclass
class _Tracked:
    """A request the engine is running, by its id."""

    key: Any
    internal_id: str
    stats: RequestStats
    text: IncrementalText
    counts_at_start: SpecCounts
    records: deque[StepRecord] = field(default_factory=deque)
    alone: bool = True  # no other request of this stream ran beside it
    reference: str | None = None  # with `stop_repeating`: the text a loop is looked for in
    answer: str = ""  # its answer so far, while a loop is looked for


