"""The copy (n-gram) drafter: propose what followed the longest earlier occurrence of the suffix.

The index is kept per request and grows with the request: each appended token costs
O(number of earlier occurrences of the current `min_match`-gram), never a rescan.

The trick: let M_t map each earlier end position q to the length of the match between the
context ending at q and the context ending at t (only matches of at least `min_match`).
Appending token t+1 keeps exactly the positions q+1 whose min-gram equals the new one, and
    M_{t+1}[q+1] = M_t.get(q, min_match - 1) + 1
because a match longer than min_match at q+1 implies one of at least min_match at q.
"""

from __future__ import annotations

from collections.abc import Iterable

from hsedit.drafting.chain import NGRAM, CopyFeatures, DraftChain

DEFAULT_MIN_MATCH = 3
DEFAULT_MAX_DRAFT = 15


class CopyIndex:
    """Incremental longest-suffix-match index over one request's token sequence."""

    def __init__(self, min_match: int = DEFAULT_MIN_MATCH) -> None:
        if min_match < 1:
            raise ValueError("min_match must be at least 1")
        self.min_match = min_match
        self.reset()

    def reset(self) -> None:
        self.tokens: list[int] = []
        self._ends: dict[tuple[int, ...], list[int]] = {}  # min-gram -> end positions
        self._matches: dict[int, int] = {}  # earlier end position -> match length

    def __len__(self) -> int:
        return len(self.tokens)

    def extend(self, new_tokens: Iterable[int]) -> None:
        for token in new_tokens:
            self._append(int(token))

    def _append(self, token: int) -> None:
        tokens = self.tokens
        tokens.append(token)
        end = len(tokens) - 1
        n = self.min_match
        if end + 1 < n:
            return
        gram = tuple(tokens[end - n + 1 :])
        earlier = self._ends.get(gram)
        previous = self._matches
        self._matches = {q: previous.get(q - 1, n - 1) + 1 for q in earlier} if earlier else {}
        if earlier is None:
            self._ends[gram] = [end]
        else:
            earlier.append(end)

    def longest_match(self) -> tuple[int, int] | None:
        """(end position of the chosen earlier occurrence, match length), or None.

        Longest match wins; among equally long ones, the most recent.
        """
        if not self._matches:
            return None
        end, length = max(self._matches.items(), key=lambda item: (item[1], item[0]))
        return end, length

    def propose(self, max_tokens: int = DEFAULT_MAX_DRAFT) -> DraftChain | None:
        best = self.longest_match()
        if best is None or max_tokens <= 0:
            return None
        source_end, match_len = best
        # The tokens after source_end are all already in the context (source_end < current end).
        draft = self.tokens[source_end + 1 : source_end + 1 + max_tokens]
        next_tokens = {self.tokens[q + 1] for q in self._matches}
        features = CopyFeatures(
            match_len=match_len,
            num_candidates=len(self._matches),
            candidates_agree=len(next_tokens) == 1,
            source_distance=len(self.tokens) - 1 - source_end,
        )
        return DraftChain(source=NGRAM, tokens=draft, copy_features=features)


def longest_match_by_scan(tokens: list[int], min_match: int) -> tuple[int, int] | None:
    """Reference implementation (quadratic): the same answer as CopyIndex.longest_match."""
    end = len(tokens) - 1
    best: tuple[int, int] | None = None
    for q in range(end):
        length = 0
        while length <= q and tokens[q - length] == tokens[end - length]:
            length += 1
        if length >= min_match and (best is None or (length, q) > (best[1], best[0])):
            best = (q, length)
    return best
