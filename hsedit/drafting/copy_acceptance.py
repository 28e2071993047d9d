"""Calibrated acceptance for copied tokens: a small logistic regression (numpy).

For position k of a copy chain, p_k = P(x_k accepted | x_<k accepted) =
sigmoid(b . [1, f(match), agree, g(extent), k - 1, k == 1]), where
- f(match) = log of the matched suffix length, capped at `MATCH_CAP` (the n-gram order the
  lookup needs: beyond a few tokens a longer key says little more),
- agree = every earlier occurrence of the key is followed by the same token,
- g(extent) = log(1 + how far back the copied passage keeps agreeing with the context,
  uncapped: a passage that matches for hundreds of tokens is an unchanged stretch of the file),
- k - 1 and [k == 1]: the position, with the first token apart.
Survival a_k = prod_{j<=k} p_j. Fit per target model on its own outputs for general text.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hsedit.drafting.chain import CopyFeatures

MATCH_CAP = 8
MAX_OFFSET = 4.0  # a request's logit shift stays within +-MAX_OFFSET
# The prior on a request's offset weighs as much as this many verified positions at p = 1/2
# (each adds p(1 - p) <= 1/4 to the curvature): a few steps of the request outweigh it.
PRIOR_POSITIONS = 2
# A request with a reference starts from a fitted shift (`reference_offset`) and keeps it against
# more evidence: an edit's one miss is its change point, after which copying resumes, and with
# the weak prior that one miss cut its next chains to a few tokens for several steps.
REFERENCE_PRIOR_POSITIONS = 8
ADAPT_WINDOW = 256  # the request's latest verified positions its offset is fit on
FEATURE_NAMES = ("bias", "log_match", "agree", "log1p_extent", "position", "first")


def position_features(features: CopyFeatures, length: int) -> np.ndarray:
    """[length, len(FEATURE_NAMES)] design rows for positions 1..length of one chain."""
    k = np.arange(length, dtype=float)
    rows = np.empty((length, len(FEATURE_NAMES)))
    rows[:, 0] = 1.0
    rows[:, 1] = math.log(min(features.match_len, MATCH_CAP))
    rows[:, 2] = float(features.candidates_agree)
    rows[:, 3] = math.log1p(features.match_len)
    rows[:, 4] = k
    rows[:, 5] = k == 0
    return rows


@dataclass(frozen=True)
class VerifiedChain:
    """A copy chain that was verified: its features, length and how many tokens the target kept."""

    features: CopyFeatures
    drafted: int
    accepted: int


def judged_labels(chain: VerifiedChain) -> np.ndarray:
    """[judged] outcomes of a chain's positions 1, 2, ...: position k is judged only if it was
    verified, that is k <= accepted + 1 and k <= drafted; it is a success (1) if k <= accepted."""
    judged = max(0, min(chain.accepted + 1, chain.drafted))
    return (np.arange(judged) < chain.accepted).astype(float)


def labelled_positions(chains: Iterable[VerifiedChain]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(design rows, labels, chain index) of every judged position (`judged_labels`)."""
    rows, labels, owner = [], [], []
    for i, chain in enumerate(chains):
        y = judged_labels(chain)
        if not len(y):
            continue
        rows.append(position_features(chain.features, len(y)))
        labels.append(y)
        owner.append(np.full(len(y), i))
    if not rows:
        return np.empty((0, len(FEATURE_NAMES))), np.empty(0), np.empty(0, dtype=int)
    return np.concatenate(rows), np.concatenate(labels), np.concatenate(owner)


