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

from collections.abc import Iterable, Sequence

from hsedit.drafting.chain import COPY, CopyFeatures, DraftChain

DEFAULT_MIN_MATCH = 3
DEFAULT_MAX_DRAFT = 15  # the paper setting, and what a drafter without a price verifies
# The hybrid's setting: its price cuts each chain where it stops paying, so an unchanged stretch
# is copied up to PRICED_MAX_DRAFT tokens a step by a request alone in the batch, and up to
# BATCHED_MAX_DRAFT beside others. The price's cost table is profiled at a short context, and
# several long chains verified together at a long one cost more than it says. Measured side by
# side (hsedit bench, docs/benchmarks.md, 2026-12-07): chains up to 63 against 31, alone, 1.14-1.34x
# on edits, 1.04-1.28x on mixed, even on chat; at batch 4 0.82-1.16x, at batch 16 0.85-1.19x.
PRICED_MAX_DRAFT = 63
BATCHED_MAX_DRAFT = 31


def priced_max_draft(max_draft: int, num_requests: int) -> int:
    """The longest chain the hybrid verifies for a request in a batch of `num_requests`."""
    return max_draft if num_requests <= 1 else min(max_draft, BATCHED_MAX_DRAFT)

# After a change, the original is looked for this far ahead of where the output left it.
RESYNC_WINDOW = 64
# A change longer than this is a rewrite, not an edit of the original: no resync.
RESYNC_MAX_NEW = 32


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
        self.reference_end = 0  # tokens [0, reference_end) are a predicted answer (`seed`)

    def seed(self, reference: Sequence[int]) -> None:
        """Start over from `reference`, a prediction of the answer that is not part of the context
        (the context is appended after it). It is copied from like earlier context with two
        differences: on an equal match it wins, since it is what the answer is expected to be and
        the context holds the original (an edit's first renamed use is otherwise drafted with the
        old name); and a copy never runs past its end into the context that follows it."""
        self.reset()
        self.extend(reference)
        self.reference_end = len(self.tokens)

    def segment_end(self, position: int) -> int:
        """Where a copy that goes on from the token at `position` has to stop: at the reference's
        end when `position` is in the reference."""
        return self.reference_end if position < self.reference_end else len(self.tokens)

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

    def longest_match(self, answer_tokens: int | None = None) -> tuple[int, int] | None:
        """(end position of the chosen earlier occurrence, match length), or None.

        Longest match wins; among equally long ones, one the reference continues, then the most
        recent. With a reference and `answer_tokens` (the answer's length so far), lengths are
        compared up to the answer's: the prompt's copy of the code matches further back than the
        reference (through the fence that opens both it and the answer), which says nothing about
        which of them the answer goes on like.
        """
        if not self._matches:
            return None
        last_continued = self.reference_end - 2  # a match ending here still has a reference token after it
        cap = answer_tokens if self.reference_end and answer_tokens is not None else len(self.tokens)
        end, length = max(self._matches.items(), key=lambda item: (min(item[1], cap), item[0] <= last_continued, item[0]))
        return end, length

    def propose(self, max_tokens: int = DEFAULT_MAX_DRAFT, answer_tokens: int | None = None) -> DraftChain | None:
        best = self.longest_match(answer_tokens)
        if (self.reference_end and answer_tokens is not None and 0 < answer_tokens < self.min_match
                and answer_tokens <= self.reference_end and self.tokens[:answer_tokens] == self.tokens[-answer_tokens:]):
            # An answer too short to match begins like the reference: copy on from there. Its match
            # is as long as the prompt's copy of the code (the same fence leads into both).
            best = (answer_tokens - 1, max([answer_tokens, *self._matches.values()]))
        if best is None or max_tokens <= 0:
            return None
        source_end, match_len = best
        # The tokens after source_end are all already in the context (source_end < current end).
        start = source_end + 1
        draft = self.tokens[start : min(start + max_tokens, self.segment_end(source_end))]
        if not draft:  # the answer so far ends like the whole reference: nothing more is predicted
            return None
        next_tokens = {self.tokens[q + 1] for q in self._matches if q + 1 != self.reference_end}
        features = CopyFeatures(
            match_len=match_len,
            num_candidates=len(self._matches),
            candidates_agree=len(next_tokens) == 1,
            source_distance=len(self.tokens) - 1 - source_end,
        )
        return DraftChain(source=COPY, tokens=draft, copy_features=features, source_start=source_end + 1)


class Alignment:
    """Where the output stands in the text it copies from, so the copy drafter resumes right
    after a change instead of waiting for `min_match` new tokens to occur in the prompt again.

    Each verified copy chain tells it: all kept and the target's own next token is the
    source's next one too: still aligned; otherwise the output diverged at source position
    `diverged_at` (that token was replaced), and every token emitted since is new text. While
    diverged, `resume` proposes where the source continues: right after the first occurrence,
    within RESYNC_WINDOW, of the last new token (the model rejoined the original there: a
    deletion or a replacement that ends like the original), else at `diverged_at` itself (an
    insertion: `x` -> `x_value` emits `_value` and then the original's `:`). Such a chain is
    priced like any other, by the calibrated acceptance of a one-token match with no second
    occurrence to agree (measured on the apply model's held-out answers: its first token is kept
    18% of the time, each later one ~90%), shifted by what the request's own guesses showed (on
    text that copies nothing, such as chat that repeats itself, nearly none is kept)."""

    def __init__(self) -> None:
        self.diverged_at: int | None = None  # source position the output did not reproduce
        self.new_tokens: list[int] = []  # emitted since the divergence

    def observe(self, chain: DraftChain | None, matched: int, emitted: Sequence[int], source: list[int]) -> None:
        """Book one step: the chain that was verified (None: no draft), how many of its tokens the
        target kept, the tokens it emitted, and the copy index's tokens (the source)."""
        if chain is None or chain.source_start is None:
            if self.diverged_at is not None:
                self.new_tokens.extend(emitted)
            return
        nxt = chain.source_start + matched  # the source token after the kept ones
        if matched == len(chain) and nxt < len(source) and source[nxt] == emitted[-1]:
            self.diverged_at, self.new_tokens = None, []
        else:
            self.diverged_at, self.new_tokens = nxt, [int(emitted[-1])]

    def resume(self, index: CopyIndex, max_tokens: int) -> DraftChain | None:
        if self.diverged_at is None or not self.new_tokens or len(self.new_tokens) > RESYNC_MAX_NEW:
            return None
        source, start = index.tokens, self.diverged_at
        # never into the new text, nor from the reference into the context
        stop = min(len(source) - len(self.new_tokens), index.segment_end(start))
        end = min(start + RESYNC_WINDOW, stop)
        last = self.new_tokens[-1]
        resume_at = next((q + 1 for q in range(start, end) if source[q] == last), start)
        draft = source[resume_at : min(resume_at + max_tokens, stop)]
        if not draft:
            return None
        features = CopyFeatures(match_len=1, num_candidates=1, candidates_agree=False,
                                source_distance=len(source) - resume_at, resumed=True)
        return DraftChain(source=COPY, tokens=list(draft), copy_features=features, source_start=resume_at)
