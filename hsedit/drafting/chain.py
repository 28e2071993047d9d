"""What a drafter hands to the selector (a chain of draft tokens and why it was proposed) and what
one verified step leaves behind (its record). Light: the server's clients import it too."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from hsedit.errors import UsageError

# Token sources, as they appear in streams, stats and the live view.
TARGET = "target"  # produced by the target model itself (the bonus / plain token)
COPY = "copy"  # copied from the request's own context (and prediction) by the copy drafter
DSPARK = "dspark"  # proposed by the model-based drafter
VLLM_NGRAM = "vllm-ngram"  # vLLM's built-in n-gram drafter, run for comparison
VLLM_SUFFIX = "vllm-suffix"  # vLLM's suffix decoding (arctic-inference), run for comparison
HYBRID = "hybrid"  # --drafter value: both drafters, the price-based choice per request
NO_DRAFTER = "none"  # --drafter value: plain decoding
PROBE = "probe"  # filler drafts that size a verification step when profiling costs
VLLM_BUILTINS = (VLLM_NGRAM, VLLM_SUFFIX)  # drafters vLLM runs out of our sight

# Bound on the per-request state a drafter keeps for requests nobody released (the oldest go).
MAX_TRACKED_REQUESTS = 4096

# Every --drafter value, in the order help texts list them; the one registry that the CLI, the
# hook's [tool.hsedit] and the engine check names against.
DRAFTER_CHOICES = (HYBRID, NO_DRAFTER, COPY, DSPARK, VLLM_NGRAM, VLLM_SUFFIX)
# --drafter value -> the drafters hsedit's own planner runs for it
OWN_DRAFTERS = {COPY: (COPY,), DSPARK: (DSPARK,), HYBRID: (COPY, DSPARK)}


# Older names still accepted (a [tool.hsedit] written before the copy drafter was called copy).
DRAFTER_ALIASES = {"ngram": COPY}


def check_drafter(name: object, where: str = "--drafter") -> str:
    """The drafter `name` stands for, if hsedit knows it; else a one-line usage error naming `where`."""
    name = DRAFTER_ALIASES.get(name, name) if isinstance(name, str) else name
    if name not in DRAFTER_CHOICES:
        raise UsageError(f"{where}: unknown drafter {name!r}; choose from {', '.join(DRAFTER_CHOICES)}")
    return name  # type: ignore[return-value]


@dataclass(frozen=True)
class CopyFeatures:
    """Facts about one copy proposal; the copy acceptance model is fit on these.

    match_len: length of the longest suffix of the context that occurred earlier.
    num_candidates: earlier occurrences of the suffix at the minimum match length.
    candidates_agree: whether all those occurrences are followed by the same token.
    source_distance: how far back (in tokens) the copied passage lies.
    resumed: a resync guess after a change (`copy_drafter.Alignment`), not a suffix match: its
      outcomes are learnt apart, since they say nothing about how well the text copies.
    """

    match_len: int
    num_candidates: int
    candidates_agree: bool
    source_distance: int
    resumed: bool = False


@dataclass
class DraftChain:
    """Draft tokens for one request and one step, from one drafter."""

    source: str
    tokens: list[int]
    copy_features: CopyFeatures | None = None
    # Per-position acceptance estimates, where the drafter has them: c_k = P(x_k kept | x_<k kept)
    # and survival a_k = prod_{i<=k} c_i.
    confidences: list[float] | None = field(default=None)
    survival: list[float] | None = field(default=None)
    # Copy chains: where in the copy index's tokens the first draft token was copied from.
    source_start: int | None = None

    def __len__(self) -> int:
        return len(self.tokens)


@dataclass(frozen=True)
class StepRecord:
    """One engine step of one request: which chain was verified, how much of it the target
    kept, and the tokens that came out. The one record of a step: the planner writes it, the
    engine trims `emitted` to what reached the output (a stop string or max_tokens can cut a
    step short), and the stats, their JSON, the benchmark and calibration read it."""

    source: str | None  # drafter whose chain was verified, None if there was none
    drafted: int
    matched: int  # draft tokens the verification agreed with (vLLM's count)
    emitted: tuple[int, ...]  # accepted draft tokens, then the target's own token
    # The proposal's copy features with the verification outcome: calibration data.
    copy_features: CopyFeatures | None = None
    price: float | None = None  # the hybrid selector's price per verified token that step

    @property
    def accepted(self) -> int:
        """Accepted draft tokens among the emitted ones (all of `matched` unless cut short)."""
        return min(self.matched, len(self.emitted))

    def token_sources(self) -> list[str]:
        return [self.source or TARGET] * self.accepted + [TARGET] * (len(self.emitted) - self.accepted)


def attribute_step(record: StepRecord | None, emitted: tuple[int, ...], unseen_drafter: str | None) -> StepRecord:
    """The record of a step as its tokens reached the output: the proposer's record, trimmed to
    `emitted` (a stop string or max_tokens can cut a step short). Without one, a drafter that
    runs out of sight (`unseen_drafter`: vLLM's own, or ours in another process) accepted every
    emitted token but the last; how many it drafted is known only at the end, from vLLM's
    per-request counts. Otherwise every token is the target's."""
    if record is not None:
        return replace(record, emitted=emitted)
    if unseen_drafter is not None and len(emitted) > 1:
        return StepRecord(unseen_drafter, 0, len(emitted) - 1, emitted)
    return StepRecord(None, 0, 0, emitted)
