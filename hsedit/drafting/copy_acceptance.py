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
ADAPT_RATE = 0.1  # per verified position, in logits
MAX_OFFSET = 4.0
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


def labelled_positions(chains: Iterable[VerifiedChain]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(design rows, labels, chain index): position k is judged only if it was verified, that is
    k <= accepted + 1 and k <= drafted; it is a success if k <= accepted."""
    rows, labels, owner = [], [], []
    for i, chain in enumerate(chains):
        judged = min(chain.accepted + 1, chain.drafted)
        if judged <= 0:
            continue
        rows.append(position_features(chain.features, judged))
        y = np.zeros(judged)
        y[: min(chain.accepted, judged)] = 1.0
        labels.append(y)
        owner.append(np.full(judged, i))
    if not rows:
        return np.empty((0, len(FEATURE_NAMES))), np.empty(0), np.empty(0, dtype=int)
    return np.concatenate(rows), np.concatenate(labels), np.concatenate(owner)


@dataclass(frozen=True)
class CopyAcceptanceModel:
    coefficients: tuple[float, ...]  # one per FEATURE_NAMES
    model: str = ""  # the target it was fit for
    fit_on: str = ""  # what data

    def conditional(self, features: CopyFeatures, length: int, offset: float = 0.0) -> np.ndarray:
        """[length] p_k for positions 1..length; `offset` shifts the logit (see `adapt`)."""
        z = position_features(features, length) @ np.asarray(self.coefficients) + offset
        return 1.0 / (1.0 + np.exp(-z))

    def survival(self, features: CopyFeatures, length: int, offset: float = 0.0) -> list[float]:
        return np.cumprod(self.conditional(features, length, offset)).tolist()

    def adapt(self, offset: float, chain: VerifiedChain) -> float:
        """One request's logit offset after one more verified copy chain: a gradient step on the
        log-loss of its verified positions. The fit is for general text; an edit that copies a
        file unchanged accepts more than that, a rewrite less, and a few steps of a request show
        which it is. Verification outcomes only ever shape later steps, so output stays exact."""
        rows, labels, _ = labelled_positions([chain])
        if not len(labels):
            return offset
        predicted = 1.0 / (1.0 + np.exp(-(rows @ np.asarray(self.coefficients) + offset)))
        return float(np.clip(offset + ADAPT_RATE * float(np.sum(labels - predicted)), -MAX_OFFSET, MAX_OFFSET))

    def predict_rows(self, rows: np.ndarray) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-(rows @ np.asarray(self.coefficients))))

    def save(self, path: str | Path) -> None:
        data = {"features": list(FEATURE_NAMES), "coefficients": list(self.coefficients),
                "model": self.model, "fit_on": self.fit_on}
        Path(path).write_text(json.dumps(data, indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> CopyAcceptanceModel:
        data = json.loads(Path(path).read_text())
        if tuple(data["features"]) != FEATURE_NAMES:
            raise ValueError(f"{path}: coefficients are for features {data['features']}, not {list(FEATURE_NAMES)}")
        return cls(tuple(float(c) for c in data["coefficients"]), data.get("model", ""), data.get("fit_on", ""))


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
