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

from hsedit.spec.chain import NGRAM, PROBE, TARGET, CopyFeatures, DraftChain
from hsedit.spec.ngram import DEFAULT_MAX_DRAFT, DEFAULT_MIN_MATCH, CopyIndex

DRAFTERS = (NGRAM,)
MAX_TRACKED_REQUESTS = 4096  # bound on state kept for requests nobody released


@dataclass(frozen=True)
class RowView:
    req_id: str
    context: np.ndarray  # [num_tokens] prompt + every emitted token, int
    sampled: Sequence[int]  # tokens the target emitted for this request this step
    max_draft: int  # how many draft tokens the engine can verify for this request


@dataclass(frozen=True)
class StepRecord:
    """One engine step of one request: what was verified and what came out."""

    source: str | None  # drafter whose chain was verified, None if there was none
    drafted: int
    accepted: int
    emitted: tuple[int, ...]  # accepted draft tokens, then the target's own token
    # The proposal's copy features with the verification outcome: calibration data.
    copy_features: CopyFeatures | None = None

    def token_sources(self) -> list[str]:
        return [self.source or TARGET] * self.accepted + [TARGET] * (len(self.emitted) - self.accepted)


@dataclass
class _RequestState:
    index: CopyIndex
    pending: DraftChain | None = None
    records: list[StepRecord] = field(default_factory=list)


class DraftPlanner:
    """Runs the enabled drafters for every request and keeps one chain per request."""

    def __init__(
        self,
        drafters: Sequence[str] = DRAFTERS,
        max_draft: int = DEFAULT_MAX_DRAFT,
        min_match: int = DEFAULT_MIN_MATCH,
    ) -> None:
        unknown = set(drafters) - set(DRAFTERS)
        if unknown:
            raise ValueError(f"unknown drafter(s): {', '.join(sorted(unknown))}")
        self.drafters = tuple(drafters)
        self.max_draft = max_draft
        self.min_match = min_match
        self._states: OrderedDict[str, _RequestState] = OrderedDict()
        # When set, every request gets this many filler draft tokens: a real verification of a
        # known size, used to profile the engine's cost table.
        self.probe_length: int | None = None

    # -- engine-facing -------------------------------------------------------------------
    def step(self, rows: Sequence[RowView]) -> list[list[int]]:
        return [self._step_row(row) for row in rows]

    def take_records(self, req_id: str) -> list[StepRecord]:
        """Step records of a request since the last call (oldest first)."""
        state = self._states.get(req_id)
        if state is None:
            return []
        records, state.records = state.records, []
        return records

    def release(self, req_id: str) -> None:
        self._states.pop(req_id, None)

    # -- internals -----------------------------------------------------------------------
    def _step_row(self, row: RowView) -> list[int]:
        if not row.sampled:  # a prefill chunk that emitted nothing yet
            return []
        state = self._state_for(row.req_id)
        state.records.append(_verification_record(state.pending, row.sampled))
        _sync_index(state.index, row.context)
        state.pending = self._select(self._propose(state, row))
        return state.pending.tokens if state.pending else []

    def _propose(self, state: _RequestState, row: RowView) -> list[DraftChain]:
        limit = min(self.max_draft, row.max_draft)
        if self.probe_length is not None:
            filler = int(row.context[-1])
            return [DraftChain(PROBE, [filler] * min(self.probe_length, limit))]
        chains = []
        if NGRAM in self.drafters:
            chain = state.index.propose(limit)
            if chain is not None and chain.tokens:
                chains.append(chain)
        return chains

    @staticmethod
    def _select(chains: list[DraftChain]) -> DraftChain | None:
        # One drafter for now; the hybrid choice (price per verified token) replaces this.
        return max(chains, key=len) if chains else None

    def _state_for(self, req_id: str) -> _RequestState:
        state = self._states.get(req_id)
        if state is None:
            state = self._states[req_id] = _RequestState(CopyIndex(self.min_match))
            while len(self._states) > MAX_TRACKED_REQUESTS:
                self._states.popitem(last=False)
        else:
            self._states.move_to_end(req_id)
        return state


def _verification_record(chain: DraftChain | None, sampled: Sequence[int]) -> StepRecord:
    emitted = tuple(int(t) for t in sampled)
    if chain is None:
        return StepRecord(source=None, drafted=0, accepted=0, emitted=emitted)
    accepted = 0
    for draft_token, token in zip(chain.tokens, emitted[:-1]):
        if draft_token != token:
            break
        accepted += 1
    return StepRecord(chain.source, len(chain), accepted, emitted, chain.copy_features)


def _sync_index(index: CopyIndex, context: np.ndarray) -> None:
    """Append the tokens the index has not seen; rebuild if the context is not an extension."""
    known = len(index)
    if known > len(context) or (known and int(context[known - 1]) != index.tokens[-1]):
        index.reset()
        known = 0
    index.extend(context[known:].tolist())
