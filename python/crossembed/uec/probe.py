"""A label-free probe of whether a frozen encoder reads an input: real fit anchors against scrambled ones.

A model reading text it does not know (an English model on a Finnish word)
places it where it places letter salad. Scrambling the letters inside each
word of the fit anchors (:func:`scramble_sample`) gives such text for free,
in the anchors' own lengths and alphabet; a logistic regression on the
model's unit embeddings separates the real anchors from their scrambled
copies (:func:`fit_probe_head`, classes weighted equally, L2 penalty
``1 / n``). Its probability ``u(x) = sigmoid(w . x + b)`` (:class:`ProbeHead`)
is the model's own evidence that it reads ``x`` like the fit's text; it needs
no labels and only the model's embeddings (black boxes included).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Sequence

import numpy as np
from scipy.optimize import minimize

from crossembed._validation import check_int, check_random_state

__all__ = ["PROBE_ROWS", "ProbeHead", "fit_probe_head", "scramble_sample", "scramble_texts"]

#: fit anchors scrambled for the probe at most (one extra encoding pass over them)
PROBE_ROWS = 4096
_LETTERS = re.compile(r"[^\W\d_]{2,}")


def scramble_texts(texts: Sequence[str], random_state=0) -> List[str]:
    """Each text with the letters of every word (two letters or more) shuffled in place."""
    rng = check_random_state(random_state)

    def shuffle(m: re.Match) -> str:
        word = m.group(0)
        return "".join(word[i] for i in rng.permutation(len(word)))

    return [_LETTERS.sub(shuffle, t) for t in texts]


def scramble_sample(texts: Sequence[str], *, max_rows: int = PROBE_ROWS, random_state=0) -> List[str]:
    """Scrambled copies of at most ``max_rows`` of ``texts`` (a random subset, in order), reproducible."""
    max_rows = check_int(max_rows, "max_rows", low=1)
    rng = check_random_state(random_state)
    rows = np.sort(rng.permutation(len(texts))[:max_rows]) if len(texts) > max_rows else np.arange(len(texts))
    return scramble_texts([texts[i] for i in rows], rng)


@dataclass
class ProbeHead:
    """``u(x) = sigmoid(x . coef + intercept)``: the probability that unit embedding ``x`` is real fit text."""

    coef: np.ndarray  # (D,) float64
    intercept: float

    def logit(self, means: np.ndarray) -> np.ndarray:
        """(n,) float64 ``x . coef + intercept`` of unit embeddings ``(n, D)``."""
        return np.asarray(means, dtype=np.float64) @ self.coef + self.intercept

    def probability(self, means: np.ndarray) -> np.ndarray:
        """(n,) float64 ``u(x)`` in (0, 1)."""
        return 0.5 * (1.0 + np.tanh(0.5 * self.logit(means)))  # the logistic function, overflow-free

    def to_array(self) -> np.ndarray:
        return np.concatenate([self.coef, [self.intercept]])

    @classmethod
    def from_array(cls, a: np.ndarray) -> ProbeHead:
        a = np.asarray(a, dtype=np.float64)
        if a.ndim != 1 or a.size < 2:
            raise ValueError("a probe head array holds D coefficients and the intercept")
        return cls(a[:-1].copy(), float(a[-1]))


def fit_probe_head(real: np.ndarray, scrambled: np.ndarray) -> ProbeHead:
    """Logistic regression of real (1) against scrambled (0) unit embeddings (module docstring).

    Minimises ``mean_class mean_i log(1 + exp(-y_i f(x_i))) + |w|^2 / (2 n)`` (the intercept
    unpenalised) by L-BFGS from zero; ``n`` counts both sides.
    """
    X = np.concatenate([np.asarray(real, np.float64), np.asarray(scrambled, np.float64)])
    n_real, n = len(real), len(real) + len(scrambled)
    if n_real < 1 or n_real == n:
        raise ValueError("the probe needs at least one real and one scrambled embedding")
    y = np.r_[np.ones(n_real), -np.ones(n - n_real)]
    weight = np.where(y > 0, 0.5 / n_real, 0.5 / (n - n_real))  # each class counts one half
    penalty = 1.0 / n

    def loss(theta: np.ndarray):
        w, b = theta[:-1], theta[-1]
        margin = y * (X @ w + b)
        value = float(weight @ np.logaddexp(0.0, -margin)) + 0.5 * penalty * float(w @ w)
        g = -weight * y * 0.5 * (1.0 - np.tanh(0.5 * margin))  # d/df of each term: -y sigmoid(-margin)
        return value, np.r_[X.T @ g + penalty * w, g.sum()]

    res = minimize(loss, np.zeros(X.shape[1] + 1), jac=True, method="L-BFGS-B", options={"maxiter": 500})
    return ProbeHead(res.x[:-1].copy(), float(res.x[-1]))
