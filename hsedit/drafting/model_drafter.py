"""Per-request state of the DSpark drafter across engine steps (torch only, no engine).

Each step the engine hands over, per request, the target features it computed this step and
the position of the first one. The drafter keeps each request's projected context (keys and
values per draft layer) for every position before the anchor, the token the target emitted
last, and drafts one block for all requests at once.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from hsedit.drafting.chain import DSPARK, DraftChain
from hsedit.drafting.dspark import ContextCache, DSparkDrafter

MAX_TRACKED_REQUESTS = 4096


@dataclass(frozen=True)
class FeatureRows:
    """Target features of one request from one engine step."""

    rows: torch.Tensor  # [n_computed, feature_size]: positions start .. start + n_computed - 1
    start: int  # position of the first row
    num_tokens: int  # the request's context length after this step (the anchor is the last)


class ModelDrafter:
    def __init__(self, model: DSparkDrafter) -> None:
        self.model = model
        self.block_size = model.config.block_size
        self._caches: OrderedDict[str, ContextCache | None] = OrderedDict()

    def observe(self, req_id: str, features: FeatureRows) -> None:
        """Bring the request's context up to (not including) its anchor token."""
        cache = self._caches.get(req_id, ContextCache())
        if cache is None:
            return  # lost its early features (e.g. came back from a cache hit): cannot draft
        if features.start < len(cache):  # recomputed after preemption: forget what follows
            cache.truncate(features.start)
        if features.start > len(cache):
            self._caches[req_id] = None
            return
        wanted = min(len(features.rows), features.num_tokens - 1 - features.start)
        self.model.extend_context(cache, features.rows[:wanted])
        self._caches[req_id] = cache
        self._caches.move_to_end(req_id)
        while len(self._caches) > MAX_TRACKED_REQUESTS:
            self._caches.popitem(last=False)

    def can_draft(self, req_id: str, num_tokens: int) -> bool:
        cache = self._caches.get(req_id)
        return cache is not None and len(cache) == num_tokens - 1

    def propose(self, requests: Sequence[tuple[str, int, int]]) -> dict[str, DraftChain]:
        """(req id, anchor token, limit) per request -> its chain, confidences and survival."""
        ready = [(r, a, lim) for r, a, lim in requests if lim > 0 and self._caches.get(r) is not None]
        if not ready:
            return {}
        block = self.model.draft([self._caches[r] for r, _, _ in ready], [a for _, a, _ in ready])
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

    def release(self, req_id: str) -> None:
        self._caches.pop(req_id, None)
