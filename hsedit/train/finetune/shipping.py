"""The shipping rule for an apply adapter: a paired comparison on the held-out regions.

Both adapters answer the same held-out examples (greedy, so an answer is a fact about the model,
not a draw). Per example the pair is (shipped exact, candidate exact); only the discordant pairs
carry evidence: `wins` where only the candidate is exact, `losses` where only the shipped one is.
Under "no difference" each discordant pair is a fair coin (the exact sign test, McNemar's test for
small counts), so

    ship  <=>  overall: wins > losses and P(X >= wins | n = wins + losses, 1/2) < ALPHA
          and  every kind: not P(X >= losses | n = its discordant pairs, 1/2) < ALPHA with losses > wins

i.e. better overall with 95% confidence, and no kind worse beyond what chance makes of its own
discordant pairs. With 40 examples a kind, one example moves a kind by 2.5 points; a kind is
called worse only when its losses are too many to be luck.

Regions alone cannot see a model that no longer rewrites a whole file (an adapter trained on
regions only answered a whole file with its first unit), and whole files are still what free-form
edits, other languages and files that do not parse are sent as. So one more kind, `whole files
kept`, pairs both adapters on a few held-out whole files on whether the answer is whole (not cut
off, and at least `WHOLE_KEPT` of the lines the edit leaves come back): it blocks shipping when
worse beyond its noise, as any kind does, and does not count towards the overall score.
A sign test on a few dozen files does not see a candidate that loses two of them (an adapter that
answered `examples/inventory.py` with its docstring and import passed it, p_worse 0.25), so a
second, strict guard, `demo files kept`, pairs them on this project's own demo files (the renames of
`examples/tasks.jsonl`): one demo file the shipped adapter answers whole and the candidate does
not blocks shipping.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import comb

ALPHA = 0.05
WHOLE_KEPT = 0.9
# The demo files are short (25-48 lines): a line or two edited beyond the instruction is 5-10% of
# them, while an answer of the first lines only keeps under a tenth. Most of the file is the bar.
DEMO_KEPT = 0.5
WHOLE_FILE_GUARD = "whole files kept"
DEMO_FILE_GUARD = "demo files kept"  # strict: one loss blocks


def kept_whole(cut_off: bool, unchanged_kept: float, at_least: float = WHOLE_KEPT) -> bool:
    """A whole-file answer that is the whole file: not cut off, the unchanged lines mostly there."""
    return not cut_off and unchanged_kept >= at_least


def sign_test(successes: int, failures: int) -> float:
    """One-sided exact p-value of seeing at least `successes` of `successes + failures` fair coins."""
    n = successes + failures
    if n == 0:
        return 1.0
    return sum(comb(n, k) for k in range(successes, n + 1)) / 2**n


@dataclass(frozen=True)
class KindComparison:
    kind: str
    n: int
    shipped_exact: int
    candidate_exact: int
    wins: int  # only the candidate exact
    losses: int  # only the shipped adapter exact
    strict: bool = False  # any loss is worse, not only a loss beyond noise

    @property
    def p_better(self) -> float:
        return sign_test(self.wins, self.losses)

    @property
    def p_worse(self) -> float:
        return sign_test(self.losses, self.wins)

    @property
    def worse(self) -> bool:
        """Worse beyond this kind's noise (strict: worse on any one example)."""
        if self.strict:
            return self.losses > 0
        return self.losses > self.wins and self.p_worse < ALPHA

    def as_dict(self) -> dict:
        return {
            "kind": self.kind, "n": self.n, "shipped_exact": self.shipped_exact,
            "candidate_exact": self.candidate_exact, "wins": self.wins, "losses": self.losses,
            "p_better": round(self.p_better, 4), "p_worse": round(self.p_worse, 4), "worse": self.worse,
            "strict": self.strict,
        }


def _paired(kind: str, pairs: Sequence[tuple[bool, bool]], strict: bool = False) -> KindComparison:
    return KindComparison(
        kind, len(pairs), sum(a for a, _ in pairs), sum(b for _, b in pairs),
        sum(b and not a for a, b in pairs), sum(a and not b for a, b in pairs), strict,
    )


def compare(
    pairs: Mapping[str, Sequence[tuple[bool, bool]]],
    guards: Mapping[str, Sequence[tuple[bool, bool]]] | None = None,
    strict_guards: Mapping[str, Sequence[tuple[bool, bool]]] | None = None,
) -> tuple[list[KindComparison], KindComparison]:
    """Per kind and overall, from (shipped exact, candidate exact) pairs of the same examples;
    `guards` are kinds paired on another property, listed with the kinds but not in the total;
    `strict_guards` the same, where one loss is worse."""
    kinds = [_paired(kind, kind_pairs) for kind, kind_pairs in sorted(pairs.items())]
    total = KindComparison(
        "all", sum(k.n for k in kinds), sum(k.shipped_exact for k in kinds), sum(k.candidate_exact for k in kinds),
        sum(k.wins for k in kinds), sum(k.losses for k in kinds),
    )
    guarded = [_paired(kind, kind_pairs) for kind, kind_pairs in (guards or {}).items()]
    guarded += [_paired(kind, kind_pairs, strict=True) for kind, kind_pairs in (strict_guards or {}).items()]
    return kinds + guarded, total


def verdict(kinds: Sequence[KindComparison], total: KindComparison) -> tuple[bool, str]:
    """Whether the candidate ships, and why, in one line."""
    worse = [k.kind for k in kinds if k.worse and not k.strict]
    if worse:
        return False, f"worse beyond noise on {', '.join(worse)}"
    lost = [f"{k.kind} ({k.losses} of {k.shipped_exact} lost)" for k in kinds if k.worse]
    if lost:
        return False, f"worse on {', '.join(lost)}"
    if total.wins <= total.losses or total.p_better >= ALPHA:
        return False, (f"not better with {1 - ALPHA:.0%} confidence: {total.wins} wins, {total.losses} losses "
                       f"(p = {total.p_better:.3f})")
    return True, f"better: {total.wins} wins, {total.losses} losses (p = {total.p_better:.4f}); no kind worse beyond noise"
