"""Per-request drafting across a batch, independent of any engine.

Each engine step the glue hands over one `RowView` per batch row: the request's id, its
whole context so far, and the tokens the target just emitted for it. The planner

1. books the verification of last step's chain (how many draft tokens the target kept),
2. brings each drafter's per-request state up to date with the new tokens,
3. asks every drafter for a chain and lets the selector keep one per request.

State is keyed by request id, never by batch row: engines reuse and compact rows.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from hsedit.drafting.chain import DSPARK, NGRAM, PROBE, TARGET, CopyFeatures, DraftChain
from hsedit.drafting.copy_acceptance import CopyAcceptanceModel
from hsedit.drafting.hybrid import HybridSelector
from hsedit.drafting.model_drafter import FeatureRows, ModelDrafter
from hsedit.drafting.ngram import DEFAULT_MAX_DRAFT, DEFAULT_MIN_MATCH, CopyIndex

DRAFTERS = (NGRAM, DSPARK)
MAX_TRACKED_REQUESTS = 4096  # bound on state kept for requests nobody released


@dataclass(frozen=True)
class RowView:
    req_id: str
    context: np.ndarray  # [num_tokens] prompt + every emitted token, int
    sampled: Sequence[int]  # tokens the target emitted for this request this step
    max_draft: int  # how many draft tokens the engine can verify for this request
    features: FeatureRows | None = None  # target features computed this step (model drafter only)


@dataclass(frozen=True)
class StepRecord:
    """One engine step of one request: what was verified and what came out."""

    source: str | None  # drafter whose chain was verified, None if there was none
    drafted: int
    accepted: int
    emitted: tuple[int, ...]  # accepted draft tokens, then the target's own token
    # The proposal's copy features with the verification outcome: calibration data.
    copy_features: CopyFeatures | None = None
    price: float | None = None  # the hybrid selector's price per verified token that step

    def token_sources(self) -> list[str]:
        return [self.source or TARGET] * self.accepted + [TARGET] * (len(self.emitted) - self.accepted)


@dataclass
class _RequestState:
    index: CopyIndex
    pending: DraftChain | None = None
    pending_price: float | None = None
    records: list[StepRecord] = field(default_factory=list)


class DraftPlanner:
    """Runs the enabled drafters for every request and keeps one chain per request."""

    def __init__(
        self,
        drafters: Sequence[str] = (NGRAM,),
        max_draft: int = DEFAULT_MAX_DRAFT,
        min_match: int = DEFAULT_MIN_MATCH,
        model_drafter: ModelDrafter | None = None,
        copy_model: CopyAcceptanceModel | None = None,
        selector: HybridSelector | None = None,
    ) -> None:
        unknown = set(drafters) - set(DRAFTERS)
        if unknown:
            raise ValueError(f"unknown drafter(s): {', '.join(sorted(unknown))}")
        if (DSPARK in drafters) != (model_drafter is not None):
            raise ValueError("the dspark drafter needs a model drafter, and only it does")
        if selector is not None and copy_model is None and NGRAM in drafters:
            raise ValueError("the hybrid selector needs the copy acceptance model")
        self.drafters = tuple(drafters)
        self.model_drafter = model_drafter
        self.copy_model = copy_model
        self.selector = selector
        self.max_draft = max_draft
        self.min_match = min_match
        self._states: OrderedDict[str, _RequestState] = OrderedDict()
        # When set, every request gets this many filler draft tokens: a real verification of a
        # known size, used to profile the engine's cost table.
        self.probe_length: int | None = None

    # -- engine-facing -------------------------------------------------------------------
    def step(self, rows: Sequence[RowView]) -> list[list[int]]:
        live: list[tuple[int, RowView, _RequestState]] = []
        for i, row in enumerate(rows):
            if self.model_drafter is not None and row.features is not None:
                self.model_drafter.observe(row.req_id, row.features)
            if not row.sampled:  # a prefill chunk that emitted nothing yet
                continue
            state = self._state_for(row.req_id)
            state.records.append(_verification_record(state.pending, row.sampled, state.pending_price))
            _sync_index(state.index, row.context)
            live.append((i, row, state))
        candidates = self._propose([(row, state) for _, row, state in live])
        chosen = self._select(candidates)
        step_price = self.selector.last_price.per_token if self.selector and self.selector.last_price else None
        drafts: list[list[int]] = [[] for _ in rows]
        for (i, _, state), chain in zip(live, chosen):
            state.pending = chain
            state.pending_price = step_price
            drafts[i] = chain.tokens if chain else []
        return drafts

    def take_records(self, req_id: str) -> list[StepRecord]:
        """Step records of a request since the last call (oldest first)."""
        state = self._states.get(req_id)
        if state is None:
            return []
        records, state.records = state.records, []
        return records

    def release(self, req_id: str) -> None:
        self._states.pop(req_id, None)
        if self.model_drafter is not None:
            self.model_drafter.release(req_id)

    # -- internals -----------------------------------------------------------------------
    def _propose(self, live: Sequence[tuple[RowView, _RequestState]]) -> list[list[DraftChain]]:
        """Every enabled drafter's chain for every live request."""
        limits = [min(self.max_draft, row.max_draft) for row, _ in live]
        if self.probe_length is not None:
            return [
                [DraftChain(PROBE, [int(row.context[-1])] * min(self.probe_length, limit))]
                for (row, _), limit in zip(live, limits)
            ]
        neural: dict[str, DraftChain] = {}
        if DSPARK in self.drafters:
            neural = self.model_drafter.propose(
                [(row.req_id, int(row.context[-1]), limit) for (row, _), limit in zip(live, limits)]
            )
        candidates = []
        for (row, state), limit in zip(live, limits):
            chains = []
            if NGRAM in self.drafters:
                chain = state.index.propose(limit)
                if chain is not None and chain.tokens:
                    if self.copy_model is not None:
                        chain.survival = self.copy_model.survival(chain.copy_features, len(chain))
                    chains.append(chain)
            if row.req_id in neural:
                chains.append(neural[row.req_id])
            candidates.append(chains)
        return candidates

    def _select(self, candidates: list[list[DraftChain]]) -> list[DraftChain | None]:
        if self.selector is not None and self.probe_length is None:
            return self.selector.select(candidates)
        # A single drafter (or a probe) proposes at most one chain per request.
        return [max(chains, key=len) if chains else None for chains in candidates]

    def _state_for(self, req_id: str) -> _RequestState:
        state = self._states.get(req_id)
        if state is None:
            state = self._states[req_id] = _RequestState(CopyIndex(self.min_match))
            while len(self._states) > MAX_TRACKED_REQUESTS:
                self._states.popitem(last=False)
        else:
            self._states.move_to_end(req_id)
        return state


def _verification_record(chain: DraftChain | None, sampled: Sequence[int], price: float | None) -> StepRecord:
    emitted = tuple(int(t) for t in sampled)
    if chain is None:
        return StepRecord(source=None, drafted=0, accepted=0, emitted=emitted, price=price)
    accepted = 0
    for draft_token, token in zip(chain.tokens, emitted[:-1]):
        if draft_token != token:
            break
        accepted += 1
    return StepRecord(chain.source, len(chain), accepted, emitted, chain.copy_features, price)


def _sync_index(index: CopyIndex, context: np.ndarray) -> None:
    """Append the tokens the index has not seen; rebuild if the context is not an extension."""
    known = len(index)
    if known > len(context) or (known and int(context[known - 1]) != index.tokens[-1]):
        index.reset()
        known = 0
    index.extend(context[known:].tolist())
