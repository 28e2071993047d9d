"""Per-request drafting across a batch, independent of any engine.

Each engine step the glue hands over one `RowView` per batch row: the request's id, its
whole context so far, and the tokens the target just emitted for it. The planner

1. books the verification of last step's chain (how many draft tokens the target kept),
2. brings each drafter's per-request state up to date with the new tokens,
3. asks every drafter for a chain and lets the selector keep one per request. With the hybrid
   selector, the model drafter runs only for the requests where the selector expects its chain
   to pay for its cost (`hybrid.model_drafting_mask`); its features stay current for all.

State is keyed by request id, never by batch row: engines reuse and compact rows.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from hsedit.drafting.chain import DSPARK, MAX_TRACKED_REQUESTS, COPY, PROBE, CopyFeatures, DraftChain, StepRecord
from hsedit.drafting.copy_acceptance import REFERENCE_PRIOR_POSITIONS, CopyAcceptanceModel, RequestOffset
from hsedit.drafting.hybrid import HybridSelector
from hsedit.drafting.model_drafter import FeatureRows, ModelDrafter
from hsedit.drafting.copy_drafter import DEFAULT_MAX_DRAFT, DEFAULT_MIN_MATCH, Alignment, CopyIndex, priced_max_draft

DRAFTERS = (COPY, DSPARK)
# A request with nothing predicted (chat) copies only repeats of its prompt or of its own answer,
# and long ones are rarely kept whole: its copy chains stop at the unpriced drafters' length.
# Measured side by side (hsedit bench, chat, one run, 2026-12-06): the hybrid with chains up to 31
# there 0.985x / 0.988x copy at batch 1 / 4, with 15 1.02x / 1.05x (docs/benchmarks.md).
UNPREDICTED_MAX_COPY = DEFAULT_MAX_DRAFT


@dataclass(frozen=True)
class RowView:
    req_id: str
    context: np.ndarray  # [num_tokens] prompt + every emitted token, int
    sampled: Sequence[int]  # tokens the target emitted for this request this step
    max_draft: int  # how many draft tokens the engine can verify for this request
    features: FeatureRows | None = None  # target features computed this step (model drafter only)


# A request the plan skips DSpark for is still probed now and then: once it has been skipped
# for more steps than its back-off, and is not copying, the drafter runs for it anyway, so its
# estimate and offset learn from a chain of its own (nothing else could show that the drafter
# pays again, and no history of other requests can lock it out). The back-off is PROBE_EVERY
# after a chain the target kept from and doubles after each chain of which it kept nothing (up
# to MAX_MODEL_WAIT); a new request waits PROBE_EVERY before its first probe, as after a kept
# chain (the plan runs the drafter from its first step where the estimates say it pays). On
# text the drafter does not know a request so tries ~log2(steps / PROBE_EVERY) times;
# a drift of its estimate towards the batch's mean retried every few steps (seen: a pass on 25%
# of chat steps, ~4 ms each on a 23 ms step, keeping nearly nothing).
PROBE_EVERY = 8
MAX_MODEL_WAIT = 64
# Weight of the newest value in the planner's running means: a finished request's copy and
# DSpark offsets (new requests start from them; few requests finish, so each counts for more)
# and a judged DSpark chain's outcome (one per request-step: many, so each counts for less).
FINISHED_OFFSET_WEIGHT = 0.2
MODEL_SURVIVAL_WEIGHT = 0.1


@dataclass
class _RequestState:
    index: CopyIndex
    pending: DraftChain | None = None
    pending_price: float | None = None
    records: list[StepRecord] = field(default_factory=list)
    model_estimate: list[float] | None = None  # expected survival of its next DSpark chain
    copy_offset: RequestOffset = field(default_factory=RequestOffset)  # its shift of the copy acceptance model
    # The same for its resync guesses after a change (`Alignment.resume`), learnt apart: a chat
    # answer that repeats itself copies well and resyncs badly, an edit the other way round.
    # New requests start from what recent guesses of their kind (with a reference or without)
    # showed: chat's are rarely kept (seen: 15 tokens of 181 verified), an edit's usually are.
    # No lock-out: every guess is judged, verified or not.
    resume_offset: RequestOffset = field(default_factory=RequestOffset)
    # Its shift of the DSpark drafter's confidences: they are calibrated on the trainer's held-out
    # data, and a request unlike it (chat for a drafter of code) keeps far fewer of its tokens.
    model_offset: RequestOffset = field(default_factory=RequestOffset)
    # The DSpark chain proposed last step, verified or not, as (tokens, logits of its raw
    # confidences): at temperature 0 the tokens the target emits next are what it would have
    # kept of any chain, so every chain it drafts is judged, not only those the selector chose.
    model_proposed: tuple[list[int], np.ndarray] | None = None
    # Its copy chain of last step at full length, chosen or not, judged the same way: so an
    # offset learns from the guesses the price turned down too, and a distrust learnt from
    # finished requests cannot lock a request out of the evidence that would lift it.
    copy_proposed: DraftChain | None = None
    model_wait: int = PROBE_EVERY  # steps it may be skipped before it is probed (PROBE_EVERY, MAX_MODEL_WAIT)
    model_idle: int = 0  # steps since its last DSpark pass
    copying: bool = False  # it had a copy chain last step (a suffix match, not a resync guess)
    alignment: Alignment = field(default_factory=Alignment)  # where the output stands in what it copies
    # Tokens the answer is expected to repeat (a Predicted Output): indexed before the context.
    reference: tuple[int, ...] = ()
    answer_start: int | None = None  # where the answer begins in the context (its prompt's length)

    def offset_for(self, features: CopyFeatures) -> RequestOffset:
        return self.resume_offset if features.resumed else self.copy_offset


class DraftPlanner:
    """Runs the enabled drafters for every request and keeps one chain per request."""

    def __init__(
        self,
        drafters: Sequence[str] = (COPY,),
        max_draft: int = DEFAULT_MAX_DRAFT,
        min_match: int = DEFAULT_MIN_MATCH,
        model_drafter: ModelDrafter | None = None,
        copy_acceptance: CopyAcceptanceModel | None = None,
        selector: HybridSelector | None = None,
    ) -> None:
        unknown = set(drafters) - set(DRAFTERS)
        if unknown:
            raise ValueError(f"unknown drafter(s): {', '.join(sorted(unknown))}")
        if (DSPARK in drafters) != (model_drafter is not None):
            raise ValueError("the dspark drafter needs a model drafter, and only it does")
        if selector is not None and copy_acceptance is None and COPY in drafters:
            raise ValueError("the hybrid selector needs the copy acceptance model")
        self.drafters = tuple(drafters)
        self.model_drafter = model_drafter
        self.copy_acceptance = copy_acceptance
        self.selector = selector
        self.max_draft = max_draft
        self.min_match = min_match
        self._states: OrderedDict[str, _RequestState] = OrderedDict()
        # Running mean of what the target kept of DSpark chains, per position (1 while kept, 0 from
        # where they parted), starting from what the drafter's trainer measured: what a request's
        # skipped estimate drifts back to. Outcomes, not the chains' own predictions: a drafter
        # off its training data predicts far more than it keeps.
        self._model_mean: np.ndarray | None = None
        if model_drafter is not None and model_drafter.model.config.expected_survival:
            prior = np.zeros(model_drafter.block_size)
            expected = model_drafter.model.config.expected_survival[: model_drafter.block_size]
            prior[: len(expected)] = expected
            self._model_mean = prior
        # New requests start from the offsets finished requests learnt: an engine that serves edits
        # trusts copies from the first step, one that serves chat does not. Requests with a
        # reference (edits) and without (chat) learn apart, the former from the fitted shift.
        self._copy_offset_mean = 0.0
        self._reference_offset_mean = copy_acceptance.reference_offset if copy_acceptance is not None else 0.0
        # Every recent resync guess of requests without a reference and with one, judged: each
        # kind's shift, what its new requests start from. Pooled, not a mean of finished requests'
        # offsets: a guess is one token of the same features, so one request's few say little, and
        # their prior-bound offsets averaged stayed at twice the rate chat keeps (seen: 0.15
        # expected of its first guesses against 0.07 kept, verified at a price of ~0.08).
        self._resume_pool = {False: RequestOffset(), True: RequestOffset()}
        self._model_offset_mean = 0.0  # the same for the DSpark confidences' shift
        self.model_drafted = 0  # request-steps the model drafter ran for (the rest it skipped)
        self.model_skipped = 0
        # When set, every request gets this many filler draft tokens: a real verification of a
        # known size, used to profile the engine's cost table.
        self.probe_length: int | None = None

    # -- engine-facing -------------------------------------------------------------------
    def step(self, rows: Sequence[RowView]) -> list[list[int]]:
        if self.model_drafter is not None:
            self.model_drafter.observe([(row.req_id, row.features) for row in rows if row.features is not None])
        live: list[tuple[int, RowView, _RequestState]] = []
        for i, row in enumerate(rows):
            if not row.sampled:  # a prefill chunk that emitted nothing yet
                continue
            state = self._state_for(row.req_id)
            if state.answer_start is None:  # its first step: the context is the prompt and what it sampled
                state.answer_start = len(row.context) - len(row.sampled)
            record = _verification_record(state.pending, row.sampled, state.pending_price)
            state.records.append(record)
            if state.copy_proposed is not None:
                self._judge_copy_chain(state, state.copy_proposed, record.emitted)
                state.copy_proposed = None
            if state.model_proposed is not None:
                tokens, logits = state.model_proposed
                labels = judged_positions(tokens, record.emitted)
                state.model_offset.observe_logits(logits[: len(labels)], labels)
                state.model_proposed = None
                if len(labels):
                    kept_any = labels[0] > 0
                    state.model_wait = PROBE_EVERY if kept_any else min(max(1, 2 * state.model_wait), MAX_MODEL_WAIT)
                    self._learn_model_outcome(labels)
            _sync_index(state, row.context)
            state.alignment.observe(state.pending, record.matched, record.emitted, state.index.tokens)
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

    def seed_prediction(self, req_id: str, reference: Sequence[int]) -> None:
        """Let the copy drafter copy from `reference` too, as from the request's own context:
        a prediction of the answer that is not part of the prompt. Call before its first step."""
        state = self._state_for(req_id)
        state.reference = tuple(int(t) for t in reference)
        state.index.seed(state.reference)
        if state.reference:
            state.copy_offset = RequestOffset(self._reference_offset_mean, REFERENCE_PRIOR_POSITIONS)
            state.resume_offset = RequestOffset(self._resume_pool[True].value)

    def time_model_drafter(self, max_requests: int) -> None:
        """Once the model drafter sits on its device: time it for the selector's drafting cost."""
        if self.model_drafter is not None:
            counts, seconds = self.model_drafter.time_passes(max_requests)
            if self.selector is not None:
                self.selector.set_draft_costs(counts, seconds)

    def knows(self, req_id: str) -> bool:
        return req_id in self._states

    def request_ids(self) -> set[str]:
        """Every request some drafter keeps state for."""
        ids = set(self._states)
        if self.model_drafter is not None:
            ids |= self.model_drafter.request_ids()
        return ids

    def release(self, req_id: str) -> None:
        state = self._states.pop(req_id, None)
        if state is not None and state.copy_offset.value != state.copy_offset.prior:
            w = FINISHED_OFFSET_WEIGHT
            if state.reference:
                self._reference_offset_mean = (1 - w) * self._reference_offset_mean + w * state.copy_offset.value
            else:
                self._copy_offset_mean = (1 - w) * self._copy_offset_mean + w * state.copy_offset.value
        if state is not None and state.model_offset.observed:
            w = FINISHED_OFFSET_WEIGHT
            self._model_offset_mean = (1 - w) * self._model_offset_mean + w * state.model_offset.value
        if self.model_drafter is not None:
            self.model_drafter.release(req_id)

    # -- internals -----------------------------------------------------------------------
    def _propose(self, live: Sequence[tuple[RowView, _RequestState]]) -> list[list[DraftChain]]:
        """Every enabled drafter's chain for every live request."""
        limits = [min(self.max_draft, row.max_draft) for row, _ in live]
        if self.probe_length is not None:
            # The cost profile's shape exactly, never the priced cap below: the table keys each
            # step by the tokens it asked for, and a 4 x 63 probe cut to 4 x 31 would time a
            # 128-token step as a 256-token one, which makes long chains look nearly free.
            return [
                [DraftChain(PROBE, [int(row.context[-1])] * min(self.probe_length, limit))]
                for (row, _), limit in zip(live, limits)
            ]
        if self.selector is not None:  # priced chains: shorter beside others (copy_drafter)
            limits = [priced_max_draft(limit, len(live)) for limit in limits]
        copy = [self._copy_chain(state, limit) for (_, state), limit in zip(live, limits)]
        neural = self._model_chains(live, limits, copy) if DSPARK in self.drafters else {}
        return [
            [c for c in (chain, neural.get(row.req_id)) if c is not None]
            for (row, _), chain in zip(live, copy)
        ]

    def _copy_chain(self, state: _RequestState, limit: int) -> DraftChain | None:
        if COPY not in self.drafters:
            return None
        if not state.reference:
            limit = min(limit, UNPREDICTED_MAX_COPY)
        answer_tokens = len(state.index) - len(state.reference) - (state.answer_start or 0)
        chain = state.index.propose(limit, answer_tokens)
        if (chain is None or not chain.tokens) and self.copy_acceptance is not None:
            # No suffix match right after a change: resume the source where it continues. Only
            # with a price: a guess verified at full length costs more than it saves.
            chain = state.alignment.resume(state.index, limit)
        if chain is None or not chain.tokens:
            return None
        if self.copy_acceptance is not None:
            offset = state.offset_for(chain.copy_features).value
            chain.survival = self.copy_acceptance.survival(chain.copy_features, len(chain), offset)
            state.copy_proposed = chain
        return chain

    def _judge_copy_chain(self, state: _RequestState, chain: DraftChain, emitted: Sequence[int]) -> None:
        """Fold a copy chain's judged positions into the request's offset (of copies, or of
        resync guesses): at temperature 0 what the target emitted is what it would have kept of
        the chain, verified or not, and the token after the kept ones judges one more position."""
        labels = judged_positions(chain.tokens, emitted)
        logits = self.copy_acceptance.logits(chain.copy_features, len(labels))
        state.offset_for(chain.copy_features).observe_logits(logits, labels)
        if chain.copy_features.resumed:
            self._resume_pool[bool(state.reference)].observe_logits(logits, labels)

    def _model_chains(
        self,
        live: Sequence[tuple[RowView, _RequestState]],
        limits: Sequence[int],
        copy: Sequence[DraftChain | None],
    ) -> dict[str, DraftChain]:
        """DSpark chains, for the requests where the selector expects them to pay (all without one)
        and those due a probe."""
        runs = [limit > 0 for limit in limits]
        for (_, state), chain in zip(live, copy):
            state.copying = chain is not None and not chain.copy_features.resumed
        if self.selector is not None:
            # A request backing off (its last chains kept nothing) is not planned for, only
            # probed; with every request backing off the plan is skipped whole (it is most of
            # the hybrid's own cost per step on text DSpark does not know).
            planned = [False] * len(live)
            open_ = [i for i, (_, state) in enumerate(live) if state.model_wait <= PROBE_EVERY]
            if open_:
                plans = self.selector.plan_model_drafting([copy[i] for i in open_],
                                                          [self._model_estimate(live[i][1]) for i in open_])
                for i, plan in zip(open_, plans):
                    planned[i] = plan
            # A probe only where DSpark could matter (while the request copies, its chains lose
            # to the copy's anyway) and where it costs about a pass: not while the request has
            # more features waiting than a pass's time projects.
            runs = [run and (plan or (not state.copying and state.model_idle > state.model_wait
                                      and self._catch_up_affordable(row.req_id)))
                    for run, plan, (row, state) in zip(runs, planned, live)]
            for (_, state), run in zip(live, runs):
                if not run:
                    state.model_idle += 1
        wanted = [i for i, run in enumerate(runs) if run]
        chains = self.model_drafter.propose([(live[i][0].req_id, int(live[i][0].context[-1]), limits[i]) for i in wanted])
        if chains and self.selector is not None:
            self.selector.record_draft_time(len(chains), self.model_drafter.last_pass_seconds)
        self.model_drafted += len(chains)
        self.model_skipped += len(live) - len(chains)
        for i in wanted:
            row, state = live[i]
            if row.req_id in chains:
                state.model_idle = 0
                shift_model_chain(state, chains[row.req_id])
                self._learn_model_estimate(state, chains[row.req_id])
        return chains

    def _catch_up_affordable(self, req_id: str) -> bool:
        """Whether projecting the request's waiting feature rows (a pass projects them first)
        costs at most a pass for one request. On an edit that copies for hundreds of steps the
        waiting rows reach the file's length, and a probe where the copy breaks cost 2-4 passes
        in catch-up (seen: 590-2,586 rows, 7-28 ms, before a 4-8 ms pass); once the rows are
        projected (every PROJECT_EVERY, or for a planned pass) the request can be probed again."""
        row_seconds = self.model_drafter.row_seconds
        if row_seconds is None or self.selector is None or self.selector.draft_seconds is None:
            return True
        return self.model_drafter.waiting_rows(req_id) * row_seconds <= self.selector.drafting_cost(1)

    def _model_estimate(self, state: _RequestState) -> list[float] | None:
        """What the request's next DSpark chain is expected to survive: its last one; what the
        target kept of recent chains for a request never drafted for."""
        if state.model_estimate is not None:
            return state.model_estimate
        return None if self._model_mean is None else self._model_mean.tolist()

    def _learn_model_estimate(self, state: _RequestState, chain: DraftChain) -> None:
        full = np.zeros(self.model_drafter.block_size)
        full[: len(chain.survival)] = chain.survival
        state.model_estimate = full.tolist()

    def _learn_model_outcome(self, labels: np.ndarray) -> None:
        """Fold one judged DSpark chain into the running mean: its judged positions, and every
        later one as lost once a position was (nothing survives a rejected token)."""
        block = self.model_drafter.block_size
        realized = np.zeros(block)
        realized[: len(labels)] = labels[:block]
        known = block if labels[-1] == 0 else min(len(labels), block)
        if self._model_mean is None:
            self._model_mean = realized
            return
        w = MODEL_SURVIVAL_WEIGHT
        self._model_mean[:known] = (1 - w) * self._model_mean[:known] + w * realized[:known]

    def _select(self, candidates: list[list[DraftChain]]) -> list[DraftChain | None]:
        if self.selector is not None and self.probe_length is None:
            drafted_for = sum(1 for chains in candidates if any(c.source == DSPARK for c in chains))
            return self.selector.select(candidates, drafted_for)
        # A single drafter (or a probe) proposes at most one chain per request.
        return [max(chains, key=len) if chains else None for chains in candidates]

    def _state_for(self, req_id: str) -> _RequestState:
        state = self._states.get(req_id)
        if state is None:
            state = self._states[req_id] = _RequestState(
                CopyIndex(self.min_match),
                copy_offset=RequestOffset(self._copy_offset_mean),
                model_offset=RequestOffset(self._model_offset_mean),
                resume_offset=RequestOffset(self._resume_pool[False].value),
            )
            while len(self._states) > MAX_TRACKED_REQUESTS:
                self._states.popitem(last=False)
        else:
            self._states.move_to_end(req_id)
        return state


