"""Per-request state of the DSpark drafter across engine steps (torch only, no engine).

Each step the engine hands over, per request, the target features it computed this step and
the position of the first one. The drafter keeps each request's context (keys and values per
draft layer, projected from those features in batches) for every position before the anchor,
the token the target emitted last, and drafts one block for all requests at once.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from hsedit.drafting.chain import DSPARK, MAX_TRACKED_REQUESTS, DraftChain
from hsedit.drafting.dspark import ContextCache, DSparkDrafter

KEPT_AFTER_RELEASE = 32  # finished requests whose context a new one with the same prefix can borrow


@dataclass(frozen=True)
class FeatureRows:
    """Target features of one request from one engine step."""

    rows: torch.Tensor  # [n_computed, feature_size]: positions start .. start + n_computed - 1
    start: int  # position of the first row
    num_tokens: int  # the request's context length after this step (the anchor is the last)
    # The request's token ids so far [num_tokens]: a request whose first rows start after 0 (the
    # engine's prefix cache skipped those positions) borrows them from a request with that prefix.
    tokens: np.ndarray | None = None


# A request's target features wait, unprojected, until it is drafted for or this many rows have
# gathered (a bound on memory): a request the hybrid never drafts for costs next to nothing,
# and catching up is one batched projection, far cheaper per row than one row per step.
PROJECT_EVERY = 1024


@dataclass
class _Context:
    """One request's context for the drafter: projected keys and values, then features not yet
    projected (positions len(cache) .. len(cache) + pending_rows - 1)."""

    cache: ContextCache = field(default_factory=ContextCache)
    pending: list[torch.Tensor] = field(default_factory=list)  # [n_i, feature_size] each
    pending_rows: int = 0
    tokens: np.ndarray | None = None  # the request's token ids, as last seen

    def __len__(self) -> int:
        return len(self.cache) + self.pending_rows


class ModelDrafter:
    def __init__(self, model: DSparkDrafter) -> None:
        self.model = model
        self.block_size = model.config.block_size
        self._contexts: OrderedDict[str, _Context | None] = OrderedDict()  # None: lost features
        self._released: deque[_Context] = deque(maxlen=KEPT_AFTER_RELEASE)
        self.last_pass_seconds = 0.0  # the last draft pass alone (catching up on features excluded)
        self.row_seconds: float | None = None  # projecting one waiting feature row, once timed

    def observe(self, batch: Sequence[tuple[str, FeatureRows]]) -> None:
        """Bring each request's context up to (not including) its anchor token. Every request
        is kept current, drafted for or not, so any of them can be drafted for next step."""
        due = []
        for req_id, features in batch:
            context = self._contexts.get(req_id, _Context())
            if context is None:
                continue  # lost its early features (e.g. came back from a cache hit): cannot draft
            if features.start < len(context):  # recomputed after preemption: forget what follows
                self._project([context])
                context.cache.truncate(features.start)
            if features.start > len(context) and not self._borrow(context, features):
                self._contexts[req_id] = None
                continue
            # A copy: the engine's token buffer rows are reused by other requests.
            context.tokens = None if features.tokens is None else np.array(features.tokens)
            self._contexts[req_id] = context
            self._contexts.move_to_end(req_id)
            wanted = min(len(features.rows), features.num_tokens - 1 - features.start)
            if wanted > 0:
                context.pending.append(features.rows[:wanted])
                context.pending_rows += wanted
                if context.pending_rows >= PROJECT_EVERY:
                    due.append(context)
        self._project(due)
        while len(self._contexts) > MAX_TRACKED_REQUESTS:
            self._contexts.popitem(last=False)

    def _borrow(self, context: _Context, features: FeatureRows) -> bool:
        """A new request whose first positions the engine's prefix cache skipped: copy their keys
        and values from a running or recently finished request with the same tokens there (the
        features of a position depend only on the tokens up to it)."""
        start, tokens = features.start, features.tokens
        if len(context) or tokens is None:
            return False
        for donor in [*(c for c in self._contexts.values() if c is not None), *self._released]:
            if donor.tokens is not None and len(donor) >= start and len(donor.tokens) >= start \
                    and np.array_equal(donor.tokens[:start], tokens[:start]):
                projected = min(start, len(donor.cache))
                if projected:
                    layers = zip(donor.cache.keys, donor.cache.values)
                    rows = donor.cache.rows
                    context.cache.append([(k[:projected].clone(), v[:projected].clone()) for k, v in layers],
                                         None if rows is None else rows[:projected].clone())
                if start > projected:  # the rest still waits as features: share them unprojected
                    context.pending = [torch.cat(donor.pending)[: start - projected]]
                    context.pending_rows = start - projected
                return True
        return False

    def _project(self, contexts: Sequence[_Context]) -> None:
        """Project the waiting features of these requests, all in one pass."""
        waiting = [c for c in contexts if c.pending]
        if waiting:
            self.model.extend_contexts([c.cache for c in waiting], [torch.cat(c.pending) for c in waiting])
            for c in waiting:
                c.pending, c.pending_rows = [], 0

    @torch.inference_mode()
    def time_passes(self, max_requests: int = 16, context: int = 256) -> tuple[list[int], list[float]]:
        """Pick the faster LM head for drafting on this device, then time draft passes for a few
        request counts: ([n], [seconds]) for the hybrid selector's drafting cost D(n)."""
        model = self.model
        device = model.fc.weight.device
        cache = ContextCache()
        rows = torch.zeros(context, model.config.feature_size, device=device)
        model.extend_context(cache, rows)  # also the warm-up of the projection timed next
        started = time.perf_counter()
        model.extend_context(ContextCache(), rows)
        self.row_seconds = (time.perf_counter() - started) / context

        def seconds(n: int, repeats: int = 3) -> float:
            model.draft([cache] * n, [0] * n)  # warm-up
            started = time.perf_counter()
            for _ in range(repeats):
                model.draft([cache] * n, [0] * n)
            return (time.perf_counter() - started) / repeats

        timed = {}
        for dtype in (None, torch.bfloat16):
            model.use_fast_head(dtype)
            timed[dtype] = seconds(4)
        model.use_fast_head(min(timed, key=timed.get))
        counts = [n for n in (1, 2, 4, 8, 16, 32) if n <= max_requests] or [1]
        return counts, [seconds(n) for n in counts]

    def propose(self, requests: Sequence[tuple[str, int, int]]) -> dict[str, DraftChain]:
        """(req id, anchor token, limit) per request -> its chain, confidences and survival."""
        ready = [(r, a, lim) for r, a, lim in requests if lim > 0 and self._contexts.get(r) is not None]
        if not ready:
            return {}
        contexts = [self._contexts[r] for r, _, _ in ready]
        self._project(contexts)
        started = time.perf_counter()
        block = self.model.draft([c.cache for c in contexts], [a for _, a, _ in ready])
        self.last_pass_seconds = time.perf_counter() - started
        chains = {}
        for i, (req_id, _, limit) in enumerate(ready):
            n = min(limit, self.block_size)
            chains[req_id] = DraftChain(
                DSPARK,
                block.tokens[i, :n].tolist(),
                confidences=block.confidences[i, :n].tolist(),
                survival=block.survival[i, :n].tolist(),
            )
        return chains

    def waiting_rows(self, req_id: str) -> int:
        """Feature rows a pass for this request would first have to project."""
        context = self._contexts.get(req_id)
        return 0 if context is None else context.pending_rows

    def request_ids(self) -> set[str]:
        return set(self._contexts)

    def release(self, req_id: str) -> None:
        context = self._contexts.pop(req_id, None)
        if context is not None and context.tokens is not None:
            self._released.append(context)
