"""What an `Engine` is started with: one frozen, hashable set of options (engines are shared
per set of options, and the cost table is keyed by them)."""

from __future__ import annotations

from dataclasses import dataclass

from hsedit.drafting.chain import HYBRID, COPY
from hsedit.drafting.ngram import DEFAULT_MAX_DRAFT, DEFAULT_MIN_MATCH, PRICED_MAX_DRAFT


@dataclass(frozen=True)
class EngineOptions:
    model: str | None = None  # None: the embedded default model
    drafter: str = COPY
    num_speculative_tokens: int | None = None  # None: 31 for the hybrid (it prices each chain), else 15
    min_match: int = DEFAULT_MIN_MATCH
    dspark: str | None = None  # DSpark drafter directory; None: the shipped one (default model only)
    copy_acceptance: str | None = None  # copy acceptance coefficients; None: as `hsedit calibrate` left them
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
