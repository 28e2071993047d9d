"""What an `Engine` is started with: one frozen, hashable set of options (engines are shared
per set of options, and the cost table is keyed by them)."""

from __future__ import annotations

from dataclasses import dataclass

from hsedit.drafting.chain import HYBRID, COPY
from hsedit.drafting.copy_drafter import DEFAULT_MAX_DRAFT, DEFAULT_MIN_MATCH, PRICED_MAX_DRAFT

AUTO_DTYPE = "auto"
DTYPES = (AUTO_DTYPE, "bfloat16", "float32")
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def machine_dtype() -> str:
    """bf16 where the hardware has it natively, else fp32 (what `--dtype auto` means here)."""
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        import torch

        if torch.cuda.is_available():
            return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            flags = next((line.split(":", 1)[1].split() for line in handle if line.startswith("flags")), [])
    except OSError:
        flags = []
    return "bfloat16" if any(flag in flags for flag in BF16_CPU_FLAGS) else "float32"


@dataclass(frozen=True)
class EngineOptions:
    model: str | None = None  # None: the embedded default model
    drafter: str = COPY
    num_speculative_tokens: int | None = None  # None: 31 for the hybrid (it prices each chain), else 15
    min_match: int = DEFAULT_MIN_MATCH
    dspark: str | None = None  # DSpark drafter directory; None: the shipped one (default model only)
    copy_acceptance: str | None = None  # copy acceptance coefficients; None: as `hsedit calibrate` left them
    compile: bool = False  # vLLM's compiled mode: faster steps, minutes to start
    # The target's dtype: "auto" is bf16 where the hardware computes it natively (a GPU, a CPU with
    # AVX512-BF16 or AMX), else fp32; "bfloat16" or "float32" to choose.
    dtype: str = "auto"
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
    def resolved_dtype(self) -> str:
        return machine_dtype() if self.dtype == AUTO_DTYPE else self.dtype

    @property
    def max_draft(self) -> int:
        """Draft tokens verified per request and step, at most."""
        if self.num_speculative_tokens is not None:
            return self.num_speculative_tokens
        return PRICED_MAX_DRAFT if self.drafter == HYBRID else DEFAULT_MAX_DRAFT
