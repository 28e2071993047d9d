"""vLLM's engine, started from hsedit's `EngineOptions`: the arguments vLLM gets (its drafter,
hsedit's proposer options in `additional_config`, the process mode), the stat logger that
counts its drafts, and the start-up's quiet. `engine.Engine` owns what this starts."""

from __future__ import annotations

import gc
import json
import mmap
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Union

from hsedit.drafting.chain import DSPARK, HYBRID, NO_DRAFTER, OWN_DRAFTERS, VLLM_NGRAM, VLLM_SUFFIX
from hsedit.engine import vllm_proposer
from hsedit.engine.options import EngineOptions
from hsedit.engine.provision import resolve_copy_acceptance, resolve_drafter
from hsedit.errors import ModelError

Proposer = Union[vllm_proposer.HseditProposer, vllm_proposer.RemoteProposer]


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


def start_vllm(options: EngineOptions, model_path: str, counts: SpecCounts) -> tuple[Any, Proposer | None]:
    """vLLM's engine for `options`, its draft counts adding into `counts`, and hsedit's handle on
    the proposer vLLM built (None with vLLM's own drafters or none)."""
    try:
        with imported_out_of_collection(VLLM_ENGINE_MODULE):
            from vllm.engine.arg_utils import EngineArgs
            from vllm.usage.usage_lib import UsageContext
            from vllm.v1.engine.llm_engine import LLMEngine
            from vllm.v1.executor import Executor
    except Exception as exc:  # pragma: no cover - depends on the installation
        raise ModelError(f"vLLM is not importable: {one_line(exc)}") from exc
    kwargs: dict[str, Any] = dict(
        model=model_path,
        dtype=options.resolved_dtype,
        enforce_eager=not options.compile,
        gpu_memory_utilization=0.5,
        kv_cache_memory_bytes=int(options.kv_cache_gib * (1 << 30)),
        seed=options.seed,
        disable_log_stats=False,  # the scheduler's spec-decode counts reach `counts`
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
            proposer = replace(proposer, copy_acceptance=resolve_copy_acceptance(options.copy_acceptance, options.model))
        kwargs["speculative_config"] = {
            "method": "custom_class",
            "model": vllm_proposer.PROPOSER_CLASS,
            "num_speculative_tokens": num_speculative_tokens,
        }
        kwargs["additional_config"] = proposer.to_config()
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
    if seeds_sampling(options.drafter):
        kwargs["worker_extension_cls"] = vllm_proposer.WORKER_EXTENSION
    # vLLM-CPU reads this when it picks the executor: "0" keeps the model runner (and our
    # proposer, its step records) in this process; "1" puts it in a worker process.
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0" if options.proposer_in_process else "1"
    try:
        config = EngineArgs(**kwargs).create_engine_config(UsageContext.ENGINE_CONTEXT)
        # Built directly rather than by `from_engine_args`: that one takes the process mode
        # from the environment, and hsedit's option decides it.
        # Compiled mode traces the model while it starts: no torch-function mode under dynamo.
        with nullcontext() if options.compile else lazily_paged_kv_cache():
            core = LLMEngine(
                vllm_config=config,
                executor_class=Executor.get_class(config),
                log_stats=True,
                stat_loggers=[_spec_counter_factory(counts)],
                multiprocess_mode=options.multiprocessing,
            )
        handle = vllm_proposer.proposer_of(core, options.proposer_in_process, num_speculative_tokens) if own else None
        if seeds_sampling(options.drafter):
            core.collective_rpc("hsedit_install_seeded_sampling")
    except Exception as exc:
        raise ModelError(f"cannot start vLLM on {model_path}: {one_line(exc)}") from exc
    return core, handle


def seeds_sampling(drafter: str) -> bool:
    """Whether sampled requests are seeded (`drafting.seeded_sampling`: drafted, exact, the same
    answer for the same seed whichever of these drafters runs). With vLLM's own drafters vLLM
    samples, as it does alone."""
    return drafter in OWN_DRAFTERS or drafter == NO_DRAFTER


VLLM_ENGINE_MODULE = "vllm.v1.engine.llm_engine"


@contextmanager
def imported_out_of_collection(module: str) -> Iterator[None]:
    """Import `module` (the first time in this process) with Python's cyclic collector paused,
    then move every object that exists out of its reach for good (`gc.freeze`).

    Why: vLLM's import allocates about a million objects that live as long as the process. The
    collector's automatic full passes over them cost ~1.5 s of a start on a 2-core AVX2 CPU, and
    vLLM's own `gc.collect()` calls while it builds the engine walk them all again (five calls,
    ~1.2 s). Frozen, they are walked by neither; the collector runs as before on what is
    allocated afterwards, worker processes forked later included. Only the first time: a later
    start in the same process could freeze a closed engine's garbage, which would never be freed."""
    if module in sys.modules:
        yield
        return
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()


LAZY_ZEROS_MIN_BYTES = 64 << 20


@contextmanager
def lazily_paged_kv_cache() -> Iterator[None]:
    """While vLLM starts in this process, serve its KV cache (one `torch.zeros` of int8 holding
    every layer's blocks, 1 GiB by default) from an anonymous memory mapping instead.

    Why: writing a gibibyte of zeros costs 1.2-3.5 s of every start on these machines (first-touch
    page faults), and an edit uses a few megabytes of it. The kernel hands out an anonymous
    mapping's pages already zeroed, on first write, so the cache reads exactly as `torch.zeros`
    would and only the blocks requests write are ever paid for. Only CPU int8 buffers of 64 MiB
    and more are served so (vLLM allocates nothing else of that shape while it starts); a worker in
    another process (`EngineOptions.multiprocessing`) allocates as vLLM does."""
    import torch
    from torch.overrides import TorchFunctionMode

    class LazyZeros(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is torch.zeros and _is_large_cpu_int8(args, kwargs):
                return zeroed_mapping(_numel(args, kwargs))
            return func(*args, **kwargs)

    with LazyZeros():
        yield


def zeroed_mapping(nbytes: int):
    """A 1-D int8 CPU tensor of `nbytes` zeros backed by an anonymous mapping (the tensor keeps
    the mapping alive)."""
    import torch

    return torch.frombuffer(mmap.mmap(-1, nbytes), dtype=torch.int8)


def _numel(args: tuple, kwargs: dict) -> int:
    size = kwargs.get("size", args[0] if len(args) == 1 else args)
    if isinstance(size, int):
        return size
    total = 1
    for dim in size:
        total *= int(dim)
    return total


def _is_large_cpu_int8(args: tuple, kwargs: dict) -> bool:
    import torch

    if kwargs.get("dtype") is not torch.int8 or torch.device(kwargs.get("device") or "cpu").type != "cpu":
        return False
    if kwargs.get("out") is not None or kwargs.get("requires_grad") or kwargs.get("pin_memory"):
        return False
    if not args and "size" not in kwargs:
        return False
    return _numel(args, kwargs) >= LAZY_ZEROS_MIN_BYTES


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


def reported_spec_counts(completion: Any) -> tuple[int, int] | None:
    metrics = getattr(completion, "spec_decode_metrics", None)
    if metrics is None:
        return None
    accepted = sum(j * count for j, count in enumerate(metrics.histogram))
    return int(metrics.num_draft_tokens), int(accepted)


@contextmanager
def silenced_stderr(enabled: bool) -> Iterator[None]:
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


def one_line(exc: BaseException) -> str:
    """The gist of an exception on one line (pydantic puts the useful part on line 2 or 3)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return " / ".join(lines[:3])[:400] or type(exc).__name__