def _verification_record(chain: DraftChain | None, sampled: Sequence[int], price: float | None) -> StepRecord:
    emitted = tuple(int(t) for t in sampled)
    if chain is None:
        return StepRecord(source=None, drafted=0, matched=0, emitted=emitted, price=price)
    # The last emitted token is the target's own: a draft token can only be kept before it.
    accepted = _leading_matches(chain.tokens, emitted[:-1])
    return StepRecord(chain.source, len(chain), accepted, emitted, chain.copy_features, price)


def _leading_matches(draft: Sequence[int], emitted: Sequence[int]) -> int:
    """How many draft tokens agree with the emitted ones before the first that does not."""
    count = 0
    for draft_token, token in zip(draft, emitted):
        if draft_token != token:
            break
        count += 1
    return count


def judged_positions(tokens: Sequence[int], emitted: Sequence[int]) -> np.ndarray:
    """Outcomes [n] of a chain's first positions against the tokens the target emitted after
    it: 1 while they agree, then one 0 where they part; positions past `emitted` are unjudged."""
    kept = _leading_matches(tokens, emitted)
    parted = kept < min(len(tokens), len(emitted))
    return np.array([1.0] * kept + [0.0] * parted)


def shift_model_chain(state: _RequestState, chain: DraftChain) -> None:
    """Apply the request's offset to a DSpark chain's confidences (and so its survival), and
    keep the chain to judge next step."""
    raw = np.clip(np.asarray(chain.confidences, dtype=float), 1e-6, 1 - 1e-6)  # [len(chain)]
    logits = np.log(raw) - np.log1p(-raw)
    state.model_proposed = (list(chain.tokens), logits)
    shifted = 1.0 / (1.0 + np.exp(-(logits + state.model_offset.value)))
    chain.confidences = shifted.tolist()
    chain.survival = np.cumprod(shifted).tolist()


def _sync_index(state: _RequestState, context: np.ndarray) -> None:
    """Append the context tokens the index has not seen (it holds the reference, then the
    context); rebuild if the context is not an extension of what it saw."""
    index, offset = state.index, len(state.reference)
    known = len(index) - offset
    if known > len(context) or (known > 0 and int(context[known - 1]) != index.tokens[-1]):
        index.seed(state.reference)
        known = 0
    index.extend(context[known:].tolist())