@dataclass(frozen=True)
class CopyAcceptanceModel:
    coefficients: tuple[float, ...]  # one per FEATURE_NAMES
    model: str = ""  # the target it was fit for
    fit_on: str = ""  # what data
    # The logit shift a request with a reference (an edit's file, a Predicted Output) starts from:
    # its answer repeats that text, so its copies survive far more often than general text's, from
    # the first step on, before its own offset has seen a chain (fit on edits by `hsedit calibrate`).
    reference_offset: float = 0.0

    def logits(self, features: CopyFeatures, length: int) -> np.ndarray:
        """[length] the logits of p_k for positions 1..length (`position_features` times the
        coefficients, in closed form: this runs between the target's steps)."""
        bias, log_match, agree, log1p_extent, position, first = self.coefficients
        base = (bias + log_match * math.log(min(features.match_len, MATCH_CAP))
                + agree * float(features.candidates_agree) + log1p_extent * math.log1p(features.match_len))
        z = base + position * np.arange(length, dtype=float)
        if length:
            z[0] += first
        return z

    def conditional(self, features: CopyFeatures, length: int, offset: float = 0.0) -> np.ndarray:
        """[length] p_k for positions 1..length; `offset` shifts the logit (a request's `RequestOffset`)."""
        return 1.0 / (1.0 + np.exp(-(self.logits(features, length) + offset)))

    def survival(self, features: CopyFeatures, length: int, offset: float = 0.0) -> list[float]:
        return np.cumprod(self.conditional(features, length, offset)).tolist()

    def predict_rows(self, rows: np.ndarray, offset: float = 0.0) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-(rows @ np.asarray(self.coefficients) + offset)))

    def save(self, path: str | Path) -> None:
        data = {"features": list(FEATURE_NAMES), "coefficients": list(self.coefficients),
                "model": self.model, "fit_on": self.fit_on, "reference_offset": self.reference_offset}
        Path(path).write_text(json.dumps(data, indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> CopyAcceptanceModel:
        data = json.loads(Path(path).read_text())
        if tuple(data["features"]) != FEATURE_NAMES:
            raise ValueError(f"{path}: coefficients are for features {data['features']}, not {list(FEATURE_NAMES)}")
        return cls(tuple(float(c) for c in data["coefficients"]), data.get("model", ""), data.get("fit_on", ""),
                   float(data.get("reference_offset", 0.0)))


class RequestOffset:
    """One request's logit shift of the copy acceptance model, fit to its own verified copies
    (the planner shifts the DSpark drafter's confidences the same way, `observe_logits`).

    The model is fit on general text; an edit that copies a file unchanged keeps nearly every
    copied token, a rewrite few, and which one a request is shows after a few steps. The offset
    is the MAP estimate under a Gaussian prior centred on `prior` (what finished requests learnt):
        o* = argmin_o sum_i [log(1 + e^(z_i + o)) - y_i (z_i + o)] + w/2 (o - prior)^2
    over the request's latest ADAPT_WINDOW verified positions (logit z_i of the fit, label y_i),
    by Newton's method: it is one convex parameter. A fixed-step update takes tens of steps to
    move a request whose copies always survive, and meanwhile the price cuts its chains short.
    Verification outcomes only ever shape later steps, so the output stays exact."""

    def __init__(self, prior: float = 0.0, prior_positions: float = PRIOR_POSITIONS) -> None:
        self.prior = prior
        self.prior_positions = prior_positions
        self.value = prior
        self._logits: np.ndarray = np.empty(0)  # [n <= ADAPT_WINDOW]
        self._labels: np.ndarray = np.empty(0)  # [n]

    @property
    def observed(self) -> int:
        """Judged positions it is fit on now."""
        return len(self._labels)

    def observe_logits(self, logits: np.ndarray, labels: np.ndarray) -> float:
        """Add judged positions as the model's logits [n] and outcomes [n] (1 kept, 0 not), refit."""
        if not len(labels):
            return self.value
        self._logits = np.concatenate([self._logits, logits])[-ADAPT_WINDOW:]
        self._labels = np.concatenate([self._labels, labels])[-ADAPT_WINDOW:]
        self.value = map_offset(self._logits, self._labels, self.prior, start=self.value,
                                prior_positions=self.prior_positions)
        return self.value


def map_offset(logits: np.ndarray, labels: np.ndarray, prior: float, start: float | None = None,
               prior_positions: float = PRIOR_POSITIONS) -> float:
    """The offset o minimising the log-loss of sigmoid(logits + o) plus the prior's quadratic."""
    weight = prior_positions / 4
    o = prior if start is None else start
    for _ in range(20):
        p = 1.0 / (1.0 + np.exp(-(logits + o)))
        gradient = float(np.sum(p - labels)) + weight * (o - prior)
        curvature = float(np.sum(p * (1 - p))) + weight
        step = gradient / curvature
        before, o = o, float(np.clip(o - step, -MAX_OFFSET, MAX_OFFSET))
        if abs(step) < 1e-6 or o == before:  # converged, or held at the clamp
            break
    return o


def fit(rows: np.ndarray, labels: np.ndarray, l2: float = 1e-3, iterations: int = 50) -> np.ndarray:
    """Logistic regression by Newton's method (IRLS) with a small ridge; returns coefficients."""
    w = np.zeros(rows.shape[1])
    ridge = l2 * np.eye(rows.shape[1])
    ridge[0, 0] = 0.0  # the intercept is not shrunk
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-(rows @ w)))
        gradient = rows.T @ (p - labels) + ridge @ w
        hessian = (rows * (p * (1 - p))[:, None]).T @ rows + ridge + 1e-9 * np.eye(len(w))
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w


def fit_model(chains: Sequence[VerifiedChain], model: str = "", fit_on: str = "") -> CopyAcceptanceModel:
    rows, labels, _ = labelled_positions(chains)
    if len(labels) < 10 or labels.min() == labels.max():
        raise ValueError("too few verified copy positions (or only one outcome) to fit the copy model")
    return CopyAcceptanceModel(tuple(float(c) for c in fit(rows, labels)), model, fit_on)
